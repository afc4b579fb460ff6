//! Threads for script VMs, kept between scripts. Starting a VM takes an idle thread (or
//! starts one) instead of paying for a thread start, and an idle thread holds a *spare*: a
//! QuickJS runtime and full context created after its previous script ended, so a VM's start
//! (the dry run of every admission among them) does not wait for `JS_NewContext`.
//!
//! A thread is idle from the moment its job returns, and its spare is ready a little later.
//! A VM's start takes the newest idle thread whose spare is ready; when none is, it starts a
//! thread while fewer than [`MAX_IDLE`] are idle, and otherwise waits on the newest idle
//! thread's spare. So back-to-back admissions alternate between two threads, one running the
//! script while the other makes its spare, rather than each waiting for the spare of the
//! thread the one before used.
//!
//! Isolation, the rule that makes this safe for untrusted scripts: a spare is brand new and is
//! handed to exactly one script, then freed with that script's VM. A thread makes its next
//! spare only after the previous script's job returned, and that job drops its context and
//! runtime (QuickJS frees every object of a runtime with it), so no object of one script is
//! reachable from another's: they share the OS thread and nothing JavaScript. The spare's
//! per-script settings (heap cap, stack size, interrupt handler) are applied by the script's
//! job before anything of the script runs in it; the spare's only code that ran before is the
//! prelude, loaded ahead from its bytecode and evaluated with the host functions (trusted
//! code, no script's value in it: the job binds the script's state to them, `vm/host.rs`).
//!
//! At most [`MAX_IDLE`] threads wait, each for at most [`IDLE_FOR`]; more VMs than that at once
//! start threads of their own that end with their script.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::host::Host;
use crate::util::sync::Lock;
use rquickjs::{Context, Runtime};

/// Idle threads kept, each with a spare. Admission needs two VMs one after the other (the
/// dry run, then the execution), so a few idle threads serve parallel clients; each spare
/// costs about 0.2 MiB of heap while it waits, and its host (the evaluated prelude) some more.
const MAX_IDLE: usize = 4;
/// How long an idle thread waits for a script before it ends (with its spare), so an idle
/// daemon gives the memory back.
const IDLE_FOR: Duration = Duration::from_secs(30);
/// The VM thread's stack: QuickJS's own limit is 4 MiB below it (`vm::run`), and Rust frames
/// of the host calls sit beside it.
const STACK_SIZE: usize = 16 << 20;

/// A fresh runtime and its context, created on the thread that will run them; never used by
/// more than one script.
pub(super) struct Spare {
    /// The context's host, set up ahead of the script: the prelude loaded from its bytecode
    /// and evaluated with the host functions, which the script's job binds to the script
    /// (`vm/host.rs`; nothing of it depends on the script). `None` when that failed: the job
    /// sets it up then, and reports why it cannot. First of the fields, so its values are
    /// released before the context and runtime are freed.
    pub host: Option<Host>,
    pub context: Context,
    pub runtime: Runtime,
}

impl Spare {
    /// A new runtime and full context with the host set up, nothing of any script in them.
    pub(super) fn create() -> Result<Spare, String> {
        let runtime =
            Runtime::new().map_err(|e| format!("cannot start the script runtime: {e}"))?;
        let context = Context::full(&runtime)
            .map_err(|e| format!("cannot create the script context: {e}"))?;
        let host = context.with(|ctx| super::host::set_up(&ctx).ok());
        Ok(Spare {
            host,
            context,
            runtime,
        })
    }
}

/// A script's runtime and context once Rust holds no value of theirs any more, freed by the
/// pool thread after the script reported itself done: the context, then the runtime, as the
/// fields (only held) drop in their order. Freeing the runtime drops its pending jobs,
/// collects the cycles left and frees every object (`JS_FreeRuntime`), so no collection of
/// its own comes before: one would walk the same heap a second time (3.6 % of an
/// admission's instructions).
pub(super) struct Spent {
    pub _context: Context,
    pub _runtime: Runtime,
}

/// Tells [`Running::wait`] that the job's script has ended. A job signals as soon as its
/// script can do nothing more, before freeing its runtime, so whoever waits (a driver
/// dropping its VM handle: the dry run of every admission) does not wait for the teardown;
/// the pool signals after the job returns in any case.
pub(super) struct Done(std_mpsc::SyncSender<()>);

