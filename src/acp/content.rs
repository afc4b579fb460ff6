//! A prompt turn's content as one agent receives it. The engine builds ACP content blocks
//! (`text`, then the call's `image` blocks); an agent whose `initialize` answer does not set
//! `agentCapabilities.promptCapabilities.image` gets, in place of each image, a text block
//! saying which image was left out and why, so the agent (and whoever reads its answer)
//! knows the prompt referred to something it did not see.

use serde_json::{Value, json};

/// `blocks` for an agent with `capabilities` (its `agentCapabilities`), on backend `backend`.
pub(crate) fn for_agent(blocks: Vec<Value>, capabilities: &Value, backend: &str) -> Vec<Value> {
    if accepts_images(capabilities) {
        return blocks;
    }
    blocks
        .into_iter()
        .map(|block| match block.get("type").and_then(Value::as_str) {
            Some("image") => json!({"type": "text", "text": image_note(&block, backend)}),
            _ => block,
        })
        .collect()
}

/// Whether the agent takes `image` content blocks in prompts (ACP: `false` when absent).
pub(crate) fn accepts_images(capabilities: &Value) -> bool {
    capabilities.pointer("/promptCapabilities/image") == Some(&Value::Bool(true))
}

/// The text that stands for an image the agent cannot take.
pub(crate) fn image_note(block: &Value, backend: &str) -> String {
    let mime_type = block
        .get("mimeType")
        .and_then(Value::as_str)
        .unwrap_or("image");
    let source = block
        .get("uri")
        .and_then(Value::as_str)
        .map(|uri| format!(" from {uri}"))
        .unwrap_or_default();
    format!(
        "[An image ({mime_type}{source}) was attached to this prompt but not sent: the \
         {backend} agent does not accept images.]"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks() -> Vec<Value> {
        vec![
            json!({"type": "text", "text": "Describe the screenshots."}),
            json!({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}),
            json!({"type": "image", "data": "R0lGOD==", "mimeType": "image/gif", "uri": "file:///shot.gif"}),
        ]
    }

    #[test]
    fn an_agent_that_takes_images_gets_them_unchanged() {
        let capabilities = json!({"promptCapabilities": {"image": true, "audio": false}});
        assert_eq!(for_agent(blocks(), &capabilities, "claude"), blocks());
    }

    #[test]
    fn an_agent_without_the_image_capability_gets_a_note_for_each_image() {
        let expected = vec![
            json!({"type": "text", "text": "Describe the screenshots."}),
            json!({"type": "text", "text": "[An image (image/png) was attached to this prompt but not sent: the codex agent does not accept images.]"}),
            json!({"type": "text", "text": "[An image (image/gif from file:///shot.gif) was attached to this prompt but not sent: the codex agent does not accept images.]"}),
        ];
        for capabilities in [
            json!({}),
            json!({"promptCapabilities": {}}),
            json!({"promptCapabilities": {"image": false}}),
            Value::Null,
        ] {
            assert_eq!(
                for_agent(blocks(), &capabilities, "codex"),
                expected,
                "{capabilities}"
            );
        }
    }
}
