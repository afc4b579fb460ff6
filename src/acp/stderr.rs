//! An agent's stderr: a bounded tail of what it wrote (for failure messages and the debug
//! log), filled by a task that drains the pipe.
//!
//! One adapter process serves many sessions and probes, so its stderr holds the words of
//! every one of them: a failure quotes only what was written since its own request began
//! ([`StderrTail::mark`], [`StderrTail::since`]), after [`StderrTail::catch_up`] has let the
//! drain read whatever the agent wrote before it answered (an agent writes about a failure to
//! stderr before it answers on stdout, so once the answer arrived, those words are in the
//! pipe if not in the tail already).

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::util::sync::Lock;
use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;

/// How much of an agent's stderr we keep for error messages.
const STDERR_TAIL_BYTES: usize = 8 * 1024;

/// How long a failure waits for the stderr drain to read what the pipe holds.
const STDERR_CATCH_UP: Duration = Duration::from_secs(1);

/// Catch-up requests that may wait for the drain at once (one per failing request).
const CATCH_UP_REQUESTS: usize = 16;

/// The last few KiB an agent wrote to stderr; shared with the task that drains the pipe.
pub(crate) struct StderrTail {
    kept: Mutex<KeptBytes>,
    /// Asks the draining task to read what the pipe holds now; closed once it hit EOF.
    catch_up: tokio::sync::mpsc::Sender<oneshot::Sender<()>>,
}

/// A position in an agent's stderr: how many bytes it had written when the mark was taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StderrMark(u64);

#[derive(Default)]
struct KeptBytes {
    bytes: VecDeque<u8>,
    /// Every byte ever kept (before trimming to the tail), so marks stay meaningful.
    written: u64,
}

impl StderrTail {
    /// A tail with no drain behind it (an agent whose stderr is not piped).
    pub(crate) fn detached() -> StderrTail {
        let (catch_up, _) = tokio::sync::mpsc::channel(1);
        StderrTail {
            kept: Mutex::new(KeptBytes::default()),
            catch_up,
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, KeptBytes> {
        self.kept.locked()
    }

    fn push(&self, line: &[u8]) {
        let mut kept = self.kept();
        kept.bytes.extend(line);
        kept.bytes.push_back(b'\n');
        kept.written += line.len() as u64 + 1;
        let excess = kept.bytes.len().saturating_sub(STDERR_TAIL_BYTES);
        kept.bytes.drain(..excess);
    }

    /// The current end of the stderr, to quote only what comes after it.
    pub(crate) fn mark(&self) -> StderrMark {
        StderrMark(self.kept().written)
    }

    /// The kept text, trimmed (lossy at a cut multibyte character).
    pub(crate) fn text(&self) -> String {
        self.since(StderrMark::default())
    }

    /// What was written after `mark` (as far as the tail still holds it), trimmed.
    pub(crate) fn since(&self, mark: StderrMark) -> String {
        let kept = self.kept();
        let new = usize::try_from(kept.written.saturating_sub(mark.0)).unwrap_or(usize::MAX);
        let skip = kept.bytes.len().saturating_sub(new);
        let bytes: Vec<u8> = kept.bytes.iter().skip(skip).copied().collect();
        String::from_utf8_lossy(&bytes).trim().to_owned()
    }

    /// Waits (at most `limit`) until the drain has read every byte the pipe holds now. An
    /// agent writes its stderr before it answers on stdout, so after an answer arrived this
    /// makes the tail hold what the agent said about it.
    pub(crate) async fn catch_up(&self) {
        let limit = STDERR_CATCH_UP;
        let (reply, done) = oneshot::channel();
        let _ = tokio::time::timeout(limit, async {
            if self.catch_up.send(reply).await.is_ok() {
                let _ = done.await;
            }
        })
        .await;
    }
}

/// Starts draining `pipe`: the tail it fills, and the task to run (on the caller's tracker).
pub(crate) fn drain(
    pipe: tokio::process::ChildStderr,
    backend: String,
    pid: u32,
) -> (Arc<StderrTail>, impl std::future::Future<Output = ()>) {
    let (catch_up, requests) = tokio::sync::mpsc::channel(CATCH_UP_REQUESTS);
    let tail = Arc::new(StderrTail {
        kept: Mutex::new(KeptBytes::default()),
        catch_up,
    });
    let drain = Drain {
        tail: tail.clone(),
        requests,
        backend,
        pid,
    };
    (tail, drain.run(pipe))
}

/// The task that copies an agent's stderr, line by line, into its bounded tail and the debug
/// log, and reads the pipe dry whenever a failure asks it to ([`StderrTail::catch_up`]).
struct Drain {
    tail: Arc<StderrTail>,
    requests: tokio::sync::mpsc::Receiver<oneshot::Sender<()>>,
    backend: String,
    pid: u32,
}

impl Drain {
    async fn run(mut self, mut pipe: tokio::process::ChildStderr) {
        let mut line = Vec::new();
        let mut chunk = vec![0u8; 4096];
        loop {
            tokio::select! {
                read = pipe.read(&mut chunk) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(count) => self.take(&mut line, &chunk[..count]),
                },
                Some(reply) = self.requests.recv() => {
                    // What the pipe holds now was written before the caller's answer arrived.
                    while unread_bytes(&pipe) > 0 {
                        match pipe.read(&mut chunk).await {
                            Ok(0) | Err(_) => break,
                            Ok(count) => self.take(&mut line, &chunk[..count]),
                        }
                    }
                    let _ = reply.send(());
                }
            }
        }
        if !line.is_empty() {
            self.keep(&line);
        }
    }

    /// Adds `bytes` to the partial `line`, keeping every line they complete.
    fn take(&self, line: &mut Vec<u8>, bytes: &[u8]) {
        for piece in bytes.split_inclusive(|byte| *byte == b'\n') {
            match piece.strip_suffix(b"\n") {
                Some(end) => {
                    line.extend_from_slice(end);
                    self.keep(line);
                    line.clear();
                }
                None => line.extend_from_slice(piece),
            }
        }
    }

    fn keep(&self, line: &[u8]) {
        tracing::debug!(backend = %self.backend, pid = self.pid, "stderr: {}", String::from_utf8_lossy(line));
        self.tail.push(line);
    }
}

/// Bytes waiting in the pipe (FIONREAD); 0 when that cannot be asked.
fn unread_bytes(pipe: &tokio::process::ChildStderr) -> usize {
    let mut count: nix::libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which points at `count`; the fd
    // is open for as long as `pipe` is borrowed.
    let done = unsafe { nix::libc::ioctl(pipe.as_raw_fd(), nix::libc::FIONREAD, &mut count) };
    if done < 0 {
        return 0;
    }
    usize::try_from(count).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_a_mark_is_what_came_after_it_even_once_the_tail_was_trimmed() {
        let tail = StderrTail::detached();
        tail.push(b"first request");
        let mark = tail.mark();
        tail.push(b"second request");
        assert_eq!(tail.since(mark), "second request");
        assert_eq!(tail.text(), "first request\nsecond request");
        let long = vec![b'x'; STDERR_TAIL_BYTES];
        let mark = tail.mark();
        tail.push(&long);
        tail.push(b"end");
        let since = tail.since(mark);
        assert!(
            since.ends_with("end") && since.len() < STDERR_TAIL_BYTES,
            "{}",
            since.len()
        );
        assert_eq!(tail.since(tail.mark()), "");
    }
}
