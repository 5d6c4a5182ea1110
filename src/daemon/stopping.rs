//! Ending attempts on purpose: `keel stop`, `restart`, `rm`, a removed unit file, shutdown.
//! The stop signal first, SIGKILL after `stop.timeout`, and what happens afterwards is the
//! task's persisted intent.

use super::jobs::{Finished, Owner, Pending, Then};
use super::record::{Intent, TaskState};
use super::store::transition;
use super::store::Store;
use super::timers::{Timer, Timers};
use super::{slices, Daemon, Task, FORCE_KILL_GRACE};
use crate::sandbox::spec;
use crate::state::now_ms;
use crate::worker::protocol::{Job, JobResult};

/// Which pending intent wins when a second request arrives during a stop: removal beats
/// everything, forgetting beats the rest, a user's stop is not undone by a shutdown, and
/// otherwise the latest request wins.
pub fn merge_intent(pending: Intent, new: Intent) -> Intent {
    match (pending, new) {
        (Intent::Remove, _) | (_, Intent::Remove) => Intent::Remove,
        (Intent::Forget, _) | (_, Intent::Forget) => Intent::Forget,
        (Intent::Stop, Intent::Interrupt) => Intent::Stop,
        (_, new) => new,
    }
}

/// Send a signal to the attempt's shim through its pidfd (never a recycled pid).
pub(crate) fn signal_shim(task: &mut Task, signal: i32) -> bool {
    if signal == spec::kill_request_signal() || signal == libc::SIGKILL {
        // A SIGKILL of keel's own making: the attempt's end is not the OOM killer's.
        task.keel_kill_ms = Some(now_ms());
    }
    let Some(shim) = task.shim.as_ref() else {
        return false;
    };
    match crate::sys::pidfd_send_signal(&shim.pidfd, signal) {
        Ok(()) => true,
        Err(e) => {
            log::warn!(
                "{}: signal {} to shim {}: {e}",
                task.name,
                crate::fmt::signal_name(signal),
                shim.pid
            );
            false
        }
    }
}

/// The unit's stop signal, through the shim (SIGKILL as the shim's kill request).
pub(crate) fn send_stop_signal(task: &mut Task, signal: i32) {
    let to_shim = spec::signal_for_shim(signal).unwrap_or(libc::SIGTERM);
    signal_shim(task, to_shim);
}

fn still_stopping(task: &Task, generation: u64) -> bool {
    task.record.generation == generation
        && task.record.state == TaskState::Stopping
        && task.shim.is_some()
}

/// What [`stop`] leaves to its caller.
#[must_use]
pub(crate) enum Stop {
    /// Decided, persisted and acted on (or nothing was left to do).
    Done,
    /// The decision could not be persisted: nothing was signalled.
    NotPersisted,
    /// No live attempt, and the intent is to forget the task (`explicit`: `keel rm`): it goes
    /// now ([`Daemon::remove_task`]).
    RemoveNow { explicit: bool },
}

fn persisted_or_not(persisted: bool) -> Stop {
    if persisted {
        Stop::Done
    } else {
        Stop::NotPersisted
    }
}

