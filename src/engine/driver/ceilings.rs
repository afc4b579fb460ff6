//! What one generation's script may make the store keep beyond its calls (which `maxAgents`
//! bounds): at most [`MAX_LOG_LINES`] log lines and [`MAX_LOG_BYTES`] bytes of them, and at
//! most [`MAX_PHASES`] phase events. Each line and title is already cut in the script's
//! thread (the prelude) and each stored event is capped, so these bound what a log or phase
//! loop can make the store keep; past any ceiling the generation fails with a message that
//! names it.

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

/// Phase events (`phase(title)` calls) one generation may write.
pub(super) const MAX_PHASES: u64 = 10_000;

/// The phase events a generation's script wrote so far.
#[derive(Default)]
pub(super) struct PhaseTally {
    phases: u64,
}

impl PhaseTally {
    /// Counts one phase event; the message to fail the generation with once past the ceiling.
    pub(super) fn add(&mut self) -> Option<String> {
        self.phases += 1;
        (self.phases > MAX_PHASES).then(|| {
            format!(
                "the script entered more than {MAX_PHASES} phases in one run of it, the most agentprism keeps"
            )
        })
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

    #[test]
    fn the_phase_at_the_ceiling_passes_and_the_next_fails() {
        let mut tally = PhaseTally::default();
        for _ in 0..MAX_PHASES {
            assert_eq!(tally.add(), None);
        }
        let refused = tally.add().expect("past the phase ceiling");
        assert!(refused.contains("10000 phases"), "{refused}");
    }
}
