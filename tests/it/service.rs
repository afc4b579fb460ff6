//! The shipped service files and packages, checked with the real tools: `systemd-analyze
//! verify` on the systemd units (no systemd needs to run), and the packaging scripts run on
//! stand-in binaries, twice, to prove the archives are reproducible. Nothing here touches the
//! real HOME, systemd or launchd.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SYSTEMD_ANALYZE: &str = "/usr/bin/systemd-analyze";
const EPOCH: &str = "1700000000";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Copies the shipped units into `dir` with `ExecStart` running an existing binary (verify
/// checks that it exists), and the env file under `dir`.
fn copy_units(dir: &Path, binary: &str) {
    for unit in ["agentprism.service", "agentprism@.service"] {
        let shipped = std::fs::read_to_string(repo().join("systemd").join(unit)).unwrap();
        let rendered = shipped.replace("%h/.local/bin/agentprism", binary);
        assert_ne!(
            rendered, shipped,
            "{unit} no longer runs %h/.local/bin/agentprism"
        );
        std::fs::write(dir.join(unit), rendered).unwrap();
    }
}

/// `systemd-analyze --user verify` in the offline mode that works without systemd as PID 1:
/// a private XDG_RUNTIME_DIR stands in for the user manager's, and generators, man-page
/// lookups and dependency recursion are off.
fn verify(dir: &Path, units: &[&str]) -> Output {
    let runtime = dir.join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    Command::new(SYSTEMD_ANALYZE)
        .args([
            "--user",
            "verify",
            "--man=no",
            "--generators=no",
            "--recursive-errors=no",
        ])
        .args(units.iter().map(|unit| dir.join(unit)))
        .current_dir(dir)
        .env("HOME", dir)
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .unwrap()
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    if !Path::new(SYSTEMD_ANALYZE).exists() {
        eprintln!("skipped: {SYSTEMD_ANALYZE} is not installed");
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    copy_units(temp.path(), env!("CARGO_BIN_EXE_agentprism"));
    // The template is verified through an instance, as a shim would start it.
    let output = verify(
        temp.path(),
        &["agentprism.service", "agentprism@0.1.0.service"],
    );
    assert!(
        output.status.success() && output.stdout.is_empty() && output.stderr.is_empty(),
        "systemd-analyze verify reported problems:\n{}",
        text(&output)
    );

    // The same check notices a broken unit, so the pass above means something.
    let broken = tempfile::tempdir().unwrap();
    copy_units(broken.path(), "/nonexistent/agentprism");
    let unit = broken.path().join("agentprism.service");
    let mut contents = std::fs::read_to_string(&unit).unwrap();
    contents.push_str("Bogus=1\n");
    std::fs::write(&unit, contents).unwrap();
    let output = verify(broken.path(), &["agentprism.service"]);
    let report = text(&output);
    assert!(!output.status.success(), "{report}");
    assert!(
        report.contains("Bogus") && report.contains("/nonexistent/agentprism"),
        "{report}"
    );
}

#[test]
fn the_serve_unit_passes_verify_and_loads_exactly_the_credentials_serve_reads() {
    assert!(
        Path::new(SYSTEMD_ANALYZE).exists(),
        "{SYSTEMD_ANALYZE} is needed (.ci/run installs systemd)"
    );
    let shipped = std::fs::read_to_string(repo().join("systemd/agentprism-serve.service")).unwrap();
    let rendered = shipped.replace("/usr/bin/agentprism", env!("CARGO_BIN_EXE_agentprism"));
    assert_ne!(
        rendered, shipped,
        "the unit no longer runs /usr/bin/agentprism"
    );
    let temp = tempfile::tempdir().unwrap();
    let unit = temp.path().join("agentprism-serve.service");
    std::fs::write(&unit, &rendered).unwrap();
    let output = Command::new(SYSTEMD_ANALYZE)
        .args([
            "verify",
            "--man=no",
            "--generators=no",
            "--recursive-errors=no",
        ])
        .arg(&unit)
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .unwrap();
    assert!(
        output.status.success() && output.stdout.is_empty() && output.stderr.is_empty(),
        "systemd-analyze verify reported problems:\n{}",
        text(&output)
    );
    // Every credential it loads (the commented pack key too) is one that serve reads by that
    // name from $CREDENTIALS_DIRECTORY (src/util/secret.rs, tests/it/secrets.rs).
    let mut names: Vec<&str> = shipped
        .lines()
        .filter_map(|line| {
            line.trim_start_matches("# ")
                .strip_prefix("LoadCredential=")
        })
        .filter_map(|value| value.split(':').next())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "MHL_SERVE_STORE",
            "MHL_SERVE_TOKEN",
            "MHL_SERVE_WORKFLOWS_KEY"
        ]
    );
}

