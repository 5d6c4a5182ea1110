//! The pressure the queue's admission reads (see `queue.rs` for the rule, `cgroup/pressure.rs`
//! for the files): read at each scheduling round that has queued tasks, and — while a task
//! waits for it to fall — again every [`PRESSURE_RECHECK`], so that the task starts once it
//! has. Each reading is three small cgroupfs (or procfs) files: cheap enough for the loop.

use super::queue::{Decision, Pressure, PressureCheck, WaitReason};
use super::timers::Timer;
use super::Daemon;
use crate::cgroup::{PressureReading, PressureSource};
use std::time::{Duration, Instant};

/// How often a round runs again while a task waits for pressure to fall: the kernel updates
/// the averages every 2 s (psi.rst; PSI_FREQ).
pub(crate) const PRESSURE_RECHECK: Duration = Duration::from_secs(2);

/// What the daemon keeps between readings.
#[derive(Debug, Default)]
pub(crate) struct PressureWatch {
    /// A round is due then for the tasks waiting on pressure (one timer at a time).
    recheck_at: Option<Instant>,
    /// Per resource (cpu, memory, io): where its figure came from at the last reading, so that
    /// a change of source (or no figure at all) is logged once, not every round.
    sources: [Option<Option<PressureSource>>; 3],
    /// When keel last started a task (pacing near the thresholds).
    last_start: Option<Instant>,
}

const RESOURCES: [&str; 3] = ["cpu", "memory", "io"];

impl PressureWatch {
    /// A start decided now: the pacing window near the thresholds begins.
    pub(crate) fn note_start(&mut self) {
        self.last_start = Some(Instant::now());
    }

    /// Log a change of where a resource's figure comes from.
    fn note_sources(&mut self, readings: [Option<PressureReading>; 3]) {
        for (n, reading) in readings.iter().enumerate() {
            let source = reading.map(|r| r.source);
            if self.sources[n] == Some(source) {
                continue;
            }
            let resource = RESOURCES[n];
            match source {
                Some(PressureSource::Tree) => {
                    log::info!("pressure: {resource} read from keel's tasks/{resource}.pressure")
                }
                Some(PressureSource::Host) => log::warn!(
                    "pressure: keel's tasks/{resource}.pressure is unreadable; the host's \
                     /proc/pressure/{resource} stands in (the whole host's stalls, not only \
                     keel's tasks')"
                ),
                None => log::warn!(
                    "pressure: no {resource} figure (neither keel's tasks/{resource}.pressure \
                     nor /proc/pressure/{resource} can be read): starts are not held back for it"
                ),
            }
            self.sources[n] = Some(source);
        }
    }
}

impl Daemon {
    /// The pressure figures and thresholds for this round; nothing is read with
    /// `pressure: Off`, without cgroups, or when `nothing_queued`.
    pub(crate) fn pressure_check(&mut self, nothing_queued: bool) -> PressureCheck {
        let thresholds = self.settings.config.pressure;
        let figures = match (&self.slices, thresholds) {
            (Ok(tree), Some(_)) if !nothing_queued => {
                let read = tree.pressure();
                self.pressure.note_sources([read.cpu, read.memory, read.io]);
                let figure = |r: Option<PressureReading>| r.map(|r| r.some_avg10);
                Pressure {
                    cpu: figure(read.cpu),
                    memory: figure(read.memory),
                    io: figure(read.io),
                }
            }
            _ => Pressure::default(),
        };
        let since_last_start_ms = (self.pressure.last_start)
            .map(|at| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX));
        PressureCheck {
            figures,
            thresholds,
            since_last_start_ms,
        }
    }

    /// While a task waits on pressure, run the round again in [`PRESSURE_RECHECK`]; while one
    /// is paced, when its window ends if that is sooner (one timer at a time, whatever the
    /// number of rounds meanwhile).
    pub(crate) fn recheck_while_pressed(&mut self, decision: &Decision) {
        let mut due = None;
        for (_, why) in &decision.waiting {
            let after = match why {
                WaitReason::Pressure(_) => PRESSURE_RECHECK,
                WaitReason::Pacing {
                    since_ms,
                    settle_ms,
                    ..
                } => Duration::from_millis(settle_ms.saturating_sub(*since_ms).max(1))
                    .min(PRESSURE_RECHECK),
                _ => continue,
            };
            due = Some(due.map_or(after, |d: Duration| d.min(after)));
        }
        if let Some(after) = due {
            self.arm_recheck_in(after);
        }
    }

    /// A round in [`PRESSURE_RECHECK`], unless one is already due by then.
    pub(crate) fn arm_pressure_recheck(&mut self) {
        self.arm_recheck_in(PRESSURE_RECHECK);
    }

    /// A round in `after`, unless one is already due by then.
    fn arm_recheck_in(&mut self, after: Duration) {
        let now = Instant::now();
        if self
            .pressure
            .recheck_at
            .is_some_and(|at| at > now && at <= now + after)
        {
            return;
        }
        self.pressure.recheck_at = Some(now + after);
        self.events.timers.add_after(after, Timer::Schedule);
    }
}
