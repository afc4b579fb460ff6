//! The server's prompts: `author-workflow`, then one per saved workflow (the project's, the
//! user's and the bundled ones; docs/workflows.md), so a host shows each as a slash command.
//! A saved workflow's prompt leads the model to the exact `workflow` tool call that runs it.
//!
//! Which project's workflows are offered comes from the client's roots: a client of the
//! initialize era that declared `roots` is asked for them (`roots/list`, on the request's own
//! stream, at most [`ROOTS_DEADLINE`]), and the first `file://` root that is a folder is the
//! project. Without roots only the user's and the bundled workflows are offered.
//!
//! Rooms: `author` the authoring prompt, `saved` the saved workflows' prompts.

mod author;
mod saved;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::engine::Engine;
use crate::mcp::context::RequestContext;
use crate::mcp::handler::{McpError, McpResult};

/// How long a client may take to answer `roots/list` before the prompts go on without a
/// project.
pub(super) const ROOTS_DEADLINE: Duration = Duration::from_secs(2);

/// `prompts/list`.
pub(super) async fn list(engine: &Engine, ctx: &RequestContext) -> McpResult<Value> {
    let project = project_from_roots(ctx).await;
    let mut prompts = vec![author::definition()];
    prompts.extend(saved::definitions(engine, project).await?);
    Ok(json!({"prompts": prompts}))
}

/// `prompts/get`.
pub(super) async fn get(
    engine: &Engine,
    ctx: &RequestContext,
    name: &str,
    arguments: &Value,
) -> McpResult<Value> {
    if name == author::NAME {
        return author::get(name, arguments);
    }
    let project = project_from_roots(ctx).await;
    saved::get(engine, project, name, arguments).await
}

/// The first `file://` root that is an existing folder, when the client offers roots.
async fn project_from_roots(ctx: &RequestContext) -> Option<PathBuf> {
    if ctx.era.is_modern() || !ctx.client_has(&["roots"]) {
        return None;
    }
    let mut pending = ctx.notifier.request("roots/list", json!({}))?;
    let answer = tokio::time::timeout(ROOTS_DEADLINE, &mut pending.receiver)
        .await
        .ok()?
        .ok()?
        .ok()?;
    answer["roots"]
        .as_array()?
        .iter()
        .filter_map(|root| root["uri"].as_str()?.strip_prefix("file://"))
        .map(|path| PathBuf::from(percent_decode(path)))
        .find(|path| path.is_absolute() && path.is_dir())
}

/// `%XX` escapes of a `file://` URI's path, decoded (an invalid escape is kept as written).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((high * 16 + low) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn unknown(name: &str, names: &[String]) -> McpError {
    let mut all = vec![author::NAME.to_owned()];
    all.extend(names.iter().cloned());
    McpError::invalid_params(format!(
        "unknown prompt {name:?}; this server has {}",
        all.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn file_uris_decode_their_escapes() {
        assert_eq!(percent_decode("/a%20b/c"), "/a b/c");
        assert_eq!(percent_decode("/a%zz"), "/a%zz");
        assert_eq!(percent_decode("/a%2"), "/a%2");
    }
}
