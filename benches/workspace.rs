//! The cost of an isolated agent call's git work (area `workspace` of `docs/performance.md`):
//! a worktree made, the agent's change committed on the call's branch, the worktree removed,
//! through `GitWorkspaces`, against its floor, a plain `git worktree add --detach` and `git
//! worktree remove --force` of the same repository. The goal is at most 1.5 times the floor.
//!
//! The repository is made once, outside the timing: 10,000 small text files in 250 folders,
//! one commit, packed. Each round then times, in an order that rotates from round to round
//! so that a burst of load falls on each kind alike:
//! - the floor, the two git commands run as plain processes;
//! - an isolated call with a change: `open`, one file edited and one added (as an agent
//!   would), `finish`;
//! - an isolated call without a change: `open` and `finish` of an untouched tree;
//! - the floor with one look at the tree: `git status` between the two commands, the least
//!   any way of finding what an agent changed adds (see [`Kind::Looked`]).
//!
//! Between making a worktree and removing it each kind waits [`AGENT_TIME`], outside the
//! timing: an agent works for seconds, and git treats files written in the same second as
//! its index as "racily clean" and reads every one of them again on each command until the
//! index is rewritten in a later second, a cost no real call pays more than once.
//!
//! The primary figure is CPU time: the kernel's account of the git processes (`getrusage`
//! of reaped children) plus this process's own, since wall time on a shared machine mostly
//! measures who else wanted the cores. Every git command runs with a HOME of its own and no
//! global or system configuration.
//!
//! The repository and worktrees live under `/dev/shm` when it exists (a tmpfs), or under
//! `AGENTPRISM_BENCH_DIR` when set. On ext4, a checkout made within half a minute of the
//! removal of 10,000 files spends seconds in the kernel's inode allocator (it passes over
//! recently freed inodes), for the floor and the call alike, which would drown the
//! difference the figures are about. `-- --rounds N` sets the rounds (default
//! [`ROUNDS`]). `cargo bench --bench workspace`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use agentprism::workspace::{Base, CallRef, GitWorkspaces, Workspaces};
use anyhow::{Context, Result, bail, ensure};

mod support;

use support::measure::{Who, cpu_times, print_machine, runtime};

const AREA: &str = "workspace";
const FOLDERS: usize = 250;
const FILES_PER_FOLDER: usize = 40;
/// Timed rounds of each kind, after one untimed round that warms the caches.
const ROUNDS: usize = 12;
/// How long the "agent" has the worktree, outside the timing (see the module comment).
const AGENT_TIME: Duration = Duration::from_millis(1_050);
/// The goal: an isolated call costs at most this many times the floor.
const GOAL_RATIO: f64 = 1.5;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench workspace: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// One timed piece of work: wall time and the CPU time of this process and its children.
#[derive(Clone, Copy, Default)]
struct Cost {
    wall: Duration,
    cpu: Duration,
    /// The part of `cpu` spent in this process (the port's own work, the runtime).
    own: Duration,
}

/// Counters at one moment.
struct Mark {
    at: Instant,
    own: Duration,
    children: Duration,
}

impl Mark {
    fn now() -> Mark {
        let (user, system) = cpu_times(Who::Process);
        let (child_user, child_system) = cpu_times(Who::Children);
        Mark {
            at: Instant::now(),
            own: user + system,
            children: child_user + child_system,
        }
    }

    fn cost(&self) -> Cost {
        let now = Mark::now();
        let own = now.own.saturating_sub(self.own);
        Cost {
            wall: now.at - self.at,
            cpu: own + now.children.saturating_sub(self.children),
            own,
        }
    }
}

