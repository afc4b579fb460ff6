//! `agentprism-workflow`, the stdio shim a host launches (daemon.md 1.7): it finds or starts
//! the daemon of its env family and proxies newline-delimited JSON-RPC between its stdio and
//! the daemon's Streamable HTTP. It links no engine, store or ACP code: only discovery, the
//! env names and this module, so it starts in milliseconds and stays a few MiB. Killing it
//! never touches a run; it never signals the daemon.
//!
//! `--in-process` and `daemon <args…>` replace the process with the sibling `agentprism`.

pub(crate) mod ensure;
pub(crate) mod frames;
pub(crate) mod http;
pub(crate) mod output;
mod post;
pub(crate) mod proxy;
pub(crate) mod sse;
mod stream;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::discovery::{Paths, current_fingerprint};
use crate::env::EnvSnapshot;
use ensure::Ensurer;
use frames::{Line, MAX_FRAME_BYTES, codes};
use output::Output;
use proxy::{Event, Exit, Proxy};

/// The shim's version, the package version shared with `agentprism --version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Args {
    /// Proxy stdio to the daemon (no arguments).
    Proxy,
    /// `--in-process`: exec `agentprism serve --stdio --project-dir <cwd>`.
    InProcess,
    /// `daemon <args…>`: exec `agentprism daemon <args…>`.
    Daemon(Vec<OsString>),
    Version,
    Help,
}

const USAGE: &str = "\
agentprism-workflow: the MCP stdio entry of agentprism (launched by MCP hosts)

usage:
  agentprism-workflow                  stdio shim to the shared per-user daemon (default)
  agentprism-workflow --in-process     a private single-process stdio server
  agentprism-workflow daemon <start|stop|status|url|run|logs> [args…]
  agentprism-workflow --version
";

impl Args {
    /// Parses the arguments after the program name.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
        let mut args = args.into_iter();
        let Some(first) = args.next() else {
            return Ok(Args::Proxy);
        };
        let parsed = match first.to_str() {
            Some("daemon") => return Ok(Args::Daemon(args.collect())),
            Some("--in-process") => Args::InProcess,
            Some("--version" | "-V") => Args::Version,
            Some("--help" | "-h" | "help") => Args::Help,
            _ => return Err(format!("unknown argument {first:?}\n\n{USAGE}")),
        };
        match args.next() {
            None => Ok(parsed),
            Some(extra) => Err(format!("unexpected argument {extra:?}\n\n{USAGE}")),
        }
    }
}

/// Runs what `args` asks for and maps the outcome to the exit code.
pub fn run(args: Args) -> ExitCode {
    match args {
        Args::Version => {
            // A closed stdout is no reason to panic (`agentprism-workflow --version | head -0`).
            let _ = writeln!(std::io::stdout(), "agentprism-workflow {VERSION}");
            ExitCode::SUCCESS
        }
        Args::Help => {
            let _ = write!(std::io::stdout(), "{USAGE}");
            ExitCode::SUCCESS
        }
        Args::InProcess => {
            let project = match std::env::current_dir() {
                Ok(dir) => dir,
                Err(error) => return fail(&format!("reading the current folder: {error}")),
            };
            let mut args: Vec<OsString> = ["serve", "--stdio", "--project-dir"]
                .map(OsString::from)
                .into();
            args.push(project.into_os_string());
            exec_agentprism(args)
        }
        Args::Daemon(rest) => {
            let mut args = vec![OsString::from("daemon")];
            args.extend(rest);
            exec_agentprism(args)
        }
        Args::Proxy => match proxy_stdio() {
            Ok(Exit::Done) => ExitCode::SUCCESS,
            Ok(Exit::Failed(message)) => fail(&message),
            Err(error) => fail(&format!("{error:#}")),
        },
    }
}

fn fail(message: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "agentprism-workflow: {message}");
    ExitCode::FAILURE
}

/// Replaces this process with the sibling `agentprism` (or `AGENTPRISM_DAEMON_BIN`).
fn exec_agentprism(args: Vec<OsString>) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let binary = crate::daemon::spawn::daemon_binary(&EnvSnapshot::capture());
    let error = std::process::Command::new(&binary).args(args).exec();
    fail(&format!("running {}: {error}", binary.display()))
}

/// The proxy on a single-threaded runtime: the shim does little work per message, and one
/// thread keeps its memory and start-up small. Stdin and stdout have a thread each, so a
/// host that stops reading never blocks the event loop.
fn proxy_stdio() -> anyhow::Result<Exit> {
    let parent = ParentWatch::start();
    let env = EnvSnapshot::capture();
    let paths = Paths::from_env(&env)?;
    crate::daemon::remember_token(&env, &paths);
    let ensurer = Arc::new(Ensurer::new(
        paths,
        current_fingerprint(),
        crate::daemon::version(),
        &env,
    ));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let exit = runtime.block_on(async {
        let (events, receiver) = mpsc::unbounded_channel();
        let stdout_closed = events.clone();
        let output = Output::start(std::io::stdout(), move || {
            let _ = stdout_closed.send(Event::StdoutClosed);
        });
        read_stdin(events.clone(), output.clone());
        let proxy = Proxy::new(ensurer, output.clone(), events);
        let exit = proxy.run(receiver, stop_reason(parent)).await;
        output.flush(std::time::Duration::from_millis(500));
        exit
    });
    // Blocking reads of stdin must not hold the process open.
    runtime.shutdown_background();
    Ok(exit)
}

