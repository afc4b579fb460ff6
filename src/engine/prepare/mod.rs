//! Preparation (engine.md 3): everything a script must pass before a run is admitted.
//!
//! Structure and meta (static), `args` against `meta.inputSchema`, the companion files of
//! `meta.files` (read through the sources port, `companions.rs`), the mocked dry run (the
//! real engine with fabricated agent answers, nothing persisted), the routing check (every
//! call the dry run reached needs a route; no fallback), and zero-token probes of each
//! routed `{backend, model}`, whose advertised modes, config options and reasoning levels each
//! call routed there must fit. Nothing is written anywhere until the caller admits the run.
//!
//! The dry run sends no call paths (only call rows and replay read them). Its result becomes
//! the run's ([`Prepared::known_result`], settled by `driver::settle_known` with no second VM)
//! only when the script completed without asking its host anything — no agent, checkpoint,
//! log, phase or nested workflow — because such a script depends on nothing but its body,
//! args, cwd and companion texts, which admission freezes.

use crate::engine::estimate::{Decision, RunSize, SizedCall, decide};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::engine::driver::{self, Outcome};
use crate::engine::effort;
use crate::engine::routing::{BackendLookup, RoutingSnapshot};
use crate::engine::runner::{AgentRunner, BackendOrigin, BackendSpec, ProbeReport};
use crate::engine::schema;
use crate::engine::script::{self, AnalyzedScript, MAX_SCRIPT_BYTES};
use crate::engine::sources::Sources;
use crate::engine::vm::{NestedResolver, VmLimits};
use crate::model::{CallKind, RunStatus};
use crate::util::safe_file;

mod budget;
pub(crate) mod companions;
mod dry;
mod rejection;
mod unrouted;
mod warnings;

use dry::{DryInput, DryRun};
pub(crate) use rejection::{Cause, Rejection};

/// How long the dry run may take.
pub(crate) const DRY_RUN_LIMIT: Duration = Duration::from_secs(30);
/// How long all probes together may take by default (`AGENTPRISM_PROBE_TIMEOUT_MS`).
pub(crate) const PROBE_LIMIT: Duration = Duration::from_secs(60);
/// How many routing catalog entries an error lists.
const CATALOG_LIMIT: usize = 24;

/// Where a script comes from.
#[derive(Clone, Debug)]
pub enum ScriptInput {
    Inline(String),
    /// An absolute path to a regular file.
    Path(PathBuf),
}

/// A script that passed preparation.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub text: String,
    pub analyzed: AnalyzedScript,
    pub args: Value,
    /// Declared `meta.backends`, parsed (empty when none).
    pub declared_backends: BTreeMap<String, BackendSpec>,
    pub routing: RoutingSnapshot,
    pub warnings: Vec<String>,
    pub probes: Vec<ProbeReport>,
    /// Calls the dry run made.
    pub dry_calls: usize,
    /// Of those, the calls that run in worktrees of their own.
    pub isolated_calls: usize,
    /// The dry run's agent calls per phase and its checkpoints: the run's size.
    pub size: crate::engine::estimate::RunSize,
    /// The texts of `meta.files` by path, as the dry run saw them: what admission freezes.
    pub files: BTreeMap<String, String>,
    /// The spending limits: the caller's over `meta`'s, checked against the routed backends.
    pub budget: crate::budget::SpendLimits,
    /// The dry run's result when it is the run's own: the script completed without asking
    /// its host anything (no agent, checkpoint, log, phase or nested workflow), so the
    /// execution would compute it again from the same inputs ([`driver::settle_known`]).
    pub known_result: Option<Option<Value>>,
}

/// A script's bytes as read for admission.
#[derive(Debug)]
pub(crate) struct ScriptBytes {
    pub bytes: Vec<u8>,
    /// For a `scriptPath`: the file's resolved path, which the run records, so every later
    /// read of it ([`reread_script`], `resources/read`) opens exactly this path and refuses a
    /// symbolic link swapped in after admission.
    pub file: Option<PathBuf>,
}

