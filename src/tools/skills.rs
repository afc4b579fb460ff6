//! The workflow authoring skill, served through the `io.modelcontextprotocol/skills`
//! extension (SEP-2640): `skills/list`, `skills/get`, `resources/read` of each file and
//! `resources/directory/read`.
//!
//! The files live in `docs/authoring/` and are compiled into the binary with `include_str!`,
//! so the guidance a host loads always matches the engine that will run the script. Digests
//! are SHA-256 of the exact bytes `resources/read` returns.

use serde_json::{Value, json};

use crate::mcp::handler::{McpError, McpResult, codes};

/// The skill's name (its directory, and the last path segment before `SKILL.md`).
pub const SKILL_NAME: &str = "agentprism-workflow-authoring";
/// The skill's entry point.
pub const SKILL_URI: &str = "skill://agentprism-workflow-authoring/SKILL.md";
pub(super) const SCHEME: &str = "skill://";
/// Hosts may cache skill metadata this long; the content only changes with the binary.
const TTL_MS: u64 = 3_600_000;
const META_PREFIX: &str = "io.modelcontextprotocol.skills/";

struct SkillFile {
    /// Relative to the skill directory.
    path: &'static str,
    text: &'static str,
}

const FILES: &[SkillFile] = &[
    SkillFile {
        path: "SKILL.md",
        text: include_str!("../../docs/authoring/SKILL.md"),
    },
    SkillFile {
        path: "references/dsl.md",
        text: include_str!("../../docs/authoring/references/dsl.md"),
    },
    SkillFile {
        path: "references/routing-and-config.md",
        text: include_str!("../../docs/authoring/references/routing-and-config.md"),
    },
    SkillFile {
        path: "references/lifecycle.md",
        text: include_str!("../../docs/authoring/references/lifecycle.md"),
    },
    SkillFile {
        path: "references/examples.md",
        text: include_str!("../../docs/authoring/references/examples.md"),
    },
];

fn uri_of(path: &str) -> String {
    format!("{SCHEME}{SKILL_NAME}/{path}")
}

fn mime_of(path: &str) -> &'static str {
    if path.ends_with(".md") {
        "text/markdown"
    } else {
        "text/plain"
    }
}

fn find(uri: &str) -> Option<&'static SkillFile> {
    let path = uri
        .strip_prefix(SCHEME)?
        .strip_prefix(SKILL_NAME)?
        .strip_prefix('/')?;
    FILES.iter().find(|file| file.path == path)
}

/// The YAML frontmatter of SKILL.md as a JSON object of its top-level scalar keys, values
/// kept verbatim (only surrounding quotes removed). Our frontmatter is flat, so a full YAML
/// parser would buy nothing.
fn frontmatter() -> Value {
    let text = FILES[0].text;
    let mut map = serde_json::Map::new();
    let mut lines = text.lines();
    if lines.next() != Some("---") {
        return Value::Object(map);
    }
    for line in lines {
        if line == "---" {
            break;
        }
        if let Some((key, value)) = line.split_once(':')
            && !key.starts_with([' ', '#'])
        {
            let value = value.trim();
            let unquoted = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(value);
            map.insert(key.trim().to_owned(), Value::String(unquoted.to_owned()));
        }
    }
    Value::Object(map)
}

/// The skill's `skills/list` entry.
fn entry() -> Value {
    let resources: Vec<Value> = FILES
        .iter()
        .map(|file| {
            json!({
                "uri": uri_of(file.path),
                "digest": format!("sha256:{}", crate::util::sha256_hex(file.text.as_bytes())),
                "size": file.text.len(),
            })
        })
        .collect();
    json!({"uri": SKILL_URI, "frontmatter": frontmatter(), "resources": resources})
}

/// Skill files for `resources/list`.
pub(super) fn listed_resources() -> Vec<Value> {
    let front = frontmatter();
    FILES
        .iter()
        .map(|file| {
            let mut resource = json!({
                "uri": uri_of(file.path),
                "name": if file.path == "SKILL.md" { SKILL_NAME.to_owned() } else { file.path.to_owned() },
                "mimeType": mime_of(file.path),
                "size": file.text.len(),
            });
            if file.path == "SKILL.md" {
                resource["description"] = front["description"].clone();
            }
            resource
        })
        .collect()
}

