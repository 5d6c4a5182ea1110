//! The scheduler: which queued tasks start now. A pure function of the queue, what runs, the
//! daemon's capacity and the clock — no I/O, so every rule is unit-tested.
//!
//! Rules:
//! - Order is priority (higher first), then submission time (earlier first), then name.
//! - A task starts only when its requests (`resources.cpu`, `.memory`: its reservation) fit in
//!   what the running tasks' requests leave, and while fewer than `max_running` tasks run.
//!   Limits play no part here: they are the kernel's to enforce.
//! - ...and while the pressure of keel's tasks (PSI `some avg10` of CPU, memory and I/O, read
//!   by the daemon and handed in as [`PressureCheck`]) is at or below the thresholds of
//!   `keel.ron`: requests are what tasks declare, pressure is what the machine shows, and a
//!   machine saturated by bursts (builds at once) takes no new task until it calms down. While
//!   nothing of keel's runs, the first task in order starts whatever the pressure: the figure
//!   is then not its tasks' doing (the host's, or a task's that ended), and no start of keel's
//!   could make it fall.
//! - **Pacing.** While a figure is above half its threshold (but none above it) and something
//!   of keel's runs, at most one task starts per `settle` window (`keel.ron`
//!   `pressure.settle`, 5 s): `avg10` lags what a start adds by seconds, so a reading just
//!   under the threshold cannot tell how many more starts the machine takes — all of them at
//!   once took it back to 94% in the admission benchmark. A calm machine (every figure at or
//!   under half its threshold) still starts a batch in one round.
//! - A smaller task may pass a blocked larger one (backfilling keeps the machine busy), but only
//!   while the larger one has waited less than `starvation_limit`. Once it has waited that long,
//!   it holds the line: nothing behind it starts until enough capacity frees for it. Without
//!   this, a stream of small tasks could keep a large one waiting forever.
//!
//! CPU is counted in integer millicores: summing `f64` cores drifts (ten reservations of 0.1
//! sum to 0.9999999999999999, which would not fit in 1.0).

use crate::config::pressure::PressureThresholds;
use crate::config::Capacity;
use crate::fmt::{format_bytes, format_cpu, format_waited};
use crate::unit::{cpu_millis, Resources};
use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What a task holds while it runs: the requests of the unit's `resources` (never its
/// limits), in integer units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reservation {
    /// CPU in thousandths of a core (`cpu: 1.5` → 1500).
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory: u64,
}

impl Reservation {
    /// The reservation of a unit's `resources`: `cpu` and `memory`, the requests; `cpu_limit`
    /// and `memory_limit` are the kernel's alone. A positive CPU share is at least one millicore,
    /// so that no task that asked for CPU is counted as free.
    pub fn of(resources: &Resources) -> Reservation {
        Reservation {
            cpu_millis: cpu_millis(resources.cpu),
            memory: resources.memory.0,
        }
    }
}

/// A queued task as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedTask {
    pub unit: String,
    pub priority: i32,
    /// When the task was submitted (ms since the epoch): its place in the order.
    pub submitted_ms: u64,
    /// When it last entered the queue (ms since the epoch): how long it has waited.
    pub queued_since_ms: u64,
    pub reservation: Reservation,
}

/// The scheduler's answer: what to start now (in order) and why each other task waits. The
/// names are the queued tasks' own (borrowed: no copy of 10,000 names per round).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision<'a> {
    pub start: Vec<&'a str>,
    /// Every queued task not started, in order, with its reason.
    pub waiting: Vec<(&'a str, WaitReason)>,
}

/// The pressure of keel's tasks as the daemon read it for this round: PSI `some avg10`, in
/// hundredths of a percent (63.12% → 6312); `None` for a figure that could not be read, which
/// holds nothing back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pressure {
    pub cpu: Option<u32>,
    pub memory: Option<u32>,
    pub io: Option<u32>,
}

/// What a round knows of pressure: the figures and `keel.ron`'s thresholds (`None`:
/// `pressure: Off`, and the figures are not read), and how long ago keel last started a task
/// (pacing; `None`: none since the daemon started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PressureCheck {
    pub figures: Pressure,
    pub thresholds: Option<PressureThresholds>,
    pub since_last_start_ms: Option<u64>,
}

