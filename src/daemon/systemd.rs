//! The daemon under systemd (`Type=notify`, `WatchdogSec=`): `READY=1` once reconciled,
//! `STATUS=` with the task counts whenever they change, `STOPPING=1` at an orderly shutdown,
//! and `WATCHDOG=1` at half the watchdog period — sent by the loop itself, from its timer
//! queue, so a wedged loop stops the pings and systemd restarts the daemon (the tasks survive
//! and are re-adopted).
//!
//! `keel health` works the other way round: its request is read and answered by the loop, so
//! an answer within the client's 5 s is the proof that the loop runs. An idle loop therefore
//! needs no periodic wake-up; it sleeps until an event or its earliest timer.

use super::timers::Timer;
use super::Daemon;

impl Daemon {
    /// After reconcile: ready, with the counts; the watchdog's first ping and its timer.
    pub(super) fn notify_ready(&mut self) {
        let summary = self.summary();
        self.notifier.ready(&summary);
        self.store.counts_changed = false;
        if let Some(every) = self.notifier.watchdog_interval() {
            log::info!(
                "systemd watchdog: pinging every {}",
                crate::fmt::duration_precise(every)
            );
            self.notifier.watchdog_ping();
            self.events.timers.add_after(every, Timer::Watchdog);
        }
    }

    pub(super) fn on_watchdog_due(&mut self) {
        if let Some(every) = self.notifier.watchdog_interval() {
            self.notifier.watchdog_ping();
            self.events.timers.add_after(every, Timer::Watchdog);
        }
    }

    /// `STATUS=` when the counts changed during this loop round (every change of state is a
    /// journal entry, which marks them).
    pub(super) fn notify_status(&mut self) {
        if !std::mem::take(&mut self.store.counts_changed) || !self.notifier.is_enabled() {
            return;
        }
        let summary = self.summary();
        self.notifier.status(&summary);
    }
}
