//! Run resources (engine.md 7 and 8): the script file, the exact result and the event
//! stream of every run, their URIs, links, listing, templates and completion.
//!
//! Direct reads are the durable contract: any retained run is readable by URI. Listings and
//! completion are conveniences bounded to the 50 newest runs. A `file://` URI is a resource
//! only when some run recorded exactly that file as its script, so this server never turns
//! into a general file reader.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::engine::script::MAX_SCRIPT_BYTES;
use crate::engine::status::file_uri;
use crate::engine::{Engine, EngineError};
use crate::mcp::handler::{McpError, McpResult, codes};
use crate::model::{EventRecord, RunId, RunRecord, RunStatus};
use crate::util::safe_file::{self, Links};

use super::skills;

/// Runs shown by `resources/list` and completion.
const LISTED_RUNS: u32 = 50;
/// Events in the canonical (query-less) read: the newest ones.
const CANONICAL_EVENTS: u64 = 100;
const MAX_EVENTS_LIMIT: u64 = 1000;

const EVENTS_TEMPLATE: &str = "workflow://runs/{id}/events";
const EVENTS_QUERY_TEMPLATE: &str = "workflow://runs/{id}/events{?after,limit,streamId}";
const RESULT_TEMPLATE: &str = "workflow://runs/{id}/result";

pub(super) fn events_uri(run_id: &RunId) -> String {
    format!("workflow://runs/{run_id}/events")
}

pub(super) fn result_uri(run_id: &RunId) -> String {
    format!("workflow://runs/{run_id}/result")
}

pub(super) fn script_link(run_id: &RunId, script_file: &Path) -> Value {
    let name = script_file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| format!("{run_id}.script.js"));
    json!({
        "type": "resource_link",
        "uri": file_uri(script_file),
        "name": name,
        "title": format!("Script of workflow run {run_id}"),
        "description": "The run's script file. Edit it and resume the run to continue with a validated revision.",
        "mimeType": "text/javascript",
    })
}

pub(super) fn events_link(run_id: &RunId) -> Value {
    json!({
        "type": "resource_link",
        "uri": events_uri(run_id),
        "name": format!("{run_id}-events"),
        "title": format!("Event stream of workflow run {run_id}"),
        "description": "Redacted append-only events; subscribe for update hints, page with ?after=<cursor>&limit=&streamId=.",
        "mimeType": "application/json",
    })
}

pub(super) fn result_link(run_id: &RunId) -> Value {
    json!({
        "type": "resource_link",
        "uri": result_uri(run_id),
        "name": format!("{run_id}-result"),
        "title": format!("Exact result of workflow run {run_id}"),
        "description": "JSON.stringify of the run's returned value.",
        "mimeType": "application/json",
    })
}

pub(super) fn templates() -> Value {
    json!([
        {
            "uriTemplate": EVENTS_TEMPLATE,
            "name": "workflow-run-events",
            "title": "Workflow run events (newest 100)",
            "description": "A run's redacted event stream: the newest 100 events and the cursor to page from. Subscribable.",
            "mimeType": "application/json",
        },
        {
            "uriTemplate": EVENTS_QUERY_TEMPLATE,
            "name": "workflow-run-events-page",
            "title": "Workflow run events page",
            "description": "Events after a cursor: after (default 0), limit 1..1000 (default 100), streamId from an earlier read (required).",
            "mimeType": "application/json",
        },
        {
            "uriTemplate": RESULT_TEMPLATE,
            "name": "workflow-run-result",
            "title": "Workflow run result",
            "description": "JSON.stringify of a completed run's result.",
            "mimeType": "application/json",
        },
    ])
}

/// What a URI names.
#[derive(Debug, PartialEq)]
enum Target {
    Script(PathBuf),
    Events {
        run_id: RunId,
        query: Option<EventsQuery>,
    },
    Result(RunId),
    Skill,
}

