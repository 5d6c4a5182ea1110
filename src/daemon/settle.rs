//! The end of an attempt: learn how it ended (the shim's status, its exit record), release
//! what it held (its slice, its checkout's branch, its liveness watch), then apply the pending
//! intent or the restart policy ([`super::policy`]) and persist the outcome.

use super::policy::{self, Decision, History, Policy};
use super::record::Ending;
use super::record::{Intent, LastExit, TaskState};
use super::store::transition;
use super::store::Store;
use super::timers::{Timer, Timers};
use super::{slices, Daemon, Instance, Shutdown, Task};
use crate::state::now_ms;
use std::time::Duration;

/// What becomes of a task once its ended attempt is settled, beyond its record.
enum Settled {
    /// Its state is recorded: nothing more.
    Recorded,
    /// Forget it (`explicit`: `keel rm`, its files go too).
    Remove { explicit: bool },
    /// It finished for good: an essential unit ends `keel init`.
    Final { essential: bool, exit: LastExit },
}

impl Daemon {
    /// A shim's pidfd became readable: the attempt is over. Learn how, then settle.
    pub(crate) fn on_shim_exit(&mut self, unit: &str) {
        self.reap_children();
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let Some(shim) = task.shim.take() else {
            return;
        };
        let generation = task.record.generation;
        let reaped = self.tasks.reaped.remove(&shim.pid);
        self.events.unwatch_shim(&shim);
        let how = match reaped {
            Some(nix::sys::wait::WaitStatus::Signaled(_, sig, _)) => {
                format!("shim killed by {}", sig.as_str())
            }
            Some(nix::sys::wait::WaitStatus::Exited(_, code))
                if code == crate::sandbox::protocol::SPEC_NOT_WRITTEN =>
            {
                "the attempt's spec could not be written (run/shim.log says why); its agent was killed"
                    .to_string()
            }
            Some(nix::sys::wait::WaitStatus::Exited(_, code)) => {
                format!("shim exited {code} without an exit record")
            }
            _ => "shim vanished without an exit record".to_string(),
        };
        let ending = Ending::from_records(&self.store.dirs.run_dir(unit), generation, &how);
        self.settle(unit, ending);
    }

    /// Apply the restart policy (or the pending intent) to an ended attempt.
    pub(crate) fn settle(&mut self, unit: &str, ending: Ending) {
        self.sandboxing.release_when_idle(self.tasks.any_shim());
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        // Fencing: a record another generation left is journaled, whoever found it (the
        // shim's end, or a restarted daemon's reconcile).
        if ending.fenced.is_some() {
            let note = ending.note.as_deref().unwrap_or_default();
            self.store.task_event(task, "fenced", note);
        }
        // An OOM event that came in the same round as the exit: journal it first.
        slices::check_oom(task, false, &mut self.store, &mut self.events);
        let mut ending = ending;
        ending.exit = slices::account_oom(task, &self.slices, ending.exit, ending.ended_ms);
        // What its relay refused last (its report, up to half a second before the end).
        if let Some(network) = task.network.as_mut() {
            let events = network.last_events();
            super::journal_network_events(task, events, &mut self.store);
        }
        slices::release_slice(task, &self.slices, &mut self.events);
        self.liveness.unwatch(unit);
        // The harvest is a job; the attempt's outcome is recorded once it has ended, so that
        // a final state means the branch is home (or kept, with the reason). Meanwhile the
        // task keeps its state without a shim: a stop or removal is recorded as an intent.
        if crate::checkout::exists(&self.store.dirs, unit) {
            task.settling = Some(ending);
            let (name, attempt) = (task.name.clone(), task.record.attempt);
            self.submit_harvest(name, attempt, None);
            return;
        }
        self.record_ending(unit, ending);
    }

    /// The ended attempt's record: the intent or the restart policy applied, persisted.
    pub(crate) fn record_ending(&mut self, unit: &str, ending: Ending) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let shutting_down = self.shutdown.is_some();
        let (store, timers) = (&mut self.store, &mut self.events.timers);
        match settle_task(task, ending, shutting_down, &self.instance, store, timers) {
            Settled::Recorded => {}
            Settled::Remove { explicit } => self.remove_task(unit, explicit),
            Settled::Final { essential, exit } => self.on_final(unit, essential, exit),
        }
    }

    /// An essential unit that finished for good ends `keel init` with its status.
    fn on_final(&mut self, unit: &str, essential: bool, exit: LastExit) {
        if essential && self.instance.under_init.is_some() {
            let code = exit.exit_code();
            log::info!(
                "{unit}: essential unit finished ({exit}): shutting down with status {code}"
            );
            self.store.event(
                unit,
                0,
                0,
                "essential-finished",
                &format!("exit status {code}"),
            );
            self.begin_shutdown(Shutdown::StopTasks { exit_code: code });
        }
    }

    pub(crate) fn on_backoff_expired(&mut self, unit: &str, generation: u64) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        if task.record.state != TaskState::Backoff || task.record.generation != generation {
            return;
        }
        transition(task, TaskState::Queued, "backoff over", &mut self.store);
        self.store.queue_changed = true;
    }
}

