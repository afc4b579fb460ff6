//! Folders under the persistence root through the real daemon and CLI (docs/security.md): a
//! root, the store's folders and the worktrees folder an older version left 0755 are narrowed
//! to 0700 by the time the daemon is up, and every folder the daemon and a run create (store,
//! logs, daemons, the control socket's folder, the run folders, an isolated call's worktree
//! folder while the call runs) is 0700; the checkout inside a worktree is the user's code and
//! keeps git's modes behind its private parents. A control socket a killed daemon left behind
//! is removed when the next daemon starts; the live daemon's own socket stays. Waits poll with
//! deadlines; nothing sleeps to synchronise.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::daemon::{World, wait_for, wait_ready};
use crate::isolation::git;
use crate::support::context::DEADLINE;

const SCRIPT: &str = "export const meta = { name: 'private', description: 'folders', model: 'mock' };\n\
    return await agent('@mock write_cwd note.txt\\n@mock wait_file GATE', {isolation: 'worktree'});\n";

/// Every folder under `root` (symlinks not followed) whose mode is not 0700, with its mode;
/// a worktree's checkout (`worktrees/<run>/<call>/tree`) is not looked into.
fn wider_folders(root: &Path) -> Vec<(PathBuf, u32)> {
    let mut wider = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let meta = std::fs::symlink_metadata(&folder).expect("inspect a folder");
        if meta.mode() & 0o777 != 0o700 {
            wider.push((folder.clone(), meta.mode() & 0o777));
        }
        for entry in std::fs::read_dir(&folder).expect("list a folder").flatten() {
            let path = entry.path();
            let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
            let checkout = path.file_name().is_some_and(|name| name == "tree")
                && path
                    .ancestors()
                    .nth(3)
                    .is_some_and(|above| above.ends_with("worktrees"));
            if is_dir && !checkout {
                pending.push(path);
            }
        }
    }
    wider.sort();
    wider
}

/// A socket nothing listens on, in `folder`, dated a minute back: what a SIGKILLed daemon
/// leaves.
fn dead_socket(folder: &Path) -> PathBuf {
    let path = folder.join("ctl-dead00000000.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
    let minute_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    let at = nix::sys::time::TimeSpec::from(
        minute_ago
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970"),
    );
    let folder_file = std::fs::File::open(folder).expect("open the folder");
    nix::sys::stat::utimensat(
        &folder_file,
        path.as_path(),
        &at,
        &at,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .expect("date the socket back");
    path
}

#[test]
fn every_folder_under_the_root_is_private_and_dead_control_sockets_are_swept() {
    let world = World::new();
    let ctx = &world.ctx;
    let state = ctx.state();
    git(
        &ctx.project(),
        &["init", "--quiet", "--initial-branch=main"],
    );
    std::fs::write(ctx.project().join("README.md"), "hello\n").unwrap();
    git(&ctx.project(), &["add", "README.md"]);
    git(&ctx.project(), &["commit", "--quiet", "-m", "start"]);
    // What an older version or a wide umask left: the root and a projects folder 0755, and
    // a dead daemon's socket in the control folder.
    let wide = std::fs::Permissions::from_mode(0o755);
    std::fs::create_dir_all(state.join("projects/old-project/runs")).unwrap();
    std::fs::create_dir_all(state.join("worktrees/old-run")).unwrap();
    std::fs::create_dir_all(state.join("daemons/ctl")).unwrap();
    for folder in [
        state.clone(),
        state.join("projects"),
        state.join("projects/old-project"),
        state.join("projects/old-project/runs"),
        state.join("worktrees"),
    ] {
        std::fs::set_permissions(&folder, wide.clone()).unwrap();
    }
    std::fs::set_permissions(
        state.join("daemons/ctl"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    let dead = dead_socket(&state.join("daemons/ctl"));

    let _daemon = ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world);
    let own_socket = PathBuf::from(record.control_url.trim_start_matches("unix:"));
    assert!(own_socket.exists(), "{}", own_socket.display());
    assert!(!dead.exists(), "the dead daemon's socket is swept at start");
    assert_eq!(
        wider_folders(&state),
        Vec::new(),
        "once the daemon has started"
    );

    let gate = ctx.path("gate");
    let script = ctx.write(
        "private.js",
        &SCRIPT.replace("GATE", &gate.display().to_string()),
    );
    let running = ctx.spawn(&["run", script.to_str().unwrap()]);
    let note = wait_for(
        "the isolated call to write into its worktree",
        DEADLINE,
        || {
            let runs = std::fs::read_dir(state.join("worktrees")).ok()?;
            runs.flatten()
                .flat_map(|run| {
                    std::fs::read_dir(run.path())
                        .into_iter()
                        .flatten()
                        .flatten()
                })
                .map(|call| call.path().join("tree/note.txt"))
                .find(|note| note.exists())
        },
    );
    assert_eq!(wider_folders(&state), Vec::new(), "while the call runs");
    std::fs::write(&gate, "go").unwrap();
    let finished = running.finish(DEADLINE);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    assert!(!note.exists(), "the worktree is removed when the call ends");
    assert_eq!(wider_folders(&state), Vec::new(), "after the run");
    assert!(own_socket.exists(), "the live daemon's socket stays");
}
