//! The wait between two attempts of an agent call: exponential backoff with jitter (2 s,
//! doubling, at most 60 s, each wait within ±20%), or the call's own `retryDelayMs`, and
//! never shorter than a `retry-after` the provider gave, up to [`MAX_RETRY_AFTER`] (a date
//! further out would hold the run's call for as long). The wait ends at once when the
//! call is cancelled. Jitter only moves when the next attempt starts, never what it does.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The wait after the first failed attempt.
pub(super) const BASE_DELAY: Duration = Duration::from_secs(2);
/// No wait is longer, whatever the attempt (a provider's `retry-after` aside).
pub(super) const MAX_DELAY: Duration = Duration::from_secs(60);
/// The longest provider `retry-after` honoured; a longer one waits this long.
pub(super) const MAX_RETRY_AFTER: Duration = Duration::from_secs(10 * 60);
/// Each wait is moved by up to this fraction either way.
const JITTER: f64 = 0.2;

/// A failed attempt that will be retried, as the `agentRetry` event reports it.
#[derive(Clone, Debug)]
pub(super) struct RetryNotice {
    /// The attempt that failed, from 1.
    pub attempt: u32,
    /// How many attempts the call may make in all.
    pub of: u32,
    pub code: String,
    pub message: String,
    /// The wait before the next attempt.
    pub wait: Duration,
}

/// The wait after failed attempt `attempt` (from 1): `fixed` when the call gave
/// `retryDelayMs`, else the backoff; at least `retry_after`, up to [`MAX_RETRY_AFTER`].
pub(super) fn delay(
    attempt: u32,
    fixed: Option<Duration>,
    retry_after: Option<Duration>,
) -> Duration {
    let chosen = fixed.unwrap_or_else(|| jittered(backoff(attempt), random_unit()));
    retry_after.map_or(chosen, |after| chosen.max(after.min(MAX_RETRY_AFTER)))
}

/// The backoff without jitter: `BASE_DELAY` doubled per earlier failure, at most `MAX_DELAY`.
fn backoff(attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    BASE_DELAY.saturating_mul(1 << doublings).min(MAX_DELAY)
}

/// `delay` moved by `unit` (in [0, 1)) across ±`JITTER`.
fn jittered(delay: Duration, unit: f64) -> Duration {
    delay.mul_f64(1.0 - JITTER + 2.0 * JITTER * unit)
}

/// A number in [0, 1) from the system's randomness (a v4 UUID's random bits).
fn random_unit() -> f64 {
    let bits = (uuid::Uuid::new_v4().as_u128() >> 75) as u64; // 53 bits
    bits as f64 / (1u64 << 53) as f64
}

/// Waits `wait`, or less when `cancel` fires; says whether the whole wait passed.
pub(super) async fn wait(wait: Duration, cancel: &CancellationToken) -> bool {
    if wait.is_zero() {
        return !cancel.is_cancelled();
    }
    tokio::select! {
        _ = tokio::time::sleep(wait) => true,
        _ = cancel.cancelled() => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_two_seconds_up_to_a_minute() {
        let waits: Vec<u64> = (1..=7).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(u32::MAX), MAX_DELAY);
    }

    #[test]
    fn jitter_stays_within_a_fifth_either_way() {
        let base = Duration::from_secs(10);
        assert_eq!(jittered(base, 0.0), Duration::from_secs(8));
        assert_eq!(jittered(base, 0.5), base);
        assert!(jittered(base, 0.999_999) < Duration::from_secs(12));
        for attempt in 1..=3 {
            let wait = delay(attempt, None, None);
            let middle = backoff(attempt);
            assert!(
                wait >= middle.mul_f64(0.8) && wait <= middle.mul_f64(1.2),
                "{wait:?}"
            );
        }
    }

    #[test]
    fn a_fixed_delay_replaces_the_backoff_and_retry_after_is_a_floor() {
        let fixed = Some(Duration::from_millis(50));
        assert_eq!(delay(3, fixed, None), Duration::from_millis(50));
        assert_eq!(delay(1, Some(Duration::ZERO), None), Duration::ZERO);
        let after = Some(Duration::from_secs(90));
        assert_eq!(delay(1, fixed, after), Duration::from_secs(90));
        assert_eq!(delay(1, None, after), Duration::from_secs(90));
        assert_eq!(
            delay(1, fixed, Some(Duration::from_millis(10))),
            Duration::from_millis(50)
        );
        // A retry-after at the ceiling is honoured; past it, the ceiling is.
        assert_eq!(delay(1, fixed, Some(MAX_RETRY_AFTER)), MAX_RETRY_AFTER);
        let days = Some(Duration::from_secs(3 * 24 * 3600));
        assert_eq!(delay(1, fixed, days), MAX_RETRY_AFTER);
    }

    #[tokio::test]
    async fn a_cancel_ends_the_wait_at_once() {
        let cancel = CancellationToken::new();
        let started = std::time::Instant::now();
        let waiting = tokio::spawn({
            let cancel = cancel.clone();
            async move { wait(Duration::from_secs(600), &cancel).await }
        });
        cancel.cancel();
        assert!(!waiting.await.unwrap());
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
