//! `agentprism monitor [runId] [--open]`: the run monitor panel in a plain browser. Makes sure
//! this environment's daemon runs (starting it as `agentprism daemon start` and the shim do),
//! then prints `http://127.0.0.1:<port>/ui#run=<runId>`, the daemon's `/ui` route with the
//! run in the fragment (which never reaches a server log); `--open` hands that URL to
//! `xdg-open` (or macOS `open`) when one is on `PATH`.
//!
//! Where the kernel cannot name a loopback connection's user, the daemon asks every request
//! for its bearer token, which a browser cannot send when it loads a page: the command says
//! so and fails instead of printing a URL that cannot load (the token is never printed or
//! logged).

use anyhow::{Result, anyhow};
use clap::Args;

use crate::daemon::spawn::{EnsureOptions, daemon_binary, ensure_daemon};
use crate::discovery::{Paths, current_fingerprint};
use crate::env::EnvSnapshot;
use crate::model::RunId;

#[derive(Debug, Args)]
pub struct MonitorArgs {
    /// The run to show first (the panel can switch runs).
    pub run_id: Option<String>,
    /// Open the URL in the default browser (`xdg-open`, or `open` on macOS).
    #[arg(long)]
    pub open: bool,
}

pub(super) async fn monitor(env: &EnvSnapshot, args: MonitorArgs) -> Result<u8> {
    let run_id = args
        .run_id
        .as_deref()
        .map(|id| RunId::parse(id).map_err(|problem| anyhow!("runId {id:?}: {problem}")))
        .transpose()?;
    let paths = Paths::from_env(env)?;
    if crate::daemon::peer_lookup_needs_token(env) {
        return Err(anyhow!(
            "this system cannot tell which user a loopback connection belongs to, so the daemon \
             asks every request for its bearer token, and a browser cannot send it when it \
             loads a page; open the run monitor in an MCP Apps host instead (workflow_monitor)"
        ));
    }
    crate::daemon::remember_token(env, &paths);
    let options = EnsureOptions::new(daemon_binary(env));
    let ready = ensure_daemon(&paths, &current_fingerprint(), &options).await?;
    let url = panel_url(ready.record.port, run_id.as_ref());
    say!("{url}");
    if args.open {
        open(env, &url)?;
    }
    Ok(crate::cli::EXIT_COMPLETED)
}

/// The panel's URL on a daemon listening on `port`.
pub(super) fn panel_url(port: u16, run_id: Option<&RunId>) -> String {
    let path = crate::daemon::panel::PANEL_PATH;
    match run_id {
        Some(run_id) => format!("http://127.0.0.1:{port}{path}#run={run_id}"),
        None => format!("http://127.0.0.1:{port}{path}"),
    }
}

/// Hands `url` to the desktop's opener, without waiting for the browser.
fn open(env: &EnvSnapshot, url: &str) -> Result<()> {
    let search = env.get("PATH").unwrap_or_default();
    let opener = ["xdg-open", "open"].iter().find_map(|name| {
        std::env::split_paths(&search)
            .map(|dir| dir.join(name))
            .find(|candidate| is_executable(candidate.as_path()))
    });
    let Some(opener) = opener else {
        return Err(anyhow!(
            "--open needs xdg-open or open on PATH; open the URL above yourself"
        ));
    };
    std::process::Command::new(&opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|error| anyhow!("starting {}: {error}", opener.display()))?;
    Ok(())
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_the_route_and_the_run_in_the_fragment() {
        let run_id = RunId::parse("mabc1234-k9x2pq").unwrap();
        assert_eq!(
            panel_url(29888, Some(&run_id)),
            "http://127.0.0.1:29888/ui#run=mabc1234-k9x2pq"
        );
        assert_eq!(panel_url(4000, None), "http://127.0.0.1:4000/ui");
    }
}