/// Reads a script: inline text, or an absolute path to a regular file of at most 1 MiB, read
/// through `sources` (on disk: links resolved once, no FIFO, device or folder, size bounded,
/// off the async workers). A file that is not named like a JavaScript file is refused
/// without a word of its contents if it is not a workflow script.
pub(crate) async fn read_script(
    sources: &dyn Sources,
    input: &ScriptInput,
) -> Result<ScriptBytes, Rejection> {
    match input {
        ScriptInput::Inline(text) => Ok(ScriptBytes {
            bytes: text.clone().into_bytes(),
            file: None,
        }),
        ScriptInput::Path(path) => {
            if !path.is_absolute() {
                return Err(Rejection::unreadable(format!(
                    "scriptPath must be an absolute path, got {}",
                    path.display()
                )));
            }
            let contents = sources
                .read_script(path)
                .await
                .map_err(|error| Rejection::unreadable(format!("scriptPath {error}")))?;
            check_named_script(path, &contents.path, &contents.bytes)?;
            Ok(ScriptBytes {
                bytes: contents.bytes,
                file: Some(contents.path),
            })
        }
    }
}

/// Reads a run's recorded script file again (a resume looks for a revision). The path was
/// resolved at admission, so (on disk) a symbolic link in it now is refused, like a FIFO, a device or an
/// oversize file. `None` when the file is gone: the run goes on with its stored text.
pub(crate) async fn reread_script(
    sources: &dyn Sources,
    path: &Path,
) -> Result<Option<Vec<u8>>, Rejection> {
    match sources.reread_script(path).await {
        Ok(contents) => {
            check_named_script(path, &contents.path, &contents.bytes)?;
            Ok(Some(contents.bytes))
        }
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(Rejection::unreadable(format!("the script file {error}"))),
    }
}

/// A saved workflow's text through the sources port, checked as a named script is; `None`
/// when the sources have no file at `path` (a lookup that goes on to the next folder). For a
/// nested `workflow(name)` it runs on the calling script's VM thread (a thread of its own,
/// never an async worker), so it reads right there.
pub(crate) fn read_nested_if_present(
    sources: &dyn Sources,
    path: &Path,
) -> Result<Option<String>, String> {
    let contents = match sources.read_companion(path, MAX_SCRIPT_BYTES as u64) {
        Ok(contents) => contents,
        Err(error) if error.is_not_found() => return Ok(None),
        Err(error) => return Err(format!("the saved workflow {error}")),
    };
    check_named_script(path, &contents.path, &contents.bytes).map_err(|r| r.message)?;
    String::from_utf8(contents.bytes)
        .map(Some)
        .map_err(|_| format!("the saved workflow {} is not valid UTF-8", path.display()))
}

/// Whether `name` is named like a JavaScript file (`.js`, `.mjs`, `.cjs`).
pub(crate) fn named_like_javascript(name: &Path) -> bool {
    name.extension()
        .and_then(|extension| extension.to_str())
        .is_some_and(|extension| matches!(extension, "js" | "mjs" | "cjs"))
}

/// Error messages may quote a short, redacted token of a script, never of another file: a
/// file whose resolved name is not a JavaScript name (`/etc/shadow`, `/proc/<pid>/environ`, a
/// token file) must pass the static checks here, and if it does not, the error gives only the
/// position and what a script must look like.
fn check_named_script(given: &Path, resolved: &Path, bytes: &[u8]) -> Result<(), Rejection> {
    if named_like_javascript(resolved) {
        return Ok(());
    }
    let Err(error) = script::analyze(bytes) else {
        return Ok(());
    };
    let shown = if given == resolved {
        given.display().to_string()
    } else {
        format!(
            "{} (which resolves to {})",
            given.display(),
            resolved.display()
        )
    };
    let position = match (error.line, error.column) {
        (Some(line), Some(column)) => {
            format!(" (the first problem is at line {line}, column {column})")
        }
        _ => String::new(),
    };
    Err(Rejection::parse(format!(
        "SCRIPT_VALIDATION_ERROR: {shown} is not a workflow script{position}: a script is UTF-8 \
         text that starts with `export const meta = {{ ... }}`. Its name does not end in .js, .mjs \
         or .cjs, so nothing of its contents is quoted"
    )))
}

