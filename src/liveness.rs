//! Liveness verdicts (DESIGN, "liveness"): "still running" is the shim's pidfd; "still
//! working" is judged here, as a pure function of what was seen of one attempt (heartbeats,
//! progress, output, CPU use), the unit's `liveness` settings and the time. Unit-tested
//! without a kernel; the daemon's side (inotify on the progress file, the one timer per task,
//! the actions) is `daemon/liveness.rs`.
//!
//! All times are milliseconds on one monotonic clock.

use crate::fmt::duration_precise;
use crate::unit::{Liveness, LivenessSignal};
use std::time::Duration;

pub type Ms = u64;

/// A stalled task whose output or CPU use counts is looked at again this often (its
/// `heartbeat_timeout`, within these bounds): that evidence is sampled, not pushed, and a
/// `Report` task goes back to `running` when it shows. Heartbeats are pushed (inotify).
pub const RECHECK_MIN: Ms = 1_000;
pub const RECHECK_MAX: Ms = 60_000;

/// CPU use counts as activity from this share of one core over the sampled interval. An agent
/// blocked on a network call (a hung model request) uses ~0; a shell's fork of `sleep`, a few
/// milliseconds; anything computing, far more.
pub const CPU_BUSY_PERCENT: u64 = 2;
/// Samples closer than this are not compared (a scheduler tick would look like 10% of a core):
/// the earlier one stays the baseline.
pub const CPU_MIN_INTERVAL: Ms = 100;

/// The unit's `liveness` settings, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub heartbeat_timeout: Ms,
    pub progress_timeout: Ms,
    pub startup_grace: Ms,
    /// Which evidence counts (`liveness.signals`).
    pub heartbeat: bool,
    pub output: bool,
    pub cpu: bool,
}

impl Settings {
    pub fn of(liveness: &Liveness) -> Self {
        let ms = |d: Duration| d.as_millis().min(u128::from(u64::MAX / 4)) as Ms;
        let counts = |s| liveness.signals.contains(&s);
        Settings {
            heartbeat_timeout: ms(liveness.heartbeat_timeout.0),
            progress_timeout: ms(liveness.progress_timeout.0),
            startup_grace: ms(liveness.startup_grace.0),
            heartbeat: counts(LivenessSignal::Heartbeat),
            output: counts(LivenessSignal::Output),
            cpu: counts(LivenessSignal::Cpu),
        }
    }
}

/// What the daemon has seen of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Evidence {
    /// When the attempt started.
    pub started: Ms,
    /// When this daemon began to watch it: the start, or the adoption by a restarted daemon.
    /// What happened while no daemon watched is unknown, so the clocks run from here at the
    /// earliest (an adopted attempt is never judged on a period nobody saw).
    pub watched_since: Ms,
    /// The last write to the progress file.
    pub heartbeat: Option<Ms>,
    /// The last change of its content.
    pub progress: Option<Ms>,
    /// The last bytes appended to the output log.
    pub output: Option<Ms>,
    /// The last sample that found the task using the CPU ([`cpu_busy`]).
    pub cpu: Option<Ms>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Some counted evidence is fresh.
    Running,
    /// No counted evidence for `heartbeat_timeout`.
    Stalled,
    /// Alive, but the progress file has not changed for `progress_timeout`.
    NoProgress,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Running => "running",
            Verdict::Stalled => "stalled",
            Verdict::NoProgress => "no-progress",
        }
    }
}

/// What the most recent counted evidence was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    Heartbeat,
    /// A heartbeat that changed the progress file's content.
    Progress,
    Output,
    Cpu,
}

