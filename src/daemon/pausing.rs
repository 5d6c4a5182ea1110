//! Pause and resume (`keel pause`, `keel resume`, and keel's own pauses: preemption): the
//! live attempt's cgroup frozen and thawed ([`super::freezer`]); the agent sees no signal.
//!
//! Decide, persist, act: the pause is written to the task's record (`paused`, with when and
//! why) before the cgroup is frozen, and its end (the frozen time added to `paused_ms`) before
//! it is thawed. A daemon that dies in between leaves the record ahead of the kernel, and the
//! next one makes the kernel agree when it adopts the attempt ([`restore_at_adoption`]): a
//! paused record is frozen (again: freezing is idempotent), a frozen cgroup whose record is
//! not paused (a resume or a stop that was recorded, not carried out) is thawed.
//!
//! The freeze takes a moment (every process must reach the freezer): `cgroup.events` is read
//! at once and then on a timer (10 ms, doubling up to 1 s) until it says `frozen 1`; the loop
//! never waits for it. While paused, the liveness clocks stop (no verdict is reached, and the
//! resume starts them again as an adoption does: `liveness::Watches::resumed`) and so does
//! the `max_runtime` budget (`runtime_limit.rs`). A stop, restart or removal of a paused task
//! thaws it first (`stopping.rs`): its stop signal and `stop.timeout` then apply as to any.
//!
//! The entry points for keel's own pauses are [`Daemon::pause_task`] and
//! [`Daemon::resume_task`] with [`PauseOrigin::Keel`]: a pause a person asked for is not
//! resumed by keel.

use super::freezer;
use super::liveness::check_liveness;
use super::record::{Pause, PauseOrigin, TaskState};
use super::slices::Slices;
use super::store::Store;
use super::timers::{Timer, Timers};
use super::{Daemon, Task};
use crate::state::now_ms;
use std::time::{Duration, Instant};

/// The first look at `cgroup.events` after a freeze that was not done at once, and the
/// longest between two looks.
const FREEZE_CHECK_FIRST: Duration = Duration::from_millis(10);
const FREEZE_CHECK_MAX: Duration = Duration::from_secs(1);
/// After this many looks (~30 s) a freeze still not done is logged (a process in an
/// uninterruptible sleep: a hung NFS mount, a device): the task stays paused meanwhile.
const FREEZE_SLOW_LOOKS: u32 = 37;

/// Why a pause or resume was not done.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PauseError {
    /// The task is not in a state for it (words for the client).
    Refused(String),
    /// The decision could not be written to the state directory: nothing was done.
    NotPersisted,
}

/// Whether an attempt in `state` (its shim watched by this daemon: `live`) may be paused:
/// `None` if so, else why not.
pub fn pause_refusal(state: TaskState, live: bool, paused: bool) -> Option<String> {
    if paused {
        return Some("already paused".into());
    }
    match state {
        TaskState::Running | TaskState::Stalled if live => None,
        TaskState::Running | TaskState::Stalled => {
            Some("its attempt is not adopted yet: try again in a moment".into())
        }
        TaskState::Starting => Some("starting: pause it once it runs".into()),
        TaskState::Stopping => Some("stopping: nothing to pause".into()),
        other => Some(format!("{other}: no attempt runs, nothing to pause")),
    }
}

/// Whether a pause by `origin` may be resumed by `by`: keel's by either, a person's only by a
/// person.
pub fn may_resume(origin: PauseOrigin, by: PauseOrigin) -> bool {
    origin == PauseOrigin::Keel || by == PauseOrigin::Request
}

/// How long ago (ms on the monotonic clock) a wall-clock instant was: the host's sleeps
/// since are not counted (`host_sleep.rs`).
fn mono_age_ms(wall_ms: u64) -> u64 {
    now_ms()
        .saturating_sub(wall_ms)
        .saturating_sub(super::host_sleep::slept_since(wall_ms))
}

/// Look again at a freeze not done yet, `tries` looks after the first.
fn arm_freeze_check(task: &Task, tries: u32, timers: &mut Timers) {
    let delay = (FREEZE_CHECK_FIRST * 2u32.saturating_pow(tries.min(10))).min(FREEZE_CHECK_MAX);
    let timer = Timer::FreezeCheck {
        unit: task.name.clone(),
        generation: task.record.generation,
        tries,
    };
    timers.add_after(delay, timer);
}

/// What the kernel says of the freeze just asked for: done, or looked at again later.
fn look_at_freeze(task: &mut Task, timers: &mut Timers) {
    task.frozen =
        (task.frozen_cgroup.as_deref()).is_some_and(|d| freezer::is_frozen(d).unwrap_or(false));
    if !task.frozen {
        arm_freeze_check(task, 0, timers);
    }
}

/// A restarted daemon adopts a live attempt: make its cgroup agree with its record. Called
/// before anything acts on the adopted attempt (a pending stop thaws what this freezes).
pub(crate) fn restore_at_adoption(
    task: &mut Task,
    slices: &Slices,
    store: &mut Store,
    timers: &mut Timers,
) {
    let unit = task.name.clone();
    let Ok(cgroup) = freezer::task_cgroup(slices, &unit) else {
        return;
    };
    let paused = task.record.paused.clone();
    match paused {
        Some(pause) if matches!(task.record.state, TaskState::Running | TaskState::Stalled) => {
            // Frozen again, in case the daemon died between recording the pause and freezing.
            if let Err(why) = freezer::freeze(&cgroup, true) {
                log::error!("{unit}: adopted paused, but cannot freeze it: {why}");
            }
            let age = Duration::from_millis(mono_age_ms(pause.since_ms));
            task.paused_at = Some(Instant::now().checked_sub(age).unwrap_or_else(Instant::now));
            task.frozen_cgroup = Some(cgroup);
            log::info!("{unit}: adopted paused ({})", pause.reason);
            look_at_freeze(task, timers);
        }
        Some(_) => {
            // Not a state to be paused in (a stop recorded the end of its pause): thawed.
            freezer::end_pause(task);
            let _ = freezer::freeze(&cgroup, false);
            let _ = store.persist(task);
        }
        None if freezer::is_frozen(&cgroup).unwrap_or(false) => {
            // A resume or a stop was recorded, and the daemon died before the thaw.
            match freezer::freeze(&cgroup, false) {
                Ok(()) => {
                    log::warn!("{unit}: adopted frozen though its record is not paused: thawed");
                    store.task_event(
                        task,
                        "resumed",
                        "thawed at adoption (its record was not paused)",
                    );
                }
                Err(why) => log::error!("{unit}: adopted frozen and cannot thaw it: {why}"),
            }
        }
        None => {}
    }
}

