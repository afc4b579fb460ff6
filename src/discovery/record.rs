//! The daemon record: what a daemon publishes about itself in `instances/<pid>.json` and, when
//! it is its family's current daemon, in the pointer `<fp>.json`. Records are hints: a reader
//! checks the process identity they carry before believing them, and a file that does not
//! parse reads as absent. `recordVersion` only ever grows by adding optional fields; a reader
//! refuses a record whose version it does not know rather than guess.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::paths::FILE_MODE;
use super::{DiscoveryError, Paths, Result};

/// `name` of every agentprism daemon record and `/healthz` body.
pub(crate) const DAEMON_NAME: &str = "agentprism-daemon";
/// `implementation` of our records (daemon.md Decision 1): a shim only adopts or supersedes
/// daemons of its own implementation.
pub(crate) const IMPLEMENTATION: &str = "agentprism-rs";
/// The record format this build writes and understands.
pub(crate) const RECORD_VERSION: u32 = 1;
/// The control protocol this build speaks.
pub(crate) const CONTROL_PROTOCOL: u32 = 1;

/// One daemon instance as it describes itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonRecord {
    /// Format of this record, [`RECORD_VERSION`].
    pub record_version: u32,
    /// Always [`DAEMON_NAME`].
    pub name: String,
    /// Always [`IMPLEMENTATION`] for records this build writes.
    pub implementation: String,
    /// Package version, ordered by [`super::compare_versions`] for succession.
    pub version: String,
    pub pid: u32,
    /// A fresh uuid v4 per daemon start, so a restarted daemon on a recycled pid is a stranger.
    pub instance_id: String,
    pub port: u16,
    /// `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    /// Unix ms when the daemon started.
    pub started_at: i64,
    /// The env family this daemon serves ([`super::fingerprint_of`]).
    pub env_fingerprint: String,
    /// `unix:<socket path>` of the signed control plane.
    pub control_url: String,
    /// Control protocol version spoken at `control_url`.
    pub control_protocol: u32,
    /// Process start time (Linux: clock ticks since boot, `/proc/<pid>/stat` field 22), so a
    /// recycled pid is not mistaken for this daemon.
    pub proc_start: u64,
    /// `/proc/sys/kernel/random/boot_id` at start: start times restart at each boot. `None`
    /// where the platform has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The daemon's executable, for `status` and the process-table match.
    pub exe: String,
    /// One-way: once `superseded`, a daemon never serves new work again.
    #[serde(default)]
    pub state: DaemonState,
    /// instanceId of the successor that superseded this daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
}

/// Whether a daemon still takes new sessions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DaemonState {
    #[default]
    Current,
    Superseded,
}

/// What reading a record file found.
#[derive(Clone, Debug, PartialEq)]
pub enum RecordRead {
    /// No file (or it vanished while being read).
    Absent,
    /// A record of ours.
    Ours(DaemonRecord),
    /// A well-formed JSON object of another implementation or name: listed, never touched.
    Foreign(ForeignRecord),
    /// Unreadable, not JSON, or missing fields: treated as absent, reported by `status`.
    Malformed { reason: String },
}

/// The few fields `status` shows of a record that is not ours, all optional.
#[derive(Clone, Debug, PartialEq)]
pub struct ForeignRecord {
    pub name: Option<String>,
    pub implementation: Option<String>,
    pub version: Option<String>,
    pub pid: Option<u32>,
    pub port: Option<u16>,
    pub instance_id: Option<String>,
    /// The whole document, as read.
    pub raw: serde_json::Value,
}

/// A record file found under `instances/`, with what it held.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordFile {
    pub path: PathBuf,
    pub read: RecordRead,
}

impl DaemonRecord {
    /// The record of the calling process as a daemon serving `port`.
    pub fn for_this_process(
        version: &str,
        instance_id: &str,
        port: u16,
        env_fingerprint: &str,
        control_url: &str,
    ) -> DaemonRecord {
        let pid = std::process::id();
        DaemonRecord {
            record_version: RECORD_VERSION,
            name: DAEMON_NAME.into(),
            implementation: IMPLEMENTATION.into(),
            version: version.into(),
            pid,
            instance_id: instance_id.into(),
            port,
            url: mcp_url(port),
            started_at: crate::util::now_ms(),
            env_fingerprint: env_fingerprint.into(),
            control_url: control_url.into(),
            control_protocol: CONTROL_PROTOCOL,
            proc_start: crate::util::process_start_time(pid).unwrap_or(0),
            boot_id: super::current_boot_id(),
            exe: std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            state: DaemonState::Current,
            superseded_by: None,
        }
    }

