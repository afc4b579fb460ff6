//! What one generation's script may log: at most [`MAX_LOG_LINES`] lines and [`MAX_LOG_BYTES`]
//! bytes of them. Each line is already cut in the script's thread (the prelude) and each
//! stored event is capped, so these bound what a log loop can make the store keep; past either
//! ceiling the generation fails with a message that names it.

/// Log lines one generation may write.
pub(super) const MAX_LOG_LINES: u64 = 100_000;
/// Bytes of log lines one generation may write.
pub(super) const MAX_LOG_BYTES: u64 = 64 << 20;

/// The lines and bytes a generation's script logged so far.
#[derive(Default)]
pub(super) struct LogTally {
    lines: u64,
    bytes: u64,
}

impl LogTally {
    /// Counts `line`; the message to fail the generation with once a ceiling is passed.
    pub(super) fn add(&mut self, line: &str) -> Option<String> {
        self.lines += 1;
        self.bytes += line.len() as u64;
        if self.lines > MAX_LOG_LINES {
            Some(format!(
                "the script logged more than {MAX_LOG_LINES} lines in one run of it, the most agentprism keeps"
            ))
        } else if self.bytes > MAX_LOG_BYTES {
            Some(format!(
                "the script logged more than {} MiB in one run of it, the most agentprism keeps",
                MAX_LOG_BYTES >> 20
            ))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_at_the_ceiling_passes_and_the_next_fails() {
        let mut tally = LogTally::default();
        for _ in 0..MAX_LOG_LINES {
            assert_eq!(tally.add("x"), None);
        }
        let refused = tally.add("x").expect("past the line ceiling");
        assert!(refused.contains("100000 lines"), "{refused}");
        let mut bytes = LogTally::default();
        let mebibyte = "y".repeat(1 << 20);
        for _ in 0..64 {
            assert_eq!(bytes.add(&mebibyte), None);
        }
        let refused = bytes.add("z").expect("past the byte ceiling");
        assert!(refused.contains("64 MiB"), "{refused}");
    }
}
