//! Newline-delimited frames read with a bound on memory: the stdio transport and the stdio
//! shim both read one JSON-RPC message per line from a host they do not control, so a line
//! is never held whole before its size is known. [`Lines`] takes the bytes a buffered reader
//! offers and keeps at most `limit` bytes of a line (its buffer never grows past that); a
//! line that passes the limit is refused at that moment, and the rest of it is counted off as
//! it arrives, up to its newline, without being kept. Blank lines are dropped.
//!
//! The assembler does no I/O, so one implementation serves the shim's blocking reader
//! ([`read_lines`]) and the transport's async one ([`AsyncLines`]).

use std::io::BufRead;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// One line, as a reader hands it on.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A whole line of at most the limit, without its newline.
    Text(Vec<u8>),
    /// A line that passed the limit: said once, as soon as it did; the rest of it up to its
    /// newline is discarded unread by anyone.
    TooLong,
}

/// Assembles lines from successive chunks of input (see the module documentation).
#[derive(Debug)]
pub(crate) struct Lines {
    limit: usize,
    /// The current line so far; its capacity stays within `limit`.
    line: Vec<u8>,
    /// Set while the rest of an over-long line is being discarded.
    skipping: bool,
    /// Set once end of input was handled, so it is handled once.
    finished: bool,
}

impl Lines {
    pub(crate) fn new(limit: usize) -> Lines {
        Lines {
            limit,
            line: Vec::new(),
            skipping: false,
            finished: false,
        }
    }

    /// Takes from `available` up to and including the first newline (or all of it): returns
    /// how many bytes the reader may consume, and the line that ended or was refused there.
    pub(crate) fn take(&mut self, available: &[u8]) -> (usize, Option<Line>) {
        let (chunk, complete) = match available.iter().position(|&byte| byte == b'\n') {
            Some(end) => (&available[..end], true),
            None => (available, false),
        };
        let used = chunk.len() + usize::from(complete);
        if self.skipping {
            self.skipping = !complete;
            return (used, None);
        }
        let length = self.line.len() + chunk.len();
        if length > self.limit {
            self.line = Vec::new();
            self.skipping = !complete;
            return (used, Some(Line::TooLong));
        }
        self.grow_to(length);
        self.line.extend_from_slice(chunk);
        if !complete {
            return (used, None);
        }
        (used, self.end_line())
    }

    /// End of input: a last line without a newline still counts.
    pub(crate) fn finish(&mut self) -> Option<Line> {
        if std::mem::replace(&mut self.finished, true) || self.skipping {
            return None;
        }
        self.end_line()
    }

    /// What the current line holds room for (tests check the bound).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.line.capacity()
    }

    /// Room for `length` bytes, growing by doubling as a `Vec` does but never past the limit
    /// (a plain `extend` could double a buffer of just under the limit to twice it).
    fn grow_to(&mut self, length: usize) {
        let capacity = self.line.capacity();
        if length <= capacity {
            return;
        }
        let target = length.max(capacity * 2).min(self.limit);
        self.line.reserve_exact(target - self.line.len());
    }

    fn end_line(&mut self) -> Option<Line> {
        let line = std::mem::take(&mut self.line);
        (!line.iter().all(u8::is_ascii_whitespace)).then_some(Line::Text(line))
    }
}

/// Reads lines from a blocking reader until EOF or until `sink` returns false.
pub(crate) fn read_lines(
    mut reader: impl BufRead,
    limit: usize,
    mut sink: impl FnMut(Line) -> bool,
) -> std::io::Result<()> {
    let mut lines = Lines::new(limit);
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            if let Some(line) = lines.finish() {
                sink(line);
            }
            return Ok(());
        }
        let (used, line) = lines.take(available);
        reader.consume(used);
        if let Some(line) = line
            && !sink(line)
        {
            return Ok(());
        }
    }
}

/// Lines from an async reader. [`AsyncLines::next`] is cancel-safe: input taken but not yet
/// a whole line stays here, so it can be one branch of a `select!`.
pub(crate) struct AsyncLines<R> {
    reader: R,
    lines: Lines,
}

