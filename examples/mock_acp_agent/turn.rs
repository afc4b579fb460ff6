//! One prompt turn played out: the `@mock` directives of the prompt run in order (replies,
//! chunks, thoughts, tool calls, the client round trips, waits, errors, crashes), then the
//! reply is streamed and the turn ends with its stop reason.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process;
use std::time::Duration;

use serde_json::{Value, json};

use super::{INTERNAL_ERROR, RpcError, Turn, TurnEnd, lock};

impl Turn<'_> {
    /// Runs the `@mock` directives in order, then streams the reply.
    pub(super) fn play(&mut self, text: &str) -> TurnEnd {
        let mut user_lines = Vec::new();
        let mut directives = Vec::new();
        for line in text.lines() {
            match parse_directive(line) {
                Some(directive) => directives.push(directive),
                None => user_lines.push(line),
            }
        }
        let user_text = user_lines.join("\n").trim().to_owned();

        for (verb, args) in directives {
            if self.cancel.is_cancelled() {
                return self.cancelled();
            }
            match self.directive(verb, args, &user_text) {
                Ok(None) => {}
                Ok(Some(end)) => return end,
                Err(error) => return TurnEnd::Error(error),
            }
        }

        let reply = self
            .reply
            .take()
            .or_else(|| schema_answer(&user_text))
            .unwrap_or_else(|| format!("ECHO: {user_text}"));
        let message_id = self.message_id();
        for chunk in split_chunks(&reply, self.chunks) {
            // Checked between chunks, so a cancel interrupts a stream.
            if self.cancel.is_cancelled() {
                return self.cancelled();
            }
            self.send_chunk("agent_message_chunk", &message_id, &chunk);
        }
        TurnEnd::Stop(self.stop_reason.clone())
    }

    /// Plays one directive; `Some` ends the turn there.
    pub(super) fn directive(
        &mut self,
        verb: &str,
        args: &str,
        user_text: &str,
    ) -> Result<Option<TurnEnd>, RpcError> {
        match verb {
            "reply" => self.reply = Some(args.to_owned()),
            // `@mock once PATH VERB ARGS`: plays `@mock VERB ARGS` only when PATH does not
            // exist yet, creating it, so a call fails once and succeeds when it runs again
            // (in this process or another).
            "once" => {
                let (path, directive) = args
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| RpcError::invalid_params("@mock once needs PATH VERB [ARGS]"))?;
                let first = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .is_ok();
                if first {
                    let directive = directive.trim();
                    let (verb, rest) = directive
                        .split_once(char::is_whitespace)
                        .unwrap_or((directive, ""));
                    return self.directive(verb, rest.trim(), user_text);
                }
            }
            "json" => {
                serde_json::from_str::<Value>(args)
                    .map_err(|error| RpcError::invalid_params(format!("@mock json: {error}")))?;
                self.reply = Some(args.to_owned());
            }
            "chunks" => {
                self.chunks = args
                    .parse()
                    .ok()
                    .filter(|&count| count > 0)
                    .ok_or_else(|| RpcError::invalid_params("@mock chunks needs N >= 1"))?;
            }
            "delay" => {
                let ms = args
                    .parse()
                    .map_err(|_| RpcError::invalid_params("@mock delay needs milliseconds"))?;
                if self.cancel.wait(Some(Duration::from_millis(ms))) {
                    return Ok(Some(self.cancelled()));
                }
            }
            "hang" => {
                self.cancel.wait(None);
                return Ok(Some(self.cancelled()));
            }
            // `@mock big_answer MIB`: streams MIB MiB of answer text in 1 MiB chunks, then the
            // turn goes on as usual (its reply follows).
            "big_answer" => {
                let mebibytes: usize = args
                    .parse()
                    .map_err(|_| RpcError::invalid_params("@mock big_answer needs MIB"))?;
                let piece = "y".repeat(1 << 20);
                let message_id = self.message_id();
                for _ in 0..mebibytes {
                    if self.cancel.is_cancelled() {
                        return Ok(Some(self.cancelled()));
                    }
                    self.send_chunk("agent_message_chunk", &message_id, &piece);
                }
            }
            // `@mock endless_line MIB`: writes one message that never ends, MIB MiB of it in
            // 1 MiB pieces with no newline (until the client stops reading), then hangs: what a
            // broken or hostile agent does to a reader that buffers a line without limit.
            "endless_line" => {
                let mebibytes: usize = args
                    .parse()
                    .map_err(|_| RpcError::invalid_params("@mock endless_line needs MIB"))?;
                self.agent.write_unterminated(mebibytes);
                self.cancel.wait(None);
                return Ok(Some(self.cancelled()));
            }
            // Holds the turn until a test creates the file (or cancels the turn), so a test
            // decides exactly when a call ends.
            "wait_file" => {
                let path = PathBuf::from(args.trim());
                while !path.exists() {
                    if self.cancel.wait(Some(Duration::from_millis(10))) {
                        return Ok(Some(self.cancelled()));
                    }
                }
            }
            "thought" => {
                let message_id = self.message_id();
                self.send_chunk("agent_thought_chunk", &message_id, args);
            }
            "tool" => {
                let tool_call_id = format!("mock-tool-{}", self.agent.serial());
                self.update(json!({
                    "sessionUpdate": "tool_call",
                    "toolCallId": tool_call_id,
                    "title": args,
                    "kind": "other",
                    "status": "in_progress",
                }));
                self.update(json!({
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": tool_call_id,
                    "status": "completed",
                    "content": [{ "type": "content", "content": { "type": "text", "text": "done" } }],
                }));
            }
            "permission" => {
                let outcome = self.ask_permission(args);
                self.add_reply(format!("PERMISSION: {outcome}"));
            }
            "read" => {
                let answer = self.agent.request(
                    "fs/read_text_file",
                    json!({ "sessionId": self.session_id, "path": args }),
                );
                self.add_reply(match answer {
                    Ok(result) => result
                        .get("content")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    Err(error) => format!("ERROR {}: {}", error.code, error.message),
                });
            }
            "write" => {
                let (path, content) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
                let answer = self.agent.request(
                    "fs/write_text_file",
                    json!({ "sessionId": self.session_id, "path": path, "content": content }),
                );
                self.add_reply(match answer {
                    Ok(_) => format!("WROTE: {path}"),
                    Err(error) => format!("ERROR {}: {}", error.code, error.message),
                });
            }
            "write_cwd" => {
                let reply = self.write_in_cwd(args);
                self.add_reply(reply);
            }
            "stop" if !args.is_empty() => self.stop_reason = args.to_owned(),
            "error" => {
                let (code, message) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
                let code = code
                    .parse()
                    .map_err(|_| RpcError::invalid_params("@mock error needs CODE MSG"))?;
                return Ok(Some(TurnEnd::Error(RpcError::new(code, message.trim()))));
            }
            "auth_required" => return Ok(Some(TurnEnd::Error(RpcError::auth_required()))),
            "usage_limit" => {
                // Shaped like codex's usage-limit failure: -32603 with a tell-tale message,
                // followed by the words given (say, when to try again).
                let message = format!("You've hit your usage limit. {}", args.trim());
                let error = RpcError::new(INTERNAL_ERROR, message.trim_end())
                    .with_data(json!({ "kind": "usage_limit" }));
                return Ok(Some(TurnEnd::Error(error)));
            }
            "crash" => {
                let reply = self
                    .reply
                    .clone()
                    .unwrap_or_else(|| format!("ECHO: {user_text}"));
                let message_id = self.message_id();
                self.send_chunk("agent_message_chunk", &message_id, &reply);
                eprintln!("mock-acp-agent: crashing mid-turn (@mock crash)");
                process::exit(2);
            }
            "stderr" => eprintln!("{args}"),
            // `@mock claude_transcript <JSON line>`: appends the line to this session's Claude
            // Code transcript (`$HOME/.claude/projects/mock/<session id>.jsonl`), where
            // claude-agent-acp's CLI records provider errors it does not report.
            "claude_transcript" => {
                let home = std::env::var("HOME").unwrap_or_default();
                let folder = Path::new(&home).join(".claude/projects/mock");
                let written = std::fs::create_dir_all(&folder).and_then(|()| {
                    let path = folder.join(format!("{}.jsonl", self.session_id));
                    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
                    writeln!(file, "{}", args.trim())
                });
                written.map_err(|error| {
                    RpcError::invalid_params(format!("@mock claude_transcript: {error}"))
                })?;
            }
            // `@mock env NAME...`: replies with `{"NAME": value-or-null, ...}`, so a test can
            // see exactly what an agent inherited.
            "env" => {
                let seen: serde_json::Map<String, Value> = args
                    .split_whitespace()
                    .map(|name| {
                        let value = std::env::var(name).map_or(Value::Null, Value::String);
                        (name.to_owned(), value)
                    })
                    .collect();
                self.reply = Some(Value::Object(seen).to_string());
            }
            "usage_null" => {
                // claude-agent-acp really sends `used: null`, which the schema does not allow.
                self.update(json!({ "sessionUpdate": "usage_update", "used": null, "size": 1000 }));
            }
            "exit_after_reply" => self.exit_after_reply = true,
            "mcp_call" => {
                let text = self.call_mcp_tool(args)?;
                self.add_reply(format!("MCP-RESULT: {text}"));
            }
            "echo_model" => {
                let (model, mode) = self
                    .agent
                    .with_session(&self.session_id, |session| {
                        Ok((session.model.clone(), session.mode.clone()))
                    })
                    .unwrap_or_else(|_| ("?".to_owned(), "?".to_owned()));
                self.add_reply(format!("MODEL: {model} MODE: {mode}"));
            }
            _ => {
                return Err(RpcError::invalid_params(format!(
                    "unknown or malformed directive: @mock {verb} {args}"
                )));
            }
        }
        Ok(None)
    }

    /// Announces a pending tool call and asks the client to allow it. `args` is `[KIND [NAME]]`:
    /// the ACP tool kind (`edit` when absent) and the adapter's own tool name, sent as
    /// claude-agent-acp sends it (`_meta.claudeCode.toolName`). Deliberately not interrupted by
    /// a cancel: the client must answer `cancelled` itself, as ACP requires.
    pub(super) fn ask_permission(&mut self, args: &str) -> String {
        let tool_call_id = format!("mock-tool-{}", self.agent.serial());
        let mut words = args.split_whitespace();
        let kind = words.next().unwrap_or("edit");
        let mut tool_call = json!({ "toolCallId": tool_call_id, "title": format!("Mock {kind}"), "kind": kind, "status": "pending" });
        if let Some(name) = words.next() {
            tool_call["_meta"] = json!({ "claudeCode": { "toolName": name } });
        }
        let mut announced = tool_call.clone();
        announced["sessionUpdate"] = json!("tool_call");
        self.update(announced);
        let answer = self.agent.request(
            "session/request_permission",
            json!({
                "sessionId": self.session_id,
                "toolCall": tool_call,
                "options": [
                    { "optionId": "allow", "name": "Allow", "kind": "allow_once" },
                    { "optionId": "reject", "name": "Reject", "kind": "reject_once" },
                ],
            }),
        );
        let outcome = match answer {
            Ok(result) => {
                let outcome = &result["outcome"];
                match outcome["outcome"].as_str() {
                    Some("selected") => outcome["optionId"].as_str().unwrap_or("?").to_owned(),
                    Some("cancelled") => "cancelled".to_owned(),
                    _ => format!("invalid answer {result}"),
                }
            }
            Err(error) => format!("error {}: {}", error.code, error.message),
        };
        let status = if outcome == "allow" {
            "completed"
        } else {
            "failed"
        };
        self.update(json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": tool_call_id,
            "status": status,
        }));
        outcome
    }

    /// Round-trip verbs add a line to the reply; the first one replaces the echo.
    pub(super) fn add_reply(&mut self, line: String) {
        match &mut self.reply {
            Some(reply) => {
                reply.push('\n');
                reply.push_str(&line);
            }
            None => self.reply = Some(line),
        }
    }

    pub(super) fn cancelled(&self) -> TurnEnd {
        TurnEnd::Stop(self.agent.settings.cancel_stop.clone())
    }

    /// A UUID-shaped id, deterministic per process run, as ACP's `messageId` expects.
    pub(super) fn message_id(&self) -> String {
        format!("00000000-0000-4000-8000-{:012x}", self.agent.serial())
    }

    pub(super) fn send_chunk(&mut self, kind: &str, message_id: &str, text: &str) {
        self.output_bytes += text.len();
        self.update(json!({
            "sessionUpdate": kind,
            "messageId": message_id,
            "content": { "type": "text", "text": text },
        }));
    }

    pub(super) fn update(&self, update: Value) {
        self.agent.send_update(&self.session_id, update);
    }
}