/// Parses `meta.backends` into backend specs (already shape-checked by the analyzer).
pub(crate) fn declared_backends(analyzed: &AnalyzedScript) -> BTreeMap<String, BackendSpec> {
    let mut out = BTreeMap::new();
    let Some(Value::Object(map)) = &analyzed.backends else {
        return out;
    };
    for (name, entry) in map {
        let text_list = |key: &str| -> Vec<String> {
            entry
                .get(key)
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let env = entry
            .get("env")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        out.insert(
            name.clone(),
            BackendSpec {
                id: name.clone(),
                command: entry
                    .get("command")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                args: text_list("args"),
                env,
                session_meta: entry.get("sessionMeta").cloned(),
                structured_output_tool: entry.get("structuredOutputTool")
                    != Some(&Value::Bool(false)),
                file_roots: Vec::new(),
                origin: BackendOrigin::Script,
            },
        );
    }
    out
}

/// The inputs of one preparation.
pub(crate) struct PrepareInput<'a> {
    pub bytes: Vec<u8>,
    pub args: Value,
    pub project_dir: &'a Path,
    /// Where `model-tiers.json` is read from (`None`: no tiers file).
    pub persistence_root: Option<&'a Path>,
    pub home: Option<&'a Path>,
    pub backends: Arc<dyn BackendLookup>,
    pub runner: Arc<dyn AgentRunner>,
    /// Where the tiers file and agent definitions are read.
    pub sources: Arc<dyn Sources>,
    /// For a revision: the run's captured routing (no new capture, no new backends).
    pub existing_routing: Option<&'a RoutingSnapshot>,
    pub vm_limits: VmLimits,
    pub probe: bool,
    /// How long all probes together may take ([`PROBE_LIMIT`] unless configured).
    pub probe_limit: Duration,
    /// Resolves nested `workflow(name)` during the dry run.
    pub nested: Option<crate::engine::vm::NestedResolver>,
    /// The spending limits the caller's arguments set (none for a revision, which keeps the
    /// run's): `meta`'s fill in the rest.
    pub budget: crate::budget::SpendLimits,
    /// Scripted answers for the dry run (`validate` only; admission never takes them).
    pub mock_answers: Option<Arc<crate::engine::mock_answers::MockAnswers>>,
}

