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
    /// Freeze a running task's cgroup (`None`: every running task, `keel pause --all`).
    Pause {
        unit: Option<String>,
    },
    /// Thaw a paused task (`None`: every paused task, `keel resume --all`).
    Resume {
        unit: Option<String>,
    },
    /// `keel diff`: the person has seen the task's work with this fingerprint
    /// (`crate::checkout::Review::fingerprint`).
    MarkReviewed {
        unit: String,
        fingerprint: String,
        #[serde(default)]
        head: Option<String>,
    },
    Reload,
    Shutdown {
        keep_tasks: bool,
    },
    Health,
    /// The Prometheus text format of the daemon's figures (`keel metrics`, docs/metrics.md).
    Metrics,
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
    /// The answer to [`Request::Metrics`]: the text as `--metrics` serves it.
    Metrics {
        text: String,
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
    /// How `resources.disk` is enforced: `kernel quotas` or `measured (<why not by the
    /// kernel>)` (empty from an older daemon).
    #[serde(default)]
    pub disk_budgets: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskInfo {
    pub unit: String,
    /// `queued`, `starting`, `running`, `stalled`, `paused`, `stopping`, `backoff`,
    /// `succeeded`, `failed`, `stopped`.
    pub state: String,
    pub attempt: u32,
    pub generation: u64,
    /// The shim's pid while an attempt is alive.
    pub pid: Option<i32>,
    /// When the current state began to apply: attempt start, backoff end, finish time (unix ms).
    pub since_ms: Option<u64>,
    pub backoff_until_ms: Option<u64>,
    /// `exit:N`, `signal:NAME`, `oom`, `stalled`, `timeout`, `lost`, `spawn-failed`, `disk`.
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
    /// A finished task whose branch has commits or whose checkout has changes that nobody
    /// has looked at with `keel diff` since (measured by a job, as `checkout_bytes`).
    #[serde(default)]
    pub unreviewed: bool,
    /// While an attempt runs: what its directory holds on the state filesystem (bytes, the
    /// last measurement this attempt) and its budget (`resources.disk`, or the default).
    #[serde(default)]
    pub disk_bytes: Option<u64>,
    #[serde(default)]
    pub disk_budget: Option<u64>,
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
    /// A source of the live attempt the kernel refused to watch, checked on a timer instead
    /// until it can be watched again (`shim exit: polled every 1s (epoll: No space left on
    /// device)`).
    #[serde(default)]
    pub watch: Option<String>,
    /// Branches of this task's checkout kept in the main repository because a harvest could
    /// not fast-forward (`<branch>@<attempt>`): work waiting for a person to merge it.
    #[serde(default)]
    pub kept_branches: Vec<String>,
    /// While the attempt's checkout is prepared (a job: `starting` until it is done).
    #[serde(default)]
    pub preparing: Option<PreparingInfo>,
    /// What the task may reach over the network: its unit's `sandbox.network` (the unit the
    /// live attempt started with; else the unit file's). `None`: no valid unit.
    #[serde(default)]
    pub network: Option<NetworkInfo>,
    /// While `paused`: when the pause began (unix ms; also `since_ms`), and whether the
    /// kernel has frozen every process yet (`false`: freezing).
    #[serde(default)]
    pub paused_since_ms: Option<u64>,
    #[serde(default)]
    pub frozen: Option<bool>,
    /// Only when one unit is asked for (`keel status UNIT`): the task in full.
    #[serde(default)]
    pub detail: Option<TaskDetail>,
}

/// A task's `sandbox.network`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkInfo {
    /// `host` (the host's network: not contained), `none` (only its own `lo`) or `allow`
    /// (only `entries`).
    pub mode: String,
    /// `allow`'s entries, as the unit writes them (`"@name"` for a list of `keel.ron`).
    #[serde(default)]
    pub entries: Vec<String>,
}

impl NetworkInfo {
    /// `host (not contained: …)`, `none (its own lo only)`, `allow: 3 entries (a.com, b.org:22,
    /// @npm)`. Not escaped: `keel status` escapes the report's strings before it shows them.
    pub fn text(&self) -> String {
        match self.mode.as_str() {
            "host" => "host (not contained: the host's whole network)".to_string(),
            "none" => "none (its own lo only)".to_string(),
            "allow" if self.entries.is_empty() => {
                "allow: nothing (its own lo only: Allow([]))".to_string()
            }
            "allow" => format!(
                "allow: {} {} ({})",
                self.entries.len(),
                if self.entries.len() == 1 {
                    "entry"
                } else {
                    "entries"
                },
                self.entries.join(", ")
            ),
            other => other.to_string(),
        }
    }
}

/// How far a task's preparation has come: its step (`queued`, `check paths`, `checkout`,
/// `base tree`) and, for a counted step, `done` of `total` (0 of 0: not counted, or not yet).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PreparingInfo {
    pub step: String,
    #[serde(default)]
    pub done: u64,
    #[serde(default)]
    pub total: u64,
}