impl std::ops::Add for Cost {
    type Output = Cost;
    fn add(self, other: Cost) -> Cost {
        Cost {
            wall: self.wall + other.wall,
            cpu: self.cpu + other.cpu,
            own: self.own + other.own,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Floor,
    Changed,
    Untouched,
    /// The floor with a `git status` before the removal. The first git command that looks
    /// at a fresh checkout reads again every file written in the same second as the index
    /// (git compares whole seconds, so it cannot tell them from files changed since); the
    /// floor never looks, a call must.
    Looked,
}

const KINDS: [Kind; 4] = [Kind::Floor, Kind::Changed, Kind::Untouched, Kind::Looked];

fn run() -> Result<()> {
    ensure!(
        cfg!(all(target_os = "linux", target_pointer_width = "64")),
        "this benchmark calls getrusage with the 64-bit Linux layout; it runs on 64-bit Linux only"
    );
    let rounds = rounds()?;
    let parent = match std::env::var_os("AGENTPRISM_BENCH_DIR") {
        Some(dir) => PathBuf::from(dir),
        None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        None => std::env::temp_dir(),
    };
    let temp = tempfile::Builder::new()
        .prefix("agentprism-workspace-bench")
        .tempdir_in(&parent)
        .with_context(|| format!("creating a temporary folder in {}", parent.display()))?;
    let root = temp.path().canonicalize()?;
    isolate_git(&root)?;

    print_machine();
    println!("load average at start: {}", load_average());
    println!("git: {}", git_text(&root, &["version"])?);
    println!(
        "folder: {} ({} rounds of each kind, {:.2} s of agent time each outside the timing)",
        root.display(),
        rounds,
        AGENT_TIME.as_secs_f64()
    );
    let repository = root.join("repository");
    let started = Instant::now();
    make_repository(&repository)?;
    println!(
        "made the repository of {} files in {:.1} s",
        FOLDERS * FILES_PER_FOLDER,
        started.elapsed().as_secs_f64()
    );

    let runtime = runtime()?;
    let workspaces = GitWorkspaces::new(&root.join("state"));
    let base = runtime.block_on(workspaces.base(&repository))?;
    let mut costs: [Vec<Cost>; 4] = Default::default();
    // Round 0 warms the caches and is not counted.
    for round in 0..=rounds {
        for step in 0..KINDS.len() {
            let kind = KINDS[(round + step) % KINDS.len()];
            let call = CallRef {
                run_id: "bench".to_owned(),
                call_index: u32::try_from(round * KINDS.len() + step)?,
                label: format!("{kind:?}"),
            };
            let cost = match kind {
                Kind::Floor => floor(&repository, &root.join("plain"), false)?,
                Kind::Looked => floor(&repository, &root.join("plain"), true)?,
                Kind::Changed => runtime.block_on(isolated(&workspaces, &base, call, true))?,
                Kind::Untouched => runtime.block_on(isolated(&workspaces, &base, call, false))?,
            };
            if round > 0 {
                costs[kind as usize].push(cost);
            }
        }
    }
    let left = git_text(&repository, &["worktree", "list", "--porcelain"])?;
    ensure!(
        left.lines().filter(|l| l.starts_with("worktree ")).count() == 1,
        "worktrees were left behind:\n{left}"
    );

    let [floor_costs, changed, untouched, looked] = costs;
    let floor = summary("floor: git worktree add + git worktree remove", floor_costs);
    let changed = summary("isolated call with a change: open + finish", changed);
    let untouched = summary("isolated call without a change: open + finish", untouched);
    let looked = summary("floor with git status before the removal", looked);
    let files = FOLDERS * FILES_PER_FOLDER;
    support::figure(
        AREA,
        &format!(
            "floor: `git worktree add` + `git worktree remove`, {files} files: CPU / wall p50"
        ),
        floor.text(),
        "-",
    );
    for (what, cost) in [("with a change", changed), ("without a change", untouched)] {
        support::figure(
            AREA,
            &format!("isolated call {what} (open + finish): CPU / wall p50"),
            cost.text(),
            "-",
        );
        support::figure(
            AREA,
            &format!("isolated call {what} against the floor: CPU / wall"),
            format!(
                "{:.2}× / {:.2}×",
                ratio(cost.cpu, floor.cpu),
                ratio(cost.wall, floor.wall)
            ),
            &format!("≤ {GOAL_RATIO}×"),
        );
    }
    support::figure(
        AREA,
        "floor with one `git status` before the removal: CPU / wall p50 (against the floor)",
        format!(
            "{} ({:.2}× / {:.2}×)",
            looked.text(),
            ratio(looked.cpu, floor.cpu),
            ratio(looked.wall, floor.wall)
        ),
        "-",
    );
    println!("load average at end: {}", load_average());
    Ok(())
}

/// The rounds asked for with `--rounds N`, or [`ROUNDS`].
fn rounds() -> Result<usize> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|arg| arg == "--rounds") {
        None => Ok(ROUNDS),
        Some(at) => {
            let text = args.get(at + 1).map(String::as_str).unwrap_or_default();
            match text.parse::<usize>() {
                Ok(rounds) if rounds > 0 => Ok(rounds),
                _ => bail!("--rounds is {text:?}, expected a whole number of rounds above 0"),
            }
        }
    }
}

/// Points git at an empty global configuration and a HOME under `root`, for this process
/// and so for every git it starts (`GitWorkspaces` included), so no user setting (hooks, a
/// file system monitor, signing) changes what is measured.
fn isolate_git(root: &Path) -> Result<()> {
    let home = root.join("home");
    std::fs::create_dir_all(&home)?;
    std::fs::write(home.join("gitconfig"), "")?;
    // SAFETY: called at the start of `run`, before the runtime or any other thread exists,
    // so nothing reads the environment concurrently.
    unsafe {
        std::env::set_var("HOME", &home);
        std::env::set_var("GIT_CONFIG_GLOBAL", home.join("gitconfig"));
        std::env::set_var("GIT_CONFIG_NOSYSTEM", "1");
        std::env::set_var("GIT_AUTHOR_NAME", "bench");
        std::env::set_var("GIT_AUTHOR_EMAIL", "bench@localhost");
        std::env::set_var("GIT_COMMITTER_NAME", "bench");
        std::env::set_var("GIT_COMMITTER_EMAIL", "bench@localhost");
    }
    Ok(())
}

