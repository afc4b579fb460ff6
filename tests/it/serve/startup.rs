//! Start-up errors of a folder server: a folder that cannot be served stops it with exit
//! code 2 before it listens, naming every offending file (and only those).

use super::serve_refused;
use crate::support::context::TestContext;

fn workflow(name: &str) -> String {
    format!(
        "// a test workflow\nexport const meta = {{ name: {name:?}, description: \"a served test workflow\" }};\nreturn {{ ok: true }};\n"
    )
}

#[test]
fn a_folder_with_bad_workflows_is_refused_naming_each_file() {
    let ctx = TestContext::new();
    ctx.write("bad/a-twin.js", &workflow("twin"));
    ctx.write("bad/nested/b-twin.js", &workflow("twin"));
    ctx.write("bad/reserved.js", &workflow("mhl_run_extra"));
    ctx.write("bad/spaced.js", &workflow("two words"));
    ctx.write(
        "bad/broken.js",
        "export const meta = { name: \"broken\", description: \"does not parse\" ;\nreturn {};\n",
    );
    ctx.write("bad/fine.js", &workflow("fine"));
    // Neither a helper without `meta` nor anything hidden is a workflow, broken or not.
    ctx.write(
        "bad/lib/helper.js",
        "export function help() { return {; }\n",
    );
    ctx.write("bad/.hidden/secret.js", &workflow("twin"));
    ctx.write(".keep", "");
    for extra in [&["--stdio"][..], &["--http", "127.0.0.1:0"][..]] {
        let (code, stderr) = serve_refused(&ctx, &ctx.path("bad"), extra);
        assert_eq!(code, 2, "{extra:?}: {stderr}");
        for named in [
            "a-twin.js and nested/b-twin.js",
            "reserved.js",
            "spaced.js",
            "broken.js",
        ] {
            assert!(
                stderr.contains(named),
                "{extra:?}: {named} is not named:\n{stderr}"
            );
        }
        for unnamed in ["fine.js", "helper.js", "secret.js"] {
            assert!(
                !stderr.contains(unnamed),
                "{extra:?}: {unnamed} is named:\n{stderr}"
            );
        }
        assert!(!stderr.contains("http://"), "it never listened: {stderr}");
    }
}

#[test]
fn each_fault_alone_is_refused() {
    let ctx = TestContext::new();
    let cases = [
        (
            "dup",
            vec![("one.js", workflow("same")), ("two.js", workflow("same"))],
            "one.js and two.js",
        ),
        (
            "reserved",
            vec![("run.js", workflow("mhl_run_status"))],
            "run.js",
        ),
        ("invalid", vec![("slash.js", workflow("a/b"))], "slash.js"),
        (
            "long",
            vec![("long.js", workflow(&"n".repeat(129)))],
            "long.js",
        ),
    ];
    for (folder, files, named) in cases {
        for (file, text) in &files {
            ctx.write(&format!("{folder}/{file}"), text);
        }
        let (code, stderr) = serve_refused(&ctx, &ctx.path(folder), &["--stdio"]);
        assert_eq!(code, 2, "{folder}: {stderr}");
        assert!(
            stderr.contains(named),
            "{folder}: {named} is not named:\n{stderr}"
        );
    }
    // At the name length limit a workflow is served (stdin is closed, so it stops at once).
    ctx.write("longest/longest.js", &workflow(&"n".repeat(128)));
    let (code, stderr) = serve_refused(&ctx, &ctx.path("longest"), &["--stdio"]);
    assert_eq!(code, 0, "a 128-character name is valid: {stderr}");
}

#[test]
fn a_folder_without_workflows_is_an_error() {
    let ctx = TestContext::new();
    std::fs::create_dir_all(ctx.path("empty")).unwrap();
    let (code, stderr) = serve_refused(&ctx, &ctx.path("empty"), &["--stdio"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("holds no workflow"), "{stderr}");

    // Helpers and hidden files do not count.
    ctx.write("helpers/lib.js", "export const x = 1;\n");
    ctx.write("helpers/.hidden.js", &workflow("hidden"));
    let (code, stderr) = serve_refused(&ctx, &ctx.path("helpers"), &["--stdio"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("holds no workflow"), "{stderr}");

    let (code, stderr) = serve_refused(&ctx, &ctx.path("missing"), &["--stdio"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("missing"), "the folder is named: {stderr}");
}
