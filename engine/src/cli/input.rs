//! `corecast pub`'s input lines, read on a thread of their own.
//!
//! A file reads as fast as the disk allows, but a pipe (`tail -f feed | corecast pub URL`) may
//! pause for minutes. Reading it on the publishing thread would block that thread: no
//! keepalive ping from the server would be answered (a corecast or reference server closes
//! such a connection after 20 s + 20 s, `docs/OPERATIONS.md`) and the rows of a batch not yet
//! full would wait with it. With the lines arriving through a channel, the publisher sees
//! [`Next::Paused`] instead, sends what it holds and waits answering pings.

use std::io::BufRead;

use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};

/// Lines read ahead of the publisher at most (then the reading thread waits).
const READ_AHEAD_LINES: usize = 8192;

/// What the input has next.
#[derive(Debug)]
pub enum Next {
    /// A line, without its line break.
    Line(String),
    /// Reading failed (the error is the reader's).
    Failed(std::io::Error),
    /// Nothing yet: the input is paused, not over.
    Paused,
    /// The input is over.
    End,
}

/// Lines of an input, read on their own thread.
pub struct InputLines {
    rx: Receiver<std::io::Result<String>>,
}

impl InputLines {
    /// Starts reading `input` line by line on a new thread.
    pub fn spawn(input: Box<dyn BufRead + Send>) -> std::io::Result<InputLines> {
        let (tx, rx) = crossbeam_channel::bounded(READ_AHEAD_LINES);
        std::thread::Builder::new()
            .name("corecast-pub-input".into())
            .spawn(move || {
                for line in input.lines() {
                    let failed = line.is_err();
                    if tx.send(line).is_err() || failed {
                        return;
                    }
                }
            })?;
        Ok(InputLines { rx })
    }

    /// The next line, waiting at most `grace` for one ([`Next::Paused`] after that).
    pub fn next_within(&self, grace: Duration) -> Next {
        match self.rx.recv_timeout(grace) {
            Ok(Ok(line)) => Next::Line(line),
            Ok(Err(e)) => Next::Failed(e),
            Err(RecvTimeoutError::Timeout) => Next::Paused,
            Err(RecvTimeoutError::Disconnected) => Next::End,
        }
    }
}
