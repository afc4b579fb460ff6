//! The prompt-cache hold: when several calls of one run send prompts that begin alike, the
//! first one goes ahead and the others wait, before they prompt, until its answer begins (or
//! a capped wait runs out). A provider caches a prompt's prefix while it reads the prompt, so
//! the calls that follow are served the shared prefix from its cache instead of each paying
//! for it in full; sent at once, every one of them would miss.
//!
//! - **Alike** means the same backend, the same model and the same first
//!   [`SHARED_PREFIX_BYTES`] bytes of the prompt text (a provider caches nothing shorter than
//!   about a thousand tokens). A shorter prompt is never held.
//! - The first call of a prefix **leads**. Its answer has begun at its first message, thought
//!   or tool call; a lead that ends, fails or is cancelled before that lets its followers go
//!   too, and the next call of that prefix leads again.
//! - A **follower** opens its session meanwhile and waits only for the lead's first output,
//!   at most the hold's cap ([`DEFAULT_HOLD`], `AGENTPRISM_PROMPT_CACHE_HOLD_MS`; 0 turns the
//!   hold off). Calls of a prefix whose lead has begun go at once.
//! - What the room keeps is bounded: one entry per prefix with a lead in flight, and at most
//!   [`MAX_WARM_PREFIXES`] prefixes remembered as warm (then the oldest are forgotten, and a
//!   forgotten prefix leads again).
//!
//! The room knows nothing of sessions or agents: the engine asks it for a call's [`Turn`],
//! tells a [`Lead`] when its answer began, and awaits a [`Follow`].

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::util::sync::Lock;

/// The prompt bytes that must be the same for two calls to share a cached prefix.
pub const SHARED_PREFIX_BYTES: usize = 4096;
/// How long a follower waits for its lead's answer to begin, by default.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(10);
/// The longest hold accepted from the environment.
pub const MAX_HOLD: Duration = Duration::from_secs(120);
/// Prefixes remembered as warm (their lead's answer began), per run.
pub const MAX_WARM_PREFIXES: usize = 1024;

/// What prompt a call sends, as the hold compares them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrefixKey([u8; 32]);

impl PrefixKey {
    /// The key of a call's prompt, or `None` when the prompt is too short to be cached.
    pub fn of(backend: &str, model: Option<&str>, prompt: &str) -> Option<PrefixKey> {
        let bytes = prompt.as_bytes();
        if bytes.len() < SHARED_PREFIX_BYTES {
            return None;
        }
        let mut hash = Sha256::new();
        for part in [backend.as_bytes(), model.unwrap_or("").as_bytes()] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part);
        }
        hash.update(&bytes[..SHARED_PREFIX_BYTES]);
        Some(PrefixKey(hash.finalize().into()))
    }
}

/// One run's hold.
pub struct PromptCacheHold {
    hold: Duration,
    state: std::sync::Mutex<Book>,
}

#[derive(Default)]
struct Book {
    /// Prefixes whose lead is in flight and has not begun: its signal and call index.
    leading: HashMap<PrefixKey, (watch::Sender<bool>, u32)>,
    /// Prefixes whose lead began, oldest first.
    warm: VecDeque<PrefixKey>,
}

/// What a call does about the hold.
pub enum Turn {
    /// Go at once: no shared prefix, the hold is off, or the prefix is warm.
    Alone,
    /// Go at once and tell the hold when the answer begins.
    Lead(Lead),
    /// Wait for the lead before prompting.
    Follow(Follow),
}

impl PromptCacheHold {
    /// A hold of `hold` at most; `Duration::ZERO` turns it off.
    pub fn new(hold: Duration) -> Arc<PromptCacheHold> {
        Arc::new(PromptCacheHold {
            hold,
            state: std::sync::Mutex::new(Book::default()),
        })
    }

    /// The turn of call `index`, whose prompt has `key`.
    pub fn enter(self: &Arc<Self>, key: Option<PrefixKey>, index: u32) -> Turn {
        let Some(key) = key.filter(|_| !self.hold.is_zero()) else {
            return Turn::Alone;
        };
        let mut book = self.state.locked();
        if book.warm.contains(&key) {
            return Turn::Alone;
        }
        if let Some((signal, lead)) = book.leading.get(&key) {
            return Turn::Follow(Follow {
                began: signal.subscribe(),
                lead: *lead,
                hold: self.hold,
            });
        }
        let (signal, _) = watch::channel(false);
        book.leading.insert(key, (signal, index));
        Turn::Lead(Lead {
            hold: self.clone(),
            key,
            done: false,
        })
    }

    /// The lead of `key` is over: `warm` when its answer began.
    fn settle(&self, key: PrefixKey, warm: bool) {
        let mut book = self.state.locked();
        if let Some((signal, _)) = book.leading.remove(&key) {
            let _ = signal.send(true);
        }
        if warm && !book.warm.contains(&key) {
            if book.warm.len() == MAX_WARM_PREFIXES {
                book.warm.pop_front();
            }
            book.warm.push_back(key);
        }
    }
}

/// The first call of a prefix. Dropping it before [`Lead::began`] releases the followers and
/// leaves the prefix cold.
pub struct Lead {
    hold: Arc<PromptCacheHold>,
    key: PrefixKey,
    done: bool,
}

impl Lead {
    /// The lead's answer began: its followers go, and later calls of the prefix go at once.
    pub fn began(&mut self) {
        if !self.done {
            self.done = true;
            self.hold.settle(self.key, true);
        }
    }
}

impl Lead {
    /// The lead's call ended: if its answer never began, its followers go and the prefix
    /// stays cold. Called when the call settles, whoever still holds a reference to the lead
    /// (a kept session's observer may outlive the call).
    pub fn end(&mut self) {
        if !self.done {
            self.done = true;
            self.hold.settle(self.key, false);
        }
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        self.end();
    }
}

/// A call waiting for its lead.
pub struct Follow {
    began: watch::Receiver<bool>,
    lead: u32,
    hold: Duration,
}

/// How a follower's wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    /// The lead's answer began, or the lead ended.
    Released,
    /// The cap ran out first.
    Capped,
}

impl Follow {
    /// The call index of the lead.
    pub fn lead(&self) -> u32 {
        self.lead
    }

    /// The cap of the wait.
    pub fn hold(&self) -> Duration {
        self.hold
    }

    /// Waits for the lead, at most the cap.
    pub async fn wait(&mut self) -> Waited {
        let released = self.began.wait_for(|began| *began);
        match tokio::time::timeout(self.hold, released).await {
            Ok(_) => Waited::Released,
            Err(_) => Waited::Capped,
        }
    }
}

/// `AGENTPRISM_PROMPT_CACHE_HOLD_MS`: the hold's cap in milliseconds (0: off), at most
/// [`MAX_HOLD`]; unset is [`DEFAULT_HOLD`].
pub fn hold_from(text: Option<&str>, variable: &str) -> Result<Duration, String> {
    let Some(text) = text else {
        return Ok(DEFAULT_HOLD);
    };
    let millis: u64 = text.trim().parse().map_err(|_| {
        format!("{variable}: expected milliseconds (0 turns the hold off), got {text:?}")
    })?;
    let hold = Duration::from_millis(millis);
    if hold > MAX_HOLD {
        return Err(format!(
            "{variable}: {millis} ms is more than the longest hold, {} ms",
            MAX_HOLD.as_millis()
        ));
    }
    Ok(hold)
}

#[cfg(test)]
mod tests;
