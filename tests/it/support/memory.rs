//! What a process and a folder cost: the peak resident set of a process (`VmHWM` in
//! `/proc/<pid>/status`, its high-water mark since it started, so a fresh daemon's peak is
//! what one test made it hold) and the bytes of the files under a folder.

use std::path::Path;

/// The most resident memory `pid` has held since it started, in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|error| panic!("reading /proc/{pid}/status: {error}"));
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|number| number.trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM line in /proc/{pid}/status:\n{status}"));
    kib << 10
}

/// The bytes of every regular file under `folder` (links are not followed).
pub fn folder_bytes(folder: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => folder_bytes(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}