/// Ask the attempt to end: `stop.signal` now, SIGKILL after `stop.timeout`. What happens
/// once it has ended is `intent`. A task without a live attempt is settled at once.
pub(crate) fn stop(
    task: &mut Task,
    intent: Intent,
    store: &mut Store,
    timers: &mut Timers,
) -> Stop {
    if task.preparing.take().is_some() {
        // Stopped while its preparation job runs: the attempt never began and is not
        // counted; the job is abandoned (its worker killed) by the loop's fencing.
        log::info!("{}: start abandoned during its preparation", task.name);
        store.task_event(task, "start-abandoned", "stopped during its preparation");
        task.record.attempt = task.record.attempt.saturating_sub(1);
        task.record.started_ms = None;
        task.record.state = TaskState::Queued;
        if matches!(intent, Intent::Interrupt | Intent::None) {
            task.record.reason = Some("interrupted during its preparation; resumes".into());
            let persisted = transition(task, TaskState::Queued, "preparation interrupted", store);
            return persisted_or_not(persisted);
        }
    }
    if task.shim.is_none() && task.record.state.has_attempt() {
        // A live shim not adopted yet (reconcile is waiting for it to say who it is): the
        // intent is recorded now and carried out when it is adopted.
        task.record.intent = merge_intent(task.record.intent, intent);
        return persisted_or_not(store.persist(task).is_ok());
    }
    if task.shim.is_none() {
        if matches!(intent, Intent::Stop | Intent::Restart) {
            // A start the host refused is not waited for any longer: stopped, or tried again
            // now as a fresh start.
            task.record.blocked = None;
            task.blocked_retries = 0;
            task.start_retry_at = None;
        }
        match intent {
            Intent::Remove | Intent::Forget => {
                return Stop::RemoveNow {
                    explicit: intent == Intent::Remove,
                }
            }
            Intent::Stop if !task.record.state.is_final() => {
                task.record.reason = Some("stopped by request".into());
                task.record.backoff_until_ms = None;
                transition(task, TaskState::Stopped, "", store);
            }
            Intent::Restart => {
                task.record.restarts.clear();
                task.record.ran_before_ms = 0;
                task.record.consecutive_failures = 0;
                task.record.backoff_until_ms = None;
                task.record.reason = None;
                transition(task, TaskState::Queued, "restart", store);
                store.queue_changed = true;
            }
            Intent::Stop | Intent::Interrupt | Intent::None => {}
        }
        return Stop::Done;
    }
    let previous_intent = task.record.intent;
    task.record.intent = merge_intent(previous_intent, intent);
    if task.record.state == TaskState::Stopping {
        return persisted_or_not(store.persist(task).is_ok());
    }
    let (signal, timeout) = (task.stop_signal(), task.stop_timeout());
    let previous_state = task.record.state;
    // A paused attempt is thawed to be stopped (freezer.rs): persisted as no longer paused.
    let pause_before = task.record.paused.is_some().then(|| {
        let kept = (task.record.paused.clone(), task.record.paused_ms);
        let kept = (kept, task.paused_at, task.frozen);
        let (cgroup, _) = super::freezer::end_pause(task);
        (kept, cgroup)
    });
    task.record.stop_started_ms = Some(now_ms());
    let generation = task.record.generation;
    let persisted = transition(
        task,
        TaskState::Stopping,
        &format!(
            "{}, SIGKILL after {}",
            crate::fmt::signal_name(signal),
            crate::fmt::duration_precise(timeout)
        ),
        store,
    );
    if !persisted {
        // Decide, persist, act: an unrecorded stop is not carried out (after a crash the
        // record would say running, and the policy would bring the task back).
        task.record.state = previous_state;
        task.record.intent = previous_intent;
        task.record.stop_started_ms = None;
        if let Some(((record, paused_at, frozen), cgroup)) = pause_before {
            (task.record.paused, task.record.paused_ms) = record;
            (task.paused_at, task.frozen, task.frozen_cgroup) = (paused_at, frozen, cgroup);
        }
        log::warn!(
            "{}: stop not carried out: it could not be recorded first; still {previous_state}",
            task.name
        );
        return Stop::NotPersisted;
    }
    if let Some((_, cgroup)) = pause_before {
        super::freezer::thaw_for_stop(&task.name, cgroup);
        store.task_event(task, "resumed", "thawed to be stopped");
    }
    send_stop_signal(task, signal);
    timers.add_after(
        timeout,
        Timer::StopTimeout {
            unit: task.name.clone(),
            generation,
        },
    );
    Stop::Done
}

impl Daemon {
    /// [`stop`] the task named `unit` (nothing to do without one). Returns false when the
    /// decision could not be persisted: then nothing was signalled.
    pub(crate) fn stop_task(&mut self, unit: &str, intent: Intent) -> bool {
        let Some(task) = self.tasks.get_mut(unit) else {
            return true;
        };
        match stop(task, intent, &mut self.store, &mut self.events.timers) {
            Stop::Done => true,
            Stop::NotPersisted => false,
            Stop::RemoveNow { explicit } => {
                self.remove_task(unit, explicit);
                true
            }
        }
    }

