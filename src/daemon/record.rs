//! A task's durable record (`tasks/<unit>/state.ron`): desired and observed state.

use crate::sandbox::spec::{exit_record_path, ExitRecord, IdBlock};
use crate::state::read_ron;
use crate::sys::wait::AgentStatus;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a task is in its life (DESIGN, "Task life").
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum TaskState {
    /// Waiting for the scheduler.
    Queued,
    /// Decided to start: the generation is persisted, the shim is being spawned.
    Starting,
    Running,
    /// Running but judged not working (liveness).
    Stalled,
    /// A stop signal was sent; waiting for the attempt to end.
    Stopping,
    /// Ended; waiting out the restart delay.
    Backoff,
    Succeeded,
    /// Ended for good (restart policy or limit); `reason` says why. `keel start` retries.
    Failed,
    /// Stopped by a user; `keel start` starts it again.
    Stopped,
}

impl TaskState {
    /// An attempt (a shim) may be alive in this state.
    pub fn has_attempt(self) -> bool {
        matches!(
            self,
            TaskState::Starting | TaskState::Running | TaskState::Stalled | TaskState::Stopping
        )
    }
    /// Finished: nothing will happen until a user acts.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Failed | TaskState::Stopped
        )
    }
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Starting => "starting",
            TaskState::Running => "running",
            TaskState::Stalled => "stalled",
            TaskState::Stopping => "stopping",
            TaskState::Backoff => "backoff",
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
            TaskState::Stopped => "stopped",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the last attempt ended, as the agent sees it in `KEEL_LAST_EXIT`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum LastExit {
    Agent(AgentStatus),
    /// The agent never ran: its program or its sandbox could not be set up (the reason is in
    /// the task's `reason`).
    SpawnFailed,
    Oom,
    Stalled,
    /// The attempt vanished without an exit record (its shim was killed, or the host rebooted).
    Lost,
    /// It ran longer than its unit's `max_runtime` (frozen time not counted) and keel stopped
    /// it. A failure for the restart policy (`crate::daemon::runtime_limit`).
    Timeout,
    /// Stopped by keel: it wrote more than its `resources.disk` (`crate::daemon::disk`).
    Disk,
}

impl LastExit {
    pub fn success(self) -> bool {
        matches!(self, LastExit::Agent(status) if status.success())
    }
    /// The status a container orchestrator should see for this exit (tini's convention).
    pub fn exit_code(self) -> i32 {
        match self {
            LastExit::Agent(status) => status.exit_code(),
            LastExit::SpawnFailed => 127,
            LastExit::Oom => 128 + libc::SIGKILL,
            LastExit::Stalled | LastExit::Lost | LastExit::Timeout | LastExit::Disk => 1,
        }
    }
}

impl fmt::Display for LastExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LastExit::Agent(status) => write!(f, "{status}"),
            LastExit::SpawnFailed => f.write_str("spawn-failed"),
            LastExit::Oom => f.write_str("oom"),
            LastExit::Stalled => f.write_str("stalled"),
            LastExit::Lost => f.write_str("lost"),
            LastExit::Timeout => f.write_str("timeout"),
            LastExit::Disk => f.write_str("disk"),
        }
    }
}

/// Who the current attempt's shim is: pid + start time + boot id names one process.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ShimIdentity {
    pub pid: i32,
    pub start_time: u64,
    pub boot_id: String,
}

/// What the daemon has been asked to do with the current attempt when it ends.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
pub enum Intent {
    /// Nothing: the restart policy decides.
    #[default]
    None,
    /// `keel stop` / shutdown: end as `stopped`.
    Stop,
    /// `keel restart`: start again at once with the current unit file.
    Restart,
    /// `keel rm`: forget the task and its files (a work directory holding files is kept).
    Remove,
    /// The unit file is gone: forget the task, keep its checkpoint, work and logs.
    Forget,
    /// The daemon is shutting down: the task resumes (as `queued`) at the next start.
    Interrupt,
}

