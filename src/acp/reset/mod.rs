//! The moment a provider's usage limit lifts, read out of an adapter's usage-limit error (its
//! message and its error data). The forms the built-in adapters pass on:
//!
//! - a wait: `resets_in_seconds`/`resetsInSeconds` in a body, a quoted `retry-after`, or words
//!   ("try again in 2 hours 3 minutes", "resets in 5 seconds", "in 1 day");
//! - a moment: `resets_at`/`resetsAt` as Unix seconds, milliseconds or an RFC 3339 time, or
//!   Claude Code's "usage limit reached|<Unix seconds>";
//! - a clock time: "try again at 3:04 PM", "resets 3pm", "resets 3pm (Europe/Paris)": the next
//!   time the clock shows it, in the named IANA zone or else in local time; with a date before
//!   it, as Codex writes a reset on another day ("try again at Dec 5th, 2026 12:18 AM"), that
//!   day's.
//!
//! The parser is pure: the present and the zone rules come from the caller, so tests fix both.
//! The zone rules the daemon uses are the system's tz database ([`zoneinfo`]). A failure that
//! is retried rather than paused reads only the provider's `retry-after` ([`retry_after`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod retry_after;
mod zoneinfo;

pub(crate) use retry_after::retry_after;

/// A zone's offset from UTC in seconds at a UTC instant (Unix seconds): `zone` is an IANA
/// name, or `None` for local time. `None` back means the zone is unknown.
pub(crate) type Offsets<'a> = &'a dyn Fn(Option<&str>, i64) -> Option<i64>;

/// [`reset_at_with`] with the present time and the system's tz database.
pub(crate) fn reset_at(text: &str) -> Option<SystemTime> {
    reset_at_with(text, SystemTime::now(), &zoneinfo::offset)
}