impl Activity {
    pub fn as_str(self) -> &'static str {
        match self {
            Activity::Heartbeat => "heartbeat",
            Activity::Progress => "progress",
            Activity::Output => "output",
            Activity::Cpu => "cpu",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judgement {
    pub verdict: Verdict,
    /// The next instant at which the verdict could change without new pushed evidence: the
    /// daemon's one timer for the task. `None`: only a heartbeat (pushed by inotify) can.
    pub next_check: Option<Ms>,
    /// When the task is (or was) stalled if nothing more is seen.
    pub stall_at: Ms,
    /// When it is without progress if its content does not change; `None` when progress is
    /// not judged (the agent has not written its progress file, or heartbeats do not count).
    pub no_progress_at: Option<Ms>,
}

/// The most recent evidence among the counted signals, and its kind. Ties go to the
/// heartbeat, then output, then CPU (the agent's own word first).
pub fn last_activity(settings: &Settings, evidence: &Evidence) -> Option<(Ms, Activity)> {
    let heartbeat = evidence.heartbeat.map(|at| {
        let kind = if evidence.progress == Some(at) {
            Activity::Progress
        } else {
            Activity::Heartbeat
        };
        (at, kind)
    });
    let candidates = [
        (settings.heartbeat, heartbeat),
        (
            settings.output,
            evidence.output.map(|at| (at, Activity::Output)),
        ),
        (settings.cpu, evidence.cpu.map(|at| (at, Activity::Cpu))),
    ];
    let mut best: Option<(Ms, Activity)> = None;
    for (counted, seen) in candidates {
        if let (true, Some((at, kind))) = (counted, seen) {
            if best.is_none_or(|(b, _)| at > b) {
                best = Some((at, kind));
            }
        }
    }
    best
}

/// The verdict at `now`, and when it could next change.
///
/// - `stalled` once no counted evidence has been seen for `heartbeat_timeout`, counted from
///   the start + `startup_grace` at the earliest (and from the adoption, for an attempt a
///   restarted daemon took over: the grace is not granted twice, the silence nobody saw is
///   not held against the task);
/// - `no-progress` when it is not stalled, has written its progress file during this attempt
///   (agents that know nothing of keel are judged by their output and CPU alone), heartbeats
///   count, and the content has not changed for `progress_timeout` (from the same floor);
/// - `running` otherwise.
pub fn judge(settings: &Settings, evidence: &Evidence, now: Ms) -> Judgement {
    let floor = evidence
        .started
        .saturating_add(settings.startup_grace)
        .max(evidence.watched_since);
    let fresh_from = last_activity(settings, evidence).map_or(floor, |(at, _)| at.max(floor));
    let stall_at = fresh_from.saturating_add(settings.heartbeat_timeout);
    let judged_on_progress = settings.heartbeat && evidence.heartbeat.is_some();
    let no_progress_at = judged_on_progress.then(|| {
        evidence
            .progress
            .map_or(floor, |at| at.max(floor))
            .saturating_add(settings.progress_timeout)
    });
    if now >= stall_at {
        let sampled = settings.output || settings.cpu;
        let recheck = settings.heartbeat_timeout.clamp(RECHECK_MIN, RECHECK_MAX);
        return Judgement {
            verdict: Verdict::Stalled,
            next_check: sampled.then(|| now.saturating_add(recheck)),
            stall_at,
            no_progress_at,
        };
    }
    match no_progress_at {
        Some(at) if now >= at => Judgement {
            verdict: Verdict::NoProgress,
            next_check: Some(stall_at),
            stall_at,
            no_progress_at,
        },
        _ => Judgement {
            verdict: Verdict::Running,
            next_check: Some(no_progress_at.map_or(stall_at, |at| at.min(stall_at))),
            stall_at,
            no_progress_at,
        },
    }
}

/// Did the task use the CPU between two samples `interval` apart? At least
/// [`CPU_BUSY_PERCENT`] of one core, over at least [`CPU_MIN_INTERVAL`].
pub fn cpu_busy(used_usec: u64, interval: Ms) -> bool {
    interval >= CPU_MIN_INTERVAL
        && used_usec.saturating_mul(100) >= interval.saturating_mul(1000 * CPU_BUSY_PERCENT)
}

/// The journal's words for a verdict: what was missing, for how long, and the last evidence.
pub fn describe(settings: &Settings, evidence: &Evidence, verdict: Verdict, now: Ms) -> String {
    let last = match last_activity(settings, evidence) {
        Some((at, kind)) => format!(
            "last {} {} ago",
            kind.as_str(),
            duration_precise(Duration::from_millis(now.saturating_sub(at)))
        ),
        None => "none seen this attempt".to_string(),
    };
    match verdict {
        Verdict::Running => format!("activity again ({last})"),
        Verdict::Stalled => format!(
            "no {} for {} ({last})",
            signal_words(settings),
            duration_precise(Duration::from_millis(settings.heartbeat_timeout))
        ),
        Verdict::NoProgress => format!(
            "progress file unchanged for {} ({last})",
            duration_precise(Duration::from_millis(settings.progress_timeout))
        ),
    }
}

/// `"heartbeat, output or CPU use"`: the counted signals, in words.
fn signal_words(settings: &Settings) -> String {
    let words: Vec<&str> = [
        (settings.heartbeat, "heartbeat"),
        (settings.output, "output"),
        (settings.cpu, "CPU use"),
    ]
    .into_iter()
    .filter_map(|(counted, word)| counted.then_some(word))
    .collect();
    match words.as_slice() {
        [] => "evidence".to_string(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests;
