//! Preemption carried out: the inputs of [`crate::daemon::preemption::decide`] gathered from
//! the tasks, this round's scheduling decision and the memory pressure of keel's tasks, and
//! its pauses and resumes done through the pause path (`PauseOrigin::Keel`: a person's pause
//! is never resumed by keel).

use crate::daemon::preemption::{self, Action, Candidate, Waiter};
use crate::daemon::queue::{Decision, PressureCheck, QueuedTask, Reservation, WaitReason};
use crate::daemon::record::{PauseOrigin, TaskState};
use crate::daemon::{Daemon, Task};

/// What a live attempt holds for the scheduler: its reservation, without CPU while it is
/// paused (frozen, it runs nothing; its pages stay resident, so its memory stays counted).
pub(super) fn held(task: &Task) -> Reservation {
    let reservation = task.reserved.unwrap_or_else(|| {
        (task.unit.as_ref())
            .map(|u| Reservation::of(&u.resources))
            .unwrap_or_default()
    });
    if task.record.paused.is_some() {
        Reservation {
            cpu_millis: 0,
            ..reservation
        }
    } else {
        reservation
    }
}

impl Daemon {
    /// Pause or resume `preemptible` tasks as this round's `decision` calls for.
    pub(super) fn preempt(
        &mut self,
        decision: &Decision,
        queued: &[QueuedTask],
        pressure: &PressureCheck,
    ) {
        let in_play = |t: &Task| {
            t.unit.as_ref().is_some_and(|u| u.preemptible)
                || t.record
                    .paused
                    .as_ref()
                    .is_some_and(|p| p.origin == PauseOrigin::Keel)
        };
        if !self.tasks.values().any(in_play) {
            return;
        }
        let (mut running, mut preempted, mut used_cpu) = (Vec::new(), Vec::new(), 0u64);
        for task in self.tasks.values() {
            if !task.record.state.has_attempt() {
                continue;
            }
            let (priority, preemptible) = task
                .unit
                .as_ref()
                .map_or((0, false), |u| (u.priority, u.preemptible));
            let cpu_millis = task
                .reserved
                .or_else(|| task.unit.as_ref().map(|u| Reservation::of(&u.resources)))
                .unwrap_or_default()
                .cpu_millis;
            let candidate = |since_ms: u64| Candidate {
                unit: task.name.clone(),
                priority,
                preemptible,
                since_ms,
                cpu_millis,
            };
            match &task.record.paused {
                Some(pause) if pause.origin == PauseOrigin::Keel => {
                    preempted.push(candidate(pause.since_ms))
                }
                Some(_) => {}
                None => {
                    used_cpu = used_cpu.saturating_add(cpu_millis);
                    if task.record.state == TaskState::Running && task.shim.is_some() {
                        running.push(candidate(task.record.started_ms.unwrap_or(0)));
                    }
                }
            }
        }
        for started in queued.iter().filter(|q| decision.start.contains(&&*q.unit)) {
            used_cpu = used_cpu.saturating_add(started.reservation.cpu_millis);
        }
        let free_cpu = (self.settings.config.capacity.cpu_millis).saturating_sub(used_cpu);
        let priority_of = |unit: &str| queued.iter().find(|q| &*q.unit == unit).map(|q| q.priority);
        let waiters: Vec<Waiter> = (decision.waiting.iter())
            .filter(|(_, why)| !matches!(why, WaitReason::NeverFits(_)))
            .filter_map(|(unit, why)| {
                let (cpu_short, memory_short) = match why {
                    WaitReason::Resources { cpu, memory } => (
                        cpu.map_or(0, |s| s.needs.saturating_sub(s.free)),
                        memory.map_or(0, |s| s.needs.saturating_sub(s.free)),
                    ),
                    _ => (0, 0),
                };
                Some(Waiter {
                    unit: unit.to_string(),
                    priority: priority_of(unit)?,
                    cpu_short,
                    memory_short,
                })
            })
            .collect();
        let memory = self.memory_pressure_for_preemption(pressure, &running, &preempted);
        for action in preemption::decide(&running, &preempted, &waiters, free_cpu, memory) {
            let done = match &action {
                Action::Pause { unit, why } => {
                    self.pause_task(unit, why, PauseOrigin::Keel).map(drop)
                }
                Action::Resume { unit, why } => {
                    self.resume_task(unit, why, PauseOrigin::Keel).map(drop)
                }
            };
            match done {
                // What it held changed: the next round sees it (the waiter starts, or the
                // resumed task holds its CPU again).
                Ok(()) => self.store.queue_changed = true,
                Err(e) => log::warn!("preemption: {action:?} not done: {e:?}"),
            }
        }
    }

    /// The memory pressure preemption weighs, with its threshold: this round's figure, or one
    /// read now (the round reads none when nothing is queued). `None` with `pressure: Off`
    /// or without cgroups. While a preemptible task runs or a preempted one waits, a round
    /// runs again every [`crate::daemon::pressure::PRESSURE_RECHECK`]: a change of pressure alone changes no state.
    fn memory_pressure_for_preemption(
        &mut self,
        pressure: &PressureCheck,
        running: &[Candidate],
        preempted: &[Candidate],
    ) -> Option<preemption::MemoryPressure> {
        let thresholds = pressure.thresholds?;
        let watching = running.iter().any(|c| c.preemptible) || !preempted.is_empty();
        if !watching {
            return None;
        }
        self.arm_pressure_recheck();
        let figure = match pressure.figures.memory {
            Some(figure) => figure,
            None => self.slices.as_ref().ok()?.pressure().memory?.some_avg10,
        };
        Some(preemption::MemoryPressure {
            percent: f64::from(figure) / 100.0,
            threshold: f64::from(thresholds.memory) / 100.0,
        })
    }
}
