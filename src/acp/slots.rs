//! Per-backend concurrency caps: a backend's `maxConcurrent` in `AGENTPRISM_BACKENDS` bounds
//! how many agent sessions it holds at once across every run of the process, so one
//! account's rate limit is not met by as many parallel calls as the scripts make. A session
//! that finds its backend full waits for a slot before it takes an agent process, in the
//! order the sessions asked (tokio's semaphore is fair); it tells its observer while it waits,
//! so status shows the call waiting, and dropping the wait (a cancel or stop) leaves the queue
//! at once. The slot is held by the open session and freed when it closes. Probes take none:
//! they prompt nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::engine::runner::{
    AgentFailure, AgentObserver, AgentSession, AgentUpdate, OutputChannel, ReopenMethod,
    TurnOutput, TurnRequest,
};
use crate::env::{self, EnvSnapshot};

/// The key of a backend entry that caps its concurrent sessions.
pub(crate) const KEY: &str = "maxConcurrent";

/// The caps `AGENTPRISM_BACKENDS` sets, by backend name in ASCII lower case (built-ins
/// included: an entry naming a built-in may set only this key). Errors name the variable,
/// the backend and the key.
pub(crate) fn caps_from_env(env: &EnvSnapshot) -> Result<BTreeMap<String, u32>, String> {
    let mut caps = BTreeMap::new();
    let Some(text) = env.non_empty(env::BACKENDS) else {
        return Ok(caps);
    };
    let declared: Value = serde_json::from_str(text)
        .map_err(|error| format!("{} is not valid JSON: {error}", env::BACKENDS))?;
    let Some(object) = declared.as_object() else {
        return Ok(caps);
    };
    for (name, entry) in object {
        if let Some(cap) = cap_of(env::BACKENDS, name, entry)?
            && caps.insert(name.to_ascii_lowercase(), cap).is_some()
        {
            return Err(format!(
                "{}: backend {name:?} is declared twice (names ignore case)",
                env::BACKENDS
            ));
        }
    }
    Ok(caps)
}

/// The `maxConcurrent` of one backend entry from `source`: absent or `null` is no cap; else
/// a whole number from 1 up.
pub(crate) fn cap_of(source: &str, name: &str, entry: &Value) -> Result<Option<u32>, String> {
    let Some(value) = entry.get(KEY).filter(|value| !value.is_null()) else {
        return Ok(None);
    };
    value
        .as_u64()
        .filter(|&cap| cap >= 1)
        .and_then(|cap| u32::try_from(cap).ok())
        .map(Some)
        .ok_or_else(|| {
            format!(
                "{source}: backend {name:?}: field `{KEY}` must be a whole number from 1 to {} \
                 (got {value})",
                u32::MAX
            )
        })
}

/// The slots of every capped backend, shared by every session the runner opens.
pub(crate) struct BackendSlots {
    /// Each capped backend's cap and its semaphore, by lower-case name.
    slots: BTreeMap<String, (u32, Arc<Semaphore>)>,
}

impl BackendSlots {
    pub(crate) fn new(caps: BTreeMap<String, u32>) -> BackendSlots {
        let slots = caps
            .into_iter()
            .map(|(name, cap)| (name, (cap, Arc::new(Semaphore::new(cap as usize)))))
            .collect();
        BackendSlots { slots }
    }

    /// A slot of `backend`, waiting for one when all are taken (and telling `observer` what
    /// it waits for, then that it stopped waiting); `None` for a backend without a cap.
    /// Cancel-safe: a dropped wait gives up its place in the queue.
    pub(crate) async fn take(
        &self,
        backend: &str,
        observer: &dyn AgentObserver,
    ) -> Option<OwnedSemaphorePermit> {
        let (cap, semaphore) = self.slots.get(&backend.to_ascii_lowercase())?;
        // The semaphore hands a released permit straight to its first waiter, so a free one
        // means nobody waits, and taking it jumps no queue.
        if let Ok(permit) = semaphore.clone().try_acquire_owned() {
            return Some(permit);
        }
        observer.update(AgentUpdate::SlotWait(Some(format!(
            "a {backend} slot ({cap} in use)"
        ))));
        let permit = semaphore.clone().acquire_owned().await.ok();
        observer.update(AgentUpdate::SlotWait(None));
        permit
    }
}

