//! A message that continues an `input-required` task (`message.taskId`): its content is the
//! answer to the checkpoint the run waits at, and the run resumes with it, as `run/resume`
//! with `checkpointReplies` does.
//!
//! The answer is, in order: the message's `metadata.answer` (any JSON), a data part's
//! `answer` member, or the message's text (its text parts joined). A text answers a `confirm`
//! checkpoint with yes/no words (`yes`, `y`, `true`, `approve`, `approved`, `ok`; `no`, `n`,
//! `false`, `reject`, `rejected`, `deny`), an `input` checkpoint as itself and a `select`
//! checkpoint when it is one of the choices; the engine checks the answer against the
//! checkpoint and refuses one that does not fit, naming what it expected.

use serde_json::{Value, json};

use super::{A2aError, invalid};
use crate::model::{CheckpointKind, CheckpointWait};

/// The `run/resume` parameters that answer `checkpoint` of task `task_id` with `message`.
pub(super) fn resume_params(
    task_id: &str,
    checkpoint: &CheckpointWait,
    message: &Value,
) -> Result<Value, A2aError> {
    let answer = answer(checkpoint.kind, message)?;
    let mut replies = serde_json::Map::new();
    replies.insert(checkpoint.call_index.to_string(), answer);
    Ok(json!({"runId": task_id, "arguments": {"checkpointReplies": replies}}))
}

fn answer(kind: CheckpointKind, message: &Value) -> Result<Value, A2aError> {
    if let Some(answer) = message.get("metadata").and_then(|m| m.get("answer")) {
        return Ok(answer.clone());
    }
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    // 1.0 spells a data part `{"data": …}`; 0.3 `{"kind": "data", "data": …}`.
    if let Some(answer) = parts
        .iter()
        .find_map(|part| part.get("data")?.get("answer"))
    {
        return Ok(answer.clone());
    }
    let text: Vec<&str> = parts
        .iter()
        .filter_map(|part| part.get("text").and_then(Value::as_str))
        .collect();
    if text.is_empty() {
        return Err(invalid(
            "params.message: the answer to the task's checkpoint is required, as text, a data \
             part {\"answer\": …} or metadata.answer",
        ));
    }
    let text = text.join("\n");
    Ok(match kind {
        CheckpointKind::Confirm => match yes_or_no(&text) {
            Some(yes) => json!(yes),
            None => {
                return Err(invalid(&format!(
                    "params.message: the checkpoint asks yes or no; {:?} is neither",
                    super::shortened(text.trim())
                )));
            }
        },
        CheckpointKind::Input | CheckpointKind::Select => json!(text.trim()),
    })
}

fn yes_or_no(text: &str) -> Option<bool> {
    let word = text
        .trim()
        .trim_end_matches(['.', '!'])
        .to_ascii_lowercase();
    match word.as_str() {
        "yes" | "y" | "true" | "approve" | "approved" | "ok" => Some(true),
        "no" | "n" | "false" | "reject" | "rejected" | "deny" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_comes_from_metadata_a_data_part_or_the_text() {
        let text = |t: &str| json!({"parts": [{"text": t}]});
        assert_eq!(
            answer(CheckpointKind::Confirm, &text("Yes.")).unwrap(),
            json!(true)
        );
        assert_eq!(
            answer(CheckpointKind::Confirm, &text("deny")).unwrap(),
            json!(false)
        );
        assert!(answer(CheckpointKind::Confirm, &text("maybe")).is_err());
        assert_eq!(
            answer(CheckpointKind::Input, &text(" blue ")).unwrap(),
            json!("blue")
        );
        let data = json!({"parts": [{"kind": "data", "data": {"answer": "b"}}]});
        assert_eq!(answer(CheckpointKind::Select, &data).unwrap(), json!("b"));
        let metadata = json!({"parts": [{"text": "no"}], "metadata": {"answer": true}});
        assert_eq!(
            answer(CheckpointKind::Confirm, &metadata).unwrap(),
            json!(true)
        );
        let error = answer(CheckpointKind::Input, &json!({"parts": []})).unwrap_err();
        assert_eq!(error.code(), -32602);
    }
}
