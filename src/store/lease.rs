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
//! A holder is one process on one machine: its host name, boot id, pid (with its start time)
//! and owner id. Both policies look at the host first:
//!
//! - under `HolderLiveness`, a lease whose holder is on another host is held: this machine
//!   cannot see that process, and a local pid of the same number is someone else;
//! - under `Ttl`, a lease whose holder is on this host is also judged by its process: one
//!   that is gone (dead, or from an earlier boot) lapses at once instead of after the TTL, so a
//!   replica restarted on the same machine takes its runs back without waiting.
//!
//! A lease written before holders recorded their host is judged as before (by the process
//! under `HolderLiveness`, by the expiry under `Ttl`).
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
        let here = crate::util::process::host_name();
        self.judge_on(lease, now_ms, here.as_deref(), |lease| {
            crate::util::process::identity(lease.pid, lease.proc_start, lease.boot_id.as_deref())
        })
    }

    /// [`LeasePolicy::judge`] on the holder's own host, with the holder's liveness supplied
    /// by `liveness` (tests of the policy's rules).
    #[cfg(test)]
    pub(crate) fn judge_with(
        &self,
        lease: &Lease,
        now_ms: i64,
        liveness: impl FnOnce(&Lease) -> Liveness,
    ) -> LeaseState {
        self.judge_on(lease, now_ms, lease.host.as_deref(), liveness)
    }

    /// [`LeasePolicy::judge`] as seen from the host `here`.
    pub(crate) fn judge_on(
        &self,
        lease: &Lease,
        now_ms: i64,
        here: Option<&str>,
        liveness: impl FnOnce(&Lease) -> Liveness,
    ) -> LeaseState {
        let locality = match (lease.host.as_deref(), here) {
            (None, _) => Locality::Unrecorded,
            (Some(holder), Some(here)) if holder == here => Locality::ThisHost,
            (Some(_), _) => Locality::OtherHost,
        };
        match self {
            LeasePolicy::HolderLiveness if locality == Locality::OtherHost => LeaseState::Held,
            LeasePolicy::HolderLiveness => match liveness(lease) {
                Liveness::Alive => LeaseState::Held,
                gone => LeaseState::Lapsed(LapseReason::HolderGone(gone)),
            },
            LeasePolicy::Ttl(_) if locality == Locality::ThisHost => match liveness(lease) {
                Liveness::Alive => self.by_expiry(lease, now_ms),
                gone => LeaseState::Lapsed(LapseReason::HolderGone(gone)),
            },
            LeasePolicy::Ttl(_) => self.by_expiry(lease, now_ms),
        }
    }

    /// The TTL rule: held until its expiry (or a TTL after it was acquired, without one).
    fn by_expiry(&self, lease: &Lease, now_ms: i64) -> LeaseState {
        match self {
            LeasePolicy::HolderLiveness => LeaseState::Held,
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

/// Where a lease's holder is, seen from the judging host.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Locality {
    ThisHost,
    OtherHost,
    /// Written before holders recorded their host.
    Unrecorded,
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
            host: None,
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
    fn the_holders_host_decides_what_its_process_says() {
        let on = |host: &str| Lease {
            host: Some(host.to_owned()),
            ..lease(Some(50_000))
        };
        let dead = |_: &Lease| Liveness::Dead(DeadReason::NoProcess);
        let alive = |_: &Lease| Liveness::Alive;
        // Holder liveness: a holder on another host is never judged by a local pid.
        let daemon = LeasePolicy::HolderLiveness;
        assert_eq!(
            daemon.judge_on(&on("b"), 0, Some("a"), dead),
            LeaseState::Held
        );
        assert!(matches!(
            daemon.judge_on(&on("a"), 0, Some("a"), dead),
            LeaseState::Lapsed(LapseReason::HolderGone(_))
        ));
        // TTL: a dead holder on this host lapses at once; on another host, at its expiry.
        let replica = LeasePolicy::Ttl(Duration::from_secs(30));
        assert!(matches!(
            replica.judge_on(&on("a"), 1_000, Some("a"), dead),
            LeaseState::Lapsed(LapseReason::HolderGone(_))
        ));
        assert_eq!(
            replica.judge_on(&on("a"), 1_000, Some("a"), alive),
            LeaseState::Held
        );
        assert_eq!(
            replica.judge_on(&on("b"), 1_000, Some("a"), dead),
            LeaseState::Held
        );
        assert!(matches!(
            replica.judge_on(&on("b"), 50_000, Some("a"), alive),
            LeaseState::Lapsed(LapseReason::Expired { .. })
        ));
        // A lease without a host is judged as before: by its expiry alone under TTL.
        assert_eq!(
            replica.judge_on(&lease(Some(50_000)), 1_000, Some("a"), dead),
            LeaseState::Held
        );
    }

    #[test]
    fn this_process_holds_its_own_lease() {
        let pid = std::process::id();
        let own = Lease {
            pid,
            proc_start: crate::util::process::start_time(pid).expect("own start time"),
            boot_id: crate::util::process::current_boot_id(),
            host: crate::util::process::host_name(),
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