impl Done {
    pub(super) fn signal(&self) {
        // Full: signalled already; disconnected: nobody waits.
        let _ = self.0.try_send(());
    }
}

/// One script's work on a pool thread; it receives the thread's spare if one was ready.
pub(super) type Job = Box<dyn FnOnce(Option<Spare>, &Done) + Send>;

/// Ends when the job has returned (its runtime freed) or its thread ended otherwise.
pub(super) struct Running {
    done: std_mpsc::Receiver<()>,
}

impl Running {
    /// Blocks until the job has returned.
    pub(super) fn wait(&self) {
        // A send means done; a disconnect means the thread ended (a panic): done as well.
        let _ = self.done.recv();
    }
}

/// A job handed to an idle thread, with the sender that says it is done.
struct Work {
    job: Job,
    done: Done,
}

/// The idle threads, newest last.
#[derive(Default)]
struct Idle {
    threads: Vec<IdleThread>,
    next_id: u64,
}

/// An idle thread: the sender of its own work channel, an id so a thread that times out can
/// take itself off the list, and whether its spare is made yet.
struct IdleThread {
    id: u64,
    /// Holds one job: a thread is taken off the idle list before it is sent its work.
    work: std_mpsc::SyncSender<Work>,
    ready: Arc<AtomicBool>,
}

impl Idle {
    /// The thread a VM's start takes: the newest with its spare ready; when none is, none
    /// (a new thread) while fewer than [`MAX_IDLE`] are idle, else the newest.
    fn take(&mut self) -> Option<IdleThread> {
        let ready = self
            .threads
            .iter()
            .rposition(|thread| thread.ready.load(Ordering::Acquire));
        match ready {
            Some(index) => Some(self.threads.remove(index)),
            None if self.threads.len() >= MAX_IDLE => self.threads.pop(),
            None => None,
        }
    }
}

fn idle() -> &'static Mutex<Idle> {
    static IDLE: OnceLock<Mutex<Idle>> = OnceLock::new();
    IDLE.get_or_init(Mutex::default)
}

/// Runs `job` on an idle thread, or on a new one when none waits. `None` when no thread could
/// be started; `job` has then been dropped.
pub(super) fn start(job: Job) -> Option<Running> {
    let (done_tx, done) = std_mpsc::sync_channel(1);
    let mut work = Work {
        job,
        done: Done(done_tx),
    };
    loop {
        let taken = idle().locked().take();
        let Some(thread) = taken else { break };
        // A thread taken here never ends without reading its channel (see `wait_for_work`),
        // so a failed send only means it died (a panic) between jobs: try the next one. Its
        // channel is empty, as only the start that took it off the list sends to it.
        match thread.work.try_send(work) {
            Ok(()) => return Some(Running { done }),
            Err(
                std_mpsc::TrySendError::Disconnected(returned)
                | std_mpsc::TrySendError::Full(returned),
            ) => work = returned,
        }
    }
    std::thread::Builder::new()
        .name("workflow-vm".into())
        .stack_size(STACK_SIZE)
        .spawn(move || worker(work))
        .ok()?;
    Some(Running { done })
}

/// A pool thread: runs its first job, then serves further jobs while it is wanted.
fn worker(first: Work) {
    let mut next = Some(first);
    let mut spare = None;
    while let Some(Work { job, done }) = next.take() {
        job(spare.take(), &done);
        // After the job returned: its runtime is gone, so the spare shares nothing with it.
        // The thread is back on the idle list before `done`, so a caller that waited for
        // this job finds it for the next one.
        let (tx, rx) = std_mpsc::sync_channel(1);
        let ready = Arc::new(AtomicBool::new(false));
        let id = {
            let mut idle = idle().locked();
            if idle.threads.len() >= MAX_IDLE {
                return;
            }
            idle.next_id += 1;
            let id = idle.next_id;
            idle.threads.push(IdleThread {
                id,
                work: tx,
                ready: ready.clone(),
            });
            id
        };
        done.signal();
        drop(done);
        spare = Spare::create().ok();
        ready.store(true, Ordering::Release);
        next = wait_for_work(id, &rx);
    }
}

