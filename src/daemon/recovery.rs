//! Recovery when the daemon starts: every recorded task is re-adopted (its shim is alive),
//! settled (its attempt ended while nobody watched), or left as it was. A shutdown that a
//! crash interrupted under `keel init` is resumed.

use super::reconcile::{self, Action, Observed};
use super::record::{Ending, Intent, ShimIdentity, TaskRecord, TaskState};
use super::timers::Timer;
use super::{Daemon, Shutdown, Task};
use crate::sandbox::spec::{self, AttemptSpec, ShimRecord};
use crate::state::{self, now_ms};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// `state_dir/shutdown.ron`: a shutdown decided under `keel init` (an essential unit ended),
/// so that a daemon respawned in the middle of it finishes it with the same exit code.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShutdownMarker {
    pub exit_code: i32,
    /// Which `keel init` this belongs to (a restarted container starts afresh).
    pub init_instance: String,
}

impl Daemon {
    /// On start: settle or re-adopt every recorded task (DESIGN, "Durable state").
    pub(crate) fn reconcile_all(&mut self) {
        // Temporary files of the daemon's own writes (not in run/, where live shims write).
        state::remove_stale_temp_files(&self.dirs.root);
        if let Ok(entries) = std::fs::read_dir(self.dirs.tasks_dir()) {
            for entry in entries.flatten() {
                state::remove_stale_temp_files(&entry.path());
            }
        }
        let names = match self.dirs.recorded_units() {
            Ok(names) => names,
            Err(e) => {
                log::error!("cannot list recorded tasks: {e}");
                return;
            }
        };
        for name in names {
            let Some(record) = self.load_record(&name) else {
                continue;
            };
            self.insert_recorded_task(&name, record);
            self.reconcile_one(&name, 0);
        }
    }

    /// Read a task's record. An unreadable one (a bug, a hand edit) is set aside and, if a
    /// shim was ever spawned, rebuilt from `run/attempt.ron` so that a live agent is
    /// re-adopted rather than started a second time.
    fn load_record(&mut self, name: &str) -> Option<TaskRecord> {
        let path = self.dirs.record_path(name);
        let error = match state::read_ron::<TaskRecord>(&path) {
            Ok(record) => return record,
            Err(e) => e,
        };
        let aside = path.with_extension("ron.unreadable");
        let _ = std::fs::rename(&path, &aside);
        let run_dir = self.dirs.run_dir(name);
        let spec: Option<AttemptSpec> = state::read_ron(&spec::attempt_path(&run_dir))
            .ok()
            .flatten();
        let mut record = TaskRecord::new(name, now_ms());
        match spec {
            Some(spec) => {
                log::error!(
                    "{name}: {error}: recovered from run/attempt.ron (kept as {})",
                    aside.display()
                );
                record.state = TaskState::Running;
                record.generation = spec.generation;
                record.attempt = spec.attempt;
            }
            None if crate::state::attempt_lock_held(&run_dir) => {
                log::error!("{name}: {error}, and a shim of unknown attempt is alive: not starting it again");
                record.state = TaskState::Failed;
                record.reason = Some(format!(
                    "state unreadable ({error}); a shim was still running"
                ));
            }
            None => {
                log::error!(
                    "{name}: {error}: the task starts over (kept as {})",
                    aside.display()
                );
            }
        }
        self.journal_event(
            name,
            record.attempt,
            record.generation,
            "record-unreadable",
            &error.to_string(),
        );
        Some(record)
    }

    fn insert_recorded_task(&mut self, name: &str, record: TaskRecord) {
        let accepted_text = std::fs::read_to_string(self.dirs.accepted_unit_path(name)).ok();
        // The unit as the units directory has it now (an edited unit's restart policy
        // applies), else the copy the last attempt accepted; the scan after reconcile settles
        // what is gone.
        let current = crate::unit::load_unit_file(&self.units_dir.join(format!("{name}.ron")))
            .ok()
            .map(|(_, unit, text)| (unit, text));
        let accepted = accepted_text.as_deref().and_then(|t| {
            crate::unit::parse_unit(&self.dirs.accepted_unit_path(name), t)
                .ok()
                .map(|unit| (unit, t.to_string()))
        });
        let (unit, unit_text) = match current.or(accepted) {
            Some((unit, text)) => (Some(unit), Some(text)),
            None => (None, None),
        };
        let started_at = record.started_ms.map(|s| {
            Instant::now()
                .checked_sub(Duration::from_millis(now_ms().saturating_sub(s)))
                .unwrap_or_else(Instant::now)
        });
        self.tasks.insert(
            name.to_string(),
            Task {
                accepted_text,
                started_at,
                ..Task::new(name, record, unit, unit_text)
            },
        );
    }

