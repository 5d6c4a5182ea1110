//! Waiting in tests: on a condition, with a deadline generous enough for a busy 2-core CI
//! machine — never a fixed sleep as the synchronisation. A check that something does NOT
//! happen is a bounded window, named as such: [`holds_throughout`].

use std::time::{Duration, Instant};

/// How long a test waits for something that normally takes milliseconds.
pub const PATIENCE: Duration = Duration::from_secs(30);

const POLL: Duration = Duration::from_millis(25);

/// Poll `check` until it gives a value; panics naming `what` once `within` has passed.
pub fn wait_for<T>(within: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check() {
            return value;
        }
        if Instant::now() > deadline {
            panic!("timed out after {within:?} waiting for: {what}");
        }
        std::thread::sleep(POLL);
    }
}

/// A negative check: `check` must stay true for the whole of `window` (polled throughout);
/// panics naming `what` at the first poll where it does not. The window bounds how long the
/// test watches, not how fast anything must be.
pub fn holds_throughout(window: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let end = Instant::now() + window;
    loop {
        assert!(check(), "no longer true within {window:?}: {what}");
        if Instant::now() >= end {
            return;
        }
        std::thread::sleep(POLL);
    }
}

/// Milliseconds since the Unix epoch, as `keel status --json` gives times.
pub fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The lines of a stream (a child's stdout), read on a thread of their own so that a test can
/// wait for each with a deadline instead of blocking on a read forever.
pub struct Lines(std::sync::mpsc::Receiver<std::io::Result<String>>);

impl Lines {
    pub fn of(stream: impl std::io::Read + Send + 'static) -> Lines {
        use std::io::BufRead;
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stream).lines() {
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        Lines(receive)
    }

    /// The next line; panics naming `what` if none comes within `within` or the stream ends.
    pub fn next_within(&self, within: Duration, what: &str) -> String {
        match self.0.recv_timeout(within) {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => panic!("reading {what}: {e}"),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("timed out after {within:?} waiting for a line of {what}")
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                panic!("{what} ended before the line the test waits for")
            }
        }
    }
}
