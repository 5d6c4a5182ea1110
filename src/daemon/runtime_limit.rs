//! Time budgets (`max_runtime`): an attempt that has run longer than its unit allows is
//! stopped as `keel stop` would stop it (its `stop.signal`, SIGKILL after `stop.timeout`), and
//! ends as `timeout`.
//!
//! What counts is the time the attempt could run: from its start on the monotonic clock
//! (CLOCK_MONOTONIC, which stops while the host sleeps), less the time it spent frozen
//! (`keel pause`, [`super::pausing`]). The verdict is [`judge`], a pure function of those
//! figures; the daemon keeps one timer per attempt ([`Timer::MaxRuntime`]) at the instant the
//! budget runs out, armed at the start, at an adoption and at each resume (a pause moves the
//! instant later: the timer that fires early finds budget left and arms the next).
//!
//! A timeout is a failure of the agent for the restart policy (as a stall is): `OnFailure` and
//! `Always` start it again after its backoff, counted against `restart_limit`; `Never` leaves
//! it `failed`. The next attempt sees `KEEL_LAST_EXIT=timeout` and has a budget of its own.

use super::record::{Intent, LastExit, TaskRecord, TaskState};
use super::stopping::{stop, Stop};
use super::store::Store;
use super::timers::{Timer, Timers};
use super::{Daemon, Task};
use crate::liveness::Ms;
use std::time::{Duration, Instant};

/// A stop for a timeout that could not be recorded is decided again this much later.
const RETRY_UNRECORDED: Duration = Duration::from_secs(1);

/// Where an attempt stands against its `max_runtime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Frozen now: the budget does not run out while it is; judged again at the resume.
    Paused,
    /// This much of the budget is left (the timer is due then, unless it is paused meanwhile).
    Left(Ms),
    /// Spent: the attempt has run `ran` (frozen time not counted).
    Spent { ran: Ms },
}

/// The attempt's budget at `now`, every time in ms on one monotonic clock: it started at
/// `started`, was frozen for `paused_before` in its ended pauses, and has been frozen since
/// `paused_since` if it is now.
pub fn judge(
    max_runtime: Ms,
    started: Ms,
    paused_before: Ms,
    paused_since: Option<Ms>,
    now: Ms,
) -> Budget {
    if paused_since.is_some() {
        return Budget::Paused;
    }
    let ran = ran_for(started, paused_before, paused_since, now);
    if ran >= max_runtime {
        Budget::Spent { ran }
    } else {
        Budget::Left(max_runtime - ran)
    }
}

/// How long the attempt has run at `now`, its frozen time not counted.
pub fn ran_for(started: Ms, paused_before: Ms, paused_since: Option<Ms>, now: Ms) -> Ms {
    let frozen_now = paused_since.map_or(0, |since| now.saturating_sub(since));
    now.saturating_sub(started)
        .saturating_sub(paused_before)
        .saturating_sub(frozen_now)
}

fn ms(d: Duration) -> Ms {
    d.as_millis().min(u128::from(u64::MAX / 4)) as Ms
}

/// The live attempt on one clock: ms since its start, and when (in the same ms) its current
/// pause began. `None` without a start.
fn attempt_clock(task: &Task, now: Instant) -> Option<(Ms, Option<Ms>)> {
    let since = |at: Instant| ms(now.saturating_duration_since(at));
    let origin = since(task.started_at?);
    let paused_since = task.paused_at.map(|at| origin.saturating_sub(since(at)));
    Some((origin, paused_since))
}

/// The live attempt's run time so far (frozen time not counted), `None` without a start.
pub(crate) fn attempt_ran(task: &Task, now: Instant) -> Option<Ms> {
    let (origin, paused_since) = attempt_clock(task, now)?;
    Some(ran_for(0, task.record.paused_ms, paused_since, origin))
}

/// The budget of the task's live attempt now; `None` when it has no `max_runtime` (or no
/// start).
fn budget_of(task: &Task, now: Instant) -> Option<Budget> {
    let max = ms(task.unit_started_with_max_runtime()?);
    let (origin, paused_since) = attempt_clock(task, now)?;
    Some(judge(max, 0, task.record.paused_ms, paused_since, origin))
}