/// Stand-ins for the two binaries: shell scripts that answer `completions <shell>`.
fn stand_ins(dir: &Path) -> (PathBuf, PathBuf) {
    let script = "#!/bin/sh\nif [ \"$1\" = completions ]; then echo \"# $2 completions\"; exit 0; fi\necho stand-in\n";
    let bin = dir.join("agentprism");
    let workflow = dir.join("agentprism-workflow");
    for path in [&bin, &workflow] {
        std::fs::write(path, script).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (bin, workflow)
}

/// Runs a packaging script with stand-in binaries and a private TMPDIR, returning the path
/// it printed.
fn package(
    script: &str,
    bins: &(PathBuf, PathBuf),
    out: &Path,
    tmp: &Path,
    version: &str,
) -> PathBuf {
    std::fs::create_dir_all(tmp).unwrap();
    let output = Command::new("bash")
        .arg(repo().join("packaging").join(script))
        .env("AGENTPRISM_BIN", &bins.0)
        .env("AGENTPRISM_WORKFLOW_BIN", &bins.1)
        .env("AGENTPRISM_VERSION", version)
        .env("AGENTPRISM_TARGET", "x86_64-linux")
        .env("DEB_ARCH", "amd64")
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .env("OUT_DIR", out)
        .env("TMPDIR", tmp)
        .env_remove("AGENTPRISM_SKIP_COMPLETIONS")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{script} failed:\n{}",
        text(&output)
    );
    let printed = String::from_utf8(output.stdout).unwrap();
    PathBuf::from(printed.trim())
}