/// `resources/read` of a skill file.
pub(super) fn read(uri: &str) -> McpResult<Value> {
    let Some(file) = find(uri) else {
        return Err(
            McpError::new(codes::RESOURCE_NOT_FOUND, format!("no skill file {uri}"))
                .with_data(json!({"uri": uri})),
        );
    };
    let mut content = json!({"uri": uri, "mimeType": mime_of(file.path), "text": file.text});
    let mut meta = serde_json::Map::new();
    meta.insert(
        format!("{META_PREFIX}skill"),
        Value::String(SKILL_NAME.to_owned()),
    );
    meta.insert(
        format!("{META_PREFIX}path"),
        Value::String(file.path.to_owned()),
    );
    meta.insert(
        format!("{META_PREFIX}digest"),
        Value::String(format!(
            "sha256:{}",
            crate::util::sha256_hex(file.text.as_bytes())
        )),
    );
    if file.path == "SKILL.md" {
        meta.insert(format!("{META_PREFIX}frontmatter"), frontmatter());
    }
    content["_meta"] = Value::Object(meta);
    Ok(json!({"contents": [content]}))
}

/// The extension's methods; `None` for any other method.
pub(super) fn custom(method: &str, params: &Value) -> Option<McpResult<Value>> {
    Some(match method {
        "skills/list" => list(params),
        "skills/get" => get(params),
        "resources/directory/read" => directory(params),
        _ => return None,
    })
}

fn list(params: &Value) -> McpResult<Value> {
    // One skill fits one page; any cursor is one we never issued.
    if let Some(cursor) = params.get("cursor").filter(|c| !c.is_null()) {
        return Err(McpError::invalid_params(format!("unknown cursor {cursor}")));
    }
    Ok(json!({"skills": [entry()], "ttlMs": TTL_MS, "cacheScope": "public"}))
}

fn get(params: &Value) -> McpResult<Value> {
    let uri = params.get("uri").and_then(Value::as_str).ok_or_else(|| {
        McpError::invalid_params("skills/get needs params.uri, a skill://…/SKILL.md URI")
    })?;
    if uri != SKILL_URI {
        return Err(McpError::invalid_params(format!(
            "unknown skill {uri}; this server has {SKILL_URI}"
        ))
        .with_data(json!({"uri": uri})));
    }
    Ok(json!({"skill": entry(), "ttlMs": TTL_MS, "cacheScope": "public"}))
}

/// Direct children of a skill directory; subdirectories are `inode/directory`.
fn directory(params: &Value) -> McpResult<Value> {
    let uri = params
        .get("uri")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::invalid_params("resources/directory/read needs params.uri"))?;
    if let Some(cursor) = params.get("cursor").filter(|c| !c.is_null()) {
        return Err(McpError::invalid_params(format!("unknown cursor {cursor}")));
    }
    let not_directory = || {
        McpError::invalid_params(format!("{uri} is not a directory")).with_data(json!({"uri": uri}))
    };
    let relative = uri
        .strip_prefix(SCHEME)
        .and_then(|rest| rest.strip_prefix(SKILL_NAME))
        .ok_or_else(not_directory)?
        .trim_matches('/');
    let prefix = if relative.is_empty() {
        String::new()
    } else {
        format!("{relative}/")
    };
    let mut children: Vec<Value> = Vec::new();
    let mut seen_directories: Vec<&str> = Vec::new();
    for file in FILES {
        let Some(rest) = file.path.strip_prefix(prefix.as_str()) else {
            continue;
        };
        match rest.split_once('/') {
            None => children.push(json!({
                "uri": uri_of(file.path),
                "name": rest,
                "mimeType": mime_of(file.path),
                "size": file.text.len(),
            })),
            Some((directory, _)) if !seen_directories.contains(&directory) => {
                seen_directories.push(directory);
                children.push(json!({
                    "uri": uri_of(&format!("{prefix}{directory}")),
                    "name": directory,
                    "mimeType": "inode/directory",
                }));
            }
            Some(_) => {}
        }
    }
    if children.is_empty() {
        return Err(not_directory());
    }
    // The same caching fields as skills/list: a 2026-07-28 client (the TypeScript SDK's
    // SkillsClient) refuses a page without them.
    Ok(json!({"resources": children, "ttlMs": TTL_MS, "cacheScope": "public"}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_names_the_skill() {
        let front = frontmatter();
        assert_eq!(front["name"], SKILL_NAME);
        assert!(front["description"].as_str().is_some_and(|d| d.len() > 20));
    }

    /// The TypeScript SDK's SkillsClient throws on a 2026-07-28 directory page without its
    /// caching fields.
    #[test]
    fn directory_pages_carry_the_caching_fields() {
        for uri in [
            format!("{SCHEME}{SKILL_NAME}"),
            format!("{SCHEME}{SKILL_NAME}/references"),
        ] {
            let page = directory(&json!({ "uri": uri })).expect("a directory");
            assert_eq!(page["ttlMs"], TTL_MS, "{page}");
            assert_eq!(page["cacheScope"], "public", "{page}");
            assert!(page["resources"].as_array().is_some_and(|r| !r.is_empty()));
        }
    }
}