#[derive(Debug, PartialEq)]
struct EventsQuery {
    after: u64,
    limit: u64,
    stream_id: String,
}

fn parse(uri: &str) -> McpResult<Target> {
    if uri.starts_with(skills::SCHEME) {
        return Ok(Target::Skill);
    }
    if let Some(rest) = uri.strip_prefix("file://") {
        // `file:///p` and `file://localhost/p` are the two forms of a local path.
        let encoded = rest.strip_prefix("localhost").unwrap_or(rest);
        if !encoded.starts_with('/') || encoded.contains(['?', '#']) {
            return Err(malformed(
                uri,
                "a file URI must name an absolute local path",
            ));
        }
        let bytes =
            percent_decode(encoded).ok_or_else(|| malformed(uri, "bad percent-encoding"))?;
        use std::os::unix::ffi::OsStringExt;
        return Ok(Target::Script(PathBuf::from(std::ffi::OsString::from_vec(
            bytes,
        ))));
    }
    let Some(rest) = uri.strip_prefix("workflow://runs/") else {
        return Err(malformed(
            uri,
            "this server serves file:// scripts, workflow://runs/{id}/events, workflow://runs/{id}/result and skill:// resources",
        ));
    };
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    let Some((id, kind)) = path.split_once('/') else {
        return Err(malformed(
            uri,
            "expected workflow://runs/{id}/events or /result",
        ));
    };
    let run_id = RunId::parse(id).map_err(|problem| malformed(uri, &problem))?;
    match (kind, query) {
        ("events", None) => Ok(Target::Events {
            run_id,
            query: None,
        }),
        ("events", Some(query)) => Ok(Target::Events {
            run_id,
            query: Some(parse_query(uri, query)?),
        }),
        ("result", None) => Ok(Target::Result(run_id)),
        ("result", Some(_)) => Err(malformed(uri, "the result resource takes no query")),
        _ => Err(malformed(
            uri,
            "expected workflow://runs/{id}/events or /result",
        )),
    }
}

fn parse_query(uri: &str, query: &str) -> McpResult<EventsQuery> {
    let mut after = None;
    let mut limit = None;
    let mut stream_id = None;
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match key {
            "after" => &mut after,
            "limit" => &mut limit,
            "streamId" => &mut stream_id,
            other => {
                return Err(malformed(
                    uri,
                    &format!("unknown query parameter {other:?}; only after, limit and streamId"),
                ));
            }
        };
        if slot.is_some() {
            return Err(malformed(
                uri,
                &format!("query parameter {key} is repeated"),
            ));
        }
        *slot = Some(value.to_owned());
    }
    let number = |name: &str, text: &str| -> McpResult<u64> {
        let canonical = text == "0" || (!text.starts_with('0') && !text.is_empty());
        text.parse::<u64>()
            .ok()
            .filter(|_| canonical && text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| malformed(uri, &format!("{name} must be a whole number, got {text:?}")))
    };
    let after = after
        .map(|text| number("after", &text))
        .transpose()?
        .unwrap_or(0);
    let limit = limit
        .map(|text| number("limit", &text))
        .transpose()?
        .unwrap_or(CANONICAL_EVENTS);
    if !(1..=MAX_EVENTS_LIMIT).contains(&limit) {
        return Err(malformed(
            uri,
            &format!("limit must be from 1 to {MAX_EVENTS_LIMIT}, got {limit}"),
        ));
    }
    let Some(stream_id) = stream_id else {
        return Err(malformed(
            uri,
            "streamId is required with a query (take it from an earlier read)",
        ));
    };
    if stream_id.len() != 32
        || !stream_id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return Err(malformed(uri, "streamId must be 32 lowercase hex digits"));
    }
    Ok(EventsQuery {
        after,
        limit,
        stream_id,
    })
}