/// A resource whose pressure is above its threshold, with both figures (hundredths of a
/// percent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Over {
    pub resource: &'static str,
    pub figure: u32,
    pub threshold: u32,
}

impl PressureCheck {
    /// Every resource above its threshold (strictly: at the threshold is not above), in the
    /// order cpu, memory, io; empty with `pressure: Off`.
    pub fn over(&self) -> Vec<Over> {
        self.select(self.thresholds, |figure, threshold| figure > threshold)
    }

    /// Every resource above half its threshold (strictly) but not above it: what puts the
    /// round in pacing; empty with `pressure: Off` or `settle: "0s"`.
    pub fn near(&self) -> Vec<Over> {
        let thresholds = self.thresholds.filter(|t| t.settle_ms > 0);
        self.select(thresholds, |figure, threshold| {
            figure > threshold / 2 && figure <= threshold
        })
    }

    /// The resources (cpu, memory, io, in that order) whose figure was read and `keep`s.
    fn select(
        &self,
        thresholds: Option<PressureThresholds>,
        keep: impl Fn(u32, u32) -> bool,
    ) -> Vec<Over> {
        let Some(t) = thresholds else {
            return Vec::new();
        };
        let f = self.figures;
        [
            ("cpu", f.cpu, t.cpu),
            ("memory", f.memory, t.memory),
            ("io", f.io, t.io),
        ]
        .into_iter()
        .filter_map(|(resource, figure, threshold)| {
            let figure = figure?;
            keep(figure, threshold).then_some(Over {
                resource,
                figure,
                threshold,
            })
        })
        .collect()
    }
}

/// A percentage of hundredths: 4000 → "40", 1250 → "12.5", 6312 → "63.12".
fn percent(hundredths: u32) -> String {
    format_cpu(u64::from(hundredths) * 10, false)
}

impl fmt::Display for Over {
    /// "cpu pressure 63% > 40%": the figure in whole percent, unless that would not read as
    /// above the threshold ("40.04% > 40%").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.figure / 100 * 100;
        let figure = match whole > self.threshold {
            true => percent(whole),
            false => percent(self.figure),
        };
        write!(
            f,
            "{} pressure {figure}% > {}%",
            self.resource,
            percent(self.threshold)
        )
    }
}

/// "cpu pressure 31% near 40%": a figure above half its threshold, in whole percent (rounded
/// down: never shown at or above a threshold it is under).
fn near_text(near: &[Over]) -> String {
    let parts: Vec<String> = near
        .iter()
        .map(|o| {
            format!(
                "{} pressure {}% near {}%",
                o.resource,
                percent(o.figure / 100 * 100),
                percent(o.threshold)
            )
        })
        .collect();
    parts.join(", ")
}

/// A quantity asked for and what is left of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Short {
    pub needs: u64,
    pub free: u64,
}

