//! An incremental `text/event-stream` parser: bytes go in as they arrive from the daemon,
//! complete events come out. The shim needs only three things from an event: its `data`
//! (one JSON-RPC message, written to stdout as one line), its `id` (kept for a `Last-Event-ID`
//! resume of the GET stream) and `retry` (how long to wait before that resume).

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Event {
    /// The `id:` field, if the event had one.
    pub id: Option<String>,
    /// The `data:` lines joined by `\n`; empty for a priming event.
    pub data: String,
    /// The `retry:` field in ms, if present.
    pub retry: Option<u64>,
}

/// Turns chunks of an SSE body into events. Lines may be split across chunks anywhere.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    /// Bytes after the last complete line.
    partial: Vec<u8>,
    current: Event,
    /// Whether the event being built has any field yet (a lone blank line dispatches nothing).
    started: bool,
    /// A `\r` ended the previous chunk, so a `\n` starting this one belongs to it.
    after_cr: bool,
}

impl Parser {
    pub(crate) fn new() -> Parser {
        Parser::default()
    }

    /// Feeds one chunk; returns the events it completed, in order.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<Event> {
        let mut events = Vec::new();
        let mut bytes = chunk;
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.partial.extend_from_slice(&bytes[..end]);
            let line = std::mem::take(&mut self.partial);
            if bytes[end] == b'\r' {
                if end + 1 == bytes.len() {
                    self.after_cr = true;
                } else if bytes[end + 1] == b'\n' {
                    bytes = &bytes[1..];
                }
            }
            bytes = &bytes[end + 1..];
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.partial.extend_from_slice(bytes);
        events
    }

    fn line(&mut self, line: &[u8]) -> Option<Event> {
        if line.is_empty() {
            if !self.started {
                return None;
            }
            self.started = false;
            return Some(std::mem::take(&mut self.current));
        }
        if line[0] == b':' {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.started && !self.current.data.is_empty() {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
            }
            "id" if !value.contains('\0') => self.current.id = Some(value.to_owned()),
            "retry" => match value.parse() {
                Ok(ms) => self.current.retry = Some(ms),
                Err(_) => return None,
            },
            _ => return None,
        }
        self.started = true;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priming_event_messages_and_comments() {
        let mut parser = Parser::new();
        let body = b"id: 1-0\nretry: 1000\ndata: \n\n: keep-alive\n\nid: 1-1\ndata: {\"a\":1}\n\n";
        let events = parser.feed(body);
        assert_eq!(
            events,
            vec![
                Event {
                    id: Some("1-0".into()),
                    data: String::new(),
                    retry: Some(1000)
                },
                Event {
                    id: Some("1-1".into()),
                    data: "{\"a\":1}".into(),
                    retry: None
                },
            ]
        );
    }

    #[test]
    fn chunks_split_anywhere_give_the_same_events() {
        let body = b"id: 7\r\ndata: {\"x\":\r\ndata: 2}\r\n\r\nretry: 5\n\ndata:z\n\n";
        let whole = Parser::new().feed(body);
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[0].data, "{\"x\":\n2}");
        assert_eq!(whole[1].retry, Some(5));
        assert_eq!(whole[2].data, "z");
        for split in 0..body.len() {
            let mut parser = Parser::new();
            let mut events = parser.feed(&body[..split]);
            events.extend(parser.feed(&body[split..]));
            assert_eq!(events, whole, "split at {split}");
        }
        let mut parser = Parser::new();
        let mut events = Vec::new();
        for byte in body {
            events.extend(parser.feed(std::slice::from_ref(byte)));
        }
        assert_eq!(events, whole);
    }
}
