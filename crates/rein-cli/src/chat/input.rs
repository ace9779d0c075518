//! What the user does while `rein chat` runs: lines on stdin, and Ctrl-C.
//!
//! Lines are read on a thread of their own, so the chat can wait for a line *or* a Ctrl-C press,
//! whichever comes first. From [`UserInput::new`] on, Ctrl-C (SIGINT on Unix) is caught instead
//! of killing the process, and the chat decides what a press means. Tokio keeps the handler
//! installed until the process exits; only `rein chat` installs it.

use std::io::{self, BufRead};

use tokio::sync::mpsc;

/// What came first.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Read {
    /// A line, without its line ending.
    Line(String),
    /// The end of input.
    End,
    /// Ctrl-C was pressed.
    CtrlC,
}

/// The user's lines and Ctrl-C presses.
#[derive(Debug)]
pub(super) struct UserInput {
    lines: mpsc::UnboundedReceiver<String>,
    ctrl_c: CtrlC,
}

impl UserInput {
    /// Catches Ctrl-C and starts reading stdin. Call it inside the Tokio runtime that will wait
    /// on it (its I/O driver receives the signal).
    pub(super) fn new() -> io::Result<Self> {
        let ctrl_c = CtrlC::catch()?;
        let (tx, lines) = mpsc::unbounded_channel();
        // Not a Tokio blocking task: the runtime would wait for it when dropped, and a read
        // from a terminal may never end.
        std::thread::Builder::new()
            .name("rein-chat-stdin".into())
            .spawn(move || {
                for line in io::stdin().lock().lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Self { lines, ctrl_c })
    }

    /// The next line, the end of input, or a Ctrl-C press, whichever comes first.
    pub(super) async fn read(&mut self) -> Read {
        tokio::select! {
            biased;
            () = self.ctrl_c.pressed() => Read::CtrlC,
            line = self.lines.recv() => line.map_or(Read::End, Read::Line),
        }
    }

    /// The next Ctrl-C press (one made while nobody waited counts too).
    pub(super) async fn ctrl_c(&mut self) {
        self.ctrl_c.pressed().await;
    }
}

/// The Ctrl-C listener: SIGINT on Unix, the console's Ctrl-C on Windows.
#[derive(Debug)]
struct CtrlC {
    #[cfg(unix)]
    inner: tokio::signal::unix::Signal,
    #[cfg(windows)]
    inner: tokio::signal::windows::CtrlC,
}

impl CtrlC {
    fn catch() -> io::Result<Self> {
        #[cfg(unix)]
        let inner = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        #[cfg(windows)]
        let inner = tokio::signal::windows::ctrl_c()?;
        Ok(Self { inner })
    }

    async fn pressed(&mut self) {
        if self.inner.recv().await.is_none() {
            // The listener is gone (the runtime shuts down): no press will come.
            std::future::pending::<()>().await;
        }
    }
}
