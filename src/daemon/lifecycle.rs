//! A task's life in the daemon: start an attempt, notice its end, apply the restart policy,
//! stop it. Each transition is persisted before it is acted on.

use super::policy::{self, Decision, History, Policy};
use super::reconcile::{self, Action, Observed};
use super::record::{Intent, LastExit, ShimIdentity, TaskRecord, TaskState};
use super::spawn::{self, AttemptContext};
use super::timers::Timer;
use super::{Daemon, Shutdown, Task, FORCE_KILL_GRACE};
use crate::sandbox::spec::{self, ExitRecord, ShimRecord};
use crate::state::{self, now_ms};
use std::time::{Duration, Instant};

impl Daemon {
    /// Persist a task's record; a failure is logged and journaled, the daemon carries on.
    pub(crate) fn persist(&mut self, unit: &str) {
        let Some(task) = self.tasks.get(unit) else {
            return;
        };
        if let Err(e) = state::write_ron(&self.dirs.record_path(unit), &task.record) {
            log::error!("{unit}: cannot persist state: {e}");
        }
    }

    /// Change state, persist, journal — in that order.
    pub(crate) fn transition(&mut self, unit: &str, to: TaskState, detail: &str) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        task.record.state = to;
        let (attempt, generation) = (task.record.attempt, task.record.generation);
        self.persist(unit);
        self.journal_event(unit, attempt, generation, to.as_str(), detail);
        if detail.is_empty() {
            log::info!("{unit}: {to}");
        } else {
            log::info!("{unit}: {to} ({detail})");
        }
    }

    /// Start every queued task the scheduler allows.
    pub(crate) fn schedule(&mut self) {
        if self.shutdown.is_some() {
            return;
        }
        let queued: Vec<super::queue::Candidate> = self
            .tasks
            .values()
            .filter(|t| t.record.state == TaskState::Queued && t.unit.is_some())
            .map(|t| super::queue::Candidate {
                unit: t.name.clone(),
                priority: t.unit.as_ref().map_or(0, |u| u.priority),
                submitted_ms: t.record.submitted_ms,
            })
            .collect();
        let running = self
            .tasks
            .values()
            .filter(|t| t.record.state.has_attempt())
            .count();
        for unit in super::queue::pick_startable(&queued, running, None) {
            self.start_attempt(&unit);
        }
    }

    /// Decide (generation + 1, state `starting`), persist, then spawn the shim.
    pub(crate) fn start_attempt(&mut self, unit: &str) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let (Some(unit_def), Some(text)) = (task.unit.clone(), task.unit_text.clone()) else {
            return;
        };
        task.record.generation += 1;
        task.record.attempt += 1;
        task.record.started_ms = Some(now_ms());
        task.record.finished_ms = None;
        task.record.backoff_until_ms = None;
        task.record.shim = None;
        task.record.intent = Intent::None;
        task.record.stop_started_ms = None;
        task.record.reason = None;
        task.started_at = Some(Instant::now());
        task.accepted_text = Some(text.clone());
        let (attempt, generation) = (task.record.attempt, task.record.generation);
        let last_exit = task.record.last_exit.map(|e| e.to_string());

        if let Err(e) = self.dirs.create_task_dirs(unit) {
            self.fail_to_start(unit, &format!("cannot create the task's directories: {e}"));
            return;
        }
        self.transition(unit, TaskState::Starting, &format!("attempt {attempt}"));
        state::crash_point("after-persist-starting");
        if let Err(e) = state::atomic_write(&self.dirs.accepted_unit_path(unit), text.as_bytes()) {
            log::warn!("{unit}: cannot keep a copy of the accepted unit: {e}");
        }
        let run_dir = self.dirs.run_dir(unit);
        let ctx = AttemptContext {
            unit_name: unit,
            attempt,
            generation,
            last_exit,
            last_progress: spawn::last_progress_line(&run_dir),
        };
        let attempt_spec = spawn::attempt_spec(&self.dirs, &unit_def, &ctx);
        match spawn::spawn_shim(&attempt_spec) {
            Ok((pid, pidfd)) => {
                state::crash_point("after-spawn");
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
            }
            Err(e) => self.fail_to_start(unit, &e.to_string()),
        }
    }

    /// The shim could not be spawned: counts as a failed attempt (backoff applies).
    fn fail_to_start(&mut self, unit: &str, why: &str) {
        log::error!("{unit}: cannot start: {why}");
        let (attempt, generation) = self
            .tasks
            .get(unit)
            .map_or((0, 0), |t| (t.record.attempt, t.record.generation));
        self.journal_event(unit, attempt, generation, "start-failed", why);
        self.settle(unit, LastExit::Lost, Some(why.to_string()));
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
        self.deregister_shim(&shim);
        let reaped = self.reaped.remove(&shim.pid);
        let run_dir = self.dirs.run_dir(unit);
        let record: Option<ExitRecord> = state::read_ron(&spec::exit_record_path(&run_dir))
            .unwrap_or_else(|e| {
                log::error!("{unit}: {e}");
                None
            });
        let (exit, spawn_error) = match record {
            Some(r) if r.generation == generation => (LastExit::Agent(r.status), r.spawn_error),
            Some(r) => {
                self.journal_event(
                    unit,
                    r.attempt,
                    r.generation,
                    "fenced",
                    &format!(
                        "exit record of generation {} ignored (current {generation})",
                        r.generation
                    ),
                );
                (LastExit::Lost, None)
            }
            None => {
                let how = match reaped {
                    Some(nix::sys::wait::WaitStatus::Signaled(_, sig, _)) => {
                        format!("shim killed by {}", sig.as_str())
                    }
                    Some(nix::sys::wait::WaitStatus::Exited(_, code)) => {
                        format!("shim exited {code} without an exit record")
                    }
                    _ => "shim vanished without an exit record".to_string(),
                };
                (LastExit::Lost, Some(how))
            }
        };
        self.settle(unit, exit, spawn_error);
    }

    /// Apply the restart policy (or the pending intent) to an ended attempt.
    pub(crate) fn settle(&mut self, unit: &str, exit: LastExit, note: Option<String>) {
        let jitter = jitter();
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
        task.record.last_exit = Some(exit);
        task.record.shim = None;
        task.record.stop_started_ms = None;
        task.record.finished_ms = Some(now_ms());
        let intent = task.record.intent;
        task.record.intent = Intent::None;
        let mut detail = format!("{exit} after {}", crate::cli::format::duration(ran_for));
        if let Some(note) = &note {
            detail.push_str(&format!("; {note}"));
        }
        self.journal_event(unit, attempt, generation, "exited", &detail);
        log::info!("{unit}: attempt {attempt} ended: {detail}");

        if intent == Intent::Remove {
            self.remove_task(unit);
            return;
        }
        if self.shutdown.is_some() {
            self.set_interrupted(unit);
            return;
        }
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let Some(unit_def) = task.unit.clone() else {
            // The unit file is gone: the task goes with it.
            self.remove_task(unit);
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
        let (decision, history) =
            policy::decide(&policy, &history, intent, exit, ran_for, now_ms(), jitter);
        task.record.restarts = history.restarts;
        task.record.consecutive_failures = history.consecutive_failures;
        match decision {
            Decision::Succeeded => {
                task.record.reason = None;
                self.transition(unit, TaskState::Succeeded, &exit.to_string());
                self.on_final(unit, exit);
            }
            Decision::Failed { reason } => {
                let reason = match note {
                    Some(note) => format!("{reason} ({note})"),
                    None => reason,
                };
                task.record.reason = Some(reason.clone());
                self.transition(unit, TaskState::Failed, &reason);
                self.on_final(unit, exit);
            }
            Decision::Restart { delay } if delay.is_zero() => {
                self.transition(unit, TaskState::Queued, "restart");
                self.schedule_pending = true;
            }
            Decision::Restart { delay } => {
                let until = now_ms() + delay.as_millis() as u64;
                task.record.backoff_until_ms = Some(until);
                task.record.reason = note;
                self.transition(
                    unit,
                    TaskState::Backoff,
                    &format!("restart in {}", crate::cli::format::duration_precise(delay)),
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
            Decision::Remove => self.remove_task(unit),
        }
    }

    /// The daemon is shutting down: the task resumes at the next start (a host reboot or
    /// daemon upgrade must not turn running work into stopped work).
    fn set_interrupted(&mut self, unit: &str) {
        if let Some(task) = self.tasks.get_mut(unit) {
            if task.unit.is_none() {
                self.remove_task(unit);
                return;
            }
            task.record.reason =
                Some("interrupted by daemon shutdown; resumes at next start".into());
            self.transition(unit, TaskState::Queued, "interrupted by shutdown");
        }
    }

    /// An essential unit that finished for good ends `keel init` with its status.
    fn on_final(&mut self, unit: &str, exit: LastExit) {
        let essential = self
            .tasks
            .get(unit)
            .and_then(|t| t.unit.as_ref())
            .is_some_and(|u| u.essential);
        if essential && self.under_init {
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

    /// Ask the attempt to end: `stop.signal` now, SIGKILL after `stop.timeout`. What happens
    /// when it has ended is `intent`. A task without a live attempt is settled at once.
    pub(crate) fn stop_task(&mut self, unit: &str, intent: Intent) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        if task.shim.is_none() {
            match intent {
                Intent::Remove => self.remove_task(unit),
                Intent::Stop => {
                    if !task.record.state.is_final() || task.record.state == TaskState::Succeeded {
                        task.record.reason = Some("stopped by request".into());
                        task.record.backoff_until_ms = None;
                        self.transition(unit, TaskState::Stopped, "");
                    }
                }
                Intent::Restart => {
                    task.record.restarts.clear();
                    task.record.consecutive_failures = 0;
                    task.record.backoff_until_ms = None;
                    self.transition(unit, TaskState::Queued, "restart");
                    self.schedule_pending = true;
                }
                Intent::None => {}
            }
            return;
        }
        // A stronger intent wins over a weaker one already pending (rm over stop).
        if intent == Intent::Remove || task.record.intent == Intent::None {
            task.record.intent = intent;
        }
        if task.record.state == TaskState::Stopping {
            self.persist(unit);
            return;
        }
        let signal = task
            .unit
            .as_ref()
            .map_or(libc::SIGTERM, |u| u.stop.signal.0);
        let timeout = task
            .unit
            .as_ref()
            .map_or(Duration::from_secs(30), |u| u.stop.timeout.0);
        task.record.stop_started_ms = Some(now_ms());
        let generation = task.record.generation;
        self.transition(
            unit,
            TaskState::Stopping,
            &format!(
                "{}, SIGKILL after {}",
                crate::unit::signal_name(signal),
                crate::cli::format::duration_precise(timeout)
            ),
        );
        self.signal_shim(unit, signal);
        self.timers.add_after(
            timeout,
            Timer::StopTimeout {
                unit: unit.to_string(),
                generation,
            },
        );
    }

    /// Shutdown: stop a running task so that it resumes at the next start.
    pub(crate) fn interrupt_for_shutdown(&mut self, unit: &str) {
        let Some(task) = self.tasks.get(unit) else {
            return;
        };
        if task.shim.is_some() {
            self.stop_task(unit, Intent::Stop);
        }
    }

    /// Send a signal to the attempt's shim through its pidfd (never a recycled pid).
    pub(crate) fn signal_shim(&mut self, unit: &str, signal: i32) -> bool {
        let Some(shim) = self.tasks.get(unit).and_then(|t| t.shim.as_ref()) else {
            return false;
        };
        match crate::sys::pidfd_send_signal(&shim.pidfd, signal) {
            Ok(()) => true,
            Err(e) => {
                log::warn!(
                    "{unit}: signal {} to shim {}: {e}",
                    crate::unit::signal_name(signal),
                    shim.pid
                );
                false
            }
        }
    }

    pub(crate) fn on_stop_timeout(&mut self, unit: &str, generation: u64) {
        if !self.still_stopping(unit, generation) {
            return;
        }
        let attempt = self.tasks.get(unit).map_or(0, |t| t.record.attempt);
        self.journal_event(unit, attempt, generation, "stop-timeout", "SIGKILL");
        log::warn!("{unit}: stop timeout: SIGKILL");
        self.signal_shim(unit, spec::kill_request_signal());
        self.timers.add_after(
            FORCE_KILL_GRACE,
            Timer::StopForce {
                unit: unit.to_string(),
                generation,
            },
        );
    }

    pub(crate) fn on_stop_force(&mut self, unit: &str, generation: u64) {
        if !self.still_stopping(unit, generation) {
            return;
        }
        log::error!("{unit}: shim did not end after SIGKILL of its agent: killing the shim");
        self.signal_shim(unit, libc::SIGKILL);
    }

    fn still_stopping(&self, unit: &str, generation: u64) -> bool {
        self.tasks.get(unit).is_some_and(|t| {
            t.record.generation == generation
                && t.record.state == TaskState::Stopping
                && t.shim.is_some()
        })
    }

    /// Forget a task: its record, run files and checkpoint go; its work directory is kept
    /// when it holds anything (a user's work is never deleted behind their back).
    pub(crate) fn remove_task(&mut self, unit: &str) {
        let Some(task) = self.tasks.remove(unit) else {
            return;
        };
        if let Some(shim) = &task.shim {
            self.deregister_shim(shim);
        }
        let (attempt, generation) = (task.record.attempt, task.record.generation);
        let dir = self.dirs.task_dir(unit);
        let work = self.dirs.work_dir(unit);
        let work_has_files = std::fs::read_dir(&work).is_ok_and(|mut d| d.next().is_some());
        let mut detail = String::new();
        for path in [
            self.dirs.record_path(unit),
            self.dirs.accepted_unit_path(unit),
        ] {
            let _ = std::fs::remove_file(path);
        }
        let _ = std::fs::remove_dir_all(self.dirs.run_dir(unit));
        let _ = std::fs::remove_dir_all(self.dirs.checkpoint_dir(unit));
        if work_has_files {
            detail = format!("work directory kept: {}", work.display());
        } else {
            let _ = std::fs::remove_dir_all(&dir);
        }
        self.journal_event(unit, attempt, generation, "removed", &detail);
        log::info!("{unit}: removed {detail}");
    }

    /// On start: settle or re-adopt every recorded task (DESIGN, "Durable state").
    pub(crate) fn reconcile_all(&mut self) {
        let names = match self.dirs.recorded_units() {
            Ok(names) => names,
            Err(e) => {
                log::error!("cannot list recorded tasks: {e}");
                return;
            }
        };
        // Temporary files of the daemon's own writes (not in run/, where live shims write).
        state::remove_stale_temp_files(&self.dirs.root);
        if let Ok(entries) = std::fs::read_dir(self.dirs.tasks_dir()) {
            for entry in entries.flatten() {
                state::remove_stale_temp_files(&entry.path());
            }
        }
        for name in names {
            let record: TaskRecord = match state::read_ron(&self.dirs.record_path(&name)) {
                Ok(Some(record)) => record,
                Ok(None) => continue,
                Err(e) => {
                    log::error!("{name}: {e}: the task starts over as new");
                    let bad = self
                        .dirs
                        .record_path(&name)
                        .with_extension("ron.unreadable");
                    let _ = std::fs::rename(self.dirs.record_path(&name), bad);
                    continue;
                }
            };
            let run_dir = self.dirs.run_dir(&name);
            let observed = Observed {
                boot_id: self.boot_id.clone(),
                shim_record: state::read_ron::<ShimRecord>(&spec::shim_record_path(&run_dir))
                    .ok()
                    .flatten(),
                exit_record: state::read_ron::<ExitRecord>(&spec::exit_record_path(&run_dir))
                    .ok()
                    .flatten(),
                alive: |id| crate::sys::same_process_alive(id.pid, id.start_time),
            };
            let accepted_text = std::fs::read_to_string(self.dirs.accepted_unit_path(&name)).ok();
            let started_at = record.started_ms.map(|s| {
                Instant::now()
                    .checked_sub(Duration::from_millis(now_ms().saturating_sub(s)))
                    .unwrap_or_else(Instant::now)
            });
            // The unit as the units directory has it now (the restart policy of an edited unit
            // applies), else the copy the last attempt accepted; the directory scan that
            // follows reconcile settles what is gone.
            let current = crate::unit::load_unit_file(&self.units_dir.join(format!("{name}.ron")))
                .ok()
                .map(|(_, unit, text)| (unit, text));
            let accepted = accepted_text.as_deref().and_then(|t| {
                crate::unit::parse_unit(&self.dirs.accepted_unit_path(&name), t)
                    .ok()
                    .map(|unit| (unit, t.to_string()))
            });
            let (unit, unit_text) = match current.or(accepted) {
                Some((unit, text)) => (Some(unit), Some(text)),
                None => (None, None),
            };
            self.tasks.insert(
                name.clone(),
                Task {
                    name: name.clone(),
                    record: record.clone(),
                    unit,
                    unit_text,
                    accepted_text,
                    shim: None,
                    started_at,
                },
            );
            match reconcile::decide(&record, &observed) {
                Action::Keep => {}
                Action::ArmBackoff { until_ms } => {
                    let delay = Duration::from_millis(until_ms.saturating_sub(now_ms()));
                    self.timers.add_after(
                        delay,
                        Timer::BackoffExpired {
                            unit: name.clone(),
                            generation: record.generation,
                        },
                    );
                }
                Action::Adopt { shim } => self.adopt(&name, shim),
                Action::Settle { exit, spawn_error } => {
                    let note = spawn_error.or_else(|| {
                        (exit == LastExit::Lost)
                            .then(|| "its shim was gone when the daemon started".to_string())
                    });
                    self.settle(&name, exit, note);
                }
            }
        }
    }

    fn adopt(&mut self, unit: &str, shim: ShimIdentity) {
        let pidfd = match crate::sys::pidfd_open(shim.pid) {
            Ok(fd) => fd,
            Err(e) => {
                log::warn!("{unit}: shim {} vanished while adopting: {e}", shim.pid);
                self.settle(
                    unit,
                    LastExit::Lost,
                    Some(format!("shim {} vanished", shim.pid)),
                );
                return;
            }
        };
        // The pid could have been reused between the start-time check and pidfd_open.
        if !crate::sys::same_process_alive(shim.pid, shim.start_time) {
            self.settle(
                unit,
                LastExit::Lost,
                Some(format!("shim {} vanished", shim.pid)),
            );
            return;
        }
        let live = self.register_shim(unit, shim.pid, pidfd);
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        task.shim = Some(live);
        task.record.shim = Some(shim.clone());
        let stopping = task.record.state == TaskState::Stopping;
        let generation = task.record.generation;
        if stopping {
            // Resume the stop where it was: the timeout counts from when it began.
            let timeout = task
                .unit
                .as_ref()
                .map_or(Duration::from_secs(30), |u| u.stop.timeout.0);
            let elapsed = Duration::from_millis(
                now_ms().saturating_sub(task.record.stop_started_ms.unwrap_or_else(now_ms)),
            );
            self.timers.add_after(
                timeout.saturating_sub(elapsed),
                Timer::StopTimeout {
                    unit: unit.to_string(),
                    generation,
                },
            );
            self.journal_event(
                unit,
                0,
                generation,
                "adopted",
                &format!("shim pid {} (stopping)", shim.pid),
            );
            self.persist(unit);
        } else {
            self.transition(
                unit,
                TaskState::Running,
                &format!("adopted shim pid {}", shim.pid),
            );
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