/// The record of an ended attempt: its exit remembered, the intent or the restart policy
/// applied, the new state persisted.
fn settle_task(
    task: &mut Task,
    mut ending: Ending,
    shutting_down: bool,
    instance: &Instance,
    store: &mut Store,
    timers: &mut Timers,
) -> Settled {
    let jitter = jitter();
    let unit = task.name.clone();
    task.shim = None;
    let ran_for = task
        .started_at
        .map(|t| t.elapsed())
        .or_else(|| {
            task.record
                .started_ms
                .map(|s| Duration::from_millis(now_ms().saturating_sub(s)))
        })
        .unwrap_or_default();
    let (attempt, generation) = (task.record.attempt, task.record.generation);
    let mut intent = task.record.intent;
    // An agent that ended on its own before it was asked to stop for a shutdown finished
    // its work: the policy decides, not the shutdown.
    if intent == Intent::Interrupt {
        if let (Some(ended), Some(stop)) = (ending.ended_ms, task.record.stop_started_ms) {
            if ended < stop {
                intent = Intent::None;
            }
        }
    }
    // The host refused the start (the shim says so): no attempt ran, nothing is counted.
    if ending.host_refused {
        return settle_refused(task, ending, intent, store, timers);
    }
    // An attempt that ran: the host's refusals before it are over.
    task.record.blocked = None;
    task.blocked_retries = 0;
    // Stopped by the liveness watch: the attempt ends as `stalled` (liveness.rs); for its
    // `max_runtime`, as `timeout` (runtime_limit.rs). A pause ends with the attempt.
    let stall = super::liveness::take_stall(&mut task.record, &mut ending);
    let timeout = super::runtime_limit::take_timeout(&mut task.record, &mut ending);
    super::runtime_limit::count_ended_attempt(task, intent == Intent::Restart);
    let _ = super::freezer::end_pause(task);
    task.runtime_due = None;
    // Stopped for its disk budget: the attempt ends as `disk` (disk.rs).
    let disk = super::disk::take_disk_stop(&mut task.record, &mut ending);
    let exit = ending.exit;
    task.record.last_exit = Some(exit);
    task.record.remember_exit(super::record::PastExit {
        attempt,
        exit,
        started_ms: task.record.started_ms,
        ended_ms: ending.ended_ms.unwrap_or_else(now_ms),
        note: stall
            .as_ref()
            .map(|s| s.reason.clone())
            .or(timeout.as_ref().map(|t| t.reason.clone()))
            .or(ending.note.clone()),
    });
    task.record.shim = None;
    task.record.stop_started_ms = None;
    task.record.finished_ms = Some(now_ms());
    task.record.intent = Intent::None;
    let mut detail = format!("{exit} after {}", crate::fmt::duration(ran_for));
    if let Some(note) = &ending.note {
        detail.push_str(&format!("; {note}"));
    }
    store.event(&unit, attempt, generation, "exited", &detail);
    log::info!("{unit}: attempt {attempt} ended: {detail}");

    if matches!(intent, Intent::Remove | Intent::Forget) {
        return Settled::Remove {
            explicit: intent == Intent::Remove,
        };
    }
    let Some(unit_def) = task.unit.clone() else {
        // The unit file is gone and no removal is pending: wait for the next scan.
        task.record.reason = Some("unit file missing".into());
        transition(task, TaskState::Stopped, "unit file missing", store);
        return Settled::Recorded;
    };
    let history = History {
        restarts: task.record.restarts.clone(),
        consecutive_failures: task.record.consecutive_failures,
    };
    let policy = Policy {
        restart: unit_def.restart,
        backoff: &unit_def.backoff,
        limit: &unit_def.restart_limit,
    };
    let disk = disk.filter(|_| intent == Intent::None).map(|why| {
        format!("{why}; not restarted: its files are still there (harvest it, free space, then keel restart)")
    });
    let (decision, history) = match stall.filter(|s| s.kill && intent == Intent::None) {
        // Over its disk budget: no restart into the same full budget.
        _ if disk.is_some() => (
            Decision::Failed {
                reason: disk.unwrap_or_default(),
            },
            history,
        ),
        // `on_stall: Kill`: no restart, whatever the policy says.
        Some(stall) => (
            Decision::Failed {
                reason: format!("{}; on_stall Kill", stall.reason),
            },
            history,
        ),
        // `max_total_runtime` spent: no restart either.
        None if timeout.as_ref().is_some_and(|t| t.for_good) && intent == Intent::None => (
            Decision::Failed {
                reason: "max_total_runtime spent".to_string(),
            },
            history,
        ),
        None => policy::decide(&policy, &history, intent, exit, ran_for, now_ms(), jitter),
    };
    task.record.restarts = history.restarts;
    task.record.consecutive_failures = history.consecutive_failures;
    let essential = unit_def.essential;
    if matches!(decision, Decision::Succeeded | Decision::Failed { .. }) && essential {
        // The shutdown this final state implies (under `keel init`) is recorded first: a
        // crash between the two writes must not leave a final essential unit and a container
        // that never ends.
        super::shutdown::record_shutdown(instance, &store.dirs, exit.exit_code());
    }
    let finished = Settled::Final { essential, exit };
    match decision {
        Decision::Succeeded => {
            task.record.reason = None;
            transition(task, TaskState::Succeeded, &exit.to_string(), store);
            finished
        }
        Decision::Failed { reason } => {
            // What the note adds to the reason: a part the reason already carries (a disk
            // stop's figures) is not told twice.
            let extra: Vec<&str> = (ending.note.as_deref().unwrap_or_default())
                .split("; ")
                .filter(|part| !part.is_empty() && !reason.contains(part))
                .collect();
            let reason = if extra.is_empty() {
                reason
            } else {
                format!("{reason} ({})", extra.join("; "))
            };
            task.record.reason = Some(reason.clone());
            transition(task, TaskState::Failed, &reason, store);
            finished
        }
        Decision::Interrupted => {
            task.record.reason =
                Some("interrupted by daemon shutdown; resumes at next start".into());
            transition(task, TaskState::Queued, "interrupted by shutdown", store);
            Settled::Recorded
        }
        Decision::Restart { .. } if shutting_down => {
            // No new attempt while shutting down: it resumes at the next start.
            task.record.reason = Some("resumes at next start".into());
            transition(task, TaskState::Queued, "restart after shutdown", store);
            Settled::Recorded
        }
        Decision::Restart { delay } if delay.is_zero() => {
            transition(task, TaskState::Queued, "restart", store);
            store.queue_changed = true;
            Settled::Recorded
        }
        Decision::Restart { delay } => {
            let until = now_ms() + delay.as_millis() as u64;
            task.record.backoff_until_ms = Some(until);
            task.record.reason = ending.note;
            transition(
                task,
                TaskState::Backoff,
                &format!("restart in {}", crate::fmt::duration_precise(delay)),
                store,
            );
            timers.add_after(delay, Timer::BackoffExpired { unit, generation });
            Settled::Recorded
        }
        Decision::Stopped => {
            task.record.reason = Some("stopped by request".into());
            transition(task, TaskState::Stopped, &exit.to_string(), store);
            Settled::Recorded
        }
        Decision::Remove => Settled::Remove { explicit: true },
    }
}

