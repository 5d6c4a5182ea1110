//! A task's life in the daemon: start an attempt, notice its end, apply the restart policy.
//! Each transition is persisted before it is acted on; stopping is in `stopping.rs`, recovery
//! after a daemon restart in `recovery.rs`.

use super::policy::{self, Decision, History, Policy};
use super::queue::{QueuedTask, Reservation};
use super::record::{Ending, Intent, LastExit, ShimIdentity, TaskState};
use super::slices::SliceProblem;
use super::spawn::{self, AttemptContext, SpawnError};
use super::timers::Timer;
use super::{Daemon, Shutdown};
use crate::state::{self, now_ms, StateError};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// How long to wait before trying again to start a task whose start could not be persisted.
const START_RETRY: Duration = Duration::from_secs(5);
/// How soon a start waiting for the previous attempt's cgroup to empty is tried again.
const SLICE_BUSY_RETRY: Duration = Duration::from_millis(20);

impl Daemon {
    /// Persist a task's record.
    pub(crate) fn persist(&mut self, unit: &str) -> Result<(), StateError> {
        let Some(task) = self.tasks.get(unit) else {
            return Ok(());
        };
        state::write_ron(&self.dirs.record_path(unit), &task.record).inspect_err(|e| {
            log::error!("{unit}: cannot persist state: {e}");
        })
    }

    /// Change state, persist, journal — in that order. Returns whether the record reached
    /// the disk.
    pub(crate) fn transition(&mut self, unit: &str, to: TaskState, detail: &str) -> bool {
        let Some(task) = self.tasks.get_mut(unit) else {
            return false;
        };
        if to == TaskState::Queued && task.record.state != TaskState::Queued {
            task.queued_since_ms = now_ms();
        }
        if to != TaskState::Queued {
            task.waiting = None;
        }
        if task.record.state.has_attempt() && !to.has_attempt() {
            // What this attempt reserved is free again.
            self.schedule_pending = true;
        }
        task.record.state = to;
        let (attempt, generation) = (task.record.attempt, task.record.generation);
        let persisted = self.persist(unit).is_ok();
        let what = if detail.is_empty() {
            to.to_string()
        } else {
            format!("{to} ({detail})")
        };
        if persisted {
            self.journal_event(unit, attempt, generation, to.as_str(), detail);
            log::info!("{unit}: {what}");
        } else {
            // Not journaled either: the caller may take it back (a stop, a start), and the
            // journal holds what the records held.
            log::warn!("{unit}: {what}: not recorded in the state directory");
        }
        persisted
    }

    /// Start every queued task the scheduler allows.
    pub(crate) fn schedule(&mut self) {
        if self.shutdown.is_some() {
            return;
        }
        let queued: Vec<QueuedTask> = self
            .tasks
            .values()
            .filter(|t| t.record.state == TaskState::Queued && t.seen_file)
            .filter(|t| t.start_retry_at.is_none_or(|at| at <= Instant::now()))
            .filter_map(|t| {
                let unit = t.unit.as_ref()?;
                Some(QueuedTask {
                    unit: t.name.clone(),
                    priority: unit.priority,
                    submitted_ms: t.record.submitted_ms,
                    queued_since_ms: t.queued_since_ms,
                    reservation: Reservation::of(&unit.resources),
                })
            })
            .collect();
        // What live attempts hold: the unit they started with (an edit applies at the next
        // start), or for an adopted attempt the unit as it is now.
        let running: Vec<Reservation> = self
            .tasks
            .values()
            .filter(|t| t.record.state.has_attempt())
            .map(|t| {
                t.reserved.unwrap_or_else(|| {
                    t.unit
                        .as_ref()
                        .map(|u| Reservation::of(&u.resources))
                        .unwrap_or_default()
                })
            })
            .collect();
        let decision = super::queue::decide(
            &queued,
            &running,
            &self.config.capacity,
            now_ms(),
            self.config.starvation_limit_ms(),
        );
        for (unit, why) in decision.waiting {
            let why = why.to_string();
            let Some(task) = self.tasks.get_mut(&unit) else {
                continue;
            };
            if task.waiting.as_deref() != Some(why.as_str()) {
                // One journal line when the reason changes, not one per round.
                let (attempt, generation) = (task.record.attempt, task.record.generation);
                task.waiting = Some(why.clone());
                self.journal_event(&unit, attempt, generation, "waiting", &why);
            }
        }
        for unit in decision.start {
            self.start_attempt(&unit);
        }
    }

