//! Watches the kernel refuses (an epoll or inotify registration failing with ENOSPC, EMFILE):
//! the source is checked on a timer instead, every [`POLL_EVERY`], and the watch is retried,
//! after [`retry_delay`], until the kernel allows it. The decisions here are pure.

use std::time::{Duration, Instant};

/// A source whose watch was refused is looked at this often.
pub(crate) const POLL_EVERY: Duration = Duration::from_secs(1);
/// The first retry of a refused watch comes after this long, each next one twice as late…
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// …up to this.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(30);

/// How long after its `failures`-th refusal (1 for the first) a watch is tried again: 1 s,
/// 2 s, 4 s … up to [`RETRY_MAX`] — a watch refused for a moment comes back soon, one refused
/// for long costs one attempt every 30 s.
pub(crate) fn retry_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (RETRY_FIRST * 2u32.pow(doublings)).min(RETRY_MAX)
}

/// The words for a refusal by `by` (`epoll`, `inotify`): `epoll: No space left on device`
/// (std's ` (os error 28)` dropped).
pub(crate) fn refusal(by: &str, e: &std::io::Error) -> String {
    let text = e.to_string();
    let words = match text.find(" (os error ") {
        Some(at) => &text[..at],
        None => &text,
    };
    format!("{by}: {words}")
}

/// A watch the kernel refused: why, how many times, and when to try again.
#[derive(Debug, Clone)]
pub(crate) struct Fallback {
    /// The kernel's words for the last refusal, with what refused (`epoll: No space left on
    /// device`).
    pub why: String,
    pub failures: u32,
    pub retry_at: Instant,
}

impl Fallback {
    /// The first refusal, at `now`.
    pub fn new(why: String, now: Instant) -> Fallback {
        Fallback {
            why,
            failures: 1,
            retry_at: now + retry_delay(1),
        }
    }

    /// Whether the watch is to be tried again at `now`.
    pub fn retry_due(&self, now: Instant) -> bool {
        now >= self.retry_at
    }

    /// Refused again at `now`.
    pub fn refused_again(&mut self, why: String, now: Instant) {
        self.failures = self.failures.saturating_add(1);
        self.why = why;
        self.retry_at = now + retry_delay(self.failures);
    }
}

/// The words `keel status` shows for a source checked on a timer: `shim exit: polled every 1s
/// (epoll: No space left on device)`.
pub(crate) fn note(what: &str, fallback: &Fallback) -> String {
    format!(
        "{what}: polled every {}s ({})",
        POLL_EVERY.as_secs(),
        fallback.why
    )
}

#[cfg(test)]
mod tests;
