//! Preemption carried out: the inputs of [`crate::daemon::preemption::decide`] gathered from
//! the tasks, this round's scheduling decision and the memory pressure of keel's tasks, and
//! its pauses and resumes done through the pause path (`PauseOrigin::Keel`: a person's pause
//! is never resumed by keel).

use crate::daemon::preemption::{self, Action, Candidate, Waiter};
use crate::daemon::queue::{Decision, PressureCheck, QueuedTask, Reservation, WaitReason};
use crate::daemon::record::{PauseOrigin, TaskState};
use crate::daemon::{Daemon, Task};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long a task whose pause failed is left out of preemption.
const PAUSE_FAILED_BACKOFF: Duration = Duration::from_secs(60);

/// At most one pause for memory pressure this often: PSI's `avg10` takes about 10 s to show
/// what a pause changed.
const MEMORY_PAUSE_EVERY: Duration = Duration::from_secs(10);

/// What preemption remembers between rounds.
#[derive(Debug, Default)]
pub(crate) struct PreemptionMemory {
    last_memory_pause: Option<Instant>,
    pause_failed: BTreeMap<String, Instant>,
}

/// Whether keel paused the task (preemption), not a person.
fn paused_by_keel(task: &Task) -> bool {
    (task.record.paused.as_ref()).is_some_and(|p| p.origin == PauseOrigin::Keel)
}

/// How many live attempts hold no `max_running` slot: those keel paused (a person's pause
/// keeps its slot, as it keeps its CPU).
pub(super) fn slotless<'t>(tasks: impl Iterator<Item = &'t Task>) -> usize {
    tasks
        .filter(|t| t.record.state.has_attempt() && paused_by_keel(t))
        .count()
}

/// A live attempt's whole reservation: the unit it started with (an edit applies at the next
/// start), or for an adopted attempt the unit as it is now.
fn held_whole(task: &Task) -> Reservation {
    task.reserved.unwrap_or_else(|| {
        (task.unit.as_ref())
            .map(|u| Reservation::of(&u.resources))
            .unwrap_or_default()
    })
}

/// What a live attempt holds for the scheduler: its reservation, without CPU while keel has
/// it paused for a task of higher priority (frozen, it runs nothing; its pages stay resident,
/// so its memory stays counted). A person's pause (`keel pause`) keeps its CPU: the task
/// comes back to it.
pub(super) fn held(task: &Task) -> Reservation {
    let reservation = held_whole(task);
    if paused_by_keel(task) {
        Reservation {
            cpu_millis: 0,
            ..reservation
        }
    } else {
        reservation
    }
}