    /// Whether this record names the same daemon instance as `other`.
    pub(crate) fn same_instance(&self, other: &DaemonRecord) -> bool {
        self.pid == other.pid && self.instance_id == other.instance_id
    }
}

/// `http://127.0.0.1:<port>/mcp`.
pub(crate) fn mcp_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/mcp")
}

/// Classifies JSON text as one of ours, foreign, or malformed.
pub(crate) fn parse_record(bytes: &[u8]) -> RecordRead {
    let value: serde_json::Value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(e) => {
            return RecordRead::Malformed {
                reason: format!("not JSON: {e}"),
            };
        }
    };
    let Some(object) = value.as_object() else {
        return RecordRead::Malformed {
            reason: "not a JSON object".into(),
        };
    };
    let text = |key: &str| object.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    if text("name").as_deref() != Some(DAEMON_NAME)
        || text("implementation").as_deref() != Some(IMPLEMENTATION)
    {
        return RecordRead::Foreign(ForeignRecord {
            name: text("name"),
            implementation: text("implementation"),
            version: text("version"),
            pid: object
                .get("pid")
                .and_then(|v| v.as_u64())
                .and_then(|v| u32::try_from(v).ok()),
            port: object
                .get("port")
                .and_then(|v| v.as_u64())
                .and_then(|v| u16::try_from(v).ok()),
            instance_id: text("instanceId"),
            raw: value,
        });
    }
    match object.get("recordVersion").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(RECORD_VERSION) => {}
        Some(v) => {
            return RecordRead::Malformed {
                reason: format!(
                    "record version {v} is not understood by this build (knows {RECORD_VERSION})"
                ),
            };
        }
        None => {
            return RecordRead::Malformed {
                reason: "no recordVersion".into(),
            };
        }
    }
    match serde_json::from_value::<DaemonRecord>(value) {
        Ok(record) => RecordRead::Ours(record),
        Err(e) => RecordRead::Malformed {
            reason: e.to_string(),
        },
    }
}

/// Reads one record file.
pub(crate) fn read_record(path: &Path) -> RecordRead {
    match std::fs::read(path) {
        Ok(bytes) => parse_record(&bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => RecordRead::Absent,
        Err(e) => RecordRead::Malformed {
            reason: format!("unreadable: {e}"),
        },
    }
}

/// Reads one record file, keeping only a record of ours: malformed or foreign read as absent.
pub fn read_own_record(path: &Path) -> Option<DaemonRecord> {
    match read_record(path) {
        RecordRead::Ours(record) => Some(record),
        _ => None,
    }
}

/// Writes `record` to `path` atomically with mode 0600.
pub fn write_record(path: &Path, record: &DaemonRecord) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(record).expect("a record serialises");
    bytes.push(b'\n');
    crate::util::write_atomic(path, &bytes, FILE_MODE)
        .map_err(|e| DiscoveryError::io("write daemon record", path, e))
}

/// Publishes this daemon's own `instances/<pid>.json`.
pub fn write_own_record(paths: &Paths, record: &DaemonRecord) -> Result<()> {
    paths.ensure_dirs()?;
    write_record(&paths.instance_record(record.pid), record)
}

