//! The script VM: one OS thread per executing script while it runs (a pooled one, `vm/pool.rs`),
//! owning a fresh QuickJS runtime.
//!
//! The thread only runs JavaScript. Every `agent()`/`checkpoint()` call becomes a
//! [`VmEvent::Call`] sent to the run's driver (a tokio task) in program order, and the
//! promise the script awaits settles when the driver answers with a [`VmReply`]. Between
//! answers the thread blocks on its reply channel, so an awaiting script costs no CPU.
//!
//! Runaway scripts are stopped by QuickJS's interrupt handler. A *slice* is everything the
//! thread does between two host waits: it starts when the thread starts the script or wakes
//! with a reply, and ends only when it blocks on the reply channel again, so the evaluation,
//! every job it queues (a `while (true) await null` loop included) and the result check all
//! count against one `slice_limit`. The heap is capped at `memory_limit`. Halting from
//! outside (stop, pause) uses the same handler.
//!
//! The prelude's own helpers (`install`, `makeError`, `strictJson`) are handed to Rust when
//! the prelude is evaluated and kept here as [`Helpers`]; they are never globals, so a
//! script can neither see nor replace them.
//!
//! The prelude is parsed once per process: the first VM compiles it as a module and keeps the
//! bytecode (`vm/prelude.rs`), and every later VM loads that bytecode instead of parsing
//! the 19 KiB source again: parsing it is most of what starting a VM costs, and every
//! admission starts at least one.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use rquickjs::promise::PromiseState;
use rquickjs::{CatchResultExt, CaughtError, Context, Ctx, Function, Persistent, Promise, Runtime};
use serde_json::Value;

mod failure;
mod host;
mod pool;
mod prelude;
mod queue;

use failure::{failure_from_value, runaway, vm_failure};
use host::{Bound, Helpers};
use pool::{Spare, Spent};
#[cfg(test)]
use prelude::{PRELUDE, PRELUDE_BYTECODE};
#[cfg(test)]
use queue::EVENT_QUEUE;
#[cfg(test)]
pub(crate) use queue::EVENT_QUEUE_BYTES;
use queue::Outbox;
pub(crate) use queue::{VmEventReceiver, VmEvents, event_queue};

/// The file name script frames carry in stack traces.
pub(crate) const SCRIPT_FILENAME: &str = "workflow.js";

/// Prepended to the script body on its first line; columns on line 1 are shifted by its length.
const WRAPPER_OPEN: &str = "(async function(){";
const WRAPPER_CLOSE: &str = "\n})()";

/// Limits of one script VM.
#[derive(Clone, Copy, Debug)]
pub struct VmLimits {
    /// Longest synchronous stretch of script code.
    pub slice_limit: Duration,
    /// Heap cap in bytes.
    pub memory_limit: usize,
}

impl Default for VmLimits {
    fn default() -> Self {
        VmLimits {
            slice_limit: Duration::from_secs(10),
            memory_limit: 64 << 20,
        }
    }
}

/// What the script asks of its driver, in program order.
#[derive(Debug)]
pub(crate) enum VmEvent {
    /// `agent()` or `checkpoint()`: `payload` is `{scope, prompt, options, path}`.
    Call {
        call_id: u64,
        kind: String,
        payload: Value,
        /// The bytes of the payload's text: what the call weighs in the queue to the driver
        /// and, while it runs, in what the driver holds of the script's calls.
        weight: usize,
    },
    Log {
        level: String,
        message: String,
    },
    Phase {
        scope: String,
        title: String,
    },
    /// The script settled: `Ok(None)` is a completion without a value.
    Finished(Result<Option<Value>, ScriptFailure>),
}

/// The driver's answer to one call.
#[derive(Debug)]
pub(crate) enum VmReply {
    Resolve {
        call_id: u64,
        value: Value,
    },
    Reject {
        call_id: u64,
        code: String,
        message: String,
        recoverable: bool,
    },
    /// The run's spend changed: the script's `budget` reads this view
    /// (`crate::budget::script_view`) from now on. Sent before the answers of the calls
    /// that changed it.
    Budget(Value),
    /// Several of the above, delivered in their order as if each came alone: the answers
    /// of one group commit, which wake the script's thread once rather than once each.
    /// Never nested: only [`VmHandle::reply_all`] makes one, of the replies it is given.
    Batch(Vec<VmReply>),
}

