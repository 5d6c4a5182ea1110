//! One deadline queue for every timer of the daemon (backoff expiries, stop timeouts, the
//! units-directory debounce, liveness deadlines, watchdog pings). The loop sleeps until the
//! earliest.
//! Timers are never removed: each carries what it is about (unit + generation), and a timer
//! that no longer applies is ignored when it fires.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    /// The backoff of `unit` after attempt `generation` has expired.
    BackoffExpired { unit: String, generation: u64 },
    /// `unit`'s stop signal was sent `stop.timeout` ago: escalate to SIGKILL.
    StopTimeout { unit: String, generation: u64 },
    /// The SIGKILL did not end the shim either: kill the shim itself.
    StopForce { unit: String, generation: u64 },
    /// A killed task cgroup still held exiting processes: try to remove it again.
    RemoveSlice { unit: String, tries: u32 },
    /// A v1 OOM notification came before the kernel counted the kill: look again.
    OomRecheck { unit: String },
    /// The units directory changed; rescan once the burst of events is over.
    RescanUnits,
    /// The units directory was replaced: watch the new one.
    WatchUnits,
    /// A shim holds its attempt lock but has not said who it is yet: reconcile again.
    ReconcileRetry { unit: String, tries: u32 },
    /// A client has had its time to send a request (or read its answer).
    ClientDeadline { token: usize },
    /// A scrape connection of `--metrics` has had its time (`metrics_server.rs`).
    ScrapeDeadline { token: usize },
    /// Re-run the scheduler (a task became startable).
    Schedule,
    /// The instant `unit`'s liveness verdict could change (attempt `generation`).
    Liveness { unit: String, generation: u64 },
    /// Time to tell systemd's watchdog the loop is alive.
    Watchdog,
    /// The progress files' events may be read again (a window of
    /// `liveness::PROGRESS_EVENTS_WINDOW` after the last read).
    ProgressEvents,
    /// Look at the sources whose watch the kernel refused; try watching them again.
    WatchFallback,
    /// The control socket's accept failed for want of descriptors: try again.
    AcceptRetry,
    /// Job `id` may be past its deadline (jobs/deadline.rs): kill its worker if so.
    JobDeadline { id: u64 },
    /// A sandboxed start took (or found no) spare shim: make the next one, now that the
    /// start is done with the CPU.
    ReplenishSpare,
    /// Look at the tasks' network relays: journal their refusals, start again one that died.
    Network,
    /// `unit`'s attempt `generation` may have spent its `max_runtime` (runtime_limit.rs).
    MaxRuntime { unit: String, generation: u64 },
    /// `unit`'s cgroup was asked to freeze: look whether the kernel says it is frozen
    /// (`cgroup.events`), the `tries`-th time (pausing.rs).
    FreezeCheck {
        unit: String,
        generation: u64,
        tries: u32,
    },
    /// Read the disk figures: enforce budgets, end the reserve's hold (`disk.rs`).
    Disk,
    /// A coalescing window of the notifications may have ended (notifications/).
    NotifyFlush,
    /// Notification hook `id` may be past its timeout: kill it if it still runs.
    NotifyTimeout { id: u64 },
}

#[derive(Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<(Instant, u64, Timer)>>,
    sequence: u64,
}

impl Timers {
    pub fn add(&mut self, at: Instant, timer: Timer) {
        self.sequence += 1;
        self.heap.push(Reverse((at, self.sequence, timer)));
    }

    pub fn add_after(&mut self, delay: Duration, timer: Timer) {
        self.add(Instant::now() + delay, timer);
    }

    /// How long the loop may sleep.
    pub fn timeout(&self, now: Instant) -> Option<Duration> {
        self.heap
            .peek()
            .map(|Reverse((at, _, _))| at.saturating_duration_since(now))
    }

    /// Remove and return every timer due at `now`, earliest first.
    pub fn pop_due(&mut self, now: Instant) -> Vec<Timer> {
        let mut due = Vec::new();
        while let Some(Reverse((at, _, _))) = self.heap.peek() {
            if *at > now {
                break;
            }
            if let Some(Reverse((_, _, timer))) = self.heap.pop() {
                due.push(timer);
            }
        }
        due
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests;