/// The next job of idle thread `id`, or `None` once it has waited [`IDLE_FOR`] and taken
/// itself off the idle list. A thread already popped by [`start`] is sent a job right after,
/// so it waits for that one instead of ending.
fn wait_for_work(id: u64, rx: &std_mpsc::Receiver<Work>) -> Option<Work> {
    match rx.recv_timeout(IDLE_FOR) {
        Ok(work) => Some(work),
        Err(std_mpsc::RecvTimeoutError::Disconnected) => None,
        Err(std_mpsc::RecvTimeoutError::Timeout) => {
            let still_idle = {
                let mut idle = idle().locked();
                let before = idle.threads.len();
                idle.threads.retain(|thread| thread.id != id);
                idle.threads.len() != before
            };
            if still_idle { None } else { rx.recv().ok() }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job that reports its thread, and whether its spare (if it got one) was fresh: no
    /// `leak` global, which every probe sets in the spare it was given.
    fn probe() -> (
        Running,
        std_mpsc::Receiver<(std::thread::ThreadId, Option<bool>)>,
    ) {
        let (tx, rx) = std_mpsc::channel();
        let running = start(Box::new(move |spare: Option<Spare>, _: &Done| {
            let fresh = spare.map(|spare| {
                spare.context.with(|ctx| {
                    let fresh: bool = ctx.eval("typeof globalThis.leak === 'undefined'").unwrap();
                    ctx.globals().set("leak", 1).unwrap();
                    fresh
                })
            });
            let _ = tx.send((std::thread::current().id(), fresh));
        }))
        .expect("a pool thread");
        (running, rx)
    }

    #[test]
    fn threads_are_reused_and_each_job_gets_a_fresh_spare() {
        // Sequential jobs find an idle thread (another test running VMs may take one now and
        // then), so far fewer threads than jobs serve them; every spare is new.
        let mut threads = std::collections::HashSet::new();
        let mut spares = 0;
        for _ in 0..20 {
            let (running, seen) = probe();
            running.wait();
            let (thread, fresh) = seen.recv().expect("the job ran");
            threads.insert(thread);
            assert_ne!(fresh, Some(false), "a spare was handed to a second job");
            spares += usize::from(fresh.is_some());
        }
        assert!(
            threads.len() <= 10,
            "{} threads for 20 sequential jobs",
            threads.len()
        );
        assert!(spares >= 10, "only {spares} of 20 jobs got a spare");
    }

    /// A spare comes with its host set up; dropped unused (as an idle thread that times out
    /// drops it), it releases the prelude's helpers before its runtime is freed, which
    /// QuickJS would otherwise abort on.
    #[test]
    fn a_spare_holds_its_host_and_frees_it_first() {
        let spare = Spare::create().expect("a spare");
        assert!(spare.host.is_some(), "the spare's host was not set up");
        drop(spare);
    }

    /// A VM's start takes the newest thread whose spare is ready, over newer ones still
    /// making theirs; with none ready it starts a thread, until [`MAX_IDLE`] are idle.
    #[test]
    fn a_start_prefers_a_thread_whose_spare_is_ready() {
        let mut idle = Idle::default();
        let add = |idle: &mut Idle, ready: bool| {
            idle.next_id += 1;
            idle.threads.push(IdleThread {
                id: idle.next_id,
                work: std_mpsc::sync_channel(1).0,
                ready: Arc::new(AtomicBool::new(ready)),
            });
        };
        add(&mut idle, true);
        add(&mut idle, true);
        add(&mut idle, false);
        assert_eq!(idle.take().map(|thread| thread.id), Some(2));
        assert_eq!(idle.take().map(|thread| thread.id), Some(1));
        assert!(
            idle.take().is_none(),
            "a thread still making its spare was taken"
        );
        for _ in 1..MAX_IDLE {
            add(&mut idle, false);
        }
        let newest = idle.next_id;
        assert_eq!(idle.take().map(|thread| thread.id), Some(newest));
    }

    #[test]
    fn a_job_that_panics_still_reports_done() {
        let running = start(Box::new(|_, _| panic!("job panics"))).expect("a pool thread");
        running.wait();
        let (after, seen) = probe();
        after.wait();
        assert!(
            seen.recv().is_ok(),
            "the pool still runs jobs after a panic"
        );
    }
}