/// `tasks/<unit>/state.ron`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskRecord {
    pub unit: String,
    pub state: TaskState,
    /// 1, 2, …: attempts ever started (never reset, so `KEEL_ATTEMPT` > 1 always means there
    /// is earlier work to resume); 0 before the first start.
    pub attempt: u32,
    /// Increments at every spawn and never goes back: fences results of older attempts.
    pub generation: u64,
    #[serde(default)]
    pub last_exit: Option<LastExit>,
    #[serde(default)]
    pub shim: Option<ShimIdentity>,
    /// Times (unix ms) of the restarts counted against `restart_limit`.
    #[serde(default)]
    pub restarts: Vec<u64>,
    /// Failures in a row since the last attempt that ran for `backoff.reset_after`.
    #[serde(default)]
    pub consecutive_failures: u32,
    #[serde(default)]
    pub backoff_until_ms: Option<u64>,
    /// Why the task is failed / stopped / waiting, in words for `keel status`.
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub intent: Intent,
    pub submitted_ms: u64,
    #[serde(default)]
    pub started_ms: Option<u64>,
    #[serde(default)]
    pub finished_ms: Option<u64>,
    /// When the current stop began (for its timeout across a daemon restart).
    #[serde(default)]
    pub stop_started_ms: Option<u64>,
    /// The liveness watch judged the attempt stalled and is stopping it: it ends as `stalled`.
    #[serde(default)]
    pub stall: Option<StallStop>,
    /// The last [`RECENT_EXITS`] attempts' ends, oldest first (for `keel status UNIT`).
    #[serde(default)]
    pub recent_exits: Vec<PastExit>,
    /// The host ids the task's user namespace maps, chosen at its first start and kept across
    /// attempts and daemon restarts until the task is removed (`crate::daemon::id_blocks`).
    /// `None`: never started with a user namespace (or the record of an older keel).
    #[serde(default)]
    pub id_block: Option<IdBlock>,
    /// Why the host refused the task's last start (cgroups unavailable, a privilege keel
    /// lacks, a `sandbox.user` this host does not have): the task is `queued` and waits,
    /// `blocked`, retried with a backoff (at most a minute apart) and at `keel reload` or
    /// SIGHUP; nothing was counted against its restart limit. Kept across attempts until one
    /// ends on the agent's own terms (`None` then): a start refused again for the same reason
    /// is journaled once (`start-blocked`), not at every retry.
    #[serde(default)]
    pub blocked: Option<String>,
    /// The live attempt is paused (its cgroup frozen: `keel pause`, or keel's own reason):
    /// persisted before the freeze, so a restarted daemon keeps it frozen
    /// (`crate::daemon::pausing`). `None` again once it is resumed, stopped or ended.
    #[serde(default)]
    pub paused: Option<Pause>,
    /// Time the current attempt spent frozen in its ended pauses (ms): not counted toward
    /// `max_runtime`. 0 at each start.
    #[serde(default)]
    pub paused_ms: u64,
    /// keel is stopping the attempt for its `max_runtime` (words for `keel status`), persisted
    /// with the stop: the attempt settles as `timeout` even across a daemon restart.
    #[serde(default)]
    pub timeout: Option<TimeoutStop>,
    /// The run time (ms, frozen time not counted) of the attempts ended since the task was
    /// added or last started by `keel start` / `keel restart`: what `max_total_runtime`
    /// counts, with the live attempt's.
    #[serde(default)]
    pub ran_before_ms: u64,
    /// The attempt wrote more than its `resources.disk` and keel is stopping it (the figures
    /// in words): it ends as `disk`, persisted with the stop (`crate::daemon::disk`).
    #[serde(default)]
    pub disk_stop: Option<String>,
    /// Kernel quotas: the task's project id (`crate::daemon::disk::quota`), kept for the
    /// task's life so that no other task is given it.
    #[serde(default)]
    pub quota_project: Option<u32>,
    /// The generation of the attempt whose directories carry the project id and limits: its
    /// budget is the kernel's to enforce, not measured.
    #[serde(default)]
    pub quota_generation: Option<u64>,
}

/// A stop decided for a time budget (`crate::daemon::runtime_limit`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TimeoutStop {
    /// In words (`ran 8h0m0s (max_runtime 8h0m0s; frozen time not counted)`).
    pub reason: String,
    /// The task's total budget is spent (`max_total_runtime`): no restart.
    #[serde(default)]
    pub for_good: bool,
}

/// A pause of the live attempt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Pause {
    /// When it was decided (unix ms).
    pub since_ms: u64,
    /// Why, in words (`keel pause`, `keel pause --all`, a scheduler's reason).
    pub reason: String,
    /// Who paused it: a person's pause is resumed only by a person (`keel resume`).
    #[serde(default)]
    pub origin: PauseOrigin,
}

/// Who paused an attempt.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
pub enum PauseOrigin {
    /// `keel pause` (a control request).
    #[default]
    Request,
    /// keel itself (preemption): keel resumes it when room returns.
    Keel,
}

