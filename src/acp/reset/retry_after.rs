//! A provider's `retry-after` (RFC 9110, section 10.2.3) read out of an adapter's error text
//! or data, as the wait the retry backoff must honour. The field comes in either form: a
//! whole number of seconds, or an HTTP-date (the preferred IMF-fixdate, and the obsolete
//! RFC 850 and asctime forms a recipient must also accept). Adapters pass headers and bodies
//! on in either spelling, so `retry-after`, `retry_after` and `retryAfter` are all read; a
//! value that is neither form is no wait. The present comes from the caller, so tests fix it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The wait a `retry-after` in `text` asks for, counted from `now`; a date already past asks
/// for none (zero).
pub(crate) fn retry_after(text: &str, now: SystemTime) -> Option<Duration> {
    let lower = text.to_ascii_lowercase();
    ["retry-after", "retry_after", "retryafter"]
        .iter()
        .flat_map(|key| lower.match_indices(key).map(move |(at, _)| at + key.len()))
        .find_map(|end| {
            let value = text[end..].trim_start_matches(['"', '\'', ':', '=', ' ', '\\']);
            delta_seconds(value).map(Duration::from_secs).or_else(|| {
                Some(
                    http_date(value, now)?
                        .duration_since(now)
                        .unwrap_or_default(),
                )
            })
        })
}

/// `1*DIGIT` standing alone: not the start of a date, a clock time, a fraction or a number
/// with a unit of its own.
fn delta_seconds(value: &str) -> Option<u64> {
    let digits = value.len() - value.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let after = &value[digits..];
    let fraction = after.starts_with('.') && after[1..].starts_with(|c: char| c.is_ascii_digit());
    if fraction || after.starts_with(|c: char| c == '-' || c == ':' || c.is_ascii_alphanumeric()) {
        return None;
    }
    value[..digits].parse().ok()
}

/// An HTTP-date at the start of `value`, in any of its three forms:
/// `Sun, 06 Nov 1994 08:49:37 GMT`, `Sunday, 06-Nov-94 08:49:37 GMT`,
/// `Sun Nov  6 08:49:37 1994`.
fn http_date(value: &str, now: SystemTime) -> Option<SystemTime> {
    let words: Vec<&str> = value
        .split_whitespace()
        .take(6)
        .map(|word| word.trim_end_matches(['"', '\'', ',', '}', '\\', ';']))
        .collect();
    let day_name = value.split([',', ' ']).next()?;
    if !DAY_NAMES
        .iter()
        .any(|day| day_name.eq_ignore_ascii_case(day) || is_long_day(day_name, day))
    {
        return None;
    }
    let (year, month, day, clock) = if value[day_name.len()..].starts_with(',') {
        match words.get(1)?.split('-').collect::<Vec<_>>()[..] {
            // RFC 850: `06-Nov-94`, then the time and GMT.
            [day, month, year] if year.len() == 2 => {
                gmt(words.get(3)?)?;
                let year = two_digit_year(year.parse().ok()?, now);
                (year, month, day, *words.get(2)?)
            }
            // IMF-fixdate: day, month, four-digit year, time, GMT.
            [day] => {
                gmt(words.get(5)?)?;
                let year = words.get(3).filter(|year| year.len() == 4)?.parse().ok()?;
                (year, *words.get(2)?, day, *words.get(4)?)
            }
            _ => return None,
        }
    } else {
        // asctime: month, day (space-padded), time, four-digit year.
        let year = words.get(4).filter(|year| year.len() == 4)?.parse().ok()?;
        (year, *words.get(1)?, *words.get(2)?, *words.get(3)?)
    };
    let month = MONTHS
        .iter()
        .position(|name| month.eq_ignore_ascii_case(name))?;
    let day: u32 = day.parse().ok().filter(|day| (1..=31).contains(day))?;
    let seconds_of_day = clock_seconds(clock)?;
    let days = days_from_civil(year, month as u32 + 1, day)?;
    let seconds = days.checked_mul(86_400)?.checked_add(seconds_of_day)?;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).ok()?))
}

const DAY_NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
pub(super) const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// RFC 850's full day names: `Sunday`, `Wednesday`.
fn is_long_day(word: &str, short: &str) -> bool {
    word.len() > 3
        && word[..3].eq_ignore_ascii_case(short)
        && word.to_ascii_lowercase().ends_with("day")
}

fn gmt(word: &str) -> Option<()> {
    word.eq_ignore_ascii_case("GMT").then_some(())
}

/// RFC 850's two-digit year, read as RFC 9110 asks: the most recent past year with those
/// digits when the same century would put it more than 50 years ahead.
fn two_digit_year(year: i64, now: SystemTime) -> i64 {
    let since = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    // Years of 365.2425 days: the year `now` falls in, give or take a day at its edges.
    let this_year = 1970 + i64::try_from(since / 31_556_952).unwrap_or(0);
    let candidate = this_year - this_year % 100 + year;
    if candidate > this_year + 50 {
        candidate - 100
    } else {
        candidate
    }
}