/// The answer to a prompt that asks for structured output (an `agent()` call with a
/// `schema`): a fenced JSON value made from the schema by the engine's own dry-run fabricator,
/// so a script that declares schemas runs against the mock without `@mock json` lines.
/// `None` when the prompt quotes no schema in the engine's output instructions.
pub(super) fn schema_answer(user_text: &str) -> Option<String> {
    let after = user_text
        .rfind(SCHEMA_INSTRUCTION)
        .map(|at| &user_text[at + SCHEMA_INSTRUCTION.len()..])?;
    let body = after.split_once("```json\n")?.1;
    let schema: Value = serde_json::from_str(body.split_once("\n```")?.0).ok()?;
    let value = agentprism::engine::schema::fabricate(&schema);
    Some(format!("```json\n{value}\n```"))
}

/// The words the engine puts before the schema it wants an answer to match, in its first
/// prompt and in each re-prompt (`src/engine/schema.rs`).
const SCHEMA_INSTRUCTION: &str = "this JSON Schema";

impl Turn<'_> {
    /// `@mock mcp_call SERVER TOOL ARGS_JSON`: calls TOOL with ARGS_JSON on the HTTP MCP
    /// server named SERVER in this session's `mcpServers` (initialize, then `tools/call`), as
    /// an agent calls a client's tool, and returns the text of the tool's answer, prefixed
    /// `ERROR: ` when it is flagged `isError`. A missing server fails the turn.
    pub(super) fn call_mcp_tool(&self, args: &str) -> Result<String, RpcError> {
        let mut words = args.splitn(3, char::is_whitespace);
        let (Some(server), Some(tool), Some(arguments)) =
            (words.next(), words.next(), words.next())
        else {
            return Err(RpcError::invalid_params(
                "@mock mcp_call needs SERVER TOOL ARGS_JSON",
            ));
        };
        let arguments: Value = serde_json::from_str(arguments)
            .map_err(|error| RpcError::invalid_params(format!("@mock mcp_call: {error}")))?;
        let url = self
            .agent
            .with_session(&self.session_id, |session| {
                Ok(session
                    .mcp_servers
                    .iter()
                    .find(|entry| entry["name"] == server && entry["type"] == "http")
                    .and_then(|entry| entry["url"].as_str())
                    .map(str::to_owned))
            })?
            .ok_or_else(|| {
                RpcError::invalid_params(format!("@mock mcp_call: no HTTP MCP server {server:?}"))
            })?;
        let failed =
            |error: String| RpcError::new(INTERNAL_ERROR, format!("@mock mcp_call: {error}"));
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "mock-acp-agent", "version": "0.1.0"}}});
        http_post(&url, &init).map_err(failed)?;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        http_post(&url, &initialized).map_err(failed)?;
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        let answer = http_post(&url, &call).map_err(failed)?;
        let answer: Value =
            serde_json::from_str(&answer).map_err(|error| failed(error.to_string()))?;
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| answer.to_string());
        Ok(if answer["result"]["isError"] == true {
            format!("ERROR: {text}")
        } else {
            text
        })
    }
}