/// How many ended attempts a record remembers.
pub const RECENT_EXITS: usize = 5;

/// One ended attempt, as `keel status UNIT` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PastExit {
    pub attempt: u32,
    pub exit: LastExit,
    /// Unix ms; `None` when the start is unknown.
    pub started_ms: Option<u64>,
    pub ended_ms: u64,
    /// What else is known of the end (`shim killed by SIGKILL`, a stall's words).
    #[serde(default)]
    pub note: Option<String>,
}

impl TaskRecord {
    /// A new attempt starts: not paused, no frozen time, no timeout pending.
    pub fn new_attempt_clocks(&mut self) {
        (self.paused, self.paused_ms, self.timeout) = (None, 0, None);
    }

    /// Remember an ended attempt, forgetting the oldest past [`RECENT_EXITS`].
    pub fn remember_exit(&mut self, past: PastExit) {
        self.recent_exits.push(past);
        let excess = self.recent_exits.len().saturating_sub(RECENT_EXITS);
        self.recent_exits.drain(..excess);
    }
}

/// A stop decided by the liveness watch (`on_stall: Restart` or `Kill`), persisted with the
/// stop so that a daemon restarted in between still settles the attempt as `stalled`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StallStop {
    /// The verdict in words (`no heartbeat for 5m0s (last heartbeat 5m0s ago)`).
    pub reason: String,
    /// `on_stall: Kill`: no restart; the task ends `failed`.
    pub kill: bool,
}

impl TaskRecord {
    pub fn new(unit: &str, now_ms: u64) -> Self {
        TaskRecord {
            unit: unit.to_string(),
            state: TaskState::Queued,
            attempt: 0,
            generation: 0,
            last_exit: None,
            shim: None,
            restarts: Vec::new(),
            consecutive_failures: 0,
            backoff_until_ms: None,
            reason: None,
            intent: Intent::None,
            submitted_ms: now_ms,
            started_ms: None,
            finished_ms: None,
            stop_started_ms: None,
            stall: None,
            recent_exits: Vec::new(),
            id_block: None,
            blocked: None,
            paused: None,
            paused_ms: 0,
            timeout: None,
            ran_before_ms: 0,
            disk_stop: None,
            quota_project: None,
            quota_generation: None,
        }
    }
}

/// How an attempt ended, as far as the daemon could learn it.
pub(crate) struct Ending {
    pub exit: LastExit,
    /// Why, beyond the exit status (a spawn error, a vanished shim).
    pub note: Option<String>,
    /// When the agent ended, from its exit record.
    pub ended_ms: Option<u64>,
    /// An exit record of another generation was found and ignored: the generation it named.
    /// [`Daemon::settle`](super::Daemon::settle) journals it as `fenced`.
    pub fenced: Option<u64>,
    /// The host refused the start (the shim's exit record says so): the task waits, blocked,
    /// rather than settle; nothing counts against its restart limit.
    pub host_refused: bool,
}

impl Ending {
    pub fn lost(note: impl Into<String>) -> Self {
        Ending {
            exit: LastExit::Lost,
            note: Some(note.into()),
            ended_ms: None,
            fenced: None,
            host_refused: false,
        }
    }

    /// The attempt could not start: `why` is the unit's problem (its checkout, its sandbox).
    pub fn spawn_failed(why: String) -> Self {
        Ending {
            exit: LastExit::SpawnFailed,
            note: Some(why),
            ended_ms: None,
            fenced: None,
            host_refused: false,
        }
    }

    /// From the exit record in `run/`, when it belongs to `generation`; otherwise lost.
    pub fn from_records(run_dir: &std::path::Path, generation: u64, otherwise: &str) -> Self {
        match read_ron::<ExitRecord>(&exit_record_path(run_dir)) {
            Ok(Some(record)) if record.generation == generation => Ending {
                exit: match record.spawn_error {
                    Some(_) => LastExit::SpawnFailed,
                    None => LastExit::Agent(record.status),
                },
                host_refused: record.host_refused && record.spawn_error.is_some(),
                note: record.spawn_error,
                ended_ms: Some(record.ended_ms),
                fenced: None,
            },
            Ok(Some(record)) => Ending {
                fenced: Some(record.generation),
                ..Ending::lost(format!(
                    "{otherwise}; exit record of generation {} ignored (current {generation})",
                    record.generation
                ))
            },
            Ok(None) => Ending::lost(otherwise),
            Err(e) => Ending::lost(format!("{otherwise}; {e}")),
        }
    }
}

#[cfg(test)]
mod tests;