/// An open session that holds a slot of its backend until it closes or is dropped.
pub(crate) struct SlottedSession {
    pub(crate) session: Box<dyn AgentSession>,
    pub(crate) _slot: OwnedSemaphorePermit,
}

#[async_trait]
impl AgentSession for SlottedSession {
    async fn prompt(
        &mut self,
        turn: TurnRequest,
        cancel: CancellationToken,
    ) -> Result<TurnOutput, AgentFailure> {
        self.session.prompt(turn, cancel).await
    }

    fn session_ref(&self) -> Option<Value> {
        self.session.session_ref()
    }

    // Every other method forwards too: a default here would hide what the session offers.
    fn output_channel(&self) -> Option<OutputChannel> {
        self.session.output_channel()
    }

    fn take_output(&mut self) -> Option<Value> {
        self.session.take_output()
    }

    fn reopen_method(&self) -> Option<ReopenMethod> {
        self.session.reopen_method()
    }

    fn reopen_failure(&self) -> Option<String> {
        self.session.reopen_failure()
    }

    async fn close(self: Box<Self>) {
        let SlottedSession { session, _slot } = *self;
        session.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::runner::{PermissionOutcome, PermissionRequest};
    use crate::util::sync::Lock;
    use std::sync::Mutex;

    fn caps_of(backends: &str) -> Result<BTreeMap<String, u32>, String> {
        caps_from_env(&EnvSnapshot::from_pairs([(env::BACKENDS, backends)]))
    }

    #[test]
    fn caps_are_read_per_backend_and_default_to_none() {
        let caps = caps_of(r#"{"claude":{"maxConcurrent":4},"Mine":{"command":"m","maxConcurrent":1},"other":{"command":"o"},"nulled":{"command":"n","maxConcurrent":null}}"#)
            .expect("caps");
        assert_eq!(
            caps,
            BTreeMap::from([("claude".to_owned(), 4), ("mine".to_owned(), 1)])
        );
        assert!(
            caps_from_env(&EnvSnapshot::default())
                .expect("none")
                .is_empty()
        );
        let largest = caps_of(&format!(
            r#"{{"a":{{"command":"a","maxConcurrent":{}}}}}"#,
            u32::MAX
        ));
        assert_eq!(largest.expect("largest")["a"], u32::MAX);
    }

    #[test]
    fn a_cap_that_is_not_a_whole_number_from_1_is_refused_naming_backend_and_key() {
        for bad in [
            "0",
            "-1",
            "1.5",
            "\"4\"",
            "true",
            "[]",
            "{}",
            "4294967296",
            "1e3",
        ] {
            let error = caps_of(&format!(
                r#"{{"mine":{{"command":"m","maxConcurrent":{bad}}}}}"#
            ))
            .expect_err(bad);
            assert!(
                error.contains("AGENTPRISM_BACKENDS")
                    && error.contains("\"mine\"")
                    && error.contains("`maxConcurrent`"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn a_backend_capped_twice_in_two_spellings_is_refused() {
        let error = caps_of(r#"{"claude":{"maxConcurrent":1},"CLAUDE":{"maxConcurrent":2}}"#)
            .expect_err("twice");
        assert!(error.contains("declared twice"), "{error}");
    }

    /// What a waiting session told its observer.
    #[derive(Default)]
    struct Told(Mutex<Vec<Option<String>>>);

    #[async_trait]
    impl AgentObserver for Told {
        fn update(&self, update: AgentUpdate) {
            if let AgentUpdate::SlotWait(waiting) = update {
                self.0.locked().push(waiting);
            }
        }

        async fn request_permission(&self, _request: PermissionRequest) -> PermissionOutcome {
            PermissionOutcome::Cancelled
        }
    }

    #[tokio::test]
    async fn waiters_get_slots_in_the_order_they_asked_and_a_dropped_wait_leaves_the_queue() {
        let slots = Arc::new(BackendSlots::new(BTreeMap::from([("mock".to_owned(), 1)])));
        let quiet = Told::default();
        let first = slots.take("Mock", &quiet).await.expect("a free slot");
        assert!(quiet.0.locked().is_empty(), "a free slot is not waited for");
        assert!(slots.take("uncapped", &quiet).await.is_none());

        let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
        let told = Arc::new(Told::default());
        let mut waiters = Vec::new();
        for name in ["second", "third"] {
            let (slots, observer, order) = (slots.clone(), told.clone(), order_tx.clone());
            waiters.push(tokio::spawn(async move {
                let slot = slots.take("mock", observer.as_ref()).await;
                order.send(name).unwrap();
                drop(slot);
            }));
            // Each waiter is queued before the next one asks.
            let expected = waiters.len();
            while told.0.locked().len() < expected {
                tokio::task::yield_now().await;
            }
        }
        let abandoned = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.take("mock", &Told::default()).await.is_some() })
        };
        tokio::task::yield_now().await;
        abandoned.abort();
        drop(first);
        assert_eq!(order_rx.recv().await, Some("second"));
        assert_eq!(order_rx.recv().await, Some("third"));
        for waiter in waiters {
            waiter.await.unwrap();
        }
        let told = told.0.locked().clone();
        assert_eq!(told.iter().flatten().count(), 2);
        assert_eq!(told[0].as_deref(), Some("a mock slot (1 in use)"));
        assert_eq!(told.iter().filter(|waiting| waiting.is_none()).count(), 2);
        assert!(
            slots.take("mock", &Told::default()).await.is_some(),
            "the abandoned wait kept no slot"
        );
    }

    /// A session with something to say for every method of the port.
    struct Telling;

    #[async_trait]
    impl AgentSession for Telling {
        async fn prompt(
            &mut self,
            _turn: TurnRequest,
            _cancel: CancellationToken,
        ) -> Result<TurnOutput, AgentFailure> {
            Err(AgentFailure::new(
                crate::engine::runner::FailureKind::Execution,
                "unused",
            ))
        }

        fn session_ref(&self) -> Option<Value> {
            Some(serde_json::json!({"sessionId": "s-1"}))
        }

        fn output_channel(&self) -> Option<OutputChannel> {
            Some(OutputChannel::Tool("StructuredOutput"))
        }

        fn take_output(&mut self) -> Option<Value> {
            Some(serde_json::json!({"verdict": "pass"}))
        }

        fn reopen_method(&self) -> Option<ReopenMethod> {
            Some(ReopenMethod::Load)
        }

        fn reopen_failure(&self) -> Option<String> {
            Some("refused".to_owned())
        }

        async fn close(self: Box<Self>) {}
    }

    /// A capped session answers for every method as the session it holds: a default of the
    /// port would hide its reopening (nothing journaled) and its output channel.
    #[tokio::test]
    async fn a_slotted_session_answers_as_the_session_it_holds() {
        let slots = BackendSlots::new(BTreeMap::from([("mock".to_owned(), 1)]));
        let slot = slots.take("mock", &Told::default()).await.expect("a slot");
        let mut slotted = SlottedSession {
            session: Box::new(Telling),
            _slot: slot,
        };
        assert_eq!(slotted.session_ref(), Telling.session_ref());
        assert_eq!(slotted.output_channel(), Telling.output_channel());
        assert_eq!(slotted.take_output(), Telling.take_output());
        assert_eq!(slotted.reopen_method(), Some(ReopenMethod::Load));
        assert_eq!(slotted.reopen_failure(), Some("refused".to_owned()));
    }
}