/// Runs every check of preparation.
pub(crate) async fn prepare(input: PrepareInput<'_>) -> Result<Prepared, Rejection> {
    check_no_nul(&input.bytes)?;
    let analyzed = analyze(&input.bytes)?;
    let text = String::from_utf8(input.bytes)
        .map_err(|_| Rejection::parse("the script is not valid UTF-8"))?;
    check_args(&analyzed, &input.args)?;
    let limits = budget::requested(input.budget, &analyzed.meta)?;
    crate::timers::meta_setting(&analyzed.meta)
        .map_err(|error| Rejection::parse(format!("SCRIPT_VALIDATION_ERROR: {error}")))?;
    let files = companions::read(input.sources.clone(), input.project_dir, &analyzed.files).await?;
    let declared = declared_backends(&analyzed);
    if let Some(existing) = input.existing_routing {
        check_no_new_backends(existing, &declared, input.backends.as_ref())?;
    }
    let nested_used = Arc::new(AtomicBool::new(false));
    // The VM runs the script while the routing is read: it needs none of it (`dry.rs`).
    let dry = DryRun::start(DryInput {
        analyzed: &analyzed,
        args: &input.args,
        project_dir: input.project_dir,
        files: Arc::new(files.clone()),
        backends: input.backends.clone(),
        runner: input.runner.clone(),
        vm_limits: input.vm_limits,
        nested: input
            .nested
            .map(|resolve| noting_use(resolve, nested_used.clone())),
        budget: limits,
        mock_answers: input.mock_answers.clone(),
    });
    let routing = match input.existing_routing {
        Some(existing) => existing.clone(),
        None => {
            let sources = input.sources.clone();
            capture_routing(
                sources,
                input.persistence_root,
                input.project_dir,
                input.home,
            )
            .await?
        }
    };
    let outcome = dry.finish(approving(&routing, &declared)).await?;
    if let Some(failure) = input.mock_answers.as_ref().and_then(|mock| mock.failure()) {
        return Err(Rejection::new(format!(
            "SCRIPT_VALIDATION_ERROR: {failure}"
        )));
    }
    check_dry_outcome(&outcome)?;
    let known_result = (outcome.script_events == 0 && !nested_used.load(Ordering::SeqCst))
        .then(|| outcome.result.clone());
    check_every_call_routed(&outcome, &declared, input.backends.as_ref())?;
    budget::check_units(limits, &outcome)?;
    let mut warnings = warnings::warnings(&analyzed, &outcome);
    let agent_calls = outcome
        .dry_calls
        .iter()
        .filter(|c| c.kind == CallKind::Agent)
        .count();
    let mut probes = Vec::new();
    if input.probe && agent_calls > 0 {
        let targets = probe_targets(&outcome, !declared.is_empty());
        let reports = run_probes(
            input.runner.as_ref(),
            &targets,
            input.project_dir,
            input.probe_limit,
        )
        .await?;
        for (report, calls) in reports {
            judge_probe(&report, &calls, &outcome.dry_calls, &mut warnings)?;
            probes.push(report);
        }
    }
    let size = run_size(&outcome);
    if let Decision::Warn(line) = decide(&size, 0, None) {
        warnings.push(line);
    }
    Ok(Prepared {
        text,
        analyzed,
        args: input.args,
        declared_backends: declared,
        routing,
        warnings,
        probes,
        size,
        dry_calls: outcome.dry_calls.len(),
        isolated_calls: outcome
            .dry_calls
            .iter()
            .filter(|call| call.isolated)
            .count(),
        files,
        known_result,
        budget: limits,
    })
}

/// Refuses a backend that did not start; warns of one whose probe failed; checks the calls
/// routed to a probed one against what it offers.
fn judge_probe(
    report: &ProbeReport,
    calls: &[usize],
    dry_calls: &[crate::engine::driver::DryCall],
    warnings: &mut Vec<String>,
) -> Result<(), Rejection> {
    if !report.started {
        return Err(Rejection::routing(format!(
            "backend {} could not be used: {}",
            report.backend,
            report
                .error
                .clone()
                .unwrap_or_else(|| "it did not start".into())
        )));
    }
    if !report.probed {
        warnings.push(failed_probe(report)?);
        return Ok(());
    }
    for &position in calls {
        check_call_against_probe(&dry_calls[position], report)?;
    }
    Ok(())
}

/// `routing` with the script's declared backends as approved, as the dry run treats them.
fn approving(
    routing: &RoutingSnapshot,
    declared: &BTreeMap<String, BackendSpec>,
) -> RoutingSnapshot {
    let mut dry_routing = routing.clone();
    for (name, spec) in declared {
        dry_routing
            .script_backends
            .entry(name.clone())
            .or_insert_with(|| spec.clone());
    }
    dry_routing
}

/// `resolve`, setting `used` once the script asks for a nested workflow: what the execution
/// would resolve then is read again, so such a dry run's result is not the run's.
fn noting_use(mut resolve: NestedResolver, used: Arc<AtomicBool>) -> NestedResolver {
    Box::new(move |name: &str| {
        used.store(true, Ordering::SeqCst);
        resolve(name)
    })
}