/// The host process that started the shim. The shim lives exactly as long as that process
/// and its stdin, and no longer.
///
/// Deliberately not `prctl(PR_SET_PDEATHSIG)`: it fires when the parent *thread* exits, and
/// hosts spawn the shim from worker threads their runtime retires when idle (Codex after
/// about 10 s), which would end a healthy shim between two tool calls. A pidfd of the parent
/// process becomes readable only when the whole process is gone. Where there is no pidfd, the
/// proxy's once-a-second `getppid()` comparison ends the shim instead.
struct ParentWatch {
    /// A pidfd of the parent process, known to refer to it (opened, then the parent pid
    /// re-read: a parent that is still our parent cannot have had its pid recycled).
    #[cfg(target_os = "linux")]
    pidfd: Option<std::os::fd::OwnedFd>,
    /// The parent died before the watch began.
    orphaned: bool,
}

impl ParentWatch {
    /// Starts watching the current parent; called first thing, before any thread exists.
    fn start() -> ParentWatch {
        let parent = nix::unistd::getppid();
        #[cfg(target_os = "linux")]
        {
            use crate::discovery::process_table::pidfd;
            let pidfd = match pidfd::open(parent.as_raw()) {
                Ok(fd) => Some(fd),
                Err(nix::errno::Errno::ESRCH) => None,
                Err(error) => {
                    let _ = writeln!(
                        std::io::stderr(),
                        "agentprism-workflow: no pidfd for the parent process ({error}); \
                         checking it every second instead"
                    );
                    None
                }
            };
            let orphaned = nix::unistd::getppid() != parent;
            ParentWatch { pidfd, orphaned }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = parent;
            ParentWatch { orphaned: false }
        }
    }

    /// Resolves when the parent process is gone; never, if it cannot be watched this way.
    async fn exited(self) -> &'static str {
        const REASON: &str = "the parent process exited";
        if self.orphaned {
            return REASON;
        }
        #[cfg(target_os = "linux")]
        if let Some(pidfd) = self.pidfd {
            // SAFETY: the `OwnedFd` is moved into the `AsyncFd`, which owns it until it is
            // dropped: the descriptor stays open and the same for the registration's lifetime.
            let registered = unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(
                    pidfd,
                    tokio::io::Interest::READABLE,
                )
            };
            match registered {
                // A pidfd polls readable once its process has exited.
                Ok(watched) => match watched.readable().await {
                    Ok(_) => return REASON,
                    Err(error) => report_unwatched(&error),
                },
                Err(error) => report_unwatched(&error.into()),
            }
        }
        std::future::pending().await
    }
}

#[cfg(target_os = "linux")]
fn report_unwatched(error: &std::io::Error) {
    let _ = writeln!(
        std::io::stderr(),
        "agentprism-workflow: cannot poll the parent's pidfd ({error}); checking it every \
         second instead"
    );
}

/// Resolves with the reason the shim should stop: a signal, or the end of its host process.
async fn stop_reason(parent: ParentWatch) -> &'static str {
    tokio::select! {
        reason = stop_signal() => reason,
        reason = parent.exited() => reason,
    }
}

/// Reads stdin on its own thread, inspecting each frame there.
fn read_stdin(events: mpsc::UnboundedSender<Event>, output: Output) {
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            let reader = std::io::BufReader::with_capacity(64 * 1024, stdin.lock());
            let mut seq = 0u64;
            let result = frames::read_lines(reader, MAX_FRAME_BYTES, |line| {
                seq += 1;
                match line {
                    Line::Text(bytes) => match frames::inspect(seq, bytes) {
                        Ok(frame) => events.send(Event::Frame(Box::new(frame))).is_ok(),
                        Err(answer) => {
                            output.write_value(&answer);
                            true
                        }
                    },
                    Line::TooLong => {
                        output.write_value(&frames::error_response(
                            &serde_json::Value::Null,
                            codes::INVALID_REQUEST,
                            &format!(
                                "a frame over the {} MiB limit; it was skipped unread",
                                MAX_FRAME_BYTES >> 20
                            ),
                        ));
                        true
                    }
                }
            });
            if let Err(error) = result {
                let _ = writeln!(
                    std::io::stderr(),
                    "agentprism-workflow: reading stdin: {error}"
                );
            }
            let _ = events.send(Event::StdinClosed);
        })
        .expect("spawn the stdin reader");
}

/// Resolves with the name of the first of SIGTERM, SIGINT or SIGHUP.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
        _ = hup.recv() => "SIGHUP",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, String> {
        Args::parse(args.iter().map(OsString::from))
    }

    #[test]
    fn arguments() {
        assert_eq!(parse(&[]), Ok(Args::Proxy));
        assert_eq!(parse(&["--in-process"]), Ok(Args::InProcess));
        assert_eq!(parse(&["--version"]), Ok(Args::Version));
        assert_eq!(
            parse(&["daemon", "status", "--json"]),
            Ok(Args::Daemon(vec!["status".into(), "--json".into()]))
        );
        assert!(parse(&["--bogus"]).is_err());
        assert!(parse(&["--version", "x"]).is_err());
    }
}