/// POSTs one JSON message to a loopback `http://host:port/path` URL (HTTP/1.1, one request
/// per connection) and returns the answer's body.
pub(super) fn http_post(url: &str, message: &Value) -> Result<String, String> {
    use std::io::Read;
    let rest = url.strip_prefix("http://").ok_or("only http:// URLs")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut stream = std::net::TcpStream::connect(authority).map_err(|error| error.to_string())?;
    let body = message.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|error| error.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|error| error.to_string())?;
    let (head, body) = answer.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
    let status = head.split(' ').nth(1).unwrap_or_default();
    if !status.starts_with('2') {
        return Err(format!("HTTP {status}: {body}"));
    }
    Ok(body.to_owned())
}

impl Turn<'_> {
    /// `@mock write_cwd PATH TEXT`: writes TEXT (and a newline) to PATH relative to the
    /// session's cwd, itself, as a coding agent edits files without asking the client.
    pub(super) fn write_in_cwd(&self, args: &str) -> String {
        let (path, content) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
        let relative = Path::new(path);
        if path.is_empty()
            || relative.is_absolute()
            || relative
                .components()
                .any(|part| matches!(part, std::path::Component::ParentDir))
        {
            return format!("ERROR write_cwd needs a relative path inside the cwd, got {path:?}");
        }
        let cwd = lock(&self.agent.state)
            .sessions
            .get(&self.session_id)
            .map(|session| session.cwd.clone());
        let Some(cwd) = cwd else {
            return format!("ERROR write_cwd: no session {}", self.session_id);
        };
        let target = cwd.join(relative);
        let written = target
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&target, format!("{content}\n")));
        match written {
            Ok(()) => format!("WROTE_CWD: {path}"),
            Err(error) => format!("ERROR write_cwd {}: {error}", target.display()),
        }
    }
}

/// `@mock verb args` → `(verb, args)`; anything else is user text.
pub(super) fn parse_directive(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim().strip_prefix("@mock")?;
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let rest = rest.trim();
    Some(match rest.split_once(char::is_whitespace) {
        Some((verb, args)) => (verb, args.trim()),
        None => (rest, ""),
    })
}

/// Splits `text` into `count` pieces of near-equal length (fewer if it is shorter), on char
/// boundaries.
pub(super) fn split_chunks(text: &str, count: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let count = count.min(chars.len());
    let size = chars.len().div_ceil(count);
    chars
        .chunks(size)
        .map(|piece| piece.iter().collect())
        .collect()
}

/// Deterministic stand-in for a tokenizer: a token per 4 bytes, rounded up, at least 1.
pub(super) fn token_count(bytes: usize) -> usize {
    bytes.div_ceil(4).max(1)
}