/// `meta.inputSchema` is a valid schema and `args` match it (when it is declared).
fn check_args(analyzed: &AnalyzedScript, args: &Value) -> Result<(), Rejection> {
    let Some(input_schema) = &analyzed.input_schema else {
        return Ok(());
    };
    schema::check_schema(input_schema).map_err(|e| {
        Rejection::parse(format!("meta.inputSchema is not a valid JSON Schema: {e}"))
    })?;
    schema::validate(input_schema, args)
        .map_err(|e| Rejection::new(format!("args do not match meta.inputSchema: {e}")))
}

/// The static checks alone, with the VM's parse of the body: what `validate` runs before
/// preparation, so that a syntax error is told as one (preparation finds it only when the dry
/// run starts the script, and tells it as the dry run's failure).
pub(crate) fn check_static(bytes: &[u8], limits: VmLimits) -> Result<(), Rejection> {
    check_no_nul(bytes)?;
    let analyzed = analyze(bytes)?;
    crate::engine::vm::check_syntax(&analyzed.body, limits)
        .map_err(|error| Rejection::parse(format!("SCRIPT_VALIDATION_ERROR: {error}")))
}

/// The static analysis, its error as a `SCRIPT_VALIDATION_ERROR` with the position.
fn analyze(bytes: &[u8]) -> Result<AnalyzedScript, Rejection> {
    script::analyze(bytes).map_err(|error| {
        // Static errors with a column already end with "at line L, column C": say it once.
        let position = match (error.line, error.column) {
            (Some(_), Some(_)) if error.message.contains(" at line ") => String::new(),
            (Some(line), Some(column)) => format!(" (line {line}, column {column})"),
            (Some(line), None) => format!(" (line {line})"),
            _ => String::new(),
        };
        Rejection::parse(format!(
            "SCRIPT_VALIDATION_ERROR: {}{position}",
            error.message
        ))
    })
}

/// A revision may not declare backends the run never approved.
fn check_no_new_backends(
    existing: &RoutingSnapshot,
    declared: &BTreeMap<String, BackendSpec>,
    backends: &dyn BackendLookup,
) -> Result<(), Rejection> {
    let widened: Vec<&str> = declared
        .keys()
        .filter(|name| {
            !existing.script_backends.contains_key(*name) && backends.backend(name).is_none()
        })
        .map(String::as_str)
        .collect();
    if !widened.is_empty() && existing.script_backends.len() < declared.len() {
        return Err(Rejection::routing(format!(
            "the revised script declares backends the run never approved: {}",
            widened.join(", ")
        )));
    }
    Ok(())
}

/// The dry run must complete; its error, redacted, is the rejection.
fn check_dry_outcome(outcome: &Outcome) -> Result<(), Rejection> {
    if outcome.status == RunStatus::Completed {
        return Ok(());
    }
    let reason = outcome
        .error_message
        .clone()
        .unwrap_or_else(|| match outcome.pause_reason {
            Some(reason) => format!("the dry run paused ({})", reason.as_str()),
            None => format!("the dry run ended {}", outcome.status.as_str()),
        });
    let code = outcome
        .error_code
        .clone()
        .unwrap_or_else(|| "SCRIPT_ERROR".into());
    // QuickJS messages may quote the source; whatever they quote is redacted.
    let (reason, _) = crate::engine::redact::redact_text(&reason);
    let provenance = if outcome.dry_calls.is_empty() {
        ""
    } else {
        DRY_VALUES_NOTE
    };
    Err(Rejection::new(format!(
        "the mocked dry run failed: {code}: {reason}{provenance}"
    )))
}

/// Added to a dry run's failure once the script had answers: the failure may come from code
/// that handles a made-up answer as if an agent had written it (docs/dry-run.md).
const DRY_VALUES_NOTE: &str = " (the dry run calls no agent: each agent() answer it got was \
    \"[dry-run] mock output for <label>\", or a value made from the call's schema, and each \
    checkpoint() answer true, \"\" or its first choice; code that handles answers must accept \
    these values too, see docs/dry-run.md)";