/// Gives the stand-ins another mtime, so a second build sees inputs of another age.
fn age(bins: &(PathBuf, PathBuf)) {
    for path in [&bins.0, &bins.1] {
        let status = Command::new("touch")
            .args(["-d", "@1600000000"])
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

#[test]
fn the_tarball_is_reproducible_and_complete() {
    let temp = tempfile::tempdir().unwrap();
    let bins = stand_ins(temp.path());
    let first = package(
        "build-tarball",
        &bins,
        &temp.path().join("one"),
        &temp.path().join("t1"),
        "0.1.0",
    );
    age(&bins);
    let second = package(
        "build-tarball",
        &bins,
        &temp.path().join("two"),
        &temp.path().join("t2"),
        "0.1.0",
    );
    assert_eq!(
        first.file_name().unwrap(),
        "agentprism-0.1.0-x86_64-linux.tar.gz"
    );
    assert!(
        std::fs::read(&first).unwrap() == std::fs::read(&second).unwrap(),
        "two builds of the same inputs differ: {} vs {}",
        first.display(),
        second.display()
    );
    let listing = Command::new("tar")
        .arg("-tvzf")
        .arg(&first)
        .output()
        .unwrap();
    let listing = String::from_utf8(listing.stdout).unwrap();
    for member in [
        "bin/agentprism",
        "bin/agentprism-workflow",
        "share/systemd/user/agentprism.service",
        "share/systemd/user/agentprism@.service",
        "share/launchd/dev.agentprism.daemon.plist",
        "share/doc/agentprism-serve.service",
        "share/bash-completion/completions/agentprism",
        "share/zsh/site-functions/_agentprism",
        "share/fish/vendor_completions.d/agentprism.fish",
        "README.md",
        "LICENSE",
    ] {
        assert!(
            listing.contains(&format!("agentprism-0.1.0-x86_64-linux/{member}\n")),
            "{member} missing:\n{listing}"
        );
    }
    for line in listing.lines() {
        assert!(line.contains(" 0/0 "), "owner not normalised: {line}");
        assert!(
            line.contains("2023-11-14"),
            "mtime not SOURCE_DATE_EPOCH: {line}"
        );
    }
}

#[test]
fn the_deb_is_reproducible_and_has_its_control_fields() {
    if Command::new("dpkg-deb").arg("--version").output().is_err() {
        eprintln!("skipped: dpkg-deb is not installed");
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let bins = stand_ins(temp.path());
    let first = package(
        "build-deb",
        &bins,
        &temp.path().join("one"),
        &temp.path().join("t1"),
        "0.2.0-rc.1",
    );
    age(&bins);
    let second = package(
        "build-deb",
        &bins,
        &temp.path().join("two"),
        &temp.path().join("t2"),
        "0.2.0-rc.1",
    );
    assert_eq!(
        first.file_name().unwrap(),
        "agentprism_0.2.0~rc.1_amd64.deb"
    );
    assert!(
        std::fs::read(&first).unwrap() == std::fs::read(&second).unwrap(),
        "two .deb builds differ"
    );

    let info = Command::new("dpkg-deb")
        .arg("--info")
        .arg(&first)
        .output()
        .unwrap();
    assert!(info.status.success(), "{}", text(&info));
    let info = String::from_utf8(info.stdout).unwrap();
    for field in [
        " Package: agentprism\n",
        " Version: 0.2.0~rc.1\n",
        " Architecture: amd64\n",
        " Section: utils\n",
        " Depends: libc6\n",
        " Description: Durable multi-agent workflow runs for MCP hosts\n",
    ] {
        assert!(info.contains(field), "{field:?} missing:\n{info}");
    }
    assert!(
        info.contains(" Maintainer: ") && info.contains(" Installed-Size: "),
        "{info}"
    );

    let contents = Command::new("dpkg-deb")
        .arg("--contents")
        .arg(&first)
        .output()
        .unwrap();
    let contents = String::from_utf8(contents.stdout).unwrap();
    for member in [
        "./usr/bin/agentprism\n",
        "./usr/bin/agentprism-workflow\n",
        "./usr/lib/systemd/user/agentprism.service\n",
        "./usr/lib/systemd/user/agentprism@.service\n",
        "./usr/share/doc/agentprism/copyright\n",
        "./usr/share/doc/agentprism/examples/agentprism-serve.service\n",
        "./usr/share/bash-completion/completions/agentprism\n",
    ] {
        assert!(contents.contains(member), "{member} missing:\n{contents}");
    }
    assert!(
        contents.lines().all(|line| line.contains(" root/root ")),
        "{contents}"
    );

    // The packaged units run the packaged binary.
    let unit = Command::new("sh")
        .arg("-c")
        .arg(
            "dpkg-deb --fsys-tarfile \"$1\" | tar -xOf - ./usr/lib/systemd/user/agentprism.service",
        )
        .arg("sh")
        .arg(&first)
        .output()
        .unwrap();
    let unit = String::from_utf8(unit.stdout).unwrap();
    assert!(
        unit.contains("\nExecStart=/usr/bin/agentprism daemon run --managed=systemd --supersede\n"),
        "{unit}"
    );
}

/// `agentprism daemon install` and `uninstall` where no user manager can be reached: the
/// real `systemctl` with neither `XDG_RUNTIME_DIR` nor `DBUS_SESSION_BUS_ADDRESS` (as under
/// `su`, in a container, or on this machine, where systemd is not PID 1). Install refuses
/// before writing anything and says what to do; uninstall removes what an earlier install left
/// and says what it could not do.
#[test]
fn without_a_user_bus_install_writes_nothing_and_uninstall_removes_the_files() {
    const SYSTEMCTL: &str = "/usr/bin/systemctl";
    assert!(
        Path::new(SYSTEMCTL).exists(),
        "{SYSTEMCTL} is needed: install systemd (the package, not a running one)"
    );
    let ctx =
        crate::support::context::TestContext::new().set("PATH", "/usr/local/bin:/usr/bin:/bin");
    assert!(
        !ctx.env.contains_key("XDG_RUNTIME_DIR")
            && !ctx.env.contains_key("DBUS_SESSION_BUS_ADDRESS")
    );
    let home = ctx.path("home");
    let config = home.join(".config");

    let install = ctx.run(&["daemon", "install"]);
    assert_eq!(install.code(), 1, "{}\n{}", install.stdout, install.stderr);
    for needed in [
        "cannot be reached",
        "nothing was installed",
        "loginctl enable-linger",
        "agentprism daemon run",
    ] {
        assert!(
            install.stderr.contains(needed),
            "{needed}: {}",
            install.stderr
        );
    }
    assert!(!config.exists(), "install wrote under {}", config.display());

    // Files an earlier install left behind (one made while a user manager was reachable).
    let units = config.join("systemd/user");
    let owned = [
        units.join("agentprism.service"),
        units.join("agentprism@.service"),
        config.join("agentprism/daemon.env"),
    ];
    for file in &owned {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, "left over\n").unwrap();
    }
    let uninstall = ctx.run(&["daemon", "uninstall"]);
    assert_eq!(
        uninstall.code(),
        1,
        "{}\n{}",
        uninstall.stdout,
        uninstall.stderr
    );
    for file in &owned {
        assert!(!file.exists(), "{} is still there", file.display());
        assert!(
            uninstall
                .stdout
                .contains(&format!("removed {}", file.display())),
            "{}",
            uninstall.stdout
        );
    }
    assert!(
        uninstall
            .stderr
            .contains("could not disable agentprism.service")
            && uninstall.stderr.contains("cannot be reached"),
        "{}",
        uninstall.stderr
    );
}
