//! When a run's lease may be taken over: the policy follows the deployment, the store only
//! keeps the data (holder identity, expiry) and makes the takeover a compare-and-swap.
//!
//! - **The daemon and the CLI** share one machine and can see the holder process, so a lease
//!   is held for exactly as long as its holder lives ([`LeasePolicy::HolderLiveness`]). The
//!   seed's rule: a live lease is never stolen on timeout, however long the holder waits (a
//!   human answering a checkpoint, an agent thinking for an hour). Expiry is ignored.
//! - **Serve replicas** share one store across machines and cannot see each other's
//!   processes, so a lease lapses when its holder stops renewing it
//!   ([`LeasePolicy::Ttl`]): holders renew every third of the TTL, and a lease not renewed
//!   within the TTL may be taken over. The old holder is fenced by the token swap.
//!
//! Neither policy looks at who asks: a process finding its own lease (same `owner_id`)
//! decides that itself before asking the policy.

use std::time::Duration;

use crate::model::Lease;
use crate::util::process::Liveness;

/// How a caller decides that a lease it found no longer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeasePolicy {
    /// Held while the holder process is alive ([`crate::util::process::identity`]).
    HolderLiveness,
    /// Held until its expiry; a lease without one lapses this long after it was acquired.
    Ttl(Duration),
}

/// What the policy says about a lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Its holder still holds it: leave it (route control to the holder instead).
    Held,
    /// It may be taken over, by compare-and-swap on its token.
    Lapsed(LapseReason),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LapseReason {
    /// The holder process is gone (dead, or its pid reused).
    HolderGone(Liveness),
    /// It was not renewed before `expires_at` (Unix ms).
    Expired { expires_at: i64 },
}

impl LeasePolicy {
    /// Judges `lease` at `now_ms`, checking the holder process on this machine when the
    /// policy asks for it.
    pub(crate) fn judge(&self, lease: &Lease, now_ms: i64) -> LeaseState {
        self.judge_with(lease, now_ms, |lease| {
            crate::util::process::identity(lease.pid, lease.proc_start, lease.boot_id.as_deref())
        })
    }

    /// [`LeasePolicy::judge`] with the holder's liveness supplied by `liveness`.
    pub(crate) fn judge_with(
        &self,
        lease: &Lease,
        now_ms: i64,
        liveness: impl FnOnce(&Lease) -> Liveness,
    ) -> LeaseState {
        match self {
            LeasePolicy::HolderLiveness => match liveness(lease) {
                Liveness::Alive => LeaseState::Held,
                gone => LeaseState::Lapsed(LapseReason::HolderGone(gone)),
            },
            LeasePolicy::Ttl(ttl) => {
                let expires_at = lease
                    .expires_at
                    .unwrap_or_else(|| lease.acquired_at.saturating_add(millis(*ttl)));
                if now_ms >= expires_at {
                    LeaseState::Lapsed(LapseReason::Expired { expires_at })
                } else {
                    LeaseState::Held
                }
            }
        }
    }

    /// The expiry a holder writes when it takes or renews a lease at `now_ms`: none under
    /// [`LeasePolicy::HolderLiveness`], `now + ttl` under [`LeasePolicy::Ttl`].
    pub fn expiry(&self, now_ms: i64) -> Option<i64> {
        match self {
            LeasePolicy::HolderLiveness => None,
            LeasePolicy::Ttl(ttl) => Some(now_ms.saturating_add(millis(*ttl))),
        }
    }

    /// How often a holder renews its lease (the driver's heartbeat): a third of the TTL, so
    /// that two missed beats still leave it held; never under
    /// [`LeasePolicy::HolderLiveness`].
    pub(crate) fn renew_every(&self) -> Option<Duration> {
        match self {
            LeasePolicy::HolderLiveness => None,
            LeasePolicy::Ttl(ttl) => Some(*ttl / 3),
        }
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::process::{DeadReason, ReuseReason};

    fn lease(expires_at: Option<i64>) -> Lease {
        Lease {
            owner_id: "daemon-1".to_owned(),
            pid: 4242,
            proc_start: 99,
            boot_id: None,
            token: "token-a".to_owned(),
            acquired_at: 1_000,
            expires_at,
        }
    }

    #[test]
    fn holder_liveness_never_lapses_a_live_holder_on_time() {
        let policy = LeasePolicy::HolderLiveness;
        let long_expired = lease(Some(1_001));
        assert_eq!(
            policy.judge_with(&long_expired, i64::MAX, |_| Liveness::Alive),
            LeaseState::Held
        );
        for gone in [
            Liveness::Dead(DeadReason::NoProcess),
            Liveness::Reused(ReuseReason::OtherBoot),
        ] {
            assert_eq!(
                policy.judge_with(&lease(None), 0, |_| gone.clone()),
                LeaseState::Lapsed(LapseReason::HolderGone(gone.clone()))
            );
        }
        assert_eq!(policy.expiry(5), None);
        assert_eq!(policy.renew_every(), None);
    }

    #[test]
    fn ttl_lapses_at_the_expiry_whatever_the_holder() {
        let policy = LeasePolicy::Ttl(Duration::from_secs(30));
        let renewed = lease(Some(50_000));
        let alive = |_: &Lease| Liveness::Alive;
        assert_eq!(policy.judge_with(&renewed, 49_999, alive), LeaseState::Held);
        assert_eq!(
            policy.judge_with(&renewed, 50_000, alive),
            LeaseState::Lapsed(LapseReason::Expired { expires_at: 50_000 })
        );
        // Written without an expiry (by the daemon): lapses a TTL after it was acquired.
        assert_eq!(
            policy.judge_with(&lease(None), 31_000, alive),
            LeaseState::Lapsed(LapseReason::Expired { expires_at: 31_000 })
        );
        assert_eq!(
            policy.judge_with(&lease(None), 30_999, alive),
            LeaseState::Held
        );
        assert_eq!(policy.expiry(5), Some(30_005));
        assert_eq!(policy.renew_every(), Some(Duration::from_secs(10)));
    }

    #[test]
    fn this_process_holds_its_own_lease() {
        let pid = std::process::id();
        let own = Lease {
            pid,
            proc_start: crate::util::process::start_time(pid).expect("own start time"),
            boot_id: crate::util::process::current_boot_id(),
            ..lease(None)
        };
        assert_eq!(LeasePolicy::HolderLiveness.judge(&own, 0), LeaseState::Held);
        let recycled = Lease {
            proc_start: own.proc_start + 1,
            ..own
        };
        assert!(matches!(
            LeasePolicy::HolderLiveness.judge(&recycled, 0),
            LeaseState::Lapsed(LapseReason::HolderGone(Liveness::Reused(_)))
        ));
    }
}
