//! The control-socket protocol: one JSON request per connection line, one JSON response line.
//! `keel status --json` prints [`StatusReport`] as is: its field names are a stable interface.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "verb", rename_all = "snake_case")]
pub enum Request {
    Status {
        unit: Option<String>,
    },
    /// Validate and install a unit file into the units directory.
    Add {
        name: String,
        text: String,
    },
    Remove {
        unit: String,
        /// Remove the checkout even if it holds changes (after a harvest).
        #[serde(default)]
        force: bool,
    },
    /// Bring a task's branch into the main repository now.
    Harvest {
        unit: String,
    },
    /// Remove the checkouts of finished tasks that are clean and harvested.
    Prune,
    Start {
        unit: String,
    },
    Stop {
        unit: String,
    },
    Restart {
        unit: String,
    },
    Kill {
        unit: String,
        signal: i32,
    },
    Reload,
    Shutdown {
        keep_tasks: bool,
    },
    Health,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Response {
    Ok {
        message: String,
    },
    Status(StatusReport),
    Health {
        pid: i32,
        loop_age_ms: u64,
        tasks: usize,
    },
    Error {
        message: String,
    },
}

/// The daemon and every task, for `keel status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StatusReport {
    pub daemon: DaemonInfo,
    pub tasks: Vec<TaskInfo>,
    /// Unit files that could not be accepted, with `file:line:col: message`.
    pub invalid_units: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DaemonInfo {
    pub pid: i32,
    pub started_ms: u64,
    pub state_dir: String,
    pub units_dir: String,
    /// The cgroup backend: `v2`, `hybrid (…)`, or `cgroups unavailable: <why>` (then no task
    /// starts).
    pub cgroup_mode: String,
    pub under_init: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskInfo {
    pub unit: String,
    /// `queued`, `starting`, `running`, `stalled`, `stopping`, `backoff`, `succeeded`,
    /// `failed`, `stopped`.
    pub state: String,
    pub attempt: u32,
    pub generation: u64,
    /// The shim's pid while an attempt is alive.
    pub pid: Option<i32>,
    /// When the current state began to apply: attempt start, backoff end, finish time (unix ms).
    pub since_ms: Option<u64>,
    pub backoff_until_ms: Option<u64>,
    /// `exit:N`, `signal:NAME`, `oom`, `stalled`, `lost`.
    pub last_exit: Option<String>,
    /// Restarts counted against the restart limit.
    pub restarts: usize,
    pub reason: Option<String>,
    /// The last line of the progress file.
    pub progress: Option<String>,
    /// The unit file was edited since this attempt started: takes effect at the next start.
    pub unit_changed: bool,
    /// The daemon has a record of this task but has not seen its unit file (a wrong or
    /// unmounted units directory?): it is neither started nor forgotten; `keel rm` forgets it.
    #[serde(default)]
    pub unit_file_missing: bool,
    /// The live attempt's cgroup: CPU time (µs) and share of one core since the previous
    /// `keel status` (100 = one core), memory now and at its peak (bytes), processes.
    #[serde(default)]
    pub cpu_usec: Option<u64>,
    #[serde(default)]
    pub cpu_percent: Option<f64>,
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    #[serde(default)]
    pub memory_peak_bytes: Option<u64>,
    #[serde(default)]
    pub pids: Option<u64>,
    /// The task's checkout: its own disk use in bytes (git directory and changes; the base
    /// tree it shares is not counted).
    #[serde(default)]
    pub checkout_bytes: Option<u64>,
    /// While an attempt runs: when the last evidence of work that counts (`liveness.signals`)
    /// was seen (unix ms), and what it was: `heartbeat`, `progress`, `output` or `cpu`.
    #[serde(default)]
    pub last_activity_ms: Option<u64>,
    #[serde(default)]
    pub last_activity_kind: Option<String>,
    /// The liveness verdict: `running`, `stalled` or `no-progress`.
    #[serde(default)]
    pub liveness: Option<String>,
    /// When the progress file's content last changed during this attempt (unix ms).
    #[serde(default)]
    pub progress_changed_ms: Option<u64>,
}