/// An attempt whose start the host refused (its shim's exit record says so: a sandbox step
/// the kernel refused for want of a privilege or a resource): it never ran. Its attempt
/// number is given back, its exit not remembered, nothing counted against its restart limit;
/// a pending removal or stop is carried out, else the task waits, blocked
/// (`lifecycle::blocked`).
fn settle_refused(
    task: &mut Task,
    ending: Ending,
    intent: Intent,
    store: &mut Store,
    timers: &mut Timers,
) -> Settled {
    let why = (ending.note).unwrap_or_else(|| "the host refused the start".to_string());
    log::info!(
        "{}: attempt {} refused by the host before the agent ran: {why}",
        task.name,
        task.record.attempt
    );
    let before = super::lifecycle::blocked::before_refused_attempt(&task.record);
    match intent {
        Intent::Remove | Intent::Forget => Settled::Remove {
            explicit: intent == Intent::Remove,
        },
        Intent::Stop => {
            let generation = task.record.generation;
            task.record = before;
            task.record.generation = generation;
            task.record.shim = None;
            task.record.intent = Intent::None;
            task.record.stop_started_ms = None;
            task.record.reason = Some("stopped by request".into());
            // Stopped: the wait for the host is over.
            task.record.blocked = None;
            task.blocked_retries = 0;
            task.start_retry_at = None;
            transition(task, TaskState::Stopped, "stopped before it ran", store);
            Settled::Recorded
        }
        Intent::None | Intent::Restart | Intent::Interrupt => {
            super::lifecycle::blocked::block_start(task, before, &why, store, timers);
            Settled::Recorded
        }
    }
}

/// A number in [0, 1) for backoff jitter, from the clock's low bits (no RNG dependency).
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mixed =
        (u64::from(nanos) ^ u64::from(std::process::id())).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 11) as f64 / (1u64 << 53) as f64
}