/// 10,000 small files in 250 folders, committed once and packed as a user's repository is.
fn make_repository(repository: &Path) -> Result<()> {
    for folder in 0..FOLDERS {
        let dir = repository.join(format!("src/module{folder:03}"));
        std::fs::create_dir_all(&dir)?;
        for file in 0..FILES_PER_FOLDER {
            let text = format!(
                "module {folder} file {file}\nfn item_{folder}_{file}() -> u32 {{\n    {}\n}}\n",
                folder * FILES_PER_FOLDER + file
            );
            std::fs::write(dir.join(format!("file{file:02}.rs")), text)?;
        }
    }
    git(repository, &["init", "--quiet", "--initial-branch=main"])?;
    git(repository, &["add", "--all"])?;
    git(
        repository,
        &["-c", "gc.auto=0", "commit", "--quiet", "-m", "start"],
    )?;
    git(repository, &["repack", "-a", "-d", "--quiet"])?;
    git(repository, &["prune"])?;
    Ok(())
}

/// The floor: the two plain git commands, with the agent's time between them untimed; with
/// `look`, a `git status` of the tree before its removal.
fn floor(repository: &Path, tree: &Path, look: bool) -> Result<Cost> {
    let tree_arg = tree.to_string_lossy().into_owned();
    let mark = Mark::now();
    git(
        repository,
        &["worktree", "add", "--detach", "--quiet", &tree_arg, "HEAD"],
    )?;
    let made = mark.cost();
    std::thread::sleep(AGENT_TIME);
    let mark = Mark::now();
    if look {
        git(tree, &["status", "--porcelain"])?;
    }
    git(repository, &["worktree", "remove", "--force", &tree_arg])?;
    Ok(made + mark.cost())
}

/// One isolated call through the port; with `change`, one file edited and one added.
async fn isolated(
    workspaces: &GitWorkspaces,
    base: &Base,
    call: CallRef,
    change: bool,
) -> Result<Cost> {
    let mark = Mark::now();
    let workspace = workspaces.open(base, call).await?;
    let opened = mark.cost();
    if change {
        let edited = workspace.cwd.join("src/module007/file03.rs");
        let mut text = std::fs::read_to_string(&edited)?;
        text.push_str("// edited by the agent\n");
        std::fs::write(&edited, text)?;
        std::fs::write(
            workspace.cwd.join("src/module007/added.rs"),
            "fn added() {}\n",
        )?;
    }
    tokio::time::sleep(AGENT_TIME).await;
    let mark = Mark::now();
    let changes = workspaces.finish(base, workspace).await?;
    let finished = mark.cost();
    let expected = if change { 2 } else { 0 };
    ensure!(
        changes.files_changed == expected && changes.branch.is_some() == change,
        "the call's changes are not what it did: {changes:?}"
    );
    Ok(opened + finished)
}

/// Medians of one kind's rounds, printed with their spread.
fn summary(what: &str, costs: Vec<Cost>) -> Cost {
    let median = |values: &mut Vec<Duration>| {
        values.sort();
        values[values.len() / 2]
    };
    let mut cpu: Vec<Duration> = costs.iter().map(|c| c.cpu).collect();
    let mut wall: Vec<Duration> = costs.iter().map(|c| c.wall).collect();
    let mut own: Vec<Duration> = costs.iter().map(|c| c.own).collect();
    let cost = Cost {
        cpu: median(&mut cpu),
        wall: median(&mut wall),
        own: median(&mut own),
    };
    println!(
        "{what}: CPU p50 {:.1} ms (min {:.1}, max {:.1}; this process {:.1}); wall p50 {:.1} ms (min {:.1}, max {:.1}); {} rounds",
        ms(cost.cpu),
        ms(cpu[0]),
        ms(*cpu.last().unwrap_or(&Duration::ZERO)),
        ms(cost.own),
        ms(cost.wall),
        ms(wall[0]),
        ms(*wall.last().unwrap_or(&Duration::ZERO)),
        cpu.len()
    );
    cost
}

impl Cost {
    fn text(&self) -> String {
        format!("{:.0} ms / {:.0} ms", ms(self.cpu), ms(self.wall))
    }
}

fn ratio(value: Duration, floor: Duration) -> f64 {
    value.as_secs_f64() / floor.as_secs_f64().max(1e-9)
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    git_text(dir, args).map(drop)
}

fn git_text(dir: &Path, args: &[&str]) -> Result<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running git {}", args.join(" ")))?;
    ensure!(
        output.status.success(),
        "git {} in {}: {}",
        args.join(" "),
        dir.display(),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".to_owned())
}
