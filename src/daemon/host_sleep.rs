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

use std::os::fd::{AsFd, AsRawFd};
use std::sync::Mutex;
use std::time::Duration;

/// The loop's token of the wake alarm ([`SleepWatch::start`]).
pub(crate) const WAKE_ALARM: mio::Token = mio::Token(4);

/// A timerfd on `CLOCK_REALTIME` whose expiry is far away: what wakes it is its cancellation.
fn wake_alarm() -> nix::Result<nix::sys::timerfd::TimerFd> {
    use nix::sys::timerfd::{ClockId, TimerFd, TimerFlags};
    let alarm = TimerFd::new(
        ClockId::CLOCK_REALTIME,
        TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
    )?;
    arm(&alarm)?;
    Ok(alarm)
}

fn arm(alarm: &nix::sys::timerfd::TimerFd) -> nix::Result<()> {
    use nix::sys::time::TimeSpec;
    use nix::sys::timerfd::{Expiration, TimerSetTimeFlags};
    // A century from now (absolute): never reached; cancelled at a resume or a clock set.
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME)?;
    let far = TimeSpec::new(now.tv_sec() + 100 * 365 * 24 * 3600, 0);
    alarm.set(
        Expiration::OneShot(far),
        TimerSetTimeFlags::TFD_TIMER_ABSTIME | TimerSetTimeFlags::TFD_TIMER_CANCEL_ON_SET,
    )
}

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

/// The last seen difference `CLOCK_BOOTTIME - CLOCK_MONOTONIC`, and the alarm that wakes the
/// loop when the host wakes.
#[derive(Debug, Default)]
pub(crate) struct SleepWatch {
    offset: Option<Duration>,
    alarm: Option<nix::sys::timerfd::TimerFd>,
}

impl SleepWatch {
    /// Seeded with the clocks as the daemon starts (a sleep during the loop's first wait is
    /// seen), with its wake alarm in `events` under [`WAKE_ALARM`]: a `CLOCK_REALTIME` timer
    /// set far ahead with `TFD_TIMER_CANCEL_ON_SET`, which the kernel cancels — and so makes
    /// readable — when the host resumes (and when the wall clock is set). Without it (refused)
    /// a sleep is noticed at the loop's next wake, and placed that much later.
    pub(crate) fn start(events: &super::event_loop::EventLoop) -> SleepWatch {
        let mut watch = SleepWatch::default();
        if let Some((boottime, monotonic)) = read_clocks() {
            watch.observe(boottime, monotonic);
        }
        match wake_alarm() {
            Ok(alarm) => match events.register_fixed(alarm.as_fd().as_raw_fd(), WAKE_ALARM) {
                Ok(()) => watch.alarm = Some(alarm),
                Err(e) => log::warn!("cannot watch the wake alarm ({e}): a host's sleep is noticed at the loop's next wake"),
            },
            Err(e) => log::warn!("cannot make the wake alarm (timerfd: {e}): a host's sleep is noticed at the loop's next wake"),
        }
        watch
    }

    /// The alarm went off (the host woke, or the wall clock was set): read and set again.
    fn rearm(&mut self) {
        let Some(alarm) = self.alarm.as_ref() else {
            return;
        };
        // ECANCELED (the expected answer), or EAGAIN: either way it is read.
        let _ = alarm.wait();
        if let Err(e) = arm(alarm) {
            log::warn!("cannot set the wake alarm again ({e}): a host's sleep is noticed at the loop's next wake");
            self.alarm = None;
        }
    }

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

/// A pair of readings this far apart on the monotonic clock is read again: the process was
/// preempted between them, and the difference would be off by that much (a false sleep next).
const READ_SPREAD: Duration = Duration::from_millis(1);

/// `(CLOCK_BOOTTIME, CLOCK_MONOTONIC)` now, BOOTTIME read between two MONOTONIC readings that
/// are at most [`READ_SPREAD`] apart (a few tries; else the tightest pair); `None` if the
/// kernel refuses either clock.
pub(crate) fn read_clocks() -> Option<(Duration, Duration)> {
    use nix::time::{clock_gettime, ClockId};
    let read = |id| clock_gettime(id).ok().map(Duration::from);
    let mut best: Option<(Duration, Duration, Duration)> = None;
    for _ in 0..4 {
        let before = read(ClockId::CLOCK_MONOTONIC)?;
        let boottime = read(ClockId::CLOCK_BOOTTIME)?;
        let after = read(ClockId::CLOCK_MONOTONIC)?;
        let spread = after.saturating_sub(before);
        if best.is_none_or(|(s, _, _)| spread < s) {
            // The monotonic time BOOTTIME was read at: between the two, the middle.
            best = Some((spread, boottime, before + spread / 2));
        }
        if spread <= READ_SPREAD {
            break;
        }
    }
    best.map(|(_, boottime, monotonic)| (boottime, monotonic))
}

impl super::Daemon {
    /// A backoff's recorded end (wall clock: what `keel status` shows, and what a later
    /// daemon arms) moves by the time slept, as its timer (monotonic) did.
    fn push_backoffs_past(&mut self, slept: Duration) {
        let slept_ms = slept.as_millis() as u64;
        for task in self.tasks.values_mut() {
            if task.record.state != crate::daemon::record::TaskState::Backoff {
                continue;
            }
            if let Some(until) = task.record.backoff_until_ms.as_mut() {
                *until = until.saturating_add(slept_ms);
                if let Err(e) = self.store.persist(task) {
                    log::warn!(
                        "{}: cannot record its backoff's end moved past the sleep: {e}",
                        task.name
                    );
                }
            }
        }
    }

    /// The wake alarm went off: set again (the sleep itself is noticed after every wait).
    pub(super) fn on_wake_alarm(&mut self) {
        self.sleep_watch.rearm();
    }

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
            self.push_backoffs_past(slept);
        }
    }
}

#[cfg(test)]
mod tests;