fn percent_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = std::str::from_utf8(bytes.get(index + 1..index + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    Some(out)
}

fn malformed(uri: &str, problem: &str) -> McpError {
    McpError::invalid_params(format!("invalid resource URI {uri}: {problem}"))
        .with_data(json!({"uri": uri}))
}

fn not_found(uri: &str, message: String) -> McpError {
    McpError::new(codes::RESOURCE_NOT_FOUND, message).with_data(json!({"uri": uri}))
}

/// The run resources as one server sees them: every run of its engine's stores, listed and
/// completed within its default project when it has one.
pub(super) struct Resources<'a> {
    pub(super) engine: &'a Engine,
    /// Scopes listings and completion (`--in-process`); `None` lists every project's runs.
    pub(super) project: Option<&'a Path>,
}

impl Resources<'_> {
    async fn record(&self, uri: &str, run_id: &RunId) -> McpResult<RunRecord> {
        match self.engine.load_reconciled(run_id).await {
            Ok(record) => Ok(record),
            // The engine's own words for a run that is not there.
            Err(unknown @ EngineError::UnknownRun(_)) => Err(not_found(uri, unknown.to_string())),
            Err(EngineError::Rejected(message)) => Err(McpError::internal(message.to_string())),
            Err(EngineError::Store(error)) => {
                Err(McpError::internal(format!("run store: {error}")))
            }
        }
    }

    /// `resources/read`.
    pub(super) async fn read(&self, uri: &str) -> McpResult<Value> {
        match parse(uri)? {
            Target::Skill => skills::read(uri),
            Target::Script(path) => self.read_script(uri, &path).await,
            Target::Result(run_id) => {
                let record = self.record(uri, &run_id).await?;
                let text = crate::engine::manager::exact_result(&record)
                    .map_err(|error| not_found(uri, error.to_string()))?;
                Ok(
                    json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": text}]}),
                )
            }
            Target::Events { run_id, query } => {
                let document = self.events_document(uri, &run_id, query).await?;
                Ok(
                    json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": document.to_string()}]}),
                )
            }
        }
    }

    async fn read_script(&self, uri: &str, path: &Path) -> McpResult<Value> {
        let owners = self
            .engine
            .runs()
            .runs_with_script(path)
            .await
            .map_err(|error| McpError::internal(format!("run store: {error}")))?;
        if owners.is_empty() {
            return Err(not_found(
                uri,
                format!("{} is not the script of any workflow run", path.display()),
            ));
        }
        // The file's current text: an edit made after admission shows at once. The path was
        // resolved at admission, so a link swapped in since is refused, never followed; so are
        // FIFOs, devices and oversize files, and the read runs off the async workers.
        let contents = safe_file::read(path, MAX_SCRIPT_BYTES as u64, Links::Refuse)
            .await
            .map_err(|error| not_found(uri, format!("the script file {error}")))?;
        let text = String::from_utf8(contents.bytes).map_err(|_| {
            not_found(
                uri,
                format!(
                    "the script file {} is not UTF-8 text, so it is not shown",
                    path.display()
                ),
            )
        })?;
        Ok(json!({"contents": [{"uri": uri, "mimeType": "text/javascript", "text": text}]}))
    }

    /// The events document (engine.md 7).
    async fn events_document(
        &self,
        uri: &str,
        run_id: &RunId,
        query: Option<EventsQuery>,
    ) -> McpResult<Value> {
        let record = self.record(uri, run_id).await?;
        let end = self.end_of_stream(run_id).await?;
        let (after, limit) = match query {
            None => (end.saturating_sub(CANONICAL_EVENTS), CANONICAL_EVENTS),
            Some(query) => {
                if query.stream_id != record.stream_id {
                    return Err(malformed(
                        uri,
                        "streamId does not match the run's event stream (the run was recreated, or the id is from another run); read the canonical URI for the current streamId",
                    ));
                }
                if query.after > end {
                    return Err(malformed(
                        uri,
                        &format!(
                            "cursor {} is ahead of the stream, which ends at {end}",
                            query.after
                        ),
                    ));
                }
                (query.after, query.limit)
            }
        };
        self.page(&record, end, after, limit).await
    }

    /// The events document of `workflow://runs/{id}/events?after=&limit=` without the
    /// `streamId` check (the run monitor's `workflow-events`, which names the run by id):
    /// `after` beyond the stream's end is refused as the resource refuses it.
    pub(super) async fn events_after(
        &self,
        run_id: &RunId,
        after: u64,
        limit: u64,
    ) -> McpResult<Value> {
        let uri = events_uri(run_id);
        let record = self.record(&uri, run_id).await?;
        let end = self.end_of_stream(run_id).await?;
        if after > end {
            return Err(McpError::invalid_params(format!(
                "after {after} is ahead of the run's event stream, which ends at {end}"
            )));
        }
        self.page(&record, end, after, limit).await
    }

    async fn end_of_stream(&self, run_id: &RunId) -> McpResult<u64> {
        self.engine
            .events()
            .last_event_seq(run_id)
            .await
            .map_err(|error| McpError::internal(format!("run store: {error}")))
    }

    /// One page of a run's events after `after`, as the events document.
    async fn page(&self, record: &RunRecord, end: u64, after: u64, limit: u64) -> McpResult<Value> {
        let run_id = &record.run_id;
        let events = self
            .engine
            .events()
            .events(run_id, after, limit as u32)
            .await
            .map_err(|error| McpError::internal(format!("run store: {error}")))?;
        let cursor = events.last().map(|event| event.seq).unwrap_or(after);
        let finalized = !matches!(record.status, RunStatus::Pending | RunStatus::Running)
            && !self.engine.is_live(run_id);
        Ok(json!({
            "schemaVersion": 1,
            "runId": run_id,
            "streamId": record.stream_id,
            "workflowName": record.workflow_name,
            "status": record.status,
            "finalized": finalized,
            "after": after,
            "cursor": cursor,
            "endCursor": end,
            "hasMore": cursor < end,
            "events": events.iter().map(event_json).collect::<Vec<_>>(),
        }))
    }

    /// `resources/subscribe`: only the canonical events URI of an existing run.
    pub(super) async fn subscribable(&self, uri: &str) -> McpResult<()> {
        match parse(uri)? {
            Target::Events {
                run_id,
                query: None,
            } => {
                self.record(uri, &run_id).await?;
                Ok(())
            }
            Target::Events { .. } => Err(McpError::invalid_params(format!(
                "{uri}: a paged events URI is readable but not subscribable; subscribe to workflow://runs/{{id}}/events"
            ))),
            _ => Err(McpError::invalid_params(format!(
                "{uri} cannot be subscribed: scripts are not watched and results never change; subscribe to workflow://runs/{{id}}/events"
            ))),
        }
    }

    async fn newest_runs(&self) -> McpResult<Vec<crate::model::RunSummary>> {
        self.engine
            .list(self.project, LISTED_RUNS)
            .await
            .map_err(|error| McpError::internal(error.to_string()))
    }

    /// `resources/list`: the 50 newest runs' script, events and (completed with a value)
    /// result, plus the skill's files.
    pub(super) async fn resource_list(&self) -> McpResult<Value> {
        let mut listed = Vec::new();
        for run in self.newest_runs().await? {
            let run_id = &run.run_id;
            let name = &run.workflow_name;
            if let Ok(record) = self.engine.runs().load_run(run_id).await {
                listed.push(json!({
                    "uri": file_uri(&record.script_file),
                    "name": record.script_file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                    "title": format!("Script of {name} ({run_id})"),
                    "mimeType": "text/javascript",
                }));
            }
            listed.push(json!({
                "uri": events_uri(run_id),
                "name": format!("{run_id}-events"),
                "title": format!("Events of {name} ({run_id})"),
                "mimeType": "application/json",
            }));
            if run.status == RunStatus::Completed && run.has_result {
                listed.push(json!({
                    "uri": result_uri(run_id),
                    "name": format!("{run_id}-result"),
                    "title": format!("Result of {name} ({run_id})"),
                    "mimeType": "application/json",
                }));
            }
        }
        listed.extend(skills::listed_resources());
        Ok(json!({"resources": listed}))
    }

    /// `completion/complete`: run ids for the templates' `{id}`.
    pub(super) async fn completion(&self, params: &Value) -> McpResult<Value> {
        let empty = json!({"completion": {"values": [], "total": 0, "hasMore": false}});
        let reference = &params["ref"];
        let argument = &params["argument"];
        if reference["type"] != "ref/resource" || argument["name"] != "id" {
            return Ok(empty);
        }
        let template = reference["uri"].as_str().unwrap_or_default();
        let results_only = template == RESULT_TEMPLATE;
        if !results_only && template != EVENTS_TEMPLATE && template != EVENTS_QUERY_TEMPLATE {
            return Ok(empty);
        }
        let prefix = argument["value"].as_str().unwrap_or_default();
        let values: Vec<String> = self
            .newest_runs()
            .await?
            .into_iter()
            .filter(|run| !results_only || (run.status == RunStatus::Completed && run.has_result))
            .map(|run| run.run_id.to_string())
            .filter(|id| id.starts_with(prefix))
            .collect();
        Ok(json!({"completion": {"total": values.len(), "values": values, "hasMore": false}}))
    }
}