/// Every agent call the dry run reached needs a route; the error names the calls without
/// one by reason (`unrouted`) and lists the catalog.
fn check_every_call_routed(
    outcome: &Outcome,
    declared: &BTreeMap<String, BackendSpec>,
    backends: &dyn BackendLookup,
) -> Result<(), Rejection> {
    let missing = outcome
        .dry_calls
        .iter()
        .filter(|call| call.kind == CallKind::Agent)
        .filter_map(|call| {
            let reason = call.route.as_ref().err()?;
            Some((call.label.as_str(), call.index, reason.as_str()))
        });
    let Some((calls, count)) = unrouted::describe(missing) else {
        return Ok(());
    };
    let mut names = backends.names();
    names.extend(declared.keys().cloned());
    names.truncate(CATALOG_LIMIT);
    let (have, these) = if count == 1 {
        ("has", "agent call".to_owned())
    } else {
        ("have", format!("{count} agent calls"))
    };
    Err(Rejection::routing(format!(
        "missing routing: {these} {have} no route: {calls}. Set agent(prompt, {{model}}), a phase model or meta.model to one of: {} (or \"<backend>/<model>\"); discover models with the config action",
        names.join(", ")
    )))
}

/// The dry run's calls as a size; the warning above `WARN_AGENTS` joins `warnings`.
fn run_size(outcome: &Outcome) -> RunSize {
    RunSize::from_calls(outcome.dry_calls.iter().map(|call| SizedCall {
        agent: call.kind == crate::model::CallKind::Agent,
        isolated: call.isolated,
        phase: call.phase.as_deref(),
    }))
}

/// What to probe: each routed `{backend, model}` once, with the dry calls routed to it.
/// Script backends waiting for approval are not started.
type ProbeTargets = BTreeMap<(String, Option<String>), (BackendSpec, Vec<usize>)>;

fn probe_targets(outcome: &Outcome, needs_approval: bool) -> ProbeTargets {
    let mut targets = ProbeTargets::new();
    for (position, call) in outcome.dry_calls.iter().enumerate() {
        if let Ok(route) = &call.route {
            if route.backend.origin == BackendOrigin::Script && needs_approval {
                continue;
            }
            targets
                .entry((route.backend.id.clone(), route.model.clone()))
                .or_insert_with(|| (route.backend.clone(), Vec::new()))
                .1
                .push(position);
        }
    }
    targets
}

/// Probes every target under one deadline. A probe still running at the deadline rejects
/// the run: admitting it without the probe's answer would run its calls against a backend
/// nobody has seen answer.
async fn run_probes(
    runner: &dyn AgentRunner,
    targets: &ProbeTargets,
    project_dir: &Path,
    limit: Duration,
) -> Result<Vec<(ProbeReport, Vec<usize>)>, Rejection> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut reports = Vec::new();
    for ((_, model), (backend, calls)) in targets {
        let probe = runner.probe(backend, model.as_deref(), project_dir);
        match tokio::time::timeout_at(deadline, probe).await {
            Ok(report) => reports.push((report, calls.clone())),
            Err(_) => {
                return Err(Rejection::routing(format!(
                    "the probe of backend {} did not finish within the probe limit of {} ({} sets it); nothing was stored",
                    backend.id,
                    describe_limit(limit),
                    crate::env::PROBE_TIMEOUT_MS,
                )));
            }
        }
    }
    Ok(reports)
}

/// [`script::check_no_nul`] as a rejection.
fn check_no_nul(bytes: &[u8]) -> Result<(), Rejection> {
    script::check_no_nul(bytes)
        .map_err(|error| Rejection::parse(format!("SCRIPT_VALIDATION_ERROR: {}", error.message)))
}

/// `60 s`, or `1500 ms` for a limit that is not whole seconds.
fn describe_limit(limit: Duration) -> String {
    if limit.subsec_millis() == 0 && limit.as_secs() > 0 {
        format!("{} s", limit.as_secs())
    } else {
        format!("{} ms", limit.as_millis())
    }
}