impl Task {
    /// The `max_runtime` of the unit the live attempt started with (the accepted copy when the
    /// file was edited since: an edit takes effect at the next start, as the rest of the unit).
    pub(crate) fn unit_started_with_max_runtime(&self) -> Option<Duration> {
        let edited = self.accepted_text.is_some() && self.accepted_text != self.unit_text;
        if edited {
            let text = self.accepted_text.as_deref()?;
            let unit = crate::unit::parse_unit(std::path::Path::new("accepted.ron"), text).ok()?;
            return unit.max_runtime.map(|d| d.0);
        }
        self.unit.as_ref()?.max_runtime.map(|d| d.0)
    }
}

/// Arm the task's budget timer for the instant its budget runs out (nothing without a
/// `max_runtime`, or while it is paused). Called at the start, the adoption and each resume.
pub(crate) fn arm(task: &mut Task, timers: &mut Timers) {
    let now = Instant::now();
    match budget_of(task, now) {
        Some(Budget::Left(left)) => arm_at(task, now + Duration::from_millis(left), timers),
        // Spent already (adopted after its deadline): judged at once.
        Some(Budget::Spent { .. }) => arm_at(task, now, timers),
        None | Some(Budget::Paused) => {}
    }
}

fn arm_at(task: &mut Task, at: Instant, timers: &mut Timers) {
    task.runtime_due = Some(at);
    timers.add(
        at,
        Timer::MaxRuntime {
            unit: task.name.clone(),
            generation: task.record.generation,
        },
    );
}

/// The attempt was stopped for its budget: it ends as `timeout` (whatever its agent's exit
/// status when the stop ended it), with the words in its note. An agent that ended on its own
/// before the stop was sent keeps its own exit.
pub(crate) fn take_timeout(
    record: &mut TaskRecord,
    ending: &mut super::record::Ending,
) -> Option<String> {
    let why = record.timeout.take()?;
    if let (Some(ended), Some(stop)) = (ending.ended_ms, record.stop_started_ms) {
        if ended < stop {
            return None;
        }
    }
    ending.exit = LastExit::Timeout;
    if ending.note.is_none() {
        ending.note = Some(why.clone());
    }
    Some(why)
}

/// The budget timer fired: stop the attempt if its budget is spent, else arm the next.
fn on_due(task: &mut Task, generation: u64, store: &mut Store, timers: &mut Timers) {
    let live = task.shim.is_some()
        && task.record.generation == generation
        && matches!(task.record.state, TaskState::Running | TaskState::Stalled);
    let now = Instant::now();
    // Timers are never removed: only the one armed last counts, once it is due.
    if !live || task.runtime_due.is_none_or(|at| at > now) {
        return;
    }
    task.runtime_due = None;
    match budget_of(task, now) {
        None | Some(Budget::Paused) => {}
        Some(Budget::Left(left)) => arm_at(task, now + Duration::from_millis(left), timers),
        Some(Budget::Spent { ran }) => {
            let max = task.unit_started_with_max_runtime().unwrap_or_default();
            let why = format!(
                "ran {} (max_runtime {}; frozen time not counted)",
                crate::fmt::duration_precise(Duration::from_millis(ran)),
                crate::fmt::duration_precise(max)
            );
            log::warn!("{}: timeout: {why}; stopping it", task.name);
            store.task_event(task, "timeout", &format!("{why}; stopping it"));
            // Stopped as `keel stop` would; the reason is persisted with the stop.
            task.record.timeout = Some(why);
            // With no intent of its own, a stop never removes the task.
            if let Stop::NotPersisted = stop(task, Intent::None, store, timers) {
                task.record.timeout = None;
                arm_at(task, now + RETRY_UNRECORDED, timers);
            }
        }
    }
}

impl Daemon {
    pub(crate) fn on_max_runtime_due(&mut self, unit: &str, generation: u64) {
        if let Some(task) = self.tasks.get_mut(unit) {
            on_due(task, generation, &mut self.store, &mut self.events.timers);
        }
    }
}

#[cfg(test)]
mod tests;