impl Daemon {
    /// `queued` less the tasks of a priority no higher than a task keel preempted: those wait,
    /// saying behind which one, until it has resumed.
    pub(super) fn behind_preempted(&mut self, queued: Vec<QueuedTask>) -> Vec<QueuedTask> {
        let capacity = &self.settings.config.capacity;
        // One that can never fit again (the capacity was lowered) would hold the line forever.
        let first = (self.tasks.values())
            .filter(|t| paused_by_keel(t))
            .filter(|t| crate::daemon::queue::never_fits(&held_whole(t), capacity).is_none())
            .filter_map(|t| Some((t.unit.as_ref()?.priority, t.name.clone())))
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(&a.1)));
        let Some((floor, paused)) = first else {
            return queued;
        };
        let (behind, rest): (Vec<QueuedTask>, Vec<QueuedTask>) =
            queued.into_iter().partition(|q| q.priority <= floor);
        let reason = WaitReason::Held {
            text: format!(
                "behind `{paused}` (priority {floor}), paused for a task of higher priority: it \
                 resumes first"
            ),
            key: format!("behind-preempted:{paused}"),
        };
        for task in &behind {
            self.note_waiting(&task.unit, reason.clone());
        }
        rest
    }

    /// Pause or resume `preemptible` tasks as this round's `decision` calls for.
    pub(super) fn preempt(
        &mut self,
        decision: &Decision,
        queued: &[QueuedTask],
        pressure: &PressureCheck,
    ) {
        let in_play =
            |t: &Task| t.unit.as_ref().is_some_and(|u| u.preemptible) || paused_by_keel(t);
        if !self.tasks.values().any(in_play) {
            return;
        }
        let (mut running, mut preempted, mut used_cpu) = (Vec::new(), Vec::new(), 0u64);
        let (mut used_memory, mut slots_held) = (0u64, 0usize);
        for task in self.tasks.values() {
            if !task.record.state.has_attempt() {
                continue;
            }
            // Frozen or not, its pages stay resident.
            used_memory = used_memory.saturating_add(held_whole(task).memory);
            let (priority, preemptible) = task
                .unit
                .as_ref()
                .map_or((0, false), |u| (u.priority, u.preemptible));
            let cpu_millis = held_whole(task).cpu_millis;
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
                Some(_) => {
                    used_cpu = used_cpu.saturating_add(cpu_millis);
                    slots_held += 1;
                }
                None => {
                    used_cpu = used_cpu.saturating_add(cpu_millis);
                    slots_held += 1;
                    let failed_lately = (self.preemption.pause_failed.get(&task.name))
                        .is_some_and(|at| at.elapsed() < PAUSE_FAILED_BACKOFF);
                    if task.record.state == TaskState::Running
                        && task.shim.is_some()
                        && !failed_lately
                    {
                        running.push(candidate(task.record.started_ms.unwrap_or(0)));
                    }
                }
            }
        }
        let starting: std::collections::BTreeSet<&str> = decision.start.iter().copied().collect();
        for started in queued.iter().filter(|q| starting.contains(q.unit.as_str())) {
            used_cpu = used_cpu.saturating_add(started.reservation.cpu_millis);
            used_memory = used_memory.saturating_add(started.reservation.memory);
            slots_held += 1;
        }
        let capacity = &self.settings.config.capacity;
        let room = preemption::Room {
            cpu: capacity.cpu_millis.saturating_sub(used_cpu),
            slots: (capacity.max_running).map(|max| max.saturating_sub(slots_held)),
        };
        let free_memory = capacity.memory.saturating_sub(used_memory);
        let queued_by_name: BTreeMap<&str, &QueuedTask> =
            queued.iter().map(|q| (q.unit.as_str(), q)).collect();
        let priority_of = |unit: &str| queued_by_name.get(unit).map(|q| q.priority);
        // A task the host has refused or deferred a start of would not take the room a pause
        // makes: it preempts nobody (else every retry of it would freeze a task for nothing).
        let refused = |unit: &str| {
            (self.tasks.get(unit))
                .is_some_and(|t| t.record.blocked.is_some() || t.start_deferrals > 0)
        };
        let waiters: Vec<Waiter> = (decision.waiting.iter())
            .filter(|(_, why)| !matches!(why, WaitReason::NeverFits(_)))
            .filter_map(|(unit, why)| {
                let ((cpu_short, memory_short), needs_slot) = match why {
                    WaitReason::Resources { .. } | WaitReason::MaxRunning { .. }
                        if refused(unit) =>
                    {
                        ((0, 0), false)
                    }
                    WaitReason::Resources { cpu, memory } => (
                        (
                            cpu.map_or(0, |s| s.needs.saturating_sub(s.free)),
                            memory.map_or(0, |s| s.needs.saturating_sub(s.free)),
                        ),
                        false,
                    ),
                    // The count stopped it before its requests were weighed: what it lacks
                    // of them too, against what is free after this round's starts.
                    WaitReason::MaxRunning { .. } => {
                        let need = queued_by_name.get(unit)?.reservation;
                        let short = (
                            need.cpu_millis.saturating_sub(room.cpu),
                            need.memory.saturating_sub(free_memory),
                        );
                        (short, true)
                    }
                    _ => ((0, 0), false),
                };
                let waits_for_host =
                    matches!(why, WaitReason::Pressure(_) | WaitReason::Pacing { .. });
                Some(Waiter {
                    unit: unit.to_string(),
                    priority: priority_of(unit)?,
                    cpu_short,
                    memory_short,
                    needs_slot,
                    waits_for_host,
                })
            })
            .collect();
        let memory = self.memory_pressure_for_preemption(pressure, &running, &preempted);
        let memory_pause_allowed =
            (self.preemption.last_memory_pause).is_none_or(|at| at.elapsed() >= MEMORY_PAUSE_EVERY);
        let actions = preemption::decide(
            &running,
            &preempted,
            &waiters,
            room,
            memory,
            memory_pause_allowed,
        );
        // The pauses of a round together make the room: one that fails leaves the others
        // freezing tasks for nothing, so they are undone.
        let mut paused_now: Vec<String> = Vec::new();
        for action in actions {
            let done = match &action {
                Action::Pause { unit, why } => {
                    let done = self.pause_task(unit, why, PauseOrigin::Keel).map(drop);
                    if done.is_err() {
                        self.preemption
                            .pause_failed
                            .insert(unit.clone(), Instant::now());
                        for undo in std::mem::take(&mut paused_now) {
                            let why = "the other pauses this room needed failed";
                            if let Err(e) = self.resume_task(&undo, why, PauseOrigin::Keel) {
                                log::warn!("preemption: {undo} not resumed: {e:?}");
                            }
                        }
                        log::warn!("preemption: {unit} not paused: {done:?}");
                        self.store.queue_changed = true;
                        break;
                    }
                    if why.starts_with("memory pressure") {
                        self.preemption.last_memory_pause = Some(Instant::now());
                    }
                    paused_now.push(unit.clone());
                    done
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
        (self.preemption.pause_failed).retain(|_, at| at.elapsed() < PAUSE_FAILED_BACKOFF);
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