impl<R: AsyncBufRead + Unpin> AsyncLines<R> {
    pub(crate) fn new(reader: R, limit: usize) -> AsyncLines<R> {
        AsyncLines {
            reader,
            lines: Lines::new(limit),
        }
    }

    /// The next line; `None` at end of input.
    pub(crate) async fn next(&mut self) -> std::io::Result<Option<Line>> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                return Ok(self.lines.finish());
            }
            let (used, line) = self.lines.take(available);
            self.reader.consume(used);
            if line.is_some() {
                return Ok(line);
            }
        }
    }

    /// What the current line holds room for.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.lines.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], limit: usize) -> Vec<Line> {
        let mut out = Vec::new();
        read_lines(std::io::BufReader::with_capacity(4, input), limit, |line| {
            out.push(line);
            true
        })
        .unwrap();
        out
    }

    #[test]
    fn blank_lines_long_lines_and_a_last_line_without_newline() {
        let got = lines(b"{\"a\":1}\n\n  \n0123456789ABC\n{\"b\":2}\n{\"c\"", 10);
        assert_eq!(
            got,
            vec![
                Line::Text(b"{\"a\":1}".to_vec()),
                Line::TooLong,
                Line::Text(b"{\"b\":2}".to_vec()),
                Line::Text(b"{\"c\"".to_vec()),
            ]
        );
        assert_eq!(lines(b"0123456789ABCDEF", 10), vec![Line::TooLong]);
    }

    /// A line of exactly the limit is a line; one byte more is refused, and so is one far
    /// larger, without the buffer ever holding more than the limit; the next line is read.
    #[test]
    fn a_line_one_byte_over_the_limit_and_a_far_larger_one_keep_the_buffer_within_it() {
        const LIMIT: usize = 1000;
        let at_limit = vec![b'x'; LIMIT];
        let one_over = vec![b'y'; LIMIT + 1];
        let far_over = vec![b'z'; LIMIT * 1000];
        let mut input = Vec::new();
        for line in [&at_limit, &one_over, &far_over] {
            input.extend_from_slice(line);
            input.push(b'\n');
        }
        input.extend_from_slice(b"{\"after\":1}\n");
        // Chunks of 7 bytes, as a pipe might hand them over, so the buffer grows step by step.
        let mut lines = Lines::new(LIMIT);
        let mut got = Vec::new();
        let mut largest = 0;
        let mut rest = input.as_slice();
        while !rest.is_empty() {
            let (used, line) = lines.take(&rest[..rest.len().min(7)]);
            largest = largest.max(lines.capacity());
            if let Some(Line::Text(text)) = &line {
                largest = largest.max(text.capacity());
            }
            got.extend(line);
            rest = &rest[used..];
        }
        got.extend(lines.finish());
        assert!(largest <= LIMIT, "the buffer grew to {largest} bytes");
        assert_eq!(
            got,
            vec![
                Line::Text(at_limit),
                Line::TooLong,
                Line::TooLong,
                Line::Text(b"{\"after\":1}".to_vec()),
            ]
        );
    }

    /// An endless line is refused as soon as it passes the limit, not at its newline.
    #[tokio::test]
    async fn an_endless_line_is_refused_once_it_passes_the_limit() {
        use tokio::io::AsyncWriteExt;
        let (mut host, ours) = tokio::io::duplex(64);
        let mut reader = AsyncLines::new(tokio::io::BufReader::with_capacity(16, ours), 100);
        let writer = tokio::spawn(async move {
            // Never a newline, and the input stays open.
            for _ in 0..1000 {
                if host.write_all(&[b'a'; 50]).await.is_err() {
                    return;
                }
            }
            std::future::pending::<()>().await;
        });
        let line = tokio::time::timeout(std::time::Duration::from_secs(10), reader.next())
            .await
            .expect("the refusal came before the newline")
            .unwrap();
        assert_eq!(line, Some(Line::TooLong));
        assert!(reader.capacity() <= 100);
        writer.abort();
    }
}