fn event_json(event: &EventRecord) -> Value {
    json!({
        "seq": event.seq,
        "timestamp": crate::util::iso_time(event.timestamp),
        "event": event.event,
        "projection": {"redacted": event.redacted, "truncated": event.truncated},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_or_name_their_problem() {
        let run_id = RunId::parse("abc-def").unwrap();
        assert_eq!(
            parse("workflow://runs/abc-def/events").unwrap(),
            Target::Events {
                run_id: run_id.clone(),
                query: None
            }
        );
        assert_eq!(
            parse("workflow://runs/abc-def/result").unwrap(),
            Target::Result(run_id)
        );
        assert_eq!(
            parse("file:///tmp/a%20b.js").unwrap(),
            Target::Script(PathBuf::from("/tmp/a b.js"))
        );
        let stream = "0123456789abcdef0123456789abcdef";
        let query = parse(&format!(
            "workflow://runs/abc-def/events?after=5&limit=10&streamId={stream}"
        ))
        .unwrap();
        assert!(matches!(
            query,
            Target::Events {
                query: Some(EventsQuery {
                    after: 5,
                    limit: 10,
                    ..
                }),
                ..
            }
        ));
        for bad in [
            "workflow://runs/ABC/events".to_owned(),
            "workflow://runs/abc-def/script".to_owned(),
            "workflow://runs/abc-def/events?after=1".to_owned(),
            format!("workflow://runs/abc-def/events?after=1&after=2&streamId={stream}"),
            format!("workflow://runs/abc-def/events?limit=0&streamId={stream}"),
            format!("workflow://runs/abc-def/events?limit=1001&streamId={stream}"),
            format!("workflow://runs/abc-def/events?cursor=1&streamId={stream}"),
            "workflow://runs/abc-def/events?streamId=xyz".to_owned(),
            "file://relative/path".to_owned(),
            "https://example.com".to_owned(),
        ] {
            let error = parse(&bad).expect_err(&bad);
            assert_eq!(error.code, codes::INVALID_PARAMS, "{bad}");
        }
    }

    #[test]
    fn file_uris_round_trip() {
        let path = Path::new("/tmp/with space/#odd%.js");
        let uri = file_uri(path);
        assert!(!uri.contains(' '), "{uri}");
        assert_eq!(parse(&uri).unwrap(), Target::Script(path.to_path_buf()));
    }
}
