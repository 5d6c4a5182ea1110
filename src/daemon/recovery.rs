//! Recovery when the daemon starts: every recorded task is re-adopted (its shim is alive),
//! settled (its attempt ended while nobody watched), or left as it was. A shutdown that a
//! crash interrupted under `keel init` is resumed.

use super::reconcile::{self, Action, Observed};
use super::record::Ending;
use super::record::{Intent, ShimIdentity, TaskRecord, TaskState};
use super::stopping::{self, stop, Stop};
use super::store::transition;
use super::timers::Timer;
use super::{liveness, slices, Daemon, Task};
use crate::sandbox::spec::{self, AttemptSpec, ShimRecord};
use crate::state::{self, now_ms};
use std::time::{Duration, Instant};

impl Daemon {
    /// On start: settle or re-adopt every recorded task (DESIGN, "Durable state").
    pub(crate) fn reconcile_all(&mut self) {
        // Temporary files of the daemon's own writes (not in run/, where live shims write).
        state::remove_stale_temp_files(&self.store.dirs.root);
        if let Ok(entries) = std::fs::read_dir(self.store.dirs.tasks_dir()) {
            for entry in entries.flatten() {
                state::remove_stale_temp_files(&entry.path());
            }
        }
        let names = match self.store.dirs.recorded_units() {
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
        let path = self.store.dirs.record_path(name);
        let error = match state::read_ron::<TaskRecord>(&path) {
            Ok(record) => return record,
            Err(e) => e,
        };
        let aside = path.with_extension("ron.unreadable");
        let _ = std::fs::rename(&path, &aside);
        let run_dir = self.store.dirs.run_dir(name);
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
                // The live attempt's ids stay its own: no other task is given them.
                record.id_block = spec.sandbox.as_ref().and_then(|s| s.id_block);
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
        self.store.event(
            name,
            record.attempt,
            record.generation,
            "record-unreadable",
            &error.to_string(),
        );
        Some(record)
    }

    fn insert_recorded_task(&mut self, name: &str, record: TaskRecord) {
        let accepted_text = std::fs::read_to_string(self.store.dirs.accepted_unit_path(name)).ok();
        // The unit as the units directory has it now (an edited unit's restart policy
        // applies), else the copy the last attempt accepted; the scan after reconcile settles
        // what is gone.
        let current = crate::unit::load_unit_file(&self.units.file_of(name))
            .ok()
            .map(|(_, unit, text)| (unit, text));
        let accepted = accepted_text.as_deref().and_then(|t| {
            crate::unit::parse_unit(&self.store.dirs.accepted_unit_path(name), t)
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
        self.tasks.insert(Task {
            accepted_text,
            started_at,
            ..Task::new(name, record, unit, unit_text)
        });
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
        let run_dir = self.store.dirs.run_dir(name);
        let observed = Observed {
            boot_id: self.instance.boot_id.clone(),
            attempt_lock_held: crate::state::attempt_lock_held(&run_dir),
            shim_record: state::read_ron::<ShimRecord>(&spec::shim_record_path(&run_dir))
                .ok()
                .flatten(),
            exit_record_generation: state::read_ron::<spec::ExitRecord>(&spec::exit_record_path(
                &run_dir,
            ))
            .ok()
            .flatten()
            .map(|e| e.generation),
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
                self.events.timers.add_after(
                    delay,
                    Timer::BackoffExpired {
                        unit: name.to_string(),
                        generation: record.generation,
                    },
                );
            }
            Action::Adopt { shim } => self.adopt(name, shim, record.generation),
            Action::WaitForShim => {
                if tries == 40 {
                    log::warn!("{name}: a shim holds run/attempt.lock but has not written run/shim.ron; still waiting");
                }
                let delay = if tries < 40 { 50 } else { 1000 };
                self.events.timers.add_after(
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
            Action::StartAgain => self.start_again(name),
        }
    }

    /// A start decided by an earlier daemon that never began (it died preparing the
    /// checkout, or before the spawn): queued again, the attempt not counted — its number is
    /// the next attempt's. Its generation stays spent (generations are never handed out
    /// twice); a base tree the dead daemon's worker left half-built has no `ready` marker and
    /// is built again, whole. A pending stop or removal is carried out instead.
    fn start_again(&mut self, unit: &str) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let intent = task.record.intent;
        self.store.task_event(
            task,
            "start-abandoned",
            "the daemon stopped before the attempt began",
        );
        task.record.attempt = task.record.attempt.saturating_sub(1);
        task.record.started_ms = None;
        task.record.intent = Intent::None;
        task.record.reason = Some("its start was interrupted before the attempt began".into());
        log::info!(
            "{unit}: its start (generation {}) never began: queued again, no attempt counted",
            task.record.generation
        );
        transition(
            task,
            TaskState::Queued,
            "start interrupted before the attempt began",
            &mut self.store,
        );
        self.store.queue_changed = true;
        match intent {
            Intent::None | Intent::Interrupt | Intent::Restart => {}
            Intent::Stop | Intent::Remove | Intent::Forget => {
                let _ = self.stop_task(unit, intent);
            }
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
            &self.store.dirs.run_dir(unit),
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
                let _ = self.store.persist(task);
            }
        }
        self.store.queue_changed = true;
    }

    /// Watch the live shim of the attempt `generation` again, once it is sure to be ours.
    fn adopt(&mut self, unit: &str, shim: ShimIdentity, generation: u64) {
        let pidfd = match crate::sys::pidfd_open(shim.pid) {
            Ok(fd) => fd,
            Err(_) => {
                let ending = Ending::from_records(
                    &self.store.dirs.run_dir(unit),
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
                    &self.store.dirs.run_dir(unit),
                    generation,
                    "its shim's pid now belongs to another process",
                );
                self.settle(unit, ending);
                return;
            }
        }
        // And it must sit in the task's own cgroup (its slice in the v2 hierarchy): a shim is
        // spawned into it and never leaves it.
        let slice = slices::slice_of(&self.slices, unit);
        if let Some(slice) = &slice {
            if let Ok(false) = crate::sys::process_in_v2_cgroup(shim.pid, slice.v2_cgroup()) {
                let ending = Ending::from_records(
                    &self.store.dirs.run_dir(unit),
                    generation,
                    "its shim's pid names a process outside the task's cgroup",
                );
                self.settle(unit, ending);
                return;
            }
        }
        let live = self.events.watch_shim(unit, shim.pid, pidfd);
        // Its network's relay (`Allow`), looked after again: restarted if it died, its
        // refusals journaled.
        let network = slice.and_then(|slice| {
            super::network::readopt(&self.store.dirs.run_dir(unit), shim.pid, &slice)
        });
        if network.is_some() {
            self.arm_network_look();
        }
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        task.shim = Some(live);
        task.network = network;
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
                crate::unit::parse_unit(&self.store.dirs.accepted_unit_path(unit), text).ok()
            })
            .or_else(|| task.unit.clone())
            .map(|u| super::queue::Reservation::of(&u.resources));
        slices::watch_oom(task, &self.slices, &mut self.events);
        // Frozen if its record says paused, thawed if not (pausing.rs), before anything acts.
        let (store, timers) = (&mut self.store, &mut self.events.timers);
        super::pausing::restore_at_adoption(task, &self.slices, store, timers);
        if task.record.state != TaskState::Stopping && task.record.intent != Intent::None {
            // A stop, restart or removal requested while the shim was not adopted yet.
            let intent = task.record.intent;
            self.store.event(
                unit,
                0,
                generation,
                "adopted",
                &format!("shim pid {}", shim.pid),
            );
            let timers = &mut self.events.timers;
            if let Stop::RemoveNow { explicit } = stop(task, intent, &mut self.store, timers) {
                // (Not with a live shim, which it now has.)
                self.remove_task(unit, explicit);
                self.liveness.unwatch(unit);
                return;
            }
        } else if task.record.state == TaskState::Stopping {
            // Resume the stop: send the signal again (the daemon may have died before sending
            // it; twice is harmless), with what is left of the timeout.
            let signal = task.stop_signal();
            let elapsed = Duration::from_millis(
                now_ms().saturating_sub(task.record.stop_started_ms.unwrap_or_else(now_ms)),
            );
            let timeout = task.stop_timeout();
            stopping::send_stop_signal(task, signal);
            self.events.timers.add_after(
                timeout.saturating_sub(elapsed),
                Timer::StopTimeout {
                    unit: unit.to_string(),
                    generation,
                },
            );
            self.store.event(
                unit,
                0,
                generation,
                "adopted",
                &format!("shim pid {} (stopping)", shim.pid),
            );
            let _ = self.store.persist(task);
        } else if unchanged {
            self.store
                .task_event(task, "running", &format!("adopted shim pid {}", shim.pid));
        } else {
            let detail = format!("adopted shim pid {}", shim.pid);
            transition(task, TaskState::Running, &detail, &mut self.store);
        }
        self.liveness
            .watch(task, &self.store.dirs, &self.slices, true);
        liveness::check_liveness(
            task,
            &mut self.liveness,
            &mut self.store,
            &mut self.events.timers,
        );
        super::runtime_limit::arm(task, &mut self.events.timers);
    }
}
