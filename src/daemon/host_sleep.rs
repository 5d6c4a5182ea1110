//! A host that slept (suspend to RAM, a laptop's lid) and woke: what the daemon notices and
//! journals (`host-slept`, with how long).
//!
//! The clocks (docs/liveness.md, "A host that sleeps"): every deadline of the daemon — the
//! liveness verdicts, backoffs, stop timeouts, job deadlines, the relay's look — runs on
//! `CLOCK_MONOTONIC` (Rust's `Instant`), which stands still while the host sleeps: a task
//! silent for 30 s before a night's sleep is still 30 s silent after it, not stalled, and a
//! backoff neither fires at the wake nor waits the night out again. `CLOCK_BOOTTIME` counts
//! the sleep; the two differ by exactly the time slept (both tick alike otherwise, NTP's
//! slewing included), which is how the daemon sees that it slept. Wall-clock times (journal
//! stamps, `since_ms`, a file's mtime) are for people and records only, never deadlines.

use std::sync::Mutex;
use std::time::Duration;

/// The sleeps this daemon saw, as (the wall-clock ms of the wake, the ms slept), the last
/// [`HISTORY_KEPT`]: what turns a wall-clock time (a file's mtime) into the monotonic clock's
/// ([`slept_since`]). Process-wide, as the clocks are.
static HISTORY: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());
/// Sleeps remembered (a laptop sleeps a few times a day; older ones are before any live
/// attempt's evidence that matters).
const HISTORY_KEPT: usize = 256;

/// A difference this small between the clocks' advance is no sleep (the two are read one
/// after the other; a loaded host may take a while between).
pub const MIN_SLEEP: Duration = Duration::from_secs(1);

/// The last seen difference `CLOCK_BOOTTIME - CLOCK_MONOTONIC`.
#[derive(Debug, Default)]
pub(crate) struct SleepWatch {
    offset: Option<Duration>,
}

impl SleepWatch {
    /// The clocks read now: how long the host slept since the last call, if it did.
    pub(crate) fn observe(&mut self, boottime: Duration, monotonic: Duration) -> Option<Duration> {
        let offset = boottime.saturating_sub(monotonic);
        let slept = self.offset.and_then(|before| offset.checked_sub(before));
        self.offset = Some(offset);
        slept.filter(|s| *s >= MIN_SLEEP)
    }
}

/// The ms of `history` (sleeps as (wake's wall ms, ms slept)) that came after the wall-clock
/// time `wall_ms`: a file written before a sleep is that much less old on the monotonic
/// clock than the wall clock says.
pub(crate) fn slept_after(history: &[(u64, u64)], wall_ms: u64) -> u64 {
    (history.iter())
        .map(|&(woke, slept)| {
            let fell_asleep = woke.saturating_sub(slept);
            match wall_ms {
                t if t <= fell_asleep => slept,
                t if t < woke => woke - t,
                _ => 0,
            }
        })
        .sum()
}

/// [`slept_after`] of the sleeps this daemon saw.
pub(crate) fn slept_since(wall_ms: u64) -> u64 {
    let history = HISTORY.lock().unwrap_or_else(|e| e.into_inner());
    slept_after(&history, wall_ms)
}

fn remember(woke_wall_ms: u64, slept: Duration) {
    let mut history = HISTORY.lock().unwrap_or_else(|e| e.into_inner());
    if history.len() >= HISTORY_KEPT {
        history.remove(0);
    }
    history.push((woke_wall_ms, slept.as_millis() as u64));
}

/// `(CLOCK_BOOTTIME, CLOCK_MONOTONIC)` now; `None` if the kernel refuses either.
pub(crate) fn read_clocks() -> Option<(Duration, Duration)> {
    use nix::time::{clock_gettime, ClockId};
    let read = |id| clock_gettime(id).ok().map(Duration::from);
    Some((
        read(ClockId::CLOCK_BOOTTIME)?,
        read(ClockId::CLOCK_MONOTONIC)?,
    ))
}

impl super::Daemon {
    /// After each wait of the loop: a sleep of the host is journaled once, with its length.
    pub(super) fn notice_host_sleep(&mut self) {
        let Some((boottime, monotonic)) = read_clocks() else {
            return;
        };
        if let Some(slept) = self.sleep_watch.observe(boottime, monotonic) {
            remember(crate::state::now_ms(), slept);
            let detail = format!(
                "the host slept for {} (deadlines run on CLOCK_MONOTONIC, which stood still: no task is judged on the time slept)",
                crate::fmt::duration_precise(slept)
            );
            log::info!("host-slept: {detail}");
            self.store.event("", 0, 0, "host-slept", &detail);
        }
    }
}

#[cfg(test)]
mod tests;