    /// Decide (generation + 1, state `starting`), persist, then spawn the shim. If the decision
    /// cannot be persisted, nothing is spawned: a new generation that is not on disk could be
    /// handed out twice after a crash.
    pub(crate) fn start_attempt(&mut self, unit: &str) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let (Some(unit_def), Some(text)) = (task.unit.clone(), task.unit_text.clone()) else {
            return;
        };
        if crate::state::attempt_lock_held(&self.dirs.run_dir(unit)) {
            // A shim of an earlier attempt is still alive (not ours to watch: it will be
            // adopted, or it is ending). Never two live attempts: try again later.
            let before = task.record.clone();
            self.defer_start(
                unit,
                before,
                "a shim of an earlier attempt still holds run/attempt.lock",
            );
            return;
        }
        // The attempt's cgroup, before the decision: one still emptying defers the start.
        let slice = match self.prepare_slice(unit, &unit_def) {
            Ok(slice) => Ok(slice),
            Err(SliceProblem::Busy(why)) => {
                // The previous attempt's killed processes are still exiting (milliseconds,
                // unless one is stuck in the kernel): look again soon; status says why.
                log::debug!("{unit}: start waits: {why}");
                if let Some(task) = self.tasks.get_mut(unit) {
                    task.start_retry_at = Some(Instant::now() + SLICE_BUSY_RETRY);
                    task.waiting = Some(why);
                }
                self.timers.add_after(SLICE_BUSY_RETRY, Timer::Schedule);
                return;
            }
            Err(SliceProblem::Failed(why)) => Err(why),
        };
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let before = task.record.clone();
        task.record.generation += 1;
        task.record.attempt += 1;
        task.record.started_ms = Some(now_ms());
        task.record.finished_ms = None;
        task.record.backoff_until_ms = None;
        task.record.shim = None;
        task.record.intent = Intent::None;
        task.record.stop_started_ms = None;
        task.record.reason = None;
        task.start_retry_at = None;
        let (attempt, generation) = (task.record.attempt, task.record.generation);
        let last_exit = task.record.last_exit.map(|e| e.to_string());