    /// Observe one task's attempt and act on the reconcile decision.
    pub(crate) fn reconcile_one(&mut self, name: &str, tries: u32) {
        let Some(task) = self.tasks.get(name) else {
            return;
        };
        if task.shim.is_some() {
            return;
        }
        let record = task.record.clone();
        let run_dir = self.dirs.run_dir(name);
        let observed = Observed {
            boot_id: self.boot_id.clone(),
            attempt_lock_held: crate::state::attempt_lock_held(&run_dir),
            shim_record: state::read_ron::<ShimRecord>(&spec::shim_record_path(&run_dir))
                .ok()
                .flatten(),
        };
        match reconcile::decide(&record, &observed) {
            Action::Keep => {}
            Action::ArmBackoff { until_ms } => {
                // Wall-clock deadline, clamped: a clock stepped backwards must not park the
                // task for hours.
                let max = self
                    .tasks
                    .get(name)
                    .and_then(|t| t.unit.as_ref())
                    .map_or(Duration::from_secs(300), |u| u.backoff.max.0);
                let delay = Duration::from_millis(until_ms.saturating_sub(now_ms())).min(max);
                self.timers.add_after(
                    delay,
                    Timer::BackoffExpired {
                        unit: name.to_string(),
                        generation: record.generation,
                    },
                );
            }
            Action::Adopt { shim } => self.adopt(name, shim),
            Action::WaitForShim => {
                if tries == 40 {
                    log::warn!("{name}: a shim holds run/attempt.lock but has not written run/shim.ron; still waiting");
                }
                let delay = if tries < 40 { 50 } else { 1000 };
                self.timers.add_after(
                    Duration::from_millis(delay),
                    Timer::ReconcileRetry {
                        unit: name.to_string(),
                        tries: tries + 1,
                    },
                );
            }
            Action::Settle => {
                let ending = Ending::from_records(
                    &run_dir,
                    record.generation,
                    "its shim was gone when the daemon started",
                );
                self.settle(name, ending);
            }
            Action::SettleAfterReboot => self.settle_after_reboot(name),
        }
    }

