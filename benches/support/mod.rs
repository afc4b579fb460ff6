//! What the benches share: a private world (HOME, persistence root, project, ephemeral
//! ports) whose shims are real `agentprism-workflow` processes, the figures' arithmetic, and
//! the one machine-readable line per figure that `scripts/measure` collects ([`figure`]).
//! Each bench includes it with `mod support;`.

#![allow(dead_code)]

pub mod http;
pub mod measure;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

pub const SHIM: &str = env!("CARGO_BIN_EXE_agentprism-workflow");

/// Prints one figure as a line `scripts/measure` reads:
/// `figure: <area> | <figure> | <value> | <goal>`, with `-` for a figure that has no goal.
/// The area is the bench's name, so `scripts/measure <area>` refreshes exactly its figures.
/// The prose lines around it are for a reader; this line is the contract.
pub fn figure(area: &str, name: &str, value: impl std::fmt::Display, goal: &str) {
    println!("figure: {area} | {name} | {value} | {goal}");
}

/// Runs `hook` as `hook <phase> <pid>`, so a profiler brackets one stretch of a bench:
/// `phase` is `on` before it and `off` after; `pid` is the daemon's. Benches that take one
/// read it from `AGENTPRISM_BENCH_HOOK`.
pub fn run_hook(hook: &std::ffi::OsStr, phase: &str, pid: i32) -> Result<(), String> {
    let status = Command::new(hook)
        .args([phase, &pid.to_string()])
        .status()
        .map_err(|error| format!("running the hook {}: {error}", hook.to_string_lossy()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the hook's `{phase}` failed: {status}"))
    }
}

pub struct World {
    pub env: Vec<(String, String)>,
    pub state: PathBuf,
    pub project: PathBuf,
}

impl World {
    pub fn new(base: &Path, name: &str) -> World {
        let root = base.join(name);
        let (home, state, project) = (root.join("home"), root.join("state"), root.join("project"));
        for dir in [&home, &state, &project] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let env = vec![
            ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".into(), home.display().to_string()),
            (
                "AGENTPRISM_PERSISTENCE_ROOT".into(),
                state.display().to_string(),
            ),
            ("AGENTPRISM_DAEMON_PORT".into(), "0".into()),
            ("AGENTPRISM_LOG".into(), "info".into()),
        ];
        // The store's durability, when the bench is asked to measure another mode.
        let mut env = env;
        if let Ok(sync) = std::env::var("AGENTPRISM_STORE_SYNC") {
            env.push(("AGENTPRISM_STORE_SYNC".into(), sync));
        }
        World {
            env,
            state,
            project,
        }
    }

    pub fn shim(&self) -> Shim {
        let mut child = Command::new(SHIM)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.project)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the shim");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Shim {
            child,
            stdin,
            stdout,
            session: None,
        }
    }

    pub fn pointer(&self) -> Value {
        let dir = self.state.join("daemons");
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json")
                && !path.ends_with("run-control-key.json")
            {
                return serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            }
        }
        panic!("no pointer under {}", dir.display());
    }

    pub fn pointer_pid(&self) -> i32 {
        self.pointer()["pid"].as_i64().unwrap() as i32
    }
}

pub struct Shim {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub stdout: BufReader<std::process::ChildStdout>,
    pub session: Option<String>,
}

impl Shim {
    pub fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .unwrap();
    }

    pub fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line).unwrap() == 0 {
                let mut stderr = String::new();
                let _ = self
                    .child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut stderr);
                panic!("the shim closed stdout: {stderr}");
            }
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == json!(id) && message.get("method").is_none() {
                return message;
            }
        }
    }

    pub fn initialize(&mut self) {
        self.request(0, "initialize", initialize_params());
        // The verbose shim names its session on stderr; the direct client reuses it.
        let mut stderr = BufReader::new(self.child.stderr.take().unwrap());
        let mut line = String::new();
        while stderr.read_line(&mut line).unwrap() > 0 {
            if let Some(rest) = line.trim().strip_prefix("agentprism-workflow: session ") {
                self.session = rest.split_whitespace().next().map(str::to_owned);
                break;
            }
            line.clear();
        }
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    }

    pub fn close(mut self) {
        self.stdin = None;
        let _ = self.child.wait();
    }
}

pub fn initialize_params() -> Value {
    json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}})
}

pub fn settle() {
    // Lets allocator arenas and lazily freed buffers settle before RSS is read.
    std::thread::sleep(Duration::from_millis(500));
}

pub fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap()
}

pub fn percentile(samples: &mut [Duration], p: usize) -> Duration {
    samples.sort();
    samples[(samples.len() * p / 100).min(samples.len() - 1)]
}

pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

pub fn report(what: &str, samples: &mut [Duration]) {
    let p50 = percentile(samples, 50);
    println!(
        "{what}: min {:.1} ms, p50 {:.1} ms, max {:.1} ms ({} runs)",
        ms(samples[0]),
        ms(p50),
        ms(*samples.last().unwrap()),
        samples.len()
    );
}

impl World {
    /// A shim with `extra` variables on top of the world's environment.
    pub fn shim_with(&self, extra: &[(&str, &str)]) -> Shim {
        let mut env = self.env.clone();
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        World {
            env,
            state: self.state.clone(),
            project: self.project.clone(),
        }
        .shim()
    }
}

/// Whether `pid` has exited (gone from `/proc`, or a zombie nobody reaped yet).
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// The test dependencies' manifest (`scripts/install-test-deps`, or `AGENTPRISM_TEST_DEPS`
/// naming its folder): the real adapters the benches that need them run.
pub struct TestDeps(String);

impl TestDeps {
    pub fn find() -> TestDeps {
        let dir = std::env::var_os("AGENTPRISM_TEST_DEPS")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"));
        let manifest = dir.join("interop-deps.env");
        TestDeps(std::fs::read_to_string(&manifest).unwrap_or_else(|error| {
            panic!(
                "{}: {error}; run `bash scripts/install-test-deps` first",
                manifest.display()
            )
        }))
    }

    /// The manifest's `name=` value.
    pub fn get(&self, name: &str) -> String {
        self.0
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("{name} is not in the test dependencies' manifest"))
            .to_owned()
    }
}
