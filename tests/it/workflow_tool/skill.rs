//! What the tool tells a host about itself: `config`'s probes of the backends (and its
//! kept answer), the skill resource and its digests, the prompt, and the skill's examples
//! passing preparation.

use agentprism::mcp::handler::{McpHandler, codes};
use agentprism::tools::SKILL_URI;
use serde_json::json;

use super::{fresh, is_error, setup};

/// `config` probes registered backends concurrently and reports unknown ones in place.
#[tokio::test]
async fn config_probes_backends() {
    let s = setup();
    let all = s
        .call(json!({"action": "config", "projectDir": s.h.project}))
        .await;
    let harnesses = all["structuredContent"]["harnesses"].as_array().unwrap();
    let names: Vec<&str> = harnesses
        .iter()
        .filter_map(|h| h["backend"].as_str())
        .collect();
    assert_eq!(names, ["claude", "codex", "pi"]);
    assert!(harnesses.iter().all(|h| h["probed"] == true));
    assert!(all["structuredContent"]["authoringSummary"]["backends"].is_array());
    let some = s
        .call(json!({"action": "config", "projectDir": s.h.project, "harnesses": ["codex", "nope"], "modelSpecs": ["pi/openrouter/x"]}))
        .await;
    let harnesses = some["structuredContent"]["harnesses"].as_array().unwrap();
    assert_eq!(harnesses.len(), 3);
    assert_eq!(harnesses[1]["probed"], false);
    assert!(
        harnesses[1]["error"]
            .as_str()
            .unwrap()
            .contains("unknown backend")
    );
    assert_eq!(harnesses[2]["currentModel"], "openrouter/x");
    let missing_dir = s
        .call(json!({"action": "config", "projectDir": "/definitely/not/here"}))
        .await;
    assert!(is_error(&missing_dir));
}

/// A host that asks `config` the same question twice within the cache's time gets the first
/// answer without a second round of probes; another question probes.
#[tokio::test]
async fn a_repeated_config_answers_without_probing_again() {
    let s = setup();
    let question = json!({"action": "config", "projectDir": s.h.project});
    let first = s.call(question.clone()).await;
    assert_eq!(s.h.runner.probes(), 3, "one probe per registered backend");
    let again = s.call(question).await;
    assert_eq!(s.h.runner.probes(), 3, "answered from the first call");
    assert_eq!(again, first);
    let other = s
        .call(json!({"action": "config", "projectDir": s.h.project, "harnesses": ["codex"]}))
        .await;
    assert_eq!(s.h.runner.probes(), 4, "{other:#}");
}

/// The skill: list entry, digests over the served bytes, get, directory reads.
#[tokio::test]
async fn the_skill_is_served_with_matching_digests() {
    use sha2::Digest;
    let s = setup();
    let list = s
        .server
        .custom(&fresh(), "skills/list", json!({}))
        .await
        .unwrap()
        .unwrap();
    assert!(list["ttlMs"].as_u64().is_some());
    assert_eq!(list["cacheScope"], "public");
    let entry = &list["skills"][0];
    assert_eq!(entry["uri"], SKILL_URI);
    assert_eq!(
        entry["frontmatter"]["name"],
        "agentprism-workflow-authoring"
    );
    let files = entry["resources"].as_array().unwrap();
    assert!(files.iter().any(|f| f["uri"] == SKILL_URI));
    for file in files {
        let uri = file["uri"].as_str().unwrap();
        assert!(uri.starts_with("skill://agentprism-workflow-authoring/"));
        let read = s.read(uri).await.unwrap();
        let text = read["contents"][0]["text"].as_str().unwrap();
        assert_eq!(file["size"].as_u64().unwrap() as usize, text.len(), "{uri}");
        let digest = agentprism::util::hex(&sha2::Sha256::digest(text.as_bytes()));
        assert_eq!(file["digest"], format!("sha256:{digest}"), "{uri}");
        assert_eq!(read["contents"][0]["mimeType"], "text/markdown");
        let meta = read["contents"][0]["_meta"].as_object().unwrap();
        assert!(
            meta.keys()
                .all(|k| k.starts_with("io.modelcontextprotocol.skills/"))
        );
    }
    let got = s
        .server
        .custom(&fresh(), "skills/get", json!({"uri": SKILL_URI}))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got["skill"], entry);
    let unknown = s
        .server
        .custom(
            &fresh(),
            "skills/get",
            json!({"uri": "skill://other/SKILL.md"}),
        )
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(unknown.code, codes::INVALID_PARAMS);

    let root = s
        .server
        .custom(
            &fresh(),
            "resources/directory/read",
            json!({"uri": "skill://agentprism-workflow-authoring"}),
        )
        .await
        .unwrap()
        .unwrap();
    let children = root["resources"].as_array().unwrap();
    assert!(children.iter().any(|c| c["uri"] == SKILL_URI));
    let references = children
        .iter()
        .find(|c| c["mimeType"] == "inode/directory")
        .unwrap();
    let inner = s
        .server
        .custom(
            &fresh(),
            "resources/directory/read",
            json!({"uri": references["uri"]}),
        )
        .await
        .unwrap()
        .unwrap();
    assert!(inner["resources"].as_array().unwrap().len() >= 3);
    let not_directory = s
        .server
        .custom(
            &fresh(),
            "resources/directory/read",
            json!({"uri": SKILL_URI}),
        )
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(not_directory.code, codes::INVALID_PARAMS);
    assert!(
        s.server
            .custom(&fresh(), "run/other", json!({}))
            .await
            .is_none()
    );
}

#[tokio::test]
async fn the_prompt_points_at_the_skill_and_config() {
    let s = setup();
    let prompts = s.server.list_prompts(&fresh(), None).await.unwrap();
    assert_eq!(prompts["prompts"][0]["name"], "author-workflow");
    let prompt = s
        .server
        .get_prompt(
            &fresh(),
            "author-workflow",
            json!({"task": "review the repo"}),
        )
        .await
        .unwrap();
    let text = prompt["messages"][0]["content"]["text"].as_str().unwrap();
    assert!(text.contains("review the repo"));
    assert!(text.contains(SKILL_URI));
    assert!(text.contains("\"config\""));
    assert!(text.len() < 2000, "compact: {}", text.len());
    let bad = s
        .server
        .get_prompt(&fresh(), "author-workflow", json!({"other": 1}))
        .await
        .unwrap_err();
    assert_eq!(bad.code, codes::INVALID_PARAMS);
    let templates = s
        .server
        .list_resource_templates(&fresh(), None)
        .await
        .unwrap();
    assert_eq!(templates["resourceTemplates"].as_array().unwrap().len(), 3);
}

/// The skill's example scripts prepare cleanly against the engine they document.
#[tokio::test]
async fn the_skill_examples_pass_preparation() {
    let s = setup();
    let sources = [
        include_str!("../../../docs/authoring/SKILL.md"),
        include_str!("../../../docs/authoring/references/examples.md"),
    ];
    let mut checked = 0;
    for source in sources {
        for block in source.split("```js\n").skip(1) {
            let script = block.split("\n```").next().unwrap();
            s.h.engine
                .validate(
                    &s.h.project,
                    &agentprism::engine::ScriptInput::Inline(script.to_owned()),
                    json!({}),
                )
                .await
                .unwrap_or_else(|e| panic!("{script}\n=> {e}"));
            checked += 1;
        }
    }
    assert_eq!(checked, 5);
}
