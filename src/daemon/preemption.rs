//! Preemption: which `preemptible: true` tasks to pause (freeze) so that a task of higher
//! priority can start, or so that memory pressure falls, and which paused ones to resume once
//! room returns. A pure function of what runs, what waits, the free capacity and the pressure.
//!
//! Rules:
//! - Only a running task whose unit says `preemptible: true` is ever paused, and only one this
//!   module paused is ever resumed by it (a task a person paused stays paused).
//! - **Capacity.** When the first queued task waiting for capacity lacks CPU, the lowest
//!   priority preemptible tasks below its priority are paused (the most recently started first
//!   within a priority) until their CPU requests cover what it lacks — or none, if all of them
//!   together would not: a pause that frees too little only stops work. A frozen task keeps
//!   its memory resident, so its memory request stays counted, and a task that lacks memory
//!   preempts nobody.
//! - **`max_running`.** A task keel paused holds no `max_running` slot (a person's pause
//!   keeps its slot, as it keeps its CPU). When the first such waiter is held back by the
//!   count, the lowest-priority preemptible task below it is paused — and more, lowest first,
//!   if it also lacks CPU, until their requests cover that too (none, if they cannot).
//! - **Memory pressure.** Above the threshold, the lowest-priority preemptible running task is
//!   paused — one, and no other until the figure can show what that pause changed
//!   (`memory_pause_allowed`: the daemon allows one each 10 s, PSI's `avg10` window).
//! - **Resume.** With no pause this round and memory pressure below half its threshold, the
//!   highest-priority paused task (the earliest paused first) is resumed when its CPU request
//!   fits in what is free, a `max_running` slot is free, and no queued task of higher priority
//!   lacks CPU or a slot, and not memory (what the resume would take from it); one a round.

use std::cmp::Reverse;

/// A running or preempted task as preemption sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub unit: String,
    pub priority: i32,
    pub preemptible: bool,
    /// When its attempt started (running) or when it was paused (preempted), ms.
    pub since_ms: u64,
    /// Its CPU request, millicores.
    pub cpu_millis: u64,
}

/// The first queued task (in the scheduler's order) that waits for capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    pub unit: String,
    pub priority: i32,
    /// What it lacks (0: that resource fits).
    pub cpu_short: u64,
    pub memory_short: u64,
    /// `max_running` tasks run: it needs a slot as well.
    pub needs_slot: bool,
    /// It waits for the host (pressure over its threshold, or the pace of starts): a pause
    /// would not start it, but a resume would take the room it is about to get — so a task
    /// paused for it stays paused while it waits so (else the two would trade places every
    /// look at the pressure).
    pub waits_for_host: bool,
}

/// What is free once this round's starts are counted: CPU (millicores; a paused task's
/// request is not held) and `max_running` slots (`None`: no count limit; a task keel paused
/// holds none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    pub cpu: u64,
    pub slots: Option<usize>,
}

/// The memory pressure of keel's tree (PSI `some avg10`, percent) and its threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryPressure {
    pub percent: f64,
    pub threshold: f64,
}

/// What to do this round, with the reason journaled and shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Pause { unit: String, why: String },
    Resume { unit: String, why: String },
}

/// This round's actions. `running`: the tasks running now (paused ones excluded);
/// `preempted`: the tasks this module paused and has not resumed; `waiters`: every queued
/// task the scheduler keeps waiting (but those that can never fit), in its order, with what
/// each lacks (nothing: it waits for something else); `room`: what is free once this round's
/// starts are counted.
pub fn decide(
    running: &[Candidate],
    preempted: &[Candidate],
    waiters: &[Waiter],
    room: Room,
    memory: Option<MemoryPressure>,
    memory_pause_allowed: bool,
) -> Vec<Action> {
    let pauses = for_capacity(running, waiters);
    if !pauses.is_empty() {
        return pauses;
    }
    if let Some(pressure) = memory.filter(|m| m.percent > m.threshold) {
        if !memory_pause_allowed {
            // The last memory pause does not show in the figure yet: wait, resume nothing.
            return Vec::new();
        }
        return lowest(running, i32::MAX)
            .into_iter()
            .take(1)
            .map(|c| Action::Pause {
                unit: c.unit.clone(),
                why: format!(
                    "memory pressure {:.0}% > {:.0}% (preemptible, priority {})",
                    pressure.percent, pressure.threshold, c.priority
                ),
            })
            .collect();
    }
    if memory.is_some_and(|m| m.percent >= m.threshold / 2.0) {
        return Vec::new();
    }
    resume_one(preempted, waiters, room).into_iter().collect()
}

/// Preemptible running tasks below `priority`, lowest priority first, the newest first within
/// one.
fn lowest(running: &[Candidate], priority: i32) -> Vec<&Candidate> {
    let mut candidates: Vec<&Candidate> = running
        .iter()
        .filter(|c| c.preemptible && c.priority < priority)
        .collect();
    candidates.sort_by_key(|c| (c.priority, Reverse(c.since_ms), c.unit.clone()));
    candidates
}

fn for_capacity(running: &[Candidate], waiters: &[Waiter]) -> Vec<Action> {
    // The first in the scheduler's order that lacks CPU or a slot (one waiting for something
    // else — pressure, the line held — would not start for a pause).
    let Some(waiter) = waiters
        .iter()
        .find(|w| w.cpu_short > 0 || w.memory_short > 0 || w.needs_slot)
    else {
        return Vec::new();
    };
    if waiter.memory_short > 0 {
        return Vec::new();
    }
    let covered =
        |freed: u64, count: usize| freed >= waiter.cpu_short && (count > 0 || !waiter.needs_slot);
    let mut freed = 0u64;
    let mut chosen = Vec::new();
    for candidate in lowest(running, waiter.priority) {
        if covered(freed, chosen.len()) {
            break;
        }
        freed = freed.saturating_add(candidate.cpu_millis);
        chosen.push(candidate);
    }
    if chosen.is_empty() || !covered(freed, chosen.len()) {
        return Vec::new();
    }
    chosen
        .into_iter()
        .map(|c| Action::Pause {
            unit: c.unit.clone(),
            why: format!(
                "preempted for `{}` (priority {} > {})",
                waiter.unit, waiter.priority, c.priority
            ),
        })
        .collect()
}

fn resume_one(preempted: &[Candidate], waiters: &[Waiter], room: Room) -> Option<Action> {
    let next = preempted
        .iter()
        .min_by_key(|c| (Reverse(c.priority), c.since_ms, c.unit.clone()))?;
    // Resuming takes CPU and a slot, not memory (its pages stayed): a waiter of higher
    // priority holds it back only if CPU or a slot is what it lacks, and not memory (one
    // short of memory would wait the same, and the task would stay frozen for nothing).
    let higher_waits = (waiters.iter()).any(|w| {
        w.priority > next.priority
            && (w.cpu_short > 0 || w.needs_slot || w.waits_for_host)
            && w.memory_short == 0
    });
    let fits = next.cpu_millis <= room.cpu && room.slots != Some(0);
    (!higher_waits && fits).then(|| Action::Resume {
        unit: next.unit.clone(),
        why: "room again: no task of higher priority waits".to_string(),
    })
}

#[cfg(test)]
mod tests;