/// Why a queued task is not started; its `Display` is what `keel status` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// Its reservation does not fit in what the running tasks leave (CPU in millicores,
    /// memory in bytes; `None` for the resource that does fit).
    Resources {
        cpu: Option<Short>,
        memory: Option<Short>,
    },
    /// Its reservation exceeds the whole capacity (which shrank after it was queued): it can
    /// never start, so it never holds the line either. The text is [`never_fits`]'.
    NeverFits(String),
    /// `max_running` tasks already run.
    MaxRunning { running: usize, max: usize },
    /// Its requests fit, but the pressure of keel's tasks is above a threshold (the same list
    /// for every task of the round, shared).
    Pressure(Arc<[Over]>),
    /// Its requests fit and the pressure is under the thresholds, but near one (above half):
    /// one start per `settle_ms`, and the last was `since_ms` ago (0: in this round). `near`
    /// is shared by every task of the round.
    Pacing {
        since_ms: u64,
        settle_ms: u64,
        near: Arc<[Over]>,
    },
    /// Chosen, but its start waits on the host (the cgroup of its previous attempt still
    /// emptying): the daemon's words, never [`decide`]'s.
    Start(String),
    /// A task ahead of it has waited past `starvation_limit` and holds the line.
    Behind { unit: Arc<str>, waited_ms: u64 },
    /// Held back before the queue — by its `after` dependencies (`waits for "build"
    /// (running)`, `blocked: after "test": …`), the state filesystem's `disk_reserve`, `keel
    /// pause --all`, a preempted task of its priority or higher: the daemon's words, never
    /// [`decide`]'s. `key` is what a change of it is judged on (the dependencies named, not
    /// their states; the hold, not its figures).
    Held { text: String, key: String },
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::Resources { cpu, memory } => {
                // Needs rounded up and free rounded down: the figures shown never look as
                // though the task would fit.
                let cpu = cpu.map(|s| {
                    format!(
                        "needs {} CPU, {} free",
                        format_cpu(s.needs, true),
                        format_cpu(s.free, false)
                    )
                });
                let memory = memory.map(|s| {
                    format!(
                        "needs {} memory, {} free",
                        format_bytes(s.needs, true),
                        format_bytes(s.free, false)
                    )
                });
                let parts: Vec<String> = cpu.into_iter().chain(memory).collect();
                f.write_str(&parts.join("; "))
            }
            WaitReason::NeverFits(message) | WaitReason::Start(message) => f.write_str(message),
            WaitReason::Held { text, .. } => f.write_str(text),
            WaitReason::MaxRunning { running, max } => {
                write!(f, "{running} of {max} running (max_running)")
            }
            WaitReason::Pressure(over) => {
                let parts: Vec<String> = over.iter().map(Over::to_string).collect();
                f.write_str(&parts.join("; "))
            }
            WaitReason::Pacing {
                since_ms,
                settle_ms,
                near,
            } => {
                let last = match since_ms {
                    0 => "last start now".to_string(),
                    ms => format!("last start {:.1}s ago", *ms as f64 / 1000.0),
                };
                let every = match settle_ms % 1000 {
                    0 => format!("{}s", settle_ms / 1000),
                    _ => crate::fmt::duration_precise(Duration::from_millis(*settle_ms)),
                };
                write!(f, "pacing: {last} (one per {every}), {}", near_text(near))
            }
            WaitReason::Behind { unit, waited_ms } => write!(
                f,
                "behind `{unit}` (waiting {}, past starvation_limit)",
                format_waited(*waited_ms)
            ),
        }
    }
}

impl WaitReason {
    /// Whether `self` and `other` are the same cause, for the journal's `waiting` events (one
    /// per change of cause, not one per round): pressure figures move at every reading, so
    /// two pressure waits are the same while the same resources are above the same
    /// thresholds; a wait behind a starved task while it reads the same (its wait in whole
    /// minutes); any other reason while it is equal. No formatting: it runs for every
    /// waiting task at every round.
    pub fn same_cause(&self, other: &WaitReason) -> bool {
        match (self, other) {
            (WaitReason::Pressure(a), WaitReason::Pressure(b))
            | (WaitReason::Pacing { near: a, .. }, WaitReason::Pacing { near: b, .. }) => {
                let key = |o: &Over| (o.resource, o.threshold);
                a.iter().map(key).eq(b.iter().map(key))
            }
            (
                WaitReason::Behind { unit, waited_ms },
                WaitReason::Behind {
                    unit: other_unit,
                    waited_ms: other_waited,
                },
            ) => unit == other_unit && format_waited(*waited_ms) == format_waited(*other_waited),
            (WaitReason::Held { key, .. }, WaitReason::Held { key: other, .. }) => key == other,
            _ => self == other,
        }
    }
}

/// The queue order: priority (higher first), then submission (earlier first), then name.
fn order(a: &QueuedTask, b: &QueuedTask) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then(a.submitted_ms.cmp(&b.submitted_ms))
        .then_with(|| a.unit.cmp(&b.unit))
}