/// `HH:MM:SS` as seconds into the day (a leap second `:60` is read as the next second).
fn clock_seconds(clock: &str) -> Option<i64> {
    let parts: Vec<&str> = clock.split(':').collect();
    let [hours, minutes, seconds] = parts[..] else {
        return None;
    };
    let field = |text: &str, max: i64| {
        (text.len() == 2)
            .then(|| text.parse::<i64>().ok())
            .flatten()
            .filter(|value| (0..=max).contains(value))
    };
    Some(field(hours, 23)? * 3600 + field(minutes, 59)? * 60 + field(seconds, 60)?)
}

/// Days from 1970-01-01 to a proleptic Gregorian date, `None` for a day the month lacks.
pub(super) fn days_from_civil(year: i64, month: u32, day: u32) -> Option<i64> {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let length = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if day > length {
        return None;
    }
    // Howard Hinnant's algorithm: years start in March, so the leap day ends the year.
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_index + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    Some(era * 146_097 + day_of_era - 719_468)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1994-11-06 08:49:37 UTC, RFC 9110's example date.
    const EXAMPLE: u64 = 784_111_777;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn delta_seconds_in_headers_and_bodies_is_the_wait() {
        let now = at(EXAMPLE);
        for (text, seconds) in [
            ("429 Too Many Requests\nRetry-After: 120\n", 120),
            (
                r#"{"error":{"type":"rate_limit_error"},"retry_after":7}"#,
                7,
            ),
            (r#"{"headers":{"retry-after":"30"}}"#, 30),
            (r#"{"retryAfter": 0}"#, 0),
            ("overloaded (retry-after=45)", 45),
        ] {
            assert_eq!(
                retry_after(text, now),
                Some(Duration::from_secs(seconds)),
                "{text}"
            );
        }
    }

    #[test]
    fn each_http_date_form_is_the_time_until_it() {
        let now = at(EXAMPLE - 90);
        for text in [
            "Retry-After: Sun, 06 Nov 1994 08:49:37 GMT",
            r#"{"retry-after":"Sun, 06 Nov 1994 08:49:37 GMT"}"#,
            "retry-after: Sunday, 06-Nov-94 08:49:37 GMT",
            "Retry-After: Sun Nov  6 08:49:37 1994",
            "retry-after: sun, 06 nov 1994 08:49:37 gmt",
        ] {
            assert_eq!(
                retry_after(text, now),
                Some(Duration::from_secs(90)),
                "{text}"
            );
        }
        assert_eq!(
            retry_after(
                "Retry-After: Sun, 06 Nov 1994 08:49:37 GMT",
                at(EXAMPLE + 5)
            ),
            Some(Duration::ZERO),
            "a date already past asks for no wait"
        );
        assert_eq!(
            http_date("Thu, 29 Feb 2024 23:59:59 GMT", now),
            Some(at(1_709_251_199))
        );
        assert_eq!(
            http_date("Thu, 01 Jan 1970 00:00:00 GMT", now),
            Some(UNIX_EPOCH)
        );
    }

    #[test]
    fn values_in_neither_form_are_no_wait() {
        let now = at(EXAMPLE);
        for text in [
            "Retry-After: soon",
            "Retry-After: -5",
            "Retry-After: 1.5",
            "Retry-After: 30s",
            "Retry-After: 99999999999999999999999",
            "retry-after-ms: 1500",
            "Retry-After: Sun, 31 Nov 1994 08:49:37 GMT",
            "Retry-After: Sun, 29 Feb 1995 08:49:37 GMT",
            "Retry-After: Sun, 06 Nov 1994 24:00:00 GMT",
            "Retry-After: Sun, 06 Nov 1994 08:49:37 PST",
            "Retry-After: Sun, 06 Nov 94 08:49:37 GMT",
            "Retry-After: Sun, 06 Foo 1994 08:49:37 GMT",
            "Retry-After: Funday, 06-Nov-94 08:49:37 GMT",
            "Retry-After: Sun Nov  6 08:49 1994",
            "Retry-After:",
            "please retry after 5 minutes",
            "no hint at all",
        ] {
            assert_eq!(retry_after(text, now), None, "{text}");
        }
    }

    #[test]
    fn an_rpc_error_that_carries_retry_after_sets_the_failures_wait() {
        use crate::acp::connection::RpcError;
        use crate::engine::runner::FailureKind;
        let error = RpcError::Remote {
            code: -32603,
            message: "API Error: 529 overloaded".to_owned(),
            data: Some(serde_json::json!({"headers": {"retry-after": "17"}})),
        };
        let failure = crate::acp::failure::rpc_failure("mock", "session/prompt", error, &[], "");
        assert_eq!(failure.kind, FailureKind::Execution);
        assert_eq!(failure.retry_after, Some(Duration::from_secs(17)));
        let plain = RpcError::Remote {
            code: -32603,
            message: "API Error: 500".to_owned(),
            data: None,
        };
        let failure = crate::acp::failure::rpc_failure("mock", "session/prompt", plain, &[], "");
        assert_eq!(failure.retry_after, None);
    }
}
