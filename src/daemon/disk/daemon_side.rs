//! The loop's side of disk budgets: every [`super::LOOK_EVERY`] it looks at the state
//! filesystem, asks a worker to walk each running task's directory, stops a task over its
//! budget, and re-runs the scheduler when the reserve's hold ends.

use super::{budget_of, over_budget, reserve_hold, LOOK_EVERY};
use crate::daemon::jobs::{Finished, JobError, Owner, Pending, Then};
use crate::daemon::record::{Ending, Intent, LastExit, TaskRecord, TaskState};
use crate::daemon::stopping::{stop, Stop};
use crate::daemon::timers::Timer;
use crate::daemon::{Daemon, Task};
use crate::worker::protocol::{Job, JobResult};

/// Whether `task`'s attempt is measured: it runs, keel is not stopping it already.
fn measured(task: &Task) -> bool {
    matches!(task.record.state, TaskState::Running | TaskState::Stalled)
        && task.shim.is_some()
        && task.record.disk_stop.is_none()
}

/// The project id of `task`'s live attempt when the kernel holds its budget.
fn kernel_project(task: &Task) -> Option<u32> {
    (task.record.quota_generation == Some(task.record.generation))
        .then_some(task.record.quota_project)
        .flatten()
}

impl Daemon {
    /// Why new starts wait for disk space now, if they do (keel.ron `disk_reserve`).
    pub(crate) fn disk_reserve_hold(&self) -> Option<String> {
        reserve_hold(self.disk.space, self.settings.config.disk_reserve)
    }

    /// [`Timer::Disk`]: the state filesystem looked at, the scheduler re-run if the reserve's
    /// hold changed, a walk asked for each running task whose previous one is done.
    pub(crate) fn on_disk_due(&mut self) {
        self.events.timers.add_after(LOOK_EVERY, Timer::Disk);
        self.disk.look(&self.store.dirs.root);
        let hold = self.disk_reserve_hold();
        let held = hold.is_some();
        if held != std::mem::replace(&mut self.disk.held, held) {
            match hold {
                Some(why) => log::warn!("{why}: new starts wait"),
                None => log::info!(
                    "state filesystem: free space back above disk_reserve: starts resume"
                ),
            }
            self.store.queue_changed = true;
        }
        let due: Vec<(String, u64, Option<u32>)> = (self.tasks.values())
            .filter(|t| measured(t))
            .map(|t| (t.name.clone(), t.record.generation, kernel_project(t)))
            .collect();
        for (unit, generation, project) in due {
            let owner = Owner::Task(unit.clone());
            let walking = |p: &Pending| matches!(p.job, Job::TaskDiskUse { .. });
            if self.jobs.has(&owner, walking) {
                continue;
            }
            let pending = Pending {
                generation,
                job: Job::TaskDiskUse { unit, project },
                then: Then::TaskDiskUse,
            };
            self.jobs.submit(owner, pending);
        }
    }

    /// A walk of a task's directory has ended: keep the figure, stop the task if over.
    pub(crate) fn on_task_disk_use_done(&mut self, finished: Finished) {
        let Owner::Task(unit) = &finished.owner else {
            return;
        };
        let (bytes, quota_hard) = match finished.outcome {
            Ok(JobResult::TaskDiskUse { bytes, quota_hard }) => (bytes, quota_hard),
            Ok(_) => return,
            Err(JobError::Failed(failure)) => return log::warn!("{unit}: {}", failure.message),
            Err(JobError::Deadline(why) | JobError::Worker(why)) => {
                return log::warn!("{unit}: {why}")
            }
        };
        let total = self.disk.space.map_or(0, |s| s.total);
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        // Submitted while this attempt ran: its own figure.
        if task.record.generation != finished.pending.generation {
            return;
        }
        task.disk_written = Some((finished.pending.generation, bytes));
        // Under kernel quotas: the kernel holds the budget; reaching it is said, not stopped.
        if let Some(hard) = quota_hard {
            let unit = unit.clone();
            return self.judge_quota(&unit, finished.pending.generation, bytes, hard);
        }
        let Some(def) = task.unit.as_ref().filter(|_| measured(task)) else {
            return;
        };
        let disk = def.resources.disk.map(|s| s.0);
        // No figure of the filesystem: only an explicit budget applies.
        if disk.is_none() && total == 0 {
            return;
        }
        if let Some(why) = over_budget(bytes, budget_of(disk, total), disk.is_some()) {
            let unit = unit.clone();
            self.stop_for_disk(&unit, why);
        }
    }

    /// For `keel status`: a live attempt's disk use (its last measurement this attempt) and
    /// budget.
    pub(crate) fn disk_figures(&self, task: &Task) -> Option<(u64, u64)> {
        let unit = task
            .unit
            .as_ref()
            .filter(|_| task.record.state.has_attempt())?;
        let (generation, bytes) = task.disk_written?;
        if generation != task.record.generation {
            return None;
        }
        let total = self.disk.space.map_or(0, |s| s.total);
        Some((bytes, budget_of(unit.resources.disk.map(|s| s.0), total)))
    }

    /// Stop `unit` as `keel stop` would; it settles as `disk`, not restarted.
    pub(super) fn stop_for_disk(&mut self, unit: &str, why: String) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        if task.record.disk_stop.is_some() {
            return; // being stopped for it already
        }
        log::warn!("{unit}: {why}: stopping it (last exit disk)");
        self.store.task_event(task, "disk-budget", &why);
        task.record.disk_stop = Some(why);
        let timers = &mut self.events.timers;
        if let Stop::NotPersisted = stop(task, Intent::None, &mut self.store, timers) {
            // Not persisted, so not done: measured and judged again at the next look.
            task.record.disk_stop = None;
        }
    }
}

/// The attempt was stopped for its disk budget: it ends as `disk` with the figures as its
/// note. An agent that ended on its own before the stop was sent keeps its own exit.
pub(crate) fn take_disk_stop(record: &mut TaskRecord, ending: &mut Ending) -> Option<String> {
    let why = record.disk_stop.take()?;
    if let (Some(ended), Some(stop)) = (ending.ended_ms, record.stop_started_ms) {
        if ended < stop {
            return None;
        }
    }
    ending.exit = LastExit::Disk;
    // What the exit already said (`shim killed by SIGKILL`) is kept after the figures.
    ending.note = Some(match ending.note.take() {
        Some(before) => format!("{why}; {before}"),
        None => why.clone(),
    });
    Some(why)
}