/// Every `instances/*.json`, skipping in-flight tmp files (names starting with `.`).
pub fn read_instance_records(paths: &Paths) -> Result<Vec<RecordFile>> {
    let dir = paths.instances_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(DiscoveryError::io("list", &dir, e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| DiscoveryError::io("list", &dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        let path = entry.path();
        let read = read_record(&path);
        if read != RecordRead::Absent {
            files.push(RecordFile { path, read });
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// A record for tests.
#[cfg(test)]
pub(crate) fn sample(pid: u32, instance_id: &str, version: &str) -> DaemonRecord {
    DaemonRecord {
        record_version: RECORD_VERSION,
        name: DAEMON_NAME.into(),
        implementation: IMPLEMENTATION.into(),
        version: version.into(),
        pid,
        instance_id: instance_id.into(),
        port: 29888,
        url: mcp_url(29888),
        started_at: 1_700_000_000_000,
        env_fingerprint: "0123456789abcdef".into(),
        control_url: "unix:/run/user/1000/agentprism/ctl-x.sock".into(),
        control_protocol: 1,
        proc_start: 12345,
        boot_id: Some("b".into()),
        exe: "/usr/bin/agentprism".into(),
        state: DaemonState::Current,
        superseded_by: None,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// A record as this build wrote it at format version 1. Never edit: if it stops parsing,
    /// the change broke records that live daemons already wrote.
    const FROZEN_V1: &str = include_str!("testdata/record-v1.json");

    #[test]
    fn frozen_v1_sample_parses() {
        let RecordRead::Ours(record) = parse_record(FROZEN_V1.as_bytes()) else {
            panic!(
                "frozen record no longer parses: {:?}",
                parse_record(FROZEN_V1.as_bytes())
            );
        };
        assert_eq!(record.record_version, 1);
        assert_eq!(record.implementation, "agentprism-rs");
        assert_eq!(record.pid, 4242);
        assert_eq!(record.port, 29888);
        assert_eq!(record.url, "http://127.0.0.1:29888/mcp");
        assert_eq!(record.proc_start, 987654);
        assert_eq!(
            record.boot_id.as_deref(),
            Some("060e3d17-2a2e-486d-908c-1728a07fd98f")
        );
        assert_eq!(record.state, DaemonState::Superseded);
        assert_eq!(
            record.superseded_by.as_deref(),
            Some("7b0e4a8e-5c0f-4d1e-9d55-1b1f1c2d3e4f")
        );
    }

    #[test]
    fn round_trip_and_wire_names() {
        let record = sample(7, "i", "0.1.0");
        let json = serde_json::to_value(&record).unwrap();
        for key in [
            "recordVersion",
            "instanceId",
            "startedAt",
            "envFingerprint",
            "controlUrl",
            "controlProtocol",
            "procStart",
            "bootId",
        ] {
            assert!(json.get(key).is_some(), "{key} missing from {json}");
        }
        assert_eq!(json["state"], "current");
        assert!(json.get("supersededBy").is_none());
        assert_eq!(
            parse_record(&serde_json::to_vec(&record).unwrap()),
            RecordRead::Ours(record)
        );
    }

    #[test]
    fn classification() {
        assert!(matches!(parse_record(b"{"), RecordRead::Malformed { .. }));
        assert!(matches!(parse_record(b"[]"), RecordRead::Malformed { .. }));
        let ts = br#"{"name":"agentprism-daemon","version":"0.30.1","pid":9,"port":29888,"instanceId":"x"}"#;
        let RecordRead::Foreign(foreign) = parse_record(ts) else {
            panic!()
        };
        assert_eq!(foreign.version.as_deref(), Some("0.30.1"));
        assert_eq!(foreign.pid, Some(9));
        let mut newer = serde_json::to_value(sample(1, "i", "1.0.0")).unwrap();
        newer["recordVersion"] = 2.into();
        let RecordRead::Malformed { reason } = parse_record(newer.to_string().as_bytes()) else {
            panic!()
        };
        assert!(reason.contains("record version 2"), "{reason}");
        let mut missing = serde_json::to_value(sample(1, "i", "1.0.0")).unwrap();
        missing.as_object_mut().unwrap().remove("port");
        assert!(matches!(
            parse_record(missing.to_string().as_bytes()),
            RecordRead::Malformed { .. }
        ));
    }

    #[test]
    fn write_is_private_and_readers_ignore_leftover_tmp_files() {
        let temp = tempfile::tempdir().unwrap();
        let paths = Paths::new(temp.path());
        let record = sample(4242, "a", "0.1.0");
        write_own_record(&paths, &record).unwrap();
        let path = paths.instance_record(4242);
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        // A writer that crashed mid-write leaves only its tmp file behind.
        std::fs::write(
            paths.instances_dir().join(".4243.json.99.deadbeef.tmp"),
            b"{\"name\":",
        )
        .unwrap();
        std::fs::write(paths.instances_dir().join("4244.json"), b"{\"name\":").unwrap();
        let files = read_instance_records(&paths).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].read, RecordRead::Ours(record.clone()));
        assert!(matches!(files[1].read, RecordRead::Malformed { .. }));
        assert_eq!(read_own_record(&paths.instance_record(4244)), None);
        // Rewriting replaces the whole file and leaves no tmp of its own.
        let mut changed = record.clone();
        changed.state = DaemonState::Superseded;
        write_record(&path, &changed).unwrap();
        assert_eq!(read_own_record(&path), Some(changed));
        let leftovers: Vec<_> = std::fs::read_dir(paths.instances_dir())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".4242"))
            .collect();
        assert!(leftovers.is_empty());
    }
}
