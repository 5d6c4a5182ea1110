//! What the daemon does about the verdicts of [`crate::liveness`] on a live attempt: say so,
//! and apply the unit's `on_stall` (report, restart, kill). The evidence itself is gathered by
//! [`super::Watches`].

use super::Watches;
use crate::daemon::event_loop::Fallback;
use crate::daemon::record::{Intent, StallStop, TaskState};
use crate::daemon::stopping::{stop, Stop};
use crate::daemon::store::Store;
use crate::daemon::timers::{Timer, Timers};
use crate::daemon::{Daemon, Task};
use crate::liveness::Verdict;
use crate::unit::OnStall;

/// A verdict that stops the attempt (`on_stall: Restart` or `Kill`).
struct StopForStall {
    reason: String,
    kill: bool,
}

/// Judge a live attempt now; say so when the verdict changed, and apply `on_stall`; arm the
/// timer for the next instant it could change.
pub(crate) fn check_liveness(
    task: &mut Task,
    watches: &mut Watches,
    store: &mut Store,
    timers: &mut Timers,
) {
    let Some((verdict, on_stall, detail)) = watches.judge(task, timers) else {
        return;
    };
    let Some(stall) = on_verdict(task, verdict, on_stall, &detail, store) else {
        return;
    };
    // Stopped as `keel stop` would (stop signal, timeout, SIGKILL); the stop and its reason
    // are persisted together, and the attempt settles as `stalled`.
    task.record.stall = Some(StallStop {
        reason: stall.reason,
        kill: stall.kill,
    });
    // With no intent of its own, a stop never removes the task: only `Done`.
    if let Stop::NotPersisted = stop(task, Intent::None, store, timers) {
        // Not persisted, so not done: judge again shortly.
        task.record.stall = None;
        watches.recheck_soon(&task.name, timers);
    }
}

/// A new verdict: say so, and apply `on_stall` to `stalled` and `no-progress`.
fn on_verdict(
    task: &mut Task,
    verdict: Verdict,
    on_stall: OnStall,
    detail: &str,
    store: &mut Store,
) -> Option<StopForStall> {
    let unit = task.name.clone();
    let state = task.record.state;
    let word = verdict.as_str();
    match (verdict, on_stall) {
        (Verdict::Running, _) => {
            if state == TaskState::Stalled {
                log::info!("{unit}: running ({detail})");
                note_state(task, TaskState::Running, detail, store);
            } else {
                log::info!("{unit}: working again: {detail}");
            }
            None
        }
        (_, OnStall::Report) if state == TaskState::Running => {
            // The state change is the journal entry; a missing change of content gets
            // its own word first.
            if verdict == Verdict::NoProgress {
                store.task_event(task, word, detail);
            }
            log::warn!("{unit}: {word}: {detail}; on_stall Report: left running");
            note_state(
                task,
                TaskState::Stalled,
                &format!("{word}: {detail}"),
                store,
            );
            None
        }
        (_, OnStall::Report) => {
            log::warn!("{unit}: {word}: {detail}");
            store.task_event(task, word, detail);
            None
        }
        (_, OnStall::Restart | OnStall::Kill) => {
            let kill = on_stall == OnStall::Kill;
            let action = if kill {
                "stopping it for good"
            } else {
                "restarting it"
            };
            log::warn!("{unit}: {word}: {detail}; {action}");
            store.task_event(task, word, &format!("{detail}; {action}"));
            Some(StopForStall {
                reason: format!("{word}: {detail}"),
                kill,
            })
        }
    }
}

/// `running` ⇄ `stalled` under `Report`: an observation, not a decision. Nothing acts on it
/// and a restarted daemon judges the attempt afresh, so it is journaled but not written to
/// the task's record: no fsync per verdict when many tasks stall at once, and the journal
/// entry is stamped when the stall was seen.
fn note_state(task: &mut Task, to: TaskState, detail: &str, store: &mut Store) {
    task.record.state = to;
    store.task_event(task, to.as_str(), detail);
}

impl Daemon {
    /// Progress files were written (the inotify descriptor is readable): heartbeats, maybe
    /// progress. Then the descriptor leaves the loop until the window ends
    /// ([`super::PROGRESS_EVENTS_WINDOW`]): a storm of writes costs one read of the queue and
    /// of each file per window, whatever its rate.
    pub(crate) fn on_liveness_event(&mut self) {
        if self.read_progress_events() && !self.liveness.paused {
            self.events.pause_fixed(self.liveness.raw_fd());
            self.liveness.paused = true;
            (self.events.timers).add_after(super::PROGRESS_EVENTS_WINDOW, Timer::ProgressEvents);
        }
    }

    /// Read the progress files' queued events and judge the tasks written. True when there
    /// were any.
    fn read_progress_events(&mut self) -> bool {
        let drained = self.liveness.drain_events();
        for (unit, modified) in drained.touched {
            let (dirs, slices) = (&self.store.dirs, &self.slices);
            if (self.liveness).progress_written(&unit, modified, drained.after, dirs, slices) {
                self.judge_liveness(&unit);
            }
        }
        drained.any
    }

    /// The window is over: the inotify descriptor goes back into the loop (what was queued
    /// meanwhile is reported at once). Refused, the queue is read on this timer instead.
    pub(crate) fn on_progress_events_due(&mut self) {
        if !self.liveness.paused {
            return;
        }
        let now = std::time::Instant::now();
        match (self.events)
            .resume_fixed(self.liveness.raw_fd(), crate::daemon::event_loop::LIVENESS)
        {
            Ok(()) => {
                self.liveness.paused = false;
                if self.liveness.resume_refused.take().is_some() {
                    log::info!("progress files' events are watched again");
                }
            }
            Err(e) => {
                let why = crate::daemon::event_loop::refusal("epoll", &e);
                match self.liveness.resume_refused.as_mut() {
                    Some(fallback) => fallback.refused_again(why, now),
                    None => {
                        log::warn!(
                            "cannot watch the progress files' events ({why}): reading them \
                             every {}ms instead",
                            super::PROGRESS_EVENTS_WINDOW.as_millis()
                        );
                        self.liveness.resume_refused = Some(Fallback::new(why, now));
                    }
                }
                self.read_progress_events();
                (self.events.timers)
                    .add_after(super::PROGRESS_EVENTS_WINDOW, Timer::ProgressEvents);
            }
        }
    }

    /// The task's timer: look at the sampled evidence, judge, act, arm the next one. Writes
    /// not read yet (the window's, or a file looked at on a timer) are read first: a verdict
    /// never misses a heartbeat that came before it.
    pub(crate) fn on_liveness_due(&mut self, unit: &str, generation: u64) {
        if self.liveness.paused {
            self.read_progress_events();
        }
        let (dirs, slices) = (&self.store.dirs, &self.slices);
        self.liveness.look_at_polled(unit, dirs, slices);
        if self
            .liveness
            .timer_due(unit, generation, &self.store.dirs, &self.slices)
        {
            self.judge_liveness(unit);
        }
    }

    /// The timer of refused watches, for progress files: those written are judged.
    pub(crate) fn look_at_polled_progress(&mut self) {
        for unit in (self.liveness).refused_due(&self.store.dirs, &self.slices) {
            self.judge_liveness(&unit);
        }
    }

    fn judge_liveness(&mut self, unit: &str) {
        if let Some(task) = self.tasks.get_mut(unit) {
            check_liveness(
                task,
                &mut self.liveness,
                &mut self.store,
                &mut self.events.timers,
            );
        }
    }
}