        task.record.state = TaskState::Starting;
        // Decided, in memory only: a death here must leave the task queued as it was.
        state::crash_point("after-decide");
        // Decide, persist, then (only then) say so and act.
        let persisted = self
            .dirs
            .create_task_dirs(unit)
            .map_err(|e| format!("cannot create the task's directories: {e}"))
            .and_then(|()| {
                self.persist(unit)
                    .map_err(|e| format!("cannot persist the start: {e}"))
            });
        if let Err(why) = persisted {
            self.defer_start(unit, before, &why);
            return;
        }
        self.journal_event(
            unit,
            attempt,
            generation,
            "starting",
            &format!("attempt {attempt}"),
        );
        log::info!("{unit}: starting (attempt {attempt})");
        state::crash_point("after-persist-starting");
        if let Some(task) = self.tasks.get_mut(unit) {
            task.started_at = Some(Instant::now());
            task.accepted_text = Some(text.clone());
            task.reserved = Some(Reservation::of(&unit_def.resources));
            task.cpu_samples.set((None, None));
            task.last_oom_ms = None;
            task.keel_kill_ms = None;
        }
        // A restart of an unchanged unit finds its copy already there: no second durable
        // write (a temporary file, two fsyncs and a rename: milliseconds on a slow disk).
        let accepted_path = self.dirs.accepted_unit_path(unit);
        let kept = std::fs::read(&accepted_path).is_ok_and(|held| held == text.as_bytes());
        if !kept {
            if let Err(e) = state::atomic_write(&accepted_path, text.as_bytes()) {
                log::warn!("{unit}: cannot keep a copy of the accepted unit: {e}");
            }
        }
        let run_dir = self.dirs.run_dir(unit);
        let ctx = AttemptContext {
            unit_name: unit,
            attempt,
            generation,
            last_exit,
            last_progress: spawn::last_progress_line(&run_dir),
        };
        let mut attempt_spec = spawn::attempt_spec(&self.dirs, &unit_def, &ctx);
        if let Some(sandbox) = attempt_spec.sandbox.as_mut() {
            // Unit files hold other tasks' settings (and their env: API keys).
            if !self.units_dir.starts_with(&self.dirs.root) {
                sandbox.hidden.push(self.units_dir.clone());
            }
        }
        // The task's checkout (made, or reused as it was) before its cgroup is used.
        let slice = slice.and_then(|slice| {
            self.prepare_checkout(unit, &unit_def, &mut attempt_spec, (attempt, generation))
                .map(|()| slice)
        });
        let slice = match slice {
            Ok(slice) => slice,
            Err(why) => {
                // Never unconfined in silence: the attempt fails with the reason.
                self.fail_spawn(unit, (attempt, generation), why);
                return;
            }
        };
        attempt_spec.cgroup_v1_procs = slice.v1_procs.clone();
        let templates = Some(&mut self.templates);
        match spawn::spawn_shim(&attempt_spec, Some(slice.v2_dir.as_fd()), templates) {
            Ok((pid, pidfd)) => {
                state::crash_point("after-spawn");
                if attempt_spec.sandbox.is_some() && !self.spare_due {
                    self.spare_due = true;
                    self.timers
                        .add_after(super::SPARE_DELAY, Timer::ReplenishSpare);
                }
                let shim = self.register_shim(unit, pid, pidfd);
                let start_time = crate::sys::process_start_time(pid).unwrap_or(0);
                let boot_id = self.boot_id.clone();
                if let Some(task) = self.tasks.get_mut(unit) {
                    task.record.shim = Some(ShimIdentity {
                        pid,
                        start_time,
                        boot_id,
                    });
                    task.shim = Some(shim);
                }
                self.transition(unit, TaskState::Running, &format!("shim pid {pid}"));
                self.watch_oom(unit);
                self.watch_liveness(unit, false);
            }
            Err(SpawnError::PreviousShimAlive) => {
                // Never two live attempts: wait for the old shim (its pidfd is not ours, or
                // it would not be running) and try again.
                let why = SpawnError::PreviousShimAlive.to_string();
                self.defer_start(unit, before, &why);
                // `starting` reached the disk: put the record back as it was.
                let _ = self.persist(unit);
            }
            // The unit's own mistake (an unknown user): failed to spawn, as the agent's
            // missing binary is.
            Err(SpawnError::Launch(why)) => self.fail_spawn(unit, (attempt, generation), why),
            Err(e) => {
                let why = e.to_string();
                log::error!("{unit}: cannot start: {why}");
                self.journal_event(unit, attempt, generation, "start-failed", &why);
                self.settle(unit, Ending::lost(why));
            }
        }
    }

    /// The attempt could not start for a reason of the unit's (its checkout, its sandbox):
    /// journaled, and settled as `spawn-failed` with the reason.
    fn fail_spawn(&mut self, unit: &str, (attempt, generation): (u32, u64), why: String) {
        log::error!("{unit}: cannot start: {why}");
        self.journal_event(unit, attempt, generation, "start-failed", &why);
        self.settle(
            unit,
            Ending {
                exit: LastExit::SpawnFailed,
                note: Some(why),
                ended_ms: None,
            },
        );
    }

    /// Undo an undecided start: the task stays queued and is retried after `START_RETRY`. The
    /// record on disk was not changed (or the change did not take): memory goes back to it.
    fn defer_start(&mut self, unit: &str, before: super::record::TaskRecord, why: &str) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let reason = format!("start deferred: {why}");
        let repeated = before.reason.as_deref() == Some(reason.as_str());
        task.record = before;
        task.record.reason = Some(reason);
        task.start_retry_at = Some(Instant::now() + START_RETRY);
        let (attempt, generation) = (task.record.attempt, task.record.generation);
        if !repeated {
            log::error!("{unit}: start deferred: {why}");
            self.journal_event(unit, attempt, generation, "start-deferred", why);
        }
        self.timers.add_after(START_RETRY, Timer::Schedule);
    }

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
        // Before the deregistration, which forgets it.
        let reaped = self.reaped.remove(&shim.pid);
        self.deregister_shim(&shim);
        let how = match reaped {
            Some(nix::sys::wait::WaitStatus::Signaled(_, sig, _)) => {
                format!("shim killed by {}", sig.as_str())
            }
            Some(nix::sys::wait::WaitStatus::Exited(_, code))
                if code == crate::sandbox::launch::SPEC_NOT_WRITTEN =>
            {
                "the attempt's spec could not be written (run/shim.log says why); its agent was killed"
                    .to_string()
            }
            Some(nix::sys::wait::WaitStatus::Exited(_, code)) => {
                format!("shim exited {code} without an exit record")
            }
            _ => "shim vanished without an exit record".to_string(),
        };
        let ending = Ending::from_records(&self.dirs.run_dir(unit), generation, &how);
        if ending.exit == LastExit::Lost {
            if let Some(note) = &ending.note {
                if note.contains("ignored") {
                    let attempt = self.tasks.get(unit).map_or(0, |t| t.record.attempt);
                    self.journal_event(unit, attempt, generation, "fenced", note);
                }
            }
        }
        self.settle(unit, ending);
    }

    /// Apply the restart policy (or the pending intent) to an ended attempt.
    pub(crate) fn settle(&mut self, unit: &str, mut ending: Ending) {
        let holds = !self.templates.is_empty() || self.templates.spare().is_some();
        if holds && !self.tasks.values().any(|t| t.shim.is_some()) {
            // Nothing runs: no template (or spare's copy of one) may keep the host's
            // filesystems busy, and an idle daemon keeps no spare process.
            self.templates.clear();
        }
        let jitter = jitter();
        // An OOM event that came in the same round as the exit: journal it first.
        self.check_oom(unit, false);
        ending.exit = self.account_oom(unit, ending.exit, ending.ended_ms);
        self.release_slice(unit);
        if let Some(task) = self.tasks.get(unit) {
            let (attempt, generation) = (task.record.attempt, task.record.generation);
            self.harvest_checkout(unit, attempt, generation);
        }
        self.unwatch_liveness(unit);
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
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
        // Stopped by the liveness watch: the attempt ends as `stalled` (liveness.rs).
        let stall = super::liveness::take_stall(&mut task.record, &mut ending);
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
        self.journal_event(unit, attempt, generation, "exited", &detail);
        log::info!("{unit}: attempt {attempt} ended: {detail}");

        if matches!(intent, Intent::Remove | Intent::Forget) {
            self.remove_task(unit, intent == Intent::Remove);
            return;
        }
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let Some(unit_def) = task.unit.clone() else {
            // The unit file is gone and no removal is pending: wait for the next scan.
            task.record.reason = Some("unit file missing".into());
            self.transition(unit, TaskState::Stopped, "unit file missing");
            return;
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
        let (decision, history) = match stall.filter(|s| s.kill && intent == Intent::None) {
            // `on_stall: Kill`: no restart, whatever the policy says.
            Some(stall) => (
                Decision::Failed {
                    reason: format!("{}; on_stall Kill", stall.reason),
                },
                history,
            ),
            None => policy::decide(&policy, &history, intent, exit, ran_for, now_ms(), jitter),
        };
        task.record.restarts = history.restarts;
        task.record.consecutive_failures = history.consecutive_failures;
        let shutting_down = self.shutdown.is_some();
        if matches!(decision, Decision::Succeeded | Decision::Failed { .. })
            && unit_def.essential
            && self.under_init.is_some()
        {
            // The shutdown this final state implies is recorded first: a crash between the
            // two writes must not leave a final essential unit and a container that never ends.
            self.persist_shutdown(exit.exit_code());
        }
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        match decision {
            Decision::Succeeded => {
                task.record.reason = None;
                self.transition(unit, TaskState::Succeeded, &exit.to_string());
                self.on_final(unit, exit);
            }
            Decision::Failed { reason } => {
                let reason = match ending.note {
                    Some(note) => format!("{reason} ({note})"),
                    None => reason,
                };
                task.record.reason = Some(reason.clone());
                self.transition(unit, TaskState::Failed, &reason);
                self.on_final(unit, exit);
            }
            Decision::Interrupted => {
                task.record.reason =
                    Some("interrupted by daemon shutdown; resumes at next start".into());
                self.transition(unit, TaskState::Queued, "interrupted by shutdown");
            }
            Decision::Restart { .. } if shutting_down => {
                // No new attempt while shutting down: it resumes at the next start.
                task.record.reason = Some("resumes at next start".into());
                self.transition(unit, TaskState::Queued, "restart after shutdown");
            }
            Decision::Restart { delay } if delay.is_zero() => {
                self.transition(unit, TaskState::Queued, "restart");
                self.schedule_pending = true;
            }
            Decision::Restart { delay } => {
                let until = now_ms() + delay.as_millis() as u64;
                task.record.backoff_until_ms = Some(until);
                task.record.reason = ending.note;
                self.transition(
                    unit,
                    TaskState::Backoff,
                    &format!("restart in {}", crate::fmt::duration_precise(delay)),
                );
                self.timers.add_after(
                    delay,
                    Timer::BackoffExpired {
                        unit: unit.to_string(),
                        generation,
                    },
                );
            }
            Decision::Stopped => {
                task.record.reason = Some("stopped by request".into());
                self.transition(unit, TaskState::Stopped, &exit.to_string());
            }
            Decision::Remove => self.remove_task(unit, true),
        }
    }

    /// An essential unit that finished for good ends `keel init` with its status.
    fn on_final(&mut self, unit: &str, exit: LastExit) {
        let essential = self
            .tasks
            .get(unit)
            .and_then(|t| t.unit.as_ref())
            .is_some_and(|u| u.essential);
        if essential && self.under_init.is_some() {
            let code = exit.exit_code();
            log::info!(
                "{unit}: essential unit finished ({exit}): shutting down with status {code}"
            );
            self.journal_event(
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
        let Some(task) = self.tasks.get(unit) else {
            return;
        };
        if task.record.state != TaskState::Backoff || task.record.generation != generation {
            return;
        }
        self.transition(unit, TaskState::Queued, "backoff over");
        self.schedule_pending = true;
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