    /// The host rebooted under a running attempt: the work was interrupted, not failed. The
    /// task is queued again whatever its restart policy (as an orderly shutdown leaves it),
    /// with no backoff and nothing counted against its limit; the next attempt is a resume
    /// (attempt + 1, `KEEL_RESUMED=1`, `KEEL_LAST_EXIT=lost`) in the same checkout. A stop or
    /// removal that was pending is carried out instead.
    fn settle_after_reboot(&mut self, unit: &str) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let ending = Ending::from_records(
            &self.dirs.run_dir(unit),
            task.record.generation,
            "the host rebooted while it ran",
        );
        // An agent that ended before the reboot (its exit record says so) finished: the policy
        // decides, as after any crash.
        let interrupted =
            ending.exit == super::record::LastExit::Lost && task.record.intent == Intent::None;
        if interrupted {
            task.record.intent = Intent::Interrupt;
        }
        self.settle(unit, ending);
        if let Some(task) = self.tasks.get_mut(unit) {
            if interrupted && task.record.state == TaskState::Queued {
                task.record.reason = Some("interrupted by a host reboot; resumes".into());
                let _ = self.persist(unit);
            }
        }
        self.schedule_pending = true;
    }

    fn adopt(&mut self, unit: &str, shim: ShimIdentity) {
        let generation = self.tasks.get(unit).map_or(0, |t| t.record.generation);
        let pidfd = match crate::sys::pidfd_open(shim.pid) {
            Ok(fd) => fd,
            Err(_) => {
                let ending = Ending::from_records(
                    &self.dirs.run_dir(unit),
                    generation,
                    "its shim vanished while being adopted",
                );
                self.settle(unit, ending);
                return;
            }
        };
        // The pidfd names whatever process has this pid now: make sure it is our shim. If the
        // process is already gone from /proc, the pidfd is readable and its end is handled as
        // any shim's.
        if let Ok(start_time) = crate::sys::process_start_time(shim.pid) {
            if start_time != shim.start_time {
                let ending = Ending::from_records(
                    &self.dirs.run_dir(unit),
                    generation,
                    "its shim's pid now belongs to another process",
                );
                self.settle(unit, ending);
                return;
            }
        }
        // And it must sit in the task's own cgroup (its slice in the v2 hierarchy): a shim is
        // spawned into it and never leaves it.
        let slice = self.slice(unit);
        if let Some(slice) = slice {
            if let Ok(false) = crate::sys::process_in_v2_cgroup(shim.pid, slice.v2_path()) {
                let ending = Ending::from_records(
                    &self.dirs.run_dir(unit),
                    generation,
                    "its shim's pid names a process outside the task's cgroup",
                );
                self.settle(unit, ending);
                return;
            }
        }
        let live = self.register_shim(unit, shim.pid, pidfd);
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        task.shim = Some(live);
        // The record on disk already says so: nothing to write (two fsyncs a task, most of a
        // restart's time with many tasks).
        let unchanged =
            task.record.state == TaskState::Running && task.record.shim.as_ref() == Some(&shim);
        task.record.shim = Some(shim.clone());
        // What the attempt holds is what it started with: the accepted copy of its unit.
        task.reserved = task
            .accepted_text
            .as_deref()
            .and_then(|text| {
                crate::unit::parse_unit(&self.dirs.accepted_unit_path(unit), text).ok()
            })
            .or_else(|| task.unit.clone())
            .map(|u| super::queue::Reservation::of(&u.resources));
        self.watch_oom(unit);
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        if task.record.state != TaskState::Stopping && task.record.intent != Intent::None {
            // A stop, restart or removal requested while the shim was not adopted yet.
            let intent = task.record.intent;
            self.journal_event(
                unit,
                0,
                generation,
                "adopted",
                &format!("shim pid {}", shim.pid),
            );
            self.stop_task(unit, intent);
        } else if task.record.state == TaskState::Stopping {
            // Resume the stop: send the signal again (the daemon may have died before sending
            // it; twice is harmless), with what is left of the timeout.
            let signal = task
                .unit
                .as_ref()
                .map_or(libc::SIGTERM, |u| u.stop.signal.0);
            let elapsed = Duration::from_millis(
                now_ms().saturating_sub(task.record.stop_started_ms.unwrap_or_else(now_ms)),
            );
            let timeout = self.stop_timeout(unit);
            self.send_stop_signal(unit, signal);
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
            let _ = self.persist(unit);
        } else if unchanged {
            let attempt = task.record.attempt;
            self.journal_event(
                unit,
                attempt,
                generation,
                "running",
                &format!("adopted shim pid {}", shim.pid),
            );
        } else {
            self.transition(
                unit,
                TaskState::Running,
                &format!("adopted shim pid {}", shim.pid),
            );
        }
        self.watch_liveness(unit, true);
    }

    /// Record a shutdown decided under `keel init`, before acting on it.
    pub(crate) fn persist_shutdown(&mut self, exit_code: i32) {
        let Some(instance) = self.under_init.clone() else {
            return;
        };
        let marker = ShutdownMarker {
            exit_code,
            init_instance: instance,
        };
        if let Err(e) = state::write_ron(&self.dirs.shutdown_marker_path(), &marker) {
            log::error!("cannot record the shutdown: {e}");
        }
    }

    /// A shutdown recorded by an earlier daemon under this same `keel init`, to be finished.
    pub(crate) fn resume_shutdown(&mut self) {
        let path = self.dirs.shutdown_marker_path();
        let marker: Option<ShutdownMarker> = state::read_ron(&path).ok().flatten();
        match (marker, &self.under_init) {
            (Some(marker), Some(instance)) if &marker.init_instance == instance => {
                log::info!(
                    "resuming the shutdown an earlier daemon began (exit {})",
                    marker.exit_code
                );
                self.begin_shutdown(Shutdown::StopTasks {
                    exit_code: marker.exit_code,
                });
            }
            (Some(_), _) => {
                let _ = std::fs::remove_file(&path);
            }
            (None, _) => {}
        }
    }
}
