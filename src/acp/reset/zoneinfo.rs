//! Zone offsets from the system's tz database (the TZif files under `$TZDIR`, by default
//! `/usr/share/zoneinfo`), so "resets 3pm (Europe/Paris)" needs no bundled copy of the
//! database. Local time is `$TZ` when it names a zone, else `/etc/localtime`, else UTC.
//!
//! Only the transitions listed in a file are used: past the last one the last offset holds.
//! Distributions install files with transitions up to 2037, so that is exact until then; a
//! file built without them ("slim") keeps its last listed offset, which can be an hour off
//! in summer.

use std::path::PathBuf;

/// The offset in seconds east of UTC of `zone` (an IANA name, `None` for local time) at
/// `utc` (Unix seconds); `None` if the zone is unknown or its file unreadable.
pub(crate) fn offset(zone: Option<&str>, utc: i64) -> Option<i64> {
    let path = match zone {
        Some(name) if name.eq_ignore_ascii_case("utc") || name.eq_ignore_ascii_case("gmt") => {
            return Some(0);
        }
        Some(name) => zone_file(name)?,
        None => match std::env::var("TZ") {
            Ok(name) if !name.trim_start_matches(':').is_empty() => {
                zone_file(name.trim_start_matches(':'))?
            }
            _ => PathBuf::from("/etc/localtime"),
        },
    };
    match read_bounded(&path) {
        Ok(bytes) => offset_in(&bytes, utc),
        // A machine without a local zone file keeps UTC, as the C library does.
        Err(_) if zone.is_none() => Some(0),
        Err(_) => None,
    }
}

/// The largest zone file read: real ones are a few KiB, and the path may come from `TZ`.
const MAX_ZONE_FILE: u64 = 1024 * 1024;

/// The file at `path`, refused past [`MAX_ZONE_FILE`] bytes.
fn read_bounded(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_ZONE_FILE + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_ZONE_FILE {
        return Err(std::io::Error::other("not a zone file: too large"));
    }
    Ok(bytes)
}

/// The file of an IANA zone name; names that could leave the database are refused.
fn zone_file(name: &str) -> Option<PathBuf> {
    let safe = !name.is_empty()
        && !name.starts_with('/')
        && name
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_-+".contains(c));
    if !safe {
        return None;
    }
    let dir = std::env::var_os("TZDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/zoneinfo"));
    Some(dir.join(name))
}

/// The offset at `utc` from the bytes of a TZif file (RFC 8536), using its 64-bit block when
/// it has one.
pub(crate) fn offset_in(bytes: &[u8], utc: i64) -> Option<i64> {
    let header = Header::read(bytes)?;
    let (body, header, time_size) = if header.version >= b'2' {
        let rest = bytes.get(44 + header.block_len(4)?..)?;
        (rest.get(44..)?, Header::read(rest)?, 8)
    } else {
        (bytes.get(44..)?, header, 4)
    };
    let times_len = header.times * time_size;
    let types_at = times_len + header.times;
    let time = |index: usize| -> Option<i64> {
        let at = index * time_size;
        Some(if time_size == 8 {
            i64::from_be_bytes(body.get(at..at + 8)?.try_into().ok()?)
        } else {
            i64::from(i32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?))
        })
    };
    // The last transition at or before `utc`; before the first one, the first type holds.
    let mut kind = 0usize;
    for index in 0..header.times {
        if time(index)? > utc {
            break;
        }
        kind = usize::from(*body.get(times_len + index)?);
    }
    if kind >= header.types {
        return None;
    }
    let at = types_at + kind * 6;
    let offset = i32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?);
    Some(i64::from(offset))
}

struct Header {
    version: u8,
    is_ut: usize,
    is_std: usize,
    leaps: usize,
    times: usize,
    types: usize,
    chars: usize,
}

impl Header {
    fn read(bytes: &[u8]) -> Option<Header> {
        if bytes.get(..4)? != b"TZif" {
            return None;
        }
        let count = |index: usize| -> Option<usize> {
            let at = 20 + index * 4;
            let value = u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?);
            usize::try_from(value).ok()
        };
        Some(Header {
            version: *bytes.get(4)?,
            is_ut: count(0)?,
            is_std: count(1)?,
            leaps: count(2)?,
            times: count(3)?,
            types: count(4)?,
            chars: count(5)?,
        })
    }

    /// The length of the data block that follows this header, for times of `time_size` bytes.
    fn block_len(&self, time_size: usize) -> Option<usize> {
        Some(
            self.times * (time_size + 1)
                + self.types * 6
                + self.chars
                + self.leaps * (time_size + 4)
                + self.is_std
                + self.is_ut,
        )
    }
}