/// What to start now. `running` are the reservations of every task that holds one (starting,
/// running, stopping: anything with a live attempt); `slotless` of them hold no `max_running`
/// slot (tasks keel paused to make room: frozen, they run nothing, and they get a slot back
/// before they resume). Times are in milliseconds; a task has waited `now_ms -
/// queued_since_ms`. `pressure`: the figures read for this round.
pub fn decide<'a>(
    queued: &'a [QueuedTask],
    running: &[Reservation],
    slotless: usize,
    capacity: &Capacity,
    now_ms: u64,
    starvation_limit_ms: u64,
    pressure: &PressureCheck,
) -> Decision<'a> {
    let over: Arc<[Over]> = pressure.over().into();
    let near: Arc<[Over]> = pressure.near().into();
    let settle_ms = pressure.thresholds.map_or(0, |t| t.settle_ms);
    // When this round's pacing window began: the last start, or this round's first.
    let mut since_start = pressure.since_last_start_ms;
    let mut sorted: Vec<&QueuedTask> = queued.iter().collect();
    // Unstable is the same order: names are unique, so no two tasks compare equal.
    sorted.sort_unstable_by(|a, b| order(a, b));

    // Saturating: a capacity lowered below what already runs leaves nothing free, not a wrap.
    let used = running
        .iter()
        .fold(Reservation::default(), |sum, r| Reservation {
            cpu_millis: sum.cpu_millis.saturating_add(r.cpu_millis),
            memory: sum.memory.saturating_add(r.memory),
        });
    let mut free = Reservation {
        cpu_millis: capacity.cpu_millis.saturating_sub(used.cpu_millis),
        memory: capacity.memory.saturating_sub(used.memory),
    };
    let mut count = running.len().saturating_sub(slotless);
    let mut held_by: Option<(Arc<str>, u64)> = None;
    let mut decision = Decision {
        start: Vec::new(),
        waiting: Vec::with_capacity(queued.len()),
    };

    for task in sorted {
        let need = task.reservation;
        let reason = if let Some(message) = never_fits(&need, capacity) {
            WaitReason::NeverFits(message)
        } else if let Some(max) = capacity.max_running.filter(|max| count >= *max) {
            WaitReason::MaxRunning {
                running: count,
                max,
            }
        } else if let Some((unit, waited_ms)) = &held_by {
            WaitReason::Behind {
                unit: unit.clone(),
                waited_ms: *waited_ms,
            }
        } else if need.cpu_millis <= free.cpu_millis && need.memory <= free.memory {
            if !over.is_empty() && count > 0 {
                decision
                    .waiting
                    .push((&task.unit, WaitReason::Pressure(over.clone())));
                continue;
            }
            let settling = since_start.filter(|since| *since < settle_ms);
            if let Some(since_ms) = settling.filter(|_| !near.is_empty() && count > 0) {
                let reason = WaitReason::Pacing {
                    since_ms,
                    settle_ms,
                    near: near.clone(),
                };
                decision.waiting.push((&task.unit, reason));
                continue;
            }
            since_start = Some(0);
            free.cpu_millis -= need.cpu_millis;
            free.memory -= need.memory;
            count += 1;
            decision.start.push(&task.unit);
            continue;
        } else {
            let waited_ms = now_ms.saturating_sub(task.queued_since_ms);
            if waited_ms >= starvation_limit_ms {
                held_by = Some((task.unit.as_str().into(), waited_ms));
            }
            let short = |needs: u64, free: u64| (needs > free).then_some(Short { needs, free });
            WaitReason::Resources {
                cpu: short(need.cpu_millis, free.cpu_millis),
                memory: short(need.memory, free.memory),
            }
        };
        decision.waiting.push((&task.unit, reason));
    }
    decision
}

/// Why a reservation can never be granted, even with nothing else running: refused at
/// `keel add`. `None` when it fits in the capacity.
pub fn never_fits(reservation: &Reservation, capacity: &Capacity) -> Option<String> {
    let mut problems = Vec::new();
    if reservation.cpu_millis > capacity.cpu_millis {
        problems.push(format!(
            "needs {} CPU but capacity is {} CPU (keel.ron capacity.cpu)",
            format_cpu(reservation.cpu_millis, true),
            format_cpu(capacity.cpu_millis, false)
        ));
    }
    if reservation.memory > capacity.memory {
        problems.push(format!(
            "needs {} memory but capacity is {} (keel.ron capacity.memory)",
            format_bytes(reservation.memory, true),
            format_bytes(capacity.memory, false)
        ));
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

#[cfg(test)]
mod tests;
