//! The loop's side of disk budgets: every [`super::LOOK_EVERY`] it reads the thread's figures,
//! stops a task over its budget, and re-runs the scheduler when the reserve's hold ends.

use super::{budget_of, over_budget, reserve_hold, LOOK_EVERY};
use crate::daemon::record::{Ending, Intent, LastExit, TaskRecord, TaskState};
use crate::daemon::stopping::{stop, Stop};
use crate::daemon::timers::Timer;
use crate::daemon::Daemon;
use std::collections::BTreeMap;

impl Daemon {
    /// Why new starts wait for disk space now, if they do (keel.ron `disk_reserve`).
    pub(crate) fn disk_reserve_hold(&self) -> Option<String> {
        let (space, age) = self.disk.space();
        reserve_hold(space, age, self.settings.config.disk_reserve)
    }

    /// [`Timer::Disk`]: budgets enforced, the set of tasks to measure renewed, the scheduler
    /// re-run if the reserve's hold changed.
    pub(crate) fn on_disk_due(&mut self) {
        self.events.timers.add_after(LOOK_EVERY, Timer::Disk);
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
        let total = self.disk.space().0.map_or(0, |s| s.total);
        let mut wanted = BTreeMap::new();
        let mut over = Vec::new();
        for task in self.tasks.values() {
            let measured = matches!(task.record.state, TaskState::Running | TaskState::Stalled)
                && task.shim.is_some()
                && task.record.disk_stop.is_none();
            let Some(unit) = task.unit.as_ref().filter(|_| measured) else {
                continue;
            };
            wanted.insert(task.name.clone(), self.store.dirs.task_dir(&task.name));
            let disk = unit.resources.disk.map(|s| s.0);
            // No figure of the filesystem yet: only an explicit budget applies.
            if disk.is_none() && total == 0 {
                continue;
            }
            let started = task.record.started_ms.unwrap_or(u64::MAX);
            // A walk that began after this attempt did: the attempt's own figure.
            let written = self
                .disk
                .written(&task.name)
                .filter(|(_, at)| *at >= started);
            let why = written
                .and_then(|(bytes, _)| over_budget(bytes, budget_of(disk, total), disk.is_some()));
            if let Some(why) = why {
                over.push((task.name.clone(), why));
            }
        }
        self.disk.measure(wanted);
        for (unit, why) in over {
            self.stop_for_disk(&unit, why);
        }
    }

    /// For `keel status`: a live attempt's disk use (its last measurement this attempt) and
    /// budget.
    pub(crate) fn disk_figures(&self, task: &crate::daemon::Task) -> Option<(u64, u64)> {
        let unit = task
            .unit
            .as_ref()
            .filter(|_| task.record.state.has_attempt())?;
        let started = task.record.started_ms?;
        let (bytes, _) = self
            .disk
            .written(&task.name)
            .filter(|(_, at)| *at >= started)?;
        let total = self.disk.space().0.map_or(0, |s| s.total);
        Some((bytes, budget_of(unit.resources.disk.map(|s| s.0), total)))
    }

    /// Stop `unit` as `keel stop` would; it settles as `disk`, not restarted.
    fn stop_for_disk(&mut self, unit: &str, why: String) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        log::warn!("{unit}: {why}: stopping it (last exit disk)");
        self.store.task_event(task, "disk-budget", &why);
        task.record.disk_stop = Some(why);
        if let Stop::NotPersisted =
            stop(task, Intent::None, &mut self.store, &mut self.events.timers)
        {
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
    ending.note = Some(why.clone());
    Some(why)
}