/// A script that threw, was stopped, or returned something that is not JSON.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ScriptFailure {
    /// `SCRIPT_ERROR`, or the `code` the thrown error carried (e.g. `SCHEMA_NONCOMPLIANCE`).
    pub code: String,
    pub message: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

impl ScriptFailure {
    pub(crate) fn script_error(message: impl Into<String>) -> ScriptFailure {
        ScriptFailure {
            code: "SCRIPT_ERROR".into(),
            message: message.into(),
            line: None,
            column: None,
        }
    }

    /// The message with its position, as users see it.
    pub(crate) fn describe(&self) -> String {
        match (self.line, self.column) {
            (Some(line), Some(column)) => {
                format!("{} (at line {line}, column {column})", self.message)
            }
            (Some(line), None) => format!("{} (at line {line})", self.message),
            _ => self.message.clone(),
        }
    }
}

/// Resolves `workflow(nameOrScript)` to a script body: `Ok((scope, body))`.
pub(crate) type NestedResolver = Box<dyn FnMut(&str) -> Result<(String, String), String> + Send>;

/// What the VM needs to start a script.
pub(crate) struct VmScript {
    /// The analyzed body (meta blanked, positions preserved).
    pub body: String,
    pub args: Value,
    pub cwd: String,
    pub nested: Option<NestedResolver>,
    /// The run's companion texts by path (`meta.files`), which `file(path)` returns.
    pub files: Arc<BTreeMap<String, String>>,
    /// Whether `agent()`/`checkpoint()` payloads carry the call's path (a stack walk per
    /// call): only call rows and replay read it, so the dry run turns it off.
    pub call_paths: bool,
    /// The script's `budget` when it starts (`crate::budget::script_view`).
    pub budget: Value,
    /// The run's `maxAgents`: the prelude refuses the call past it as the driver would.
    pub max_calls: u32,
}

/// Controls a running VM from outside its thread.
pub(crate) struct VmHandle {
    replies: std_mpsc::Sender<VmReply>,
    halt: Arc<AtomicBool>,
    /// The script's job on its pool thread, waited for on drop so its runtime is freed
    /// before the handle is gone; `None` when no thread could be started.
    running: Option<pool::Running>,
}

impl VmHandle {
    /// Answers a call. Ignored once the VM has ended.
    pub(crate) fn reply(&self, reply: VmReply) {
        let _ = self.replies.send(reply);
    }

    /// Answers several calls at once, in order ([`VmReply::Batch`]).
    pub(crate) fn reply_all(&self, mut replies: Vec<VmReply>) {
        match replies.len() {
            0 => {}
            1 => self.reply(replies.remove(0)),
            _ => self.reply(VmReply::Batch(replies)),
        }
    }

    /// Stops the script at its next instruction or wait; no further events are sent.
    pub(crate) fn halt(&self) {
        self.halt.store(true, Ordering::SeqCst);
        // Wake the thread if it is waiting for a reply.
        let _ = self.replies.send(VmReply::Reject {
            call_id: u64::MAX,
            code: "WORKFLOW_ABORTED".into(),
            message: "halted".into(),
            recoverable: false,
        });
    }
}

impl Drop for VmHandle {
    fn drop(&mut self) {
        self.halt();
        if let Some(running) = self.running.take() {
            // The job ends at its next interrupt check or wait; it never blocks long.
            running.wait();
        }
    }
}

/// Starts the script on a VM thread of its own while it runs (a pooled one, `vm/pool.rs`, in
/// a fresh runtime and context). Events arrive on `events` until `Finished` (or until the VM
/// is halted, after which nothing more is sent).
pub(crate) fn spawn(script: VmScript, limits: VmLimits, events: VmEvents) -> VmHandle {
    let (reply_tx, reply_rx) = std_mpsc::channel();
    let halt = Arc::new(AtomicBool::new(false));
    let thread_halt = halt.clone();
    let running = pool::start(Box::new(move |spare, done| {
        let (finished, spent) = run(
            script,
            limits,
            &events,
            reply_rx,
            thread_halt.clone(),
            spare,
        );
        if !thread_halt.load(Ordering::SeqCst) {
            // A closed queue means the driver is gone; there is nobody left to tell.
            let _ = events.finish(finished);
        }
        // The script can do nothing more: its driver stops waiting, the runtime is freed after.
        done.signal();
        drop(spent);
    }));
    VmHandle {
        replies: reply_tx,
        halt,
        running,
    }
}