/// `at` as Unix milliseconds, the way run records keep times.
pub(crate) fn unix_ms(at: SystemTime) -> Option<i64> {
    i64::try_from(at.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()
}

/// The fields that give a wait in seconds, in either spelling (adapters pass bodies as
/// snake_case or camelCase JSON), lower case.
pub(crate) const WAIT_KEYS: [&str; 6] = [
    "resets_in_seconds",
    "resetsinseconds",
    "retry-after",
    "retry_after",
    "retryafter",
    "retry after",
];

/// When the limit `text` describes lifts, seen at `now`. Machine-readable fields win over
/// words, since words are written for people and may round.
pub(crate) fn reset_at_with(text: &str, now: SystemTime, offsets: Offsets) -> Option<SystemTime> {
    let lower = text.to_ascii_lowercase();
    for key in WAIT_KEYS {
        if let Some(seconds) = number_after(&lower, key) {
            return now.checked_add(Duration::from_secs(seconds));
        }
    }
    for key in ["resets_at", "resetsat"] {
        if let Some(at) = moment_after(text, &lower, key) {
            return Some(at);
        }
    }
    if let Some(at) = moment_after(text, &lower, "limit reached|") {
        return Some(at);
    }
    from_words(text, &lower, now, offsets)
}

/// "… in <amount> <unit> …" or "… at <clock> (<zone>)" after "try again", "retry after" or
/// "resets".
fn from_words(text: &str, lower: &str, now: SystemTime, offsets: Offsets) -> Option<SystemTime> {
    // Each phrase in turn: "try again later" must not hide a "resets 3pm" beside it.
    ["try again ", "retry after ", "resets "]
        .iter()
        .filter_map(|needle| word_at(lower, needle).map(|index| index + needle.len()))
        .find_map(|start| after_phrase(text, lower, start, now, offsets))
}

/// What follows a phrase at `start`: "in <wait>", "<wait>", or "[at] <clock> [zone]".
fn after_phrase(
    text: &str,
    lower: &str,
    start: usize,
    now: SystemTime,
    offsets: Offsets,
) -> Option<SystemTime> {
    let rest = lower[start..].trim_start();
    let wait = rest.strip_prefix("in ").unwrap_or(rest);
    if let Some(seconds) = wait_of(wait) {
        return now.checked_add(Duration::from_secs(seconds));
    }
    let clock = rest.strip_prefix("at ").unwrap_or(rest);
    let (date, clock) = match date_of(clock, now) {
        Some((date, after)) => (Some(date), after),
        None => (None, clock),
    };
    let (minutes, after) = clock_of(clock)?;
    // Lower-casing keeps byte offsets, and a zone name is read as written.
    let zone = zone_of(&text[lower.len() - after.len()..]);
    match date {
        Some(days) => dated_clock(days, minutes, zone.as_deref(), offsets),
        None => next_clock(minutes, zone.as_deref(), now, offsets),
    }
}

/// A date at the start of `text`, as Codex writes one ("dec 5th, 2026 ", "jan 2 "): days
/// since 1970-01-01 and the text after it. Without a year, the present's (by UTC).
fn date_of(text: &str, now: SystemTime) -> Option<(i64, &str)> {
    let (month_word, rest) = text.split_once(' ')?;
    let month = retry_after::MONTHS
        .iter()
        .position(|name| month_word.len() >= 3 && name.eq_ignore_ascii_case(&month_word[..3]))?;
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || digits > 2 {
        return None;
    }
    let day: u32 = rest[..digits].parse().ok()?;
    let mut rest = &rest[digits..];
    for suffix in ["st", "nd", "rd", "th"] {
        rest = rest.strip_prefix(suffix).unwrap_or(rest);
    }
    rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    let year_len = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let year = if year_len == 4 {
        let year = rest[..4].parse().ok()?;
        rest = rest[4..]
            .strip_prefix(',')
            .unwrap_or(&rest[4..])
            .trim_start();
        year
    } else {
        let since = now.duration_since(UNIX_EPOCH).ok()?.as_secs();
        let days = i64::try_from(since / 86_400).ok()?;
        // The year of the present day: the first day of a year on or before it.
        (1970..=days / 365 + 1970)
            .rev()
            .find(|year| retry_after::days_from_civil(*year, 1, 1).is_some_and(|d| d <= days))?
    };
    let days = retry_after::days_from_civil(year, u32::try_from(month).ok()? + 1, day)?;
    Some((days, rest))
}

/// The moment the clock in `zone` shows `minutes` past midnight on day `days`.
fn dated_clock(
    days: i64,
    minutes: u32,
    zone: Option<&str>,
    offsets: Offsets,
) -> Option<SystemTime> {
    let is_utc = zone
        .is_some_and(|name| name.eq_ignore_ascii_case("utc") || name.eq_ignore_ascii_case("gmt"));
    let offsets = |zone, utc| if is_utc { Some(0) } else { offsets(zone, utc) };
    let local = days.checked_mul(86_400)? + i64::from(minutes) * 60;
    let guess = local - offsets(zone, local)?;
    let utc = local - offsets(zone, guess)?;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(utc).ok()?))
}

/// A wait in words ("2 hours 3 minutes", "5 seconds", "1 day", "90s", "2h 3m"), in seconds.
fn wait_of(text: &str) -> Option<u64> {
    let mut total = None;
    let mut rest = text;
    loop {
        rest = rest.trim_start().trim_start_matches("and ").trim_start();
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            break;
        }
        let amount: u64 = rest[..digits].parse().ok()?;
        let after = rest[digits..].trim_start();
        let unit_len = after.len()
            - after
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let unit = match &after[..unit_len] {
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600,
            "d" | "day" | "days" => 86_400,
            _ => break,
        };
        total = Some(total.unwrap_or(0) + amount.checked_mul(unit)?);
        rest = after[unit_len..].trim_start_matches(',');
    }
    total
}

/// A clock time at the start of `text` ("3pm", "3:04 pm", "15:30", "9.30am"): minutes past
/// midnight, and the text after it. A bare number without am/pm is not a time.
fn clock_of(text: &str) -> Option<(u32, &str)> {
    let digits = |s: &str| s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let hour_len = digits(text);
    if hour_len == 0 || hour_len > 2 {
        return None;
    }
    let mut hour: u32 = text[..hour_len].parse().ok()?;
    let mut rest = &text[hour_len..];
    let mut minute = 0;
    let mut has_minutes = false;
    if let Some(after) = rest.strip_prefix(':').or_else(|| rest.strip_prefix('.'))
        && digits(after) == 2
    {
        minute = after[..2].parse().ok()?;
        rest = &after[2..];
        has_minutes = true;
    }
    let trimmed = rest.trim_start();
    let meridiem = ["am", "a.m.", "pm", "p.m."]
        .into_iter()
        .find(|word| trimmed.starts_with(word));
    match meridiem {
        Some(word) => {
            if !(1..=12).contains(&hour) {
                return None;
            }
            hour %= 12;
            if word.starts_with('p') {
                hour += 12;
            }
            rest = &trimmed[word.len()..];
        }
        None if !has_minutes || hour > 23 => return None,
        None => {}
    }
    (minute < 60).then_some((hour * 60 + minute, rest))
}