    /// Shutdown: stop a running task so that it resumes at the next start.
    pub(crate) fn interrupt_for_shutdown(&mut self, unit: &str) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        if !task.record.state.has_attempt() {
            return;
        }
        // An interruption never removes: only `Done`.
        let stop = stop(
            task,
            Intent::Interrupt,
            &mut self.store,
            &mut self.events.timers,
        );
        if matches!(stop, Stop::NotPersisted) {
            // Stopped unrecorded, it would count as a failure at the next start; left
            // running, the next daemon re-adopts it (under keel init it ends with PID 1, and
            // is then recorded as lost).
            task.left_running = true;
            log::warn!(
                "{unit}: left running: its stop could not be recorded in {}: {}",
                self.store.dirs.root.display(),
                super::unwritable::why_unwritable(&self.store.dirs.root)
            );
        }
    }

    pub(crate) fn on_stop_timeout(&mut self, unit: &str, generation: u64) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        if !still_stopping(task, generation) {
            return;
        }
        let attempt = task.record.attempt;
        self.store
            .event(unit, attempt, generation, "stop-timeout", "SIGKILL");
        log::warn!("{unit}: stop timeout: SIGKILL");
        signal_shim(task, spec::kill_request_signal());
        self.events.timers.add_after(
            FORCE_KILL_GRACE,
            Timer::StopForce {
                unit: unit.to_string(),
                generation,
            },
        );
    }

    pub(crate) fn on_stop_force(&mut self, unit: &str, generation: u64) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        if !still_stopping(task, generation) {
            return;
        }
        log::error!("{unit}: shim did not end after SIGKILL of its agent: killing its cgroup");
        // cgroup.kill takes the shim and everything left with it; without a slice, the shim.
        task.keel_kill_ms = Some(now_ms());
        if !slices::kill_slice(&self.slices, unit) {
            signal_shim(task, libc::SIGKILL);
        }
    }

    /// `keel rm`'s deletion: run files (unless a shim still holds their lock), checkpoint, and
    /// the task directory itself unless its work directory holds files. A checkout goes only
    /// when clean and harvested (or with `force`, harvested first), in a job: the rest of the
    /// files go once it has ended ([`Daemon::on_checkout_removed`]), and the client waiting
    /// on `keel rm` is answered then. Returns what was kept when no job was needed.
    pub(crate) fn delete_task_files(
        &mut self,
        unit: &str,
        (attempt, generation): (u32, u64),
        force: bool,
    ) -> Option<String> {
        if !crate::checkout::exists(&self.store.dirs, unit) {
            return Some(self.delete_files_but_work(unit));
        }
        let job = Job::Remove {
            unit: unit.to_string(),
            attempt,
            force,
            limits: self.settings.config.harvest_limits,
        };
        let pending = Pending {
            generation,
            job,
            then: Then::Remove,
        };
        self.jobs.submit(Owner::Task(unit.to_string()), pending);
        self.tasks.removals_pending.insert(unit.to_string());
        None
    }

    /// The job removing a task's checkout (`keel rm`) has ended: the rest of its files go
    /// (unless the checkout stays), the removal is journaled, its client answered.
    pub(crate) fn on_checkout_removed(&mut self, finished: Finished) {
        let Owner::Task(unit) = &finished.owner else {
            return;
        };
        let Job::Remove { attempt, .. } = finished.pending.job else {
            return;
        };
        let generation = finished.pending.generation;
        self.tasks.removals_pending.remove(unit);
        let detail = match finished.outcome {
            Ok(JobResult::Removed { note }) if self.tasks.contains(unit) => {
                // Added again meanwhile: its new files are not this removal's to delete.
                note
            }
            Ok(JobResult::Removed { note }) => {
                let kept = self.delete_files_but_work(unit);
                match (note.is_empty(), kept.is_empty()) {
                    (true, _) => kept,
                    (false, true) => note,
                    (false, false) => format!("{note}; {kept}"),
                }
            }
            other => {
                let why = match other {
                    Err(e) => e.to_string(),
                    Ok(result) => format!("the removal job answered {result:?}"),
                };
                log::warn!("{unit}: task directory kept: {why}");
                format!(
                    "task directory {} kept: {why}",
                    self.store.dirs.task_dir(unit).display()
                )
            }
        };
        self.store
            .event(unit, attempt, generation, "removed", &detail);
        log::info!("{unit}: removed {detail}");
        if !detail.is_empty() {
            self.tasks.removal_notes.insert(unit.clone(), detail);
        }
    }

    /// The loop never walks what an agent left: each tree goes to the trash (a rename) and a
    /// worker deletes it (trash.rs).
    fn delete_files_but_work(&mut self, unit: &str) -> String {
        let run = self.store.dirs.run_dir(unit);
        let work = self.store.dirs.work_dir(unit);
        let work_has_files = std::fs::read_dir(&work).is_ok_and(|mut d| d.next().is_some());
        if crate::state::attempt_lock_held(&run) {
            // Never pull run/ (and its lock) from under a live shim.
            log::error!("{unit}: removed while a shim still holds its attempt lock; run/ kept");
        } else {
            self.throw_away(unit, &run);
        }
        let checkpoint = self.store.dirs.checkpoint_dir(unit);
        self.throw_away(unit, &checkpoint);
        if work_has_files {
            format!("work directory kept: {}", work.display())
        } else {
            let task_dir = self.store.dirs.task_dir(unit);
            self.throw_away(unit, &task_dir);
            String::new()
        }
    }

    /// Forget a task. `explicit` (`keel rm`): its record, run files and checkpoint go, and its
    /// work directory unless it holds files. Otherwise (its unit file vanished) only the
    /// record goes: checkpoint, work and logs stay for whoever brings the file back.
    pub(crate) fn remove_task(&mut self, unit: &str, explicit: bool) {
        let Some(mut task) = self.tasks.remove(unit) else {
            return;
        };
        slices::release_slice(&mut task, &self.slices, &mut self.events);
        // No start can take a spare made for its user namespace any more.
        if let Some((_, userns)) = &task.user_namespace {
            self.sandboxing
                .user_namespace_gone(std::os::fd::AsFd::as_fd(userns));
        }
        if let Some(shim) = &task.shim {
            self.events.unwatch_shim(shim);
            self.tasks.reaped.remove(&shim.pid);
        }
        // Whatever it reserved is free for the queue.
        self.store.queue_changed = true;
        let (attempt, generation) = (task.record.attempt, task.record.generation);
        let run = self.store.dirs.run_dir(unit);
        let _ = std::fs::remove_file(self.store.dirs.record_path(unit));
        let _ = std::fs::remove_file(self.store.dirs.accepted_unit_path(unit));
        let detail = if explicit {
            match self.delete_task_files(unit, (attempt, generation), task.force_remove) {
                Some(kept) => kept,
                // The checkout goes in a job: journaled and answered when it has ended.
                None => return self.rescan_if_back(unit),
            }
        } else {
            for record in [
                spec::attempt_path(&run),
                spec::shim_record_path(&run),
                spec::exit_record_path(&run),
            ] {
                let _ = std::fs::remove_file(record);
            }
            format!(
                "unit file gone; checkpoint, work and logs kept in {}",
                self.store.dirs.task_dir(unit).display()
            )
        };
        self.store
            .event(unit, attempt, generation, "removed", &detail);
        log::info!("{unit}: removed {detail}");
        if !detail.is_empty() {
            self.tasks.removal_notes.insert(unit.to_string(), detail);
        }
        self.rescan_if_back(unit);
    }

    /// The unit file may have come back while the task was stopping.
    fn rescan_if_back(&mut self, unit: &str) {
        if self.units.file_of(unit).exists() {
            self.request_rescan();
        }
    }
}

#[cfg(test)]
mod tests;