/// The interrupt handler's view of time: when the current slice (the stretch since the
/// thread last woke from a host wait) started.
struct SliceClock {
    origin: Instant,
    /// Milliseconds since `origin` at which the current slice started, plus one; 0 = idle.
    started: AtomicU64,
    tripped: AtomicBool,
}

impl SliceClock {
    fn begin(&self) {
        let now = self.origin.elapsed().as_millis() as u64 + 1;
        self.started.store(now, Ordering::SeqCst);
    }
    fn end(&self) {
        self.started.store(0, Ordering::SeqCst);
    }
    /// Moves the current slice's start later by `waited`, time the thread spent blocked on
    /// the driver rather than running the script.
    fn exclude(&self, waited: Duration) {
        let _ = self
            .started
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |started| {
                (started != 0).then(|| started + waited.as_millis() as u64)
            });
    }
}

type Unhandled = Rc<RefCell<Vec<(Persistent<rquickjs::Value<'static>>, ScriptFailure)>>>;
type Resolvers =
    Rc<RefCell<HashMap<u64, (Persistent<Function<'static>>, Persistent<Function<'static>>)>>>;

/// Applies a script's heap cap and stack size to its runtime, and the interrupt handler that
/// stops it when halted or when a slice outruns `limits.slice_limit`; returns the slice
/// clock the handler reads.
fn apply_limits(runtime: &Runtime, limits: VmLimits, halt: &Arc<AtomicBool>) -> Arc<SliceClock> {
    runtime.set_memory_limit(limits.memory_limit);
    runtime.set_max_stack_size(4 << 20);
    let clock = Arc::new(SliceClock {
        origin: Instant::now(),
        started: AtomicU64::new(0),
        tripped: AtomicBool::new(false),
    });
    let handler_clock = clock.clone();
    let halt = halt.clone();
    let slice_ms = limits.slice_limit.as_millis() as u64;
    runtime.set_interrupt_handler(Some(Box::new(move || {
        if halt.load(Ordering::Relaxed) {
            return true;
        }
        let started = handler_clock.started.load(Ordering::Relaxed);
        if started != 0
            && handler_clock.origin.elapsed().as_millis() as u64 + 1 - started > slice_ms
        {
            handler_clock.tripped.store(true, Ordering::Relaxed);
            return true;
        }
        false
    })));
    clock
}

fn run(
    mut script: VmScript,
    limits: VmLimits,
    events: &VmEvents,
    replies: std_mpsc::Receiver<VmReply>,
    halt: Arc<AtomicBool>,
    spare: Option<Spare>,
) -> (Result<Option<Value>, ScriptFailure>, Option<Spent>) {
    // A spare was made for this script alone (`vm/pool.rs`); without one, a new pair now.
    let Spare {
        host,
        context,
        runtime,
    } = match spare.map_or_else(Spare::create, Ok) {
        Ok(spare) => spare,
        Err(error) => return (Err(ScriptFailure::script_error(error)), None),
    };
    let clock = apply_limits(&runtime, limits, &halt);
    let unhandled: Unhandled = Rc::default();
    let resolvers: Resolvers = Rc::default();
    let nested = script.nested.take();
    let files = script.files.clone();

    // Tracked from the first statement: a rejection floated before the script's first
    // `await` happens while it is being started.
    track_rejections(&runtime, &unhandled);
    let outbox = Outbox {
        events: events.clone(),
        clock: clock.clone(),
    };
    let started = context.with(|ctx| {
        // The spare's host (`vm/host.rs`) if it has one, else set up now.
        let host = match host {
            Some(host) => host,
            None => host::set_up(&ctx).map_err(|e| vm_failure(&ctx, e, &clock, limits))?,
        };
        host.bind(Bound::new(outbox, resolvers.clone(), nested, files));
        // The first slice: from here until the thread first waits for the driver.
        clock.begin();
        match start_script(&ctx, &host.helpers, &script) {
            Ok(main) => Ok((host, main)),
            Err(e) => {
                let failure = vm_failure(&ctx, e, &clock, limits);
                host.unbind();
                Err(failure)
            }
        }
    });
    let (host, main) = match started {
        Ok(started) => started,
        Err(failure) => {
            runtime.set_host_promise_rejection_tracker(None);
            resolvers.borrow_mut().clear();
            unhandled.borrow_mut().clear();
            let spent = Spent {
                _context: context,
                _runtime: runtime,
            };
            return (Err(failure), Some(spent));
        }
    };

    let result = drive(
        &runtime,
        &context,
        &main,
        &host.helpers,
        &resolvers,
        &unhandled,
        &clock,
        limits,
        &replies,
        &halt,
    );
    // Release every JS value Rust still holds before the runtime is freed: QuickJS asserts
    // that no object outlives its runtime, and the resolvers' closures would keep cycles.
    runtime.set_host_promise_rejection_tracker(None);
    resolvers.borrow_mut().clear();
    unhandled.borrow_mut().clear();
    drop(main);
    host.unbind();
    drop(host);
    context.with(|ctx| {
        let globals = ctx.globals();
        for name in ["agent", "checkpoint"] {
            let _ = globals.remove(name);
        }
    });
    let spent = Spent {
        _context: context,
        _runtime: runtime,
    };
    (result, Some(spent))
}

#[allow(clippy::too_many_arguments)]
fn drive(
    runtime: &Runtime,
    context: &Context,
    main: &Persistent<Promise<'static>>,
    helpers: &Helpers,
    resolvers: &Resolvers,
    unhandled: &Unhandled,
    clock: &SliceClock,
    limits: VmLimits,
    replies: &std_mpsc::Receiver<VmReply>,
    halt: &AtomicBool,
) -> Result<Option<Value>, ScriptFailure> {
    // The rest of a batch of replies, each delivered after the jobs the one before it queued
    // have run, as a reply that came alone would be.
    let mut queued: std::collections::VecDeque<VmReply> = std::collections::VecDeque::new();
    loop {
        run_jobs(runtime, clock, limits, halt)?;
        if halt.load(Ordering::SeqCst) {
            return Err(ScriptFailure::script_error("halted"));
        }
        // A script that ended with its own error fails with it; one that returned fails
        // all the same when it floated a rejection it never handled (reading the result
        // runs its getters, which can float one too).
        if let Some(result) = settled(context, main, helpers, clock, limits) {
            return match (result, take_unhandled(context, main, unhandled)) {
                (Ok(_), Some(failure)) => Err(failure),
                (result, _) => result,
            };
        }
        if let Some(failure) = take_unhandled(context, main, unhandled) {
            return Err(failure);
        }
        if resolvers.borrow().is_empty() {
            return Err(ScriptFailure::script_error(
                "the script is waiting for a promise that can never settle (no agent or checkpoint call is pending)",
            ));
        }
        // The only host wait: the slice ends while the thread blocks, and a new one begins
        // when it wakes.
        let reply = match queued.pop_front() {
            Some(reply) => reply,
            None => {
                clock.end();
                let received = replies.recv();
                clock.begin();
                match received {
                    Ok(VmReply::Batch(batch)) => {
                        queued.extend(batch);
                        continue;
                    }
                    Ok(reply) => reply,
                    Err(_) => return Err(ScriptFailure::script_error("halted")),
                }
            }
        };
        if halt.load(Ordering::SeqCst) {
            return Err(ScriptFailure::script_error("halted"));
        }
        let delivered = context.with(|ctx| deliver(&ctx, helpers, resolvers, reply));
        if let Err(error) = delivered {
            return Err(context.with(|ctx| vm_failure(&ctx, error, clock, limits)));
        }
    }
}

/// The first rejection no handler took, as the failure it makes. The script's own promise
/// (`main`) is not one: its rejection is the script's outcome.
fn take_unhandled(
    context: &Context,
    main: &Persistent<Promise<'static>>,
    unhandled: &Unhandled,
) -> Option<ScriptFailure> {
    let floated: Vec<_> = unhandled.borrow_mut().drain(..).collect();
    let (_, failure) = context.with(|ctx| {
        let main = main.clone().restore(&ctx).ok()?.into_value();
        floated.into_iter().find(|(promise, _)| {
            promise
                .clone()
                .restore(&ctx)
                .map_or(true, |promise| promise != main)
        })
    })?;
    Some(ScriptFailure {
        message: format!("unhandled promise rejection: {}", failure.message),
        ..failure
    })
}

/// Records rejections no handler took (and forgets them once one does). Whatever is left
/// once the queued jobs have run counts as unhandled: the script next waits for the host or
/// has ended, and a handler added after a host answer comes too late (as in Node, where a
/// rejection is unhandled once the microtask queue drains).
fn track_rejections(runtime: &Runtime, unhandled: &Unhandled) {
    let unhandled = unhandled.clone();
    runtime.set_host_promise_rejection_tracker(Some(Box::new(
        move |ctx, promise, reason, is_handled| {
            let mut list = unhandled.borrow_mut();
            if is_handled {
                list.retain(|(saved, _)| {
                    saved
                        .clone()
                        .restore(&ctx)
                        .map(|value| value != promise)
                        .unwrap_or(true)
                });
            } else {
                let failure = failure_from_value(&ctx, reason);
                list.push((Persistent::save(&ctx, promise), failure));
            }
        },
    )));
}

/// Runs every queued job (promise continuations). They all belong to the slice that began
/// when the thread last woke: a job that only queues the next one (`await null` in a loop)
/// never gets a fresh deadline.
fn run_jobs(
    runtime: &Runtime,
    clock: &SliceClock,
    limits: VmLimits,
    halt: &AtomicBool,
) -> Result<(), ScriptFailure> {
    loop {
        if halt.load(Ordering::SeqCst) {
            return Err(ScriptFailure::script_error("halted"));
        }
        match runtime.execute_pending_job() {
            Ok(true) => continue,
            Ok(false) => return Ok(()),
            Err(job_error) => {
                let failure = job_error.0.with(|ctx| {
                    let error = ctx.catch();
                    if clock.tripped.load(Ordering::SeqCst) {
                        runaway(limits)
                    } else {
                        failure_from_value(&ctx, error)
                    }
                });
                return Err(failure);
            }
        }
    }
}

/// The script's result once its main promise settled; `None` while it is pending.
fn settled(
    context: &Context,
    main: &Persistent<Promise<'static>>,
    helpers: &Helpers,
    clock: &SliceClock,
    limits: VmLimits,
) -> Option<Result<Option<Value>, ScriptFailure>> {
    context.with(|ctx| {
        let promise = main.clone().restore(&ctx).ok()?;
        match promise.state() {
            PromiseState::Pending => None,
            PromiseState::Resolved => Some(finish_value(&ctx, &promise, helpers, clock, limits)),
            PromiseState::Rejected => {
                let reason = match promise.result::<rquickjs::Value>() {
                    Some(Err(rquickjs::Error::Exception)) => ctx.catch(),
                    Some(Ok(value)) => value,
                    _ => ctx.catch(),
                };
                if clock.tripped.load(Ordering::SeqCst) {
                    return Some(Err(runaway(limits)));
                }
                Some(Err(failure_from_value(&ctx, reason)))
            }
        }
    })
}

/// Parses an analyzed script's `body` as the VM would run it, without running it: the
/// wrapper function is created and never called, so no script code executes. A syntax error
/// comes back as the VM reports one (message, line, column); a server that lists scripts as
/// tools (the folder server) refuses a broken one at start-up with it.
pub(crate) fn check_syntax(body: &str, limits: VmLimits) -> Result<(), String> {
    let runtime =
        Runtime::new().map_err(|error| format!("the script VM did not start: {error}"))?;
    runtime.set_memory_limit(limits.memory_limit);
    let context =
        Context::full(&runtime).map_err(|error| format!("the script VM did not start: {error}"))?;
    context.with(|ctx| {
        let mut source = String::with_capacity(body.len() + 32);
        source.push_str(WRAPPER_OPEN);
        source.push_str(body);
        source.push_str("\n})");
        match ctx.eval_with_options::<rquickjs::Value, _>(source, eval_options(SCRIPT_FILENAME)) {
            Ok(_) => Ok(()),
            Err(_) => Err(failure_from_value(&ctx, ctx.catch()).describe()),
        }
    })
}

fn eval_options(filename: &str) -> rquickjs::context::EvalOptions {
    let mut options = rquickjs::context::EvalOptions::default();
    options.global = true;
    options.strict = false;
    options.filename = Some(filename.to_owned());
    options
}

fn start_script<'js>(
    ctx: &Ctx<'js>,
    helpers: &Helpers,
    script: &VmScript,
) -> rquickjs::Result<Persistent<Promise<'static>>> {
    let install = helpers.install.clone().restore(ctx)?;
    let wrapper_line = script.body.matches('\n').count() as u32 + 2;
    install.call::<_, ()>((
        script.args.to_string(),
        script.cwd.clone(),
        wrapper_line,
        WRAPPER_OPEN.len() as u32,
        script.call_paths,
        script.budget.to_string(),
        f64::from(script.max_calls),
    ))?;
    let mut source = String::with_capacity(script.body.len() + 32);
    source.push_str(WRAPPER_OPEN);
    source.push_str(&script.body);
    source.push_str(WRAPPER_CLOSE);
    let promise: Promise = ctx.eval_with_options(source, eval_options(SCRIPT_FILENAME))?;
    Ok(Persistent::save(ctx, promise))
}