/// [`RoutingSnapshot::capture`] on the blocking pool, under the file-read deadline: its
/// reads of tiers and agent definitions never hold an async worker.
async fn capture_routing(
    sources: Arc<dyn Sources>,
    root: Option<&Path>,
    project_dir: &Path,
    home: Option<&Path>,
) -> Result<RoutingSnapshot, Rejection> {
    let (root, project_dir, home) = (
        root.map(Path::to_path_buf),
        project_dir.to_path_buf(),
        home.map(Path::to_path_buf),
    );
    let capture = tokio::task::spawn_blocking(move || {
        RoutingSnapshot::capture(
            sources.as_ref(),
            root.as_deref(),
            &project_dir,
            home.as_deref(),
        )
    });
    match tokio::time::timeout(safe_file::READ_DEADLINE, capture).await {
        Ok(Ok(captured)) => captured.map_err(Rejection::routing),
        Ok(Err(error)) => Err(Rejection::routing(format!(
            "reading tiers and agent definitions failed: {error}"
        ))),
        Err(_) => Err(Rejection::routing(format!(
            "tiers and agent definitions were not read within {} s",
            safe_file::READ_DEADLINE.as_secs()
        ))),
    }
}

/// A probe that started the backend but could not open a session (engine.md 3.4, as
/// `docs/engine.md` "Preparation" settles it): missing or expired credentials are only a
/// warning, since the run pauses `auth_required` live and resumes once they are fixed; any
/// other failure (a model the backend refuses, a broken adapter) would fail every call, so it
/// rejects the run, naming the backend and the reason.
fn failed_probe(report: &ProbeReport) -> Result<String, Rejection> {
    let reason = report
        .error
        .clone()
        .unwrap_or_else(|| "no session opened".into());
    if report.auth_required {
        return Ok(format!(
            "backend {} needs credentials ({reason}); the run will pause auth_required if they are still missing when it gets there",
            report.backend
        ));
    }
    Err(Rejection::routing(format!(
        "probe of backend {} failed: {reason}",
        report.backend
    )))
}

fn check_call_against_probe(call: &driver::DryCall, report: &ProbeReport) -> Result<(), Rejection> {
    if let Some(mode) = &call.mode {
        let advertised: Vec<&str> = report
            .modes
            .iter()
            .filter_map(|m| m.get("id").and_then(Value::as_str))
            .collect();
        if !advertised.is_empty() && !advertised.contains(&mode.as_str()) {
            return Err(Rejection::routing(format!(
                "{}@{}: backend {} has no mode {mode:?}; it offers: {}",
                call.label,
                call.index,
                report.backend,
                advertised.join(", ")
            )));
        }
    }
    if let Some(effort) = call.effort {
        effort::call_setting(
            &report.config_options,
            effort,
            &call.config_options,
            &report.backend,
            report.current_model.as_deref(),
        )
        .map_err(|message| {
            Rejection::routing(format!("{}@{}: {message}", call.label, call.index))
        })?;
    }
    for (id, value) in &call.config_options {
        let Some(option) = report
            .config_options
            .iter()
            .find(|o| o.get("id").and_then(Value::as_str) == Some(id))
        else {
            return Err(Rejection::routing(format!(
                "{}@{}: backend {} has no config option {id:?}",
                call.label, call.index, report.backend
            )));
        };
        if let (Some(wanted), Some(options)) = (
            value.as_str(),
            option.get("options").and_then(Value::as_array),
        ) {
            let values: Vec<&str> = options
                .iter()
                .flat_map(|o| match o.get("options").and_then(Value::as_array) {
                    Some(group) => group
                        .iter()
                        .filter_map(|g| g.get("value").and_then(Value::as_str))
                        .collect::<Vec<_>>(),
                    None => o.get("value").and_then(Value::as_str).into_iter().collect(),
                })
                .collect();
            if !values.is_empty() && !values.contains(&wanted) {
                return Err(Rejection::routing(format!(
                    "{}@{}: config option {id:?} of backend {} has no value {wanted:?}",
                    call.label, call.index, report.backend
                )));
            }
        }
    }
    Ok(())
}
