//! Printing for the command line, and the URL a foreground daemon prints, that never panics.
//! `println!` panics when stdout is a pipe whose reader has gone (`agentprism status <id> |
//! head -1`), and `eprintln!` likewise for stderr. Rust ignores SIGPIPE, so every write to a
//! closed pipe is an `EPIPE` error: here a closed stdout or stderr silently drops the rest of
//! the output and the command ends with the exit code it would have had. Resetting SIGPIPE
//! instead would let a dead agent's stdin pipe kill a foreground run.
//!
//! In the CLI, use `say!` for stdout and `note!` for stderr (the macros are defined in
//! `cli/mod.rs` so every CLI module sees them).

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to stdout failed for a reason other than a closed pipe, so the failure is
/// reported once on stderr, not once per line.
static STDOUT_FAILED: AtomicBool = AtomicBool::new(false);

/// Writes `args` (and a newline when `newline`) to stdout and flushes.
pub(crate) fn stdout(args: fmt::Arguments<'_>, newline: bool) {
    if let Err(error) = write(&mut io::stdout().lock(), args, newline)
        && error.kind() != io::ErrorKind::BrokenPipe
        && !STDOUT_FAILED.swap(true, Ordering::Relaxed)
    {
        stderr(
            format_args!("agentprism: writing to stdout failed: {error}"),
            true,
        );
    }
}

/// Writes `args` (and a newline when `newline`) to stderr and flushes; errors are dropped,
/// since there is nowhere left to report them.
pub(crate) fn stderr(args: fmt::Arguments<'_>, newline: bool) {
    let _ = write(&mut io::stderr().lock(), args, newline);
}

fn write(out: &mut impl Write, args: fmt::Arguments<'_>, newline: bool) -> io::Result<()> {
    out.write_fmt(args)?;
    if newline {
        out.write_all(b"\n")?;
    }
    out.flush()
}