fn deliver<'js>(
    ctx: &Ctx<'js>,
    helpers: &Helpers,
    resolvers: &Resolvers,
    reply: VmReply,
) -> rquickjs::Result<()> {
    let (call_id, outcome) = match reply {
        VmReply::Budget(view) => {
            let set = helpers.set_budget.clone().restore(ctx)?;
            return set.call::<_, ()>((view.to_string(),));
        }
        // `drive` takes a batch apart before delivering.
        VmReply::Batch(_) => return Ok(()),
        VmReply::Resolve { call_id, value } => (call_id, Ok(value)),
        VmReply::Reject {
            call_id,
            code,
            message,
            recoverable,
        } => (call_id, Err((code, message, recoverable))),
    };
    let Some((resolve, reject)) = resolvers.borrow_mut().remove(&call_id) else {
        return Ok(());
    };
    match outcome {
        // The answer as the script receives it: parsed here, so the call's promise settles
        // with it and the prelude chains no `.then` of its own per call.
        Ok(value) => {
            let resolve = resolve.restore(ctx)?;
            // A text answer (the usual one) becomes a string without a JSON round trip.
            let value = match &value {
                Value::String(text) => rquickjs::String::from_str(ctx.clone(), text)?.into_value(),
                other => ctx.json_parse(other.to_string())?,
            };
            resolve.call::<_, ()>((value,))
        }
        Err((code, message, recoverable)) => {
            let make = helpers.make_error.clone().restore(ctx)?;
            let error: rquickjs::Value = make.call((code, message, recoverable))?;
            let reject = reject.restore(ctx)?;
            reject.call::<_, ()>((error,))
        }
    }
}

