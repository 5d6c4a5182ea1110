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
//!
//! `max_total_runtime` is the task's budget across its attempts (since it was added, or last
//! started by `keel start` or `keel restart`): the run time of its ended attempts
//! (`ran_before_ms` in its record) plus the live one's. Spent, the attempt is stopped the same
//! way and ends as `timeout`, and the task ends `failed` whatever its restart policy.

use super::record::{Intent, LastExit, TaskRecord, TaskState, TimeoutStop};
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

/// The task's total budget (`max_total_runtime`) at `now`: what is left of it once its ended
/// attempts' `ran_before` is taken out, judged as the attempt's own ([`judge`]); `ran` in
/// `Spent` is the total.
pub fn judge_total(
    max_total: Ms,
    ran_before: Ms,
    started: Ms,
    paused_before: Ms,
    paused_since: Option<Ms>,
    now: Ms,
) -> Budget {
    let left = max_total.saturating_sub(ran_before);
    match judge(left, started, paused_before, paused_since, now) {
        Budget::Spent { ran } => Budget::Spent {
            ran: ran.saturating_add(ran_before),
        },
        other => other,
    }
}

/// Which budget runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// `max_runtime`: the attempt's; the restart policy applies.
    Attempt,
    /// `max_total_runtime`: the task's, across its attempts; it ends `failed`.
    Total,
}

/// The budget that runs out first, of the attempt's and the task's total (each `None` when the
/// unit sets none). A spent total wins over a spent attempt budget: the task is done for good.
pub fn first_to_run_out(attempt: Option<Budget>, total: Option<Budget>) -> Option<(Budget, Which)> {
    let tagged = [(total, Which::Total), (attempt, Which::Attempt)];
    let budgets = tagged
        .iter()
        .filter_map(|&(b, which)| b.map(|b| (b, which)));
    let mut first: Option<(Budget, Which)> = None;
    for (budget, which) in budgets {
        first = match (first, budget) {
            (None, _) => Some((budget, which)),
            (Some((Budget::Spent { .. }, _)), _) => first,
            (_, Budget::Spent { .. }) => Some((budget, which)),
            (Some((Budget::Left(a), _)), Budget::Left(b)) if b < a => Some((budget, which)),
            (Some((Budget::Paused, _)), Budget::Left(_)) => Some((budget, which)),
            (Some(_), _) => first,
        };
    }
    first
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

/// The budget of the task's live attempt that runs out first now; `None` when its unit sets
/// neither `max_runtime` nor `max_total_runtime` (or it has no start).
fn budget_of(task: &Task, now: Instant) -> Option<(Budget, Which)> {
    let (max, max_total) = task.budgets_started_with();
    let (origin, paused_since) = attempt_clock(task, now)?;
    let paused_ms = task.record.paused_ms;
    let attempt = max.map(|max| judge(ms(max), 0, paused_ms, paused_since, origin));
    let total = max_total.map(|max| {
        let before = task.record.ran_before_ms;
        judge_total(ms(max), before, 0, paused_ms, paused_since, origin)
    });
    first_to_run_out(attempt, total)
}

impl Task {
    /// The `max_runtime` and `max_total_runtime` of the unit the live attempt started with
    /// (the accepted copy when the file was edited since: an edit takes effect at the next
    /// start, as the rest of the unit).
    pub(crate) fn budgets_started_with(&self) -> (Option<Duration>, Option<Duration>) {
        let edited = self.accepted_text.is_some() && self.accepted_text != self.unit_text;
        let accepted = edited
            .then_some(self.accepted_text.as_deref())
            .flatten()
            .and_then(|text| {
                crate::unit::parse_unit(std::path::Path::new("accepted.ron"), text).ok()
            });
        match accepted.as_ref().or(self.unit.as_ref()) {
            Some(unit) => (
                unit.max_runtime.map(|d| d.0),
                unit.max_total_runtime.map(|d| d.0),
            ),
            None => (None, None),
        }
    }
}

/// Arm the task's budget timer for the instant its budget runs out (nothing without a
/// `max_runtime`, or while it is paused). Called at the start, the adoption and each resume.
pub(crate) fn arm(task: &mut Task, timers: &mut Timers) {
    let now = Instant::now();
    match budget_of(task, now) {
        Some((Budget::Left(left), _)) => arm_at(task, now + Duration::from_millis(left), timers),
        // Spent already (adopted after its deadline): judged at once.
        Some((Budget::Spent { .. }, _)) => arm_at(task, now, timers),
        None | Some((Budget::Paused, _)) => {}
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
) -> Option<TimeoutStop> {
    let timeout = record.timeout.take()?;
    if let (Some(ended), Some(stop)) = (ending.ended_ms, record.stop_started_ms) {
        if ended < stop {
            return None;
        }
    }
    ending.exit = LastExit::Timeout;
    if ending.note.is_none() {
        ending.note = Some(timeout.reason.clone());
    }
    Some(timeout)
}

/// At the end of an attempt: its run time joins the task's total (what `max_total_runtime`
/// counts), or the total starts again (`keel restart`). Before the pause's end is recorded.
pub(crate) fn count_ended_attempt(task: &mut Task, restarted_by_request: bool) {
    let ran = attempt_ran(task, Instant::now()).unwrap_or(0);
    task.record.ran_before_ms = match restarted_by_request {
        true => 0,
        false => task.record.ran_before_ms.saturating_add(ran),
    };
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
        None | Some((Budget::Paused, _)) => {}
        Some((Budget::Left(left), _)) => arm_at(task, now + Duration::from_millis(left), timers),
        Some((Budget::Spent { ran }, which)) => {
            let (max, max_total) = task.budgets_started_with();
            let why = match which {
                Which::Attempt => format!(
                    "ran {} (max_runtime {}; frozen time not counted)",
                    precise(ran),
                    precise(ms(max.unwrap_or_default()))
                ),
                Which::Total => format!(
                    "ran {} in all its attempts (max_total_runtime {}; frozen time not counted)",
                    precise(ran),
                    precise(ms(max_total.unwrap_or_default()))
                ),
            };
            log::warn!("{}: timeout: {why}; stopping it", task.name);
            store.task_event(task, "timeout", &format!("{why}; stopping it"));
            // Stopped as `keel stop` would; the reason is persisted with the stop.
            task.record.timeout = Some(TimeoutStop {
                reason: why,
                for_good: which == Which::Total,
            });
            // With no intent of its own, a stop never removes the task.
            if let Stop::NotPersisted = stop(task, Intent::None, store, timers) {
                task.record.timeout = None;
                arm_at(task, now + RETRY_UNRECORDED, timers);
            }
        }
    }
}

fn precise(ms: Ms) -> String {
    crate::fmt::duration_precise(Duration::from_millis(ms))
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
