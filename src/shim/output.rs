//! The shim's stdout: one writer thread that puts each message on one line, so answers and
//! notifications of concurrent requests never interleave, and that says when stdout is gone.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

/// Lines for stdout, written by one thread so messages never interleave.
#[derive(Clone)]
pub(crate) struct Output {
    sender: mpsc::UnboundedSender<OutputItem>,
}

/// What the writer thread is asked to do.
pub(crate) enum OutputItem {
    Line(Vec<u8>),
    /// Answered once every earlier line is written.
    Flush(std::sync::mpsc::Sender<()>),
}

impl Output {
    /// Starts the stdout writer thread; `closed` runs once when stdout is gone (EPIPE).
    pub(crate) fn start(
        mut writer: impl std::io::Write + Send + 'static,
        closed: impl FnOnce() + Send + 'static,
    ) -> Output {
        let (sender, mut receiver) = mpsc::unbounded_channel::<OutputItem>();
        std::thread::Builder::new()
            .name("stdout".into())
            .spawn(move || {
                let mut closed = Some(closed);
                let mut broken = false;
                while let Some(item) = receiver.blocking_recv() {
                    match item {
                        OutputItem::Line(mut line) if !broken => {
                            line.push(b'\n');
                            if writer
                                .write_all(&line)
                                .and_then(|()| writer.flush())
                                .is_err()
                            {
                                broken = true;
                                if let Some(closed) = closed.take() {
                                    closed();
                                }
                            }
                        }
                        OutputItem::Line(_) => {}
                        OutputItem::Flush(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            })
            .expect("spawn the stdout writer");
        Output { sender }
    }

    /// Writes one message as one line; a message with raw newlines is re-serialised compactly.
    pub(crate) fn write(&self, message: &[u8]) {
        let line = if message.contains(&b'\n') {
            match serde_json::from_slice::<Value>(message) {
                Ok(value) => value.to_string().into_bytes(),
                Err(_) => message
                    .iter()
                    .map(|&b| if b == b'\n' { b' ' } else { b })
                    .collect(),
            }
        } else {
            message.to_vec()
        };
        let _ = self.sender.send(OutputItem::Line(line));
    }

    pub(crate) fn write_value(&self, message: &Value) {
        let _ = self
            .sender
            .send(OutputItem::Line(message.to_string().into_bytes()));
    }

    /// Waits (bounded) until every line written so far has reached stdout.
    pub(crate) fn flush(&self, deadline: Duration) {
        let (done, wait) = std::sync::mpsc::channel();
        if self.sender.send(OutputItem::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(deadline);
        }
    }
}