impl Daemon {
    /// Pause the live attempt of `unit`: recorded, then frozen. `reason` is shown by
    /// `keel status` and journaled. The entry point for keel's own pauses too
    /// (`PauseOrigin::Keel`). Returns whether the kernel has frozen it already.
    pub(crate) fn pause_task(
        &mut self,
        unit: &str,
        reason: &str,
        origin: PauseOrigin,
    ) -> Result<bool, PauseError> {
        let Some(task) = self.tasks.get_mut(unit) else {
            return Err(PauseError::Refused("unknown unit".into()));
        };
        let live = task.shim.is_some();
        if let Some(why) = pause_refusal(task.record.state, live, task.record.paused.is_some()) {
            return Err(PauseError::Refused(why));
        }
        let cgroup = freezer::task_cgroup(&self.slices, unit).map_err(PauseError::Refused)?;
        task.record.paused = Some(Pause {
            since_ms: now_ms(),
            reason: reason.to_string(),
            origin,
        });
        // Decide, persist, act.
        if self.store.persist(task).is_err() {
            task.record.paused = None;
            return Err(PauseError::NotPersisted);
        }
        crate::state::crash_point("after-persist-paused");
        if let Err(why) = freezer::freeze(&cgroup, true) {
            log::warn!("{unit}: cannot pause it: {why}");
            task.record.paused = None;
            let _ = self.store.persist(task);
            return Err(PauseError::Refused(why));
        }
        task.paused_at = Some(Instant::now());
        task.frozen_cgroup = Some(cgroup);
        log::info!("{unit}: paused ({reason})");
        self.store.task_event(task, "paused", reason);
        look_at_freeze(task, &mut self.events.timers);
        Ok(task.frozen)
    }

    /// Resume the paused attempt of `unit`: recorded, then thawed; its liveness clocks and
    /// `max_runtime` budget run again. Returns how long it was paused.
    pub(crate) fn resume_task(
        &mut self,
        unit: &str,
        reason: &str,
        by: PauseOrigin,
    ) -> Result<Duration, PauseError> {
        let Some(task) = self.tasks.get_mut(unit) else {
            return Err(PauseError::Refused("unknown unit".into()));
        };
        let Some(pause) = task.record.paused.clone() else {
            return Err(PauseError::Refused("not paused".into()));
        };
        if !may_resume(pause.origin, by) {
            return Err(PauseError::Refused(format!(
                "paused by request ({}): only keel resume resumes it",
                pause.reason
            )));
        }
        let kept = (task.record.paused_ms, task.paused_at, task.frozen);
        let (cgroup, lasted) = freezer::end_pause(task);
        if self.store.persist(task).is_err() {
            task.record.paused = Some(pause);
            (task.record.paused_ms, task.paused_at, task.frozen) = kept;
            task.frozen_cgroup = cgroup;
            return Err(PauseError::NotPersisted);
        }
        crate::state::crash_point("after-persist-resumed");
        let dir = match cgroup {
            Some(dir) => Ok(dir),
            None => freezer::task_cgroup(&self.slices, unit),
        };
        if let Err(why) = dir.and_then(|dir| freezer::freeze(&dir, false)) {
            // Recorded as resumed: the next adoption thaws it, if it still lives.
            log::error!("{unit}: cannot thaw it: {why}");
            self.store.task_event(task, "resume-failed", &why);
            return Err(PauseError::Refused(why));
        }
        let detail = format!(
            "{reason}; paused for {}",
            crate::fmt::duration_precise(lasted)
        );
        log::info!("{unit}: resumed ({detail})");
        self.store.task_event(task, "resumed", &detail);
        self.liveness.resumed(unit, lasted);
        super::runtime_limit::arm(task, &mut self.events.timers);
        let timers = &mut self.events.timers;
        check_liveness(task, &mut self.liveness, &mut self.store, timers);
        Ok(lasted)
    }

    /// The timer of a freeze not done yet: look at `cgroup.events` again.
    pub(crate) fn on_freeze_check(&mut self, unit: &str, generation: u64, tries: u32) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let current = task.record.generation == generation && task.record.paused.is_some();
        if !current || task.frozen {
            return;
        }
        let dir = task.frozen_cgroup.clone();
        task.frozen = dir.is_some_and(|d| freezer::is_frozen(&d).unwrap_or(false));
        if task.frozen {
            log::info!("{unit}: frozen");
            return;
        }
        if tries == FREEZE_SLOW_LOOKS {
            log::warn!(
                "{unit}: paused, but not every process of its cgroup is frozen yet (one in an \
                 uninterruptible sleep?): still waiting"
            );
        }
        arm_freeze_check(task, tries + 1, &mut self.events.timers);
    }
}

#[cfg(test)]
mod tests;