fn finish_value<'js>(
    ctx: &Ctx<'js>,
    promise: &Promise<'js>,
    helpers: &Helpers,
    clock: &SliceClock,
    limits: VmLimits,
) -> Result<Option<Value>, ScriptFailure> {
    let value: rquickjs::Value = match promise.result() {
        Some(Ok(value)) => value,
        _ => return Err(failure_from_value(ctx, ctx.catch())),
    };
    let strict = helpers
        .strict_json
        .clone()
        .restore(ctx)
        .map_err(|e| vm_failure(ctx, e, clock, limits))?;
    // Still the current slice: a result whose getters loop is a runaway like any other.
    let text = strict.call::<_, Option<String>>((value,)).catch(ctx);
    if clock.tripped.load(Ordering::SeqCst) {
        return Err(runaway(limits));
    }
    match text {
        Ok(None) => Ok(None),
        Ok(Some(text)) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| ScriptFailure::script_error(format!("the result is not JSON: {e}"))),
        Err(CaughtError::Exception(exception)) => Err(ScriptFailure::script_error(format!(
            "the script's result must be strict JSON: {}",
            exception.message().unwrap_or_default()
        ))),
        Err(other) => Err(ScriptFailure::script_error(format!(
            "the script's result must be strict JSON: {other}"
        ))),
    }
}

#[cfg(test)]
mod tests;