/// A zone named right after a clock time: "(Europe/Paris)", "Europe/Paris", "(UTC)".
fn zone_of(text: &str) -> Option<String> {
    let text = text.trim_start();
    let text = text.strip_prefix('(').unwrap_or(text);
    let len = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || "/_-+".contains(c)))
        .unwrap_or(text.len());
    let name = &text[..len];
    let is_zone = name.contains('/') || matches!(name, "UTC" | "GMT" | "utc" | "gmt");
    is_zone.then(|| name.to_owned())
}

/// The first moment after `now` at which the clock in `zone` shows `minutes` past midnight.
fn next_clock(
    minutes: u32,
    zone: Option<&str>,
    now: SystemTime,
    offsets: Offsets,
) -> Option<SystemTime> {
    let is_utc = zone
        .is_some_and(|name| name.eq_ignore_ascii_case("utc") || name.eq_ignore_ascii_case("gmt"));
    let offsets = |zone, utc| if is_utc { Some(0) } else { offsets(zone, utc) };
    let now_secs = i64::try_from(now.duration_since(UNIX_EPOCH).ok()?.as_secs()).ok()?;
    let local_now = now_secs + offsets(zone, now_secs)?;
    let midnight = local_now.div_euclid(86_400) * 86_400;
    for day in 0..3 {
        let local = midnight + day * 86_400 + i64::from(minutes) * 60;
        // The offset at the wanted moment may differ from today's (a DST change in between).
        let guess = local - offsets(zone, local - offsets(zone, now_secs)?)?;
        let utc = local - offsets(zone, guess)?;
        if utc > now_secs {
            return Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(utc).ok()?));
        }
    }
    None
}

/// Where `needle` first starts a word in `text` (no letter, digit or `_` just before it).
pub(super) fn word_at(text: &str, needle: &str) -> Option<usize> {
    text.match_indices(needle)
        .map(|(index, _)| index)
        .find(|&index| {
            !text[..index]
                .chars()
                .next_back()
                .is_some_and(|before| before.is_alphanumeric() || before == '_')
        })
}

/// The whole number right after some occurrence of `key` (past quotes, colons, `=`, spaces).
pub(crate) fn number_after(text: &str, key: &str) -> Option<u64> {
    text.match_indices(key).find_map(|(index, _)| {
        let rest = text[index + key.len()..].trim_start_matches(['"', '\'', ':', '=', ' ', '\\']);
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        // Not a date, a clock time or a number with a unit of its own ("3pm", "90s").
        if rest[digits..].starts_with(|c: char| c == '-' || c == ':' || c.is_ascii_alphabetic()) {
            return None;
        }
        rest[..digits].parse().ok()
    })
}

/// The moment after `key` (found in `lower`, read from `text`): Unix seconds, milliseconds
/// (a number too large for seconds) or an RFC 3339 time.
fn moment_after(text: &str, lower: &str, key: &str) -> Option<SystemTime> {
    if let Some(number) = number_after(lower, key) {
        let seconds = if number > 100_000_000_000 {
            number / 1000
        } else {
            number
        };
        return Some(UNIX_EPOCH + Duration::from_secs(seconds));
    }
    lower.match_indices(key).find_map(|(index, _)| {
        let rest = text[index + key.len()..].trim_start_matches(['"', '\'', ':', '=', ' ', '\\']);
        let end = rest
            .find(|ch: char| {
                ch == '"' || ch == '\'' || ch == ',' || ch == '}' || ch.is_whitespace()
            })
            .unwrap_or(rest.len());
        humantime::parse_rfc3339_weak(&rest[..end]).ok()
    })
}

#[cfg(test)]
mod tests;