impl PreparingInfo {
    /// `base tree 41% (24,600 / 60,000 files)`, `checkout`, `queued`.
    pub fn text(&self) -> String {
        if self.total == 0 {
            return crate::fmt::printable(&self.step).into_owned();
        }
        let unit = match self.step.as_str() {
            s if s.starts_with("base tree") => " files",
            "check paths" => " paths",
            _ => "",
        };
        format!(
            "{} {}% ({} / {}{unit})",
            crate::fmt::printable(&self.step),
            self.done.min(self.total) * 100 / self.total,
            thousands(self.done),
            thousands(self.total)
        )
    }
}

/// One task in full, for `keel status UNIT`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TaskDetail {
    pub unit_file: String,
    /// The command of the current unit file (`None`: no valid unit file).
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// The captured stdout and stderr (`keel logs UNIT`).
    pub log_path: String,
    /// When the current (or last) attempt started (unix ms).
    #[serde(default)]
    pub started_ms: Option<u64>,
    /// The last few ended attempts, oldest first.
    #[serde(default)]
    pub recent_exits: Vec<ExitInfo>,
    #[serde(default)]
    pub restart: Option<RestartInfo>,
    #[serde(default)]
    pub checkout: Option<CheckoutInfo>,
    #[serde(default)]
    pub liveness: Option<LivenessInfo>,
    /// The unit's resources as the cgroup has them: the CPU limit in cores (`None`: no cap,
    /// or no unit), the memory limit (bytes), processes (`pids.max`).
    #[serde(default)]
    pub cpu_limit: Option<f64>,
    #[serde(default)]
    pub memory_limit_bytes: Option<u64>,
    #[serde(default)]
    pub pids_limit: Option<u64>,
    /// The requests the queue counts: CPU cores (also the task's CPU weight), memory (bytes).
    #[serde(default)]
    pub cpu_request: Option<f64>,
    #[serde(default)]
    pub memory_request_bytes: Option<u64>,
    /// The processes in the live attempt's cgroup (host pids: the shim, the agent, its
    /// children).
    #[serde(default)]
    pub processes: Vec<i32>,
    /// `network: Allow`: what the attempt's relay let through and refused, per destination
    /// (its last report). `None`: no relay report.
    #[serde(default)]
    pub network_traffic: Option<NetworkTraffic>,
    /// The live attempt's time budget: `max_runtime` (ms; `None`: no limit), how long it has
    /// run with its frozen time not counted, and how long it has been frozen in all.
    #[serde(default)]
    pub max_runtime_ms: Option<u64>,
    #[serde(default)]
    pub ran_ms: Option<u64>,
    #[serde(default)]
    pub paused_ms: Option<u64>,
    /// `max_total_runtime` (ms; `None`: no limit) and what the task's attempts have run
    /// against it (since it was added or last started by `keel start` / `keel restart`).
    #[serde(default)]
    pub max_total_runtime_ms: Option<u64>,
    #[serde(default)]
    pub ran_total_ms: Option<u64>,
}

/// What a task's relay counted (`crate::network::relay_protocol::RelayReport`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkTraffic {
    pub allowed: Vec<crate::network::relay_protocol::AllowedCount>,
    pub refused: Vec<crate::network::relay_protocol::RefusedCount>,
    pub open_connections: u64,
    /// When the relay last wrote it (unix ms).
    pub updated_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExitInfo {
    pub attempt: u32,
    /// As `last_exit`: `exit:N`, `signal:NAME`, `oom`, `stalled`, `timeout`, `lost`,
    /// `spawn-failed`, `disk`.
    pub exit: String,
    #[serde(default)]
    pub started_ms: Option<u64>,
    pub ended_ms: u64,
    #[serde(default)]
    pub note: Option<String>,
}

/// The restart policy and where the task stands against it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RestartInfo {
    /// `Always`, `OnFailure` or `Never`.
    pub policy: String,
    /// `restart_limit`: at most `limit` restarts within `window_ms`.
    pub limit: u32,
    pub window_ms: u64,
    pub consecutive_failures: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CheckoutInfo {
    /// The checkout's directory in the state directory (mounted as the agent's workdir).
    pub path: String,
    pub repo: String,
    pub branch: String,
    /// `repo.base` as written in the unit, and the commit it was.
    pub base: String,
    pub base_commit: String,
}

/// The liveness watch of the live attempt: each signal's last evidence (unix ms), whether
/// it counts, and the deadlines.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LivenessInfo {
    pub verdict: String,
    pub signals: Vec<SignalInfo>,
    pub heartbeat_timeout_ms: u64,
    pub progress_timeout_ms: u64,
    pub startup_grace_ms: u64,
    /// `Restart`, `Kill` or `Report`.
    pub on_stall: String,
    /// When the task is judged stalled if nothing more is seen (unix ms).
    pub stall_at_ms: u64,
    /// When it is judged without progress if the progress file does not change.
    #[serde(default)]
    pub no_progress_at_ms: Option<u64>,
    /// How many times keel read the progress file during this attempt (a few a second at
    /// most, whatever the agent's write rate).
    #[serde(default)]
    pub progress_reads: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SignalInfo {
    /// `heartbeat`, `progress`, `output` or `cpu`.
    pub kind: String,
    pub counted: bool,
    #[serde(default)]
    pub last_ms: Option<u64>,
}

/// `24600` as `24,600`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
