//! Small helpers shared across modules: time, hashing, hex, durable file writes,
//! (`safe_file`) the one way to read a file a caller named, (`process`) the one
//! process-liveness rule, and (`sync`) the one lock policy.

pub mod process;
pub(crate) mod private_dir;
pub(crate) mod safe_file;
pub(crate) mod secret;
pub(crate) mod socket_owner;
pub(crate) mod sync;
pub(crate) mod weighed_queue;

use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// RFC 3339 with milliseconds, UTC.
pub(crate) fn iso_time(ms: i64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(time).to_string()
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0xf)] as char);
    }
    out
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Writes `bytes` to `path` so that a crash leaves either the old or the new content: a
/// temporary file `.<name>.<pid>.<random>.tmp` in the same folder, created with
/// `O_CREAT|O_EXCL|O_CLOEXEC` (std opens with `O_CLOEXEC`; `create_new` is `O_EXCL`) and
/// `mode` at open, fsync, rename, then fsync of the folder. Readers skip names starting with
/// `.`, so a tmp left by a crash is never read. Errors name the path.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    write_replacing(path, bytes, mode, true)
}

/// Like [`write_atomic`] without the two fsyncs: a process crash still leaves the old or the
/// new content (rename is atomic), but a power loss may leave neither. For files whose
/// content is also stored durably elsewhere (a run's script copy: the store keeps the text).
pub(crate) fn write_replace(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    write_replacing(path, bytes, mode, false)
}

/// Writes `bytes` to a fresh temporary file beside `path` with exactly `mode` (the umask may
/// have narrowed it at open; a reader that checks the mode, such as the run-control key's,
/// sees what was asked for), synced if `sync`. Returns the temporary file's path; on error it
/// is already removed.
fn write_temporary(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    sync: bool,
) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other(format!("{} has no parent folder", path.display())))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .map_err(|e| annotate(e, "create", &tmp))?;
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
            .map_err(|e| annotate(e, "set mode of", &tmp))?;
        file.write_all(bytes)
            .map_err(|e| annotate(e, "write", &tmp))?;
        if sync {
            file.sync_all().map_err(|e| annotate(e, "sync", &tmp))?;
        }
        Ok(())
    })();
    match written {
        Ok(()) => Ok(tmp),
        Err(error) => {
            let _ = std::fs::remove_file(&tmp);
            Err(error)
        }
    }
}

fn write_replacing(path: &Path, bytes: &[u8], mode: u32, sync: bool) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other(format!("{} has no parent folder", path.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| annotate(e, "create folder", dir))?;
    let tmp = write_temporary(path, bytes, mode, sync)?;
    let result = std::fs::rename(&tmp, path).map_err(|e| annotate(e, "rename into place", path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    } else if sync && let Ok(folder) = std::fs::File::open(dir) {
        let _ = folder.sync_all();
    }
    result
}

/// Publishes `bytes` at `path` without ever replacing it: written in full (mode exactly
/// `mode`, synced) to a temporary file beside it, then `link(2)`ed into place. Returns `false`
/// when `path` already existed: the first writer wins, and no reader ever sees a half-written
/// file. Errors name the path.
pub(crate) fn publish_once(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<bool> {
    let tmp = write_temporary(path, bytes, mode, true)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            if let Some(folder) = path.parent().and_then(|dir| std::fs::File::open(dir).ok()) {
                let _ = folder.sync_all();
            }
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(annotate(e, "publish", path)),
    }
}

/// Adds what was being done and to which path to an I/O error.
pub(crate) fn annotate(error: std::io::Error, doing: &str, path: &Path) -> std::io::Error {
    std::io::Error::new(error.kind(), format!("{doing} {}: {error}", path.display()))
}

/// Cuts `text` to at most `max` bytes at a char boundary.
pub(crate) fn truncate_utf8(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` cut to at most `max` bytes at a char boundary, with `…` after it when cut.
pub(crate) fn shortened(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    format!("{}…", truncate_utf8(text, max)).into()
}

/// Cuts `message` to at most `max` bytes at a char boundary, saying how long it was: for a
/// message whose text a script or an agent chose.
pub(crate) fn cut_message(message: &mut String, max: usize) {
    if message.len() <= max {
        return;
    }
    let whole = message.len();
    let kept = truncate_utf8(message, max).len();
    message.truncate(kept);
    message.push_str(&format!("… (cut: the message had {whole} bytes)"));
}

/// A process's start time in clock ticks since boot (Linux `/proc/<pid>/stat` field 22), so
/// a recycled pid is told apart from the process that held it. `None` if it does not exist
/// or is a zombie. The same reading as [`process::start_time`].
pub fn process_start_time(pid: u32) -> Option<u64> {
    process::start_time(pid)
}

/// Whether `pid` is alive and is still the process that started at `start_time`: the one
/// rule of [`process::identity`], without a boot id.
#[cfg(test)]
pub(crate) fn process_is(pid: u32, start_time: u64) -> bool {
    process::identity(pid, start_time, None).is_alive()
}

/// The length of `value`'s compact JSON, counted without building the text.
pub(crate) fn json_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serialising plain data into a sink that cannot fail cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_identity() {
        let pid = std::process::id();
        let start = process_start_time(pid).expect("own start time");
        assert!(process_is(pid, start));
        assert!(!process_is(pid, start + 1));
        assert!(!process_is(0, start));
    }

    #[test]
    fn utf8_truncation_keeps_boundaries() {
        assert_eq!(truncate_utf8("é", 1), "");
        assert_eq!(truncate_utf8("aé", 2), "a");
        assert_eq!(truncate_utf8("abc", 5), "abc");
    }
}
