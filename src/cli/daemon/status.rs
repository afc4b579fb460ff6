//! `daemon status` (the survey as lines or JSON; exit 0 iff this family has a current daemon,
//! else 3) and `daemon stop` (SIGTERM to this family's daemons, or every one with `--all`,
//! then a bounded wait).

use std::time::{Duration, Instant};

use anyhow::Result;
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use super::STOP_DEADLINE;
use super::survey::{KeyState, Listed, process_family, survey};
use crate::discovery::liveness::proc_stat;
use crate::discovery::process_table::{SignalTarget, signal_target};
use crate::env::EnvSnapshot;

pub(super) async fn status(env: &EnvSnapshot, as_json: bool) -> Result<u8> {
    let survey = survey(env).await?;
    let has_current = survey.listed.iter().any(|l| l.role == "current");
    if as_json {
        let daemons: Vec<Value> = survey.listed.iter().map(listed_json).collect();
        let pruned: Vec<Value> = survey
            .pruned
            .iter()
            .map(|(path, reason)| json!({"path": path, "reason": reason}))
            .collect();
        let document = json!({
            "family": survey.fingerprint,
            "root": survey.paths.root(),
            "running": has_current,
            "daemons": daemons,
            "pruned": pruned,
            "log": survey.paths.daemon_log(),
            "control": survey.key.json(&survey.paths.run_control_key()),
        });
        say!("{}", serde_json::to_string_pretty(&document)?);
    } else {
        say!(
            "env family {} under {}",
            survey.fingerprint,
            survey.paths.root().display()
        );
        if survey.listed.is_empty() {
            say!("no daemon is running (`agentprism daemon start` starts one)");
        }
        for listed in &survey.listed {
            say!("{}", listed_line(listed));
        }
        for (path, reason) in &survey.pruned {
            say!("pruned stale record {} ({reason})", path.display());
        }
        if let KeyState::Unusable(error) = &survey.key {
            say!(
                "control off: {error}; daemons run without a control socket, /healthz \
                 carries no proof and no daemon can supersede another (to recover: `agentprism \
                 daemon stop --all`, remove {}, start again)",
                survey.paths.run_control_key().display()
            );
        }
        say!("log: {}", survey.paths.daemon_log().display());
    }
    Ok(if has_current { 0 } else { 3 })
}

pub(super) fn listed_json(listed: &Listed) -> Value {
    let record = listed.entry.own_record();
    let health = listed.health.as_ref();
    let from_health = |key: &str| {
        health
            .and_then(|h| h.get(key))
            .cloned()
            .unwrap_or(Value::Null)
    };
    json!({
        "role": listed.role,
        "pid": listed.pid,
        "instanceId": record.map(|r| r.instance_id.clone())
            .or_else(|| listed.entry.process.as_ref().and_then(|p| p.instance_id.clone())),
        "version": record.map(|r| r.version.clone()),
        "url": record.map(|r| r.url.clone()),
        "port": record.map(|r| r.port),
        "envFingerprint": record.map(|r| r.env_fingerprint.clone()),
        "startedAt": record.map(|r| r.started_at),
        "uptimeMs": from_health("uptimeMs"),
        "sessions": from_health("sessions"),
        "activeRuns": from_health("activeRuns"),
        "inflightRequests": from_health("inflightRequests"),
        "state": from_health("state"),
        "lameDuck": from_health("lameDuck"),
        "drain": from_health("drain"),
        "controlUrl": record.map(|r| r.control_url.clone()),
        "controlAvailable": from_health("controlAvailable"),
        "record": listed.entry.record.as_ref().map(|f| f.path.clone()),
        "cmdline": listed.entry.process.as_ref().map(|p| p.cmdline.clone()),
        "note": listed.note,
    })
}

pub(super) fn listed_line(listed: &Listed) -> String {
    let mut line = format!("{:<13}", listed.role);
    if let Some(pid) = listed.pid {
        line.push_str(&format!(" pid {pid}"));
    }
    if let Some(record) = listed.entry.own_record() {
        line.push_str(&format!(
            "  {}  v{}  instance {}",
            record.url,
            record.version,
            &record.instance_id[..record.instance_id.len().min(8)]
        ));
        if listed.role == "other family" {
            line.push_str(&format!("  family {}", record.env_fingerprint));
        }
    }
    if let Some(health) = &listed.health {
        let number = |key: &str| health.get(key).and_then(Value::as_u64).unwrap_or(0);
        line.push_str(&format!(
            "  up {}  sessions {}  runs {}",
            humantime::format_duration(Duration::from_secs(number("uptimeMs") / 1000)),
            number("sessions"),
            number("activeRuns")
        ));
    }
    if listed
        .entry
        .own_record()
        .is_some_and(|record| record.control_url.is_empty())
    {
        line.push_str("  control off");
    }
    if let Some(drain) = listed.health.as_ref().and_then(|h| h.get("drain"))
        && drain.is_object()
    {
        // What a lame duck still waits for (daemon.md Decision 5: every wait is visible).
        let number = |key: &str| drain.get(key).and_then(Value::as_u64).unwrap_or(0);
        line.push_str(&format!(
            "  lame duck since {} for {}: {} in-flight requests, {} unacked stop intents",
            drain.get("since").and_then(Value::as_str).unwrap_or("-"),
            drain
                .get("successor")
                .and_then(Value::as_str)
                .map_or("-", |id| &id[..id.len().min(8)]),
            number("inflightRequests"),
            number("unackedIntents"),
        ));
    }
    if let Some(process) = &listed.entry.process
        && listed.entry.own_record().is_none()
    {
        line.push_str(&format!("  {}", process.cmdline.join(" ")));
    }
    if let Some(record) = &listed.entry.record
        && listed.entry.own_record().is_none()
    {
        line.push_str(&format!("  record {}", record.path.display()));
    }
    if let Some(note) = &listed.note {
        line.push_str(&format!("  ({note})"));
    }
    line
}

pub(super) async fn stop(env: &EnvSnapshot, all: bool) -> Result<u8> {
    let survey = survey(env).await?;
    let mut targets: Vec<(SignalTarget, String)> = Vec::new();
    for listed in &survey.listed {
        let Some(target) = listed.entry.signal_target() else {
            continue;
        };
        let family = match listed.entry.own_record() {
            Some(record) => Some(record.env_fingerprint.clone()),
            None => process_family(target.pid),
        };
        let ours =
            listed.role != "foreign" && family.as_deref() == Some(survey.fingerprint.as_str());
        if all || ours {
            targets.push((target, listed.role.to_owned()));
        }
    }
    if targets.is_empty() {
        note!(
            "no {}daemon is running",
            if all { "" } else { "agentprism " }
        );
        return Ok(0);
    }
    let mut signalled = Vec::new();
    for (target, role) in targets {
        match signal_target(target, Signal::SIGTERM) {
            Ok(_) => {
                note!("stopping {role} daemon pid {}", target.pid);
                signalled.push(target);
            }
            Err(error) => note!("agentprism: {error}"),
        }
    }
    let started = Instant::now();
    loop {
        let alive: Vec<u32> = signalled
            .iter()
            .filter(|target| still_running(target))
            .map(|target| target.pid)
            .collect();
        if alive.is_empty() {
            note!("stopped");
            return Ok(0);
        }
        if started.elapsed() >= STOP_DEADLINE {
            note!(
                "agentprism: still running after {STOP_DEADLINE:?}: pid {}",
                alive
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            return Ok(1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(super) fn still_running(target: &SignalTarget) -> bool {
    proc_stat(target.pid).is_some_and(|stat| !stat.zombie && stat.start_time == target.start_time)
}
