//! The Prometheus text exposition format (version 0.0.4) of keel's figures: `keel metrics`
//! prints it and `keel daemon --metrics ADDR` serves it (docs/metrics.md lists every metric).
//!
//! This module is pure and a leaf: the daemon gathers a [`Snapshot`] of what it holds in
//! memory (and reads from cgroupfs), [`render`] turns it into text. The address `--metrics`
//! takes is checked in `address.rs`, the HTTP of a scrape is answered in `http.rs`.

pub mod address;
pub mod http;
mod text;

pub use text::{escape_help, escape_label, number, Family, Kind};

/// The `Content-Type` of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every state `keel_task_state` has a series for (as `keel status` says them).
pub const TASK_STATES: [&str; 10] = [
    "queued",
    "starting",
    "running",
    "stalled",
    "paused",
    "stopping",
    "backoff",
    "succeeded",
    "failed",
    "stopped",
];

/// What the daemon knows at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub daemon: DaemonFigures,
    pub tasks: Vec<TaskFigures>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct DaemonFigures {
    /// keel's version (`CARGO_PKG_VERSION`).
    pub version: String,
    /// `v2`, `hybrid (…)`, or why there are no cgroups.
    pub cgroup_mode: String,
    /// When the daemon started (unix seconds).
    pub start_time_seconds: f64,
    /// How long the loop's current round had run when the snapshot was taken (`keel health`'s
    /// loop age): a round stuck on something slow shows here.
    pub loop_lag_seconds: f64,
    /// Tasks waiting for the scheduler.
    pub queue_length: usize,
    /// Unit files that could not be accepted.
    pub invalid_units: usize,
    /// Scrape connections open now (`--metrics`).
    pub scrape_connections: usize,
}

/// One task. `None`: not known now (no live attempt, no cgroup, no relay).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskFigures {
    pub unit: String,
    /// One of [`TASK_STATES`].
    pub state: String,
    pub attempts: u32,
    /// Restarts counted against `restart_limit` (those within its window).
    pub restarts: usize,
    pub consecutive_failures: u32,
    /// `exit:N`, `signal:NAME`, `oom`, `stalled`, `timeout`, `lost`, `spawn-failed`, `disk`.
    pub last_exit: Option<String>,
    pub cpu_usec: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub memory_peak_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub oom_kills: Option<u64>,
    /// Seconds since each liveness signal (`heartbeat`, `progress`, `output`, `cpu`) was last
    /// seen, for those seen this attempt.
    pub activity_ages: Vec<(String, f64)>,
    pub checkout_bytes: Option<u64>,
    pub disk_bytes: Option<u64>,
    pub disk_budget_bytes: Option<u64>,
    pub network: Option<NetworkFigures>,
}

/// What a task's relay reported (`network: Allow`), summed over destinations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkFigures {
    pub sent_bytes: u64,
    pub received_bytes: u64,
    pub connections: u64,
    pub refused: u64,
    pub open_connections: u64,
}

/// The kind of an exit as [`TaskFigures::last_exit`] says it: `exit:3` is `exit`.
pub fn exit_kind(exit: &str) -> &str {
    exit.split(':').next().unwrap_or(exit)
}

fn opt(value: Option<u64>) -> Option<f64> {
    value.map(|v| v as f64)
}

/// The snapshot in the text format: every family once (its `# HELP` and `# TYPE` even when
/// it has no sample now), families in a fixed order.
pub fn render(snapshot: &Snapshot) -> String {
    use Kind::Gauge;
    let d = &snapshot.daemon;
    let mut out = String::new();

    let mut build = Family::new("keel_build_info", Gauge, "keel's version (always 1).");
    build.add(&[("version", &d.version)], 1.0);
    let mut mode = Family::new(
        "keel_cgroup_mode_info",
        Gauge,
        "The cgroup backend: v2, hybrid (...), or why there are none (always 1).",
    );
    mode.add(&[("mode", &d.cgroup_mode)], 1.0);
    let mut start = Family::new(
        "keel_daemon_start_time_seconds",
        Gauge,
        "When the daemon started (unix time).",
    );
    start.add(&[], d.start_time_seconds);
    let mut lag = Family::new(
        "keel_daemon_loop_lag_seconds",
        Gauge,
        "How long the event loop's current round had run when it answered (keel health's loop age).",
    );
    lag.add(&[], d.loop_lag_seconds);
    let mut queue = Family::new(
        "keel_queue_length",
        Gauge,
        "Tasks waiting for the scheduler.",
    );
    queue.add(&[], d.queue_length as f64);
    let mut by_state = Family::new("keel_tasks", Gauge, "Tasks by state.");
    for state in TASK_STATES {
        let n = snapshot.tasks.iter().filter(|t| t.state == state).count();
        by_state.add(&[("state", state)], n as f64);
    }
    let mut invalid = Family::new(
        "keel_invalid_units",
        Gauge,
        "Unit files the daemon could not accept (keel status lists them).",
    );
    invalid.add(&[], d.invalid_units as f64);
    let mut scrapes = Family::new(
        "keel_metrics_connections",
        Gauge,
        "Scrape connections open now (keel daemon --metrics).",
    );
    scrapes.add(&[], d.scrape_connections as f64);
    for family in [build, mode, start, lag, queue, by_state, invalid, scrapes] {
        family.write(&mut out);
    }

    let mut families = TaskFamilies::new();
    for task in &snapshot.tasks {
        families.add(task);
    }
    for family in families.all() {
        family.write(&mut out);
    }
    out
}

/// The per-task families, in their order.
struct TaskFamilies {
    state: Family,
    attempts: Family,
    restarts: Family,
    failures: Family,
    last_exit: Family,
    cpu: Family,
    memory: Family,
    memory_peak: Family,
    pids: Family,
    oom: Family,
    activity: Family,
    checkout: Family,
    disk: Family,
    disk_budget: Family,
    sent: Family,
    received: Family,
    connections: Family,
    refused: Family,
    open: Family,
}

impl TaskFamilies {
    fn new() -> Self {
        use Kind::{Counter, Gauge};
        TaskFamilies {
            state: Family::new(
                "keel_task_state",
                Gauge,
                "1 for the task's current state, 0 for the others.",
            ),
            attempts: Family::new(
                "keel_task_attempts_total",
                Counter,
                "Attempts started (the attempt number of keel status).",
            ),
            restarts: Family::new(
                "keel_task_restarts",
                Gauge,
                "Restarts counted against restart_limit (those within its window).",
            ),
            failures: Family::new(
                "keel_task_consecutive_failures",
                Gauge,
                "Failed attempts in a row.",
            ),
            last_exit: Family::new(
                "keel_task_last_exit_info",
                Gauge,
                "How the last attempt ended: exit is exit:N, signal:NAME, oom, stalled, timeout, lost, spawn-failed or disk; kind is the part before the colon (always 1).",
            ),
            cpu: Family::new(
                "keel_task_cpu_seconds_total",
                Counter,
                "CPU time of the live attempt's cgroup (cpu.stat usage_usec; cpuacct.usage on v1).",
            ),
            memory: Family::new(
                "keel_task_memory_bytes",
                Gauge,
                "Memory of the live attempt's cgroup now (memory.current; memory.usage_in_bytes on v1).",
            ),
            memory_peak: Family::new(
                "keel_task_memory_peak_bytes",
                Gauge,
                "Peak memory of the live attempt's cgroup (memory.peak; memory.max_usage_in_bytes on v1).",
            ),
            pids: Family::new(
                "keel_task_pids",
                Gauge,
                "Processes in the live attempt's cgroup (pids.current).",
            ),
            oom: Family::new(
                "keel_task_oom_kills_total",
                Counter,
                "OOM kills in the live attempt's cgroup.",
            ),
            activity: Family::new(
                "keel_task_activity_age_seconds",
                Gauge,
                "Seconds since a liveness signal (heartbeat, progress, output, cpu) was last seen this attempt.",
            ),
            checkout: Family::new(
                "keel_task_checkout_bytes",
                Gauge,
                "The checkout's own disk use, as last measured (the shared base tree not counted).",
            ),
            disk: Family::new(
                "keel_task_disk_bytes",
                Gauge,
                "What the live attempt's directory holds on the state filesystem (measured every 2 s).",
            ),
            disk_budget: Family::new(
                "keel_task_disk_budget_bytes",
                Gauge,
                "The live attempt's disk budget (resources.disk, or the default).",
            ),
            sent: Family::new(
                "keel_task_network_sent_bytes_total",
                Counter,
                "Bytes the task sent through its relay (network: Allow), as last reported.",
            ),
            received: Family::new(
                "keel_task_network_received_bytes_total",
                Counter,
                "Bytes the task received through its relay, as last reported.",
            ),
            connections: Family::new(
                "keel_task_network_connections_total",
                Counter,
                "Connections the relay let through, as last reported.",
            ),
            refused: Family::new(
                "keel_task_network_refused_total",
                Counter,
                "Connections and names the relay refused, as last reported.",
            ),
            open: Family::new(
                "keel_task_network_open_connections",
                Gauge,
                "Connections open through the relay, as last reported.",
            ),
        }
    }

    fn add(&mut self, t: &TaskFigures) {
        let unit: &[(&'static str, &str)] = &[("unit", &t.unit)];
        for state in TASK_STATES {
            let value = if t.state == state { 1.0 } else { 0.0 };
            self.state
                .add(&[("unit", &t.unit), ("state", state)], value);
        }
        self.attempts.add(unit, f64::from(t.attempts));
        self.restarts.add(unit, t.restarts as f64);
        self.failures.add(unit, f64::from(t.consecutive_failures));
        if let Some(exit) = &t.last_exit {
            let labels = [
                ("unit", t.unit.as_str()),
                ("kind", exit_kind(exit)),
                ("exit", exit),
            ];
            self.last_exit.add(&labels, 1.0);
        }
        let seconds = t.cpu_usec.map(|usec| usec as f64 / 1e6);
        self.cpu.add_some(unit, seconds);
        self.memory.add_some(unit, opt(t.memory_bytes));
        self.memory_peak.add_some(unit, opt(t.memory_peak_bytes));
        self.pids.add_some(unit, opt(t.pids));
        self.oom.add_some(unit, opt(t.oom_kills));
        for (signal, age) in &t.activity_ages {
            self.activity
                .add(&[("unit", &t.unit), ("signal", signal)], *age);
        }
        self.checkout.add_some(unit, opt(t.checkout_bytes));
        self.disk.add_some(unit, opt(t.disk_bytes));
        self.disk_budget.add_some(unit, opt(t.disk_budget_bytes));
        if let Some(n) = &t.network {
            self.sent.add(unit, n.sent_bytes as f64);
            self.received.add(unit, n.received_bytes as f64);
            self.connections.add(unit, n.connections as f64);
            self.refused.add(unit, n.refused as f64);
            self.open.add(unit, n.open_connections as f64);
        }
    }

    fn all(self) -> [Family; 19] {
        [
            self.state,
            self.attempts,
            self.restarts,
            self.failures,
            self.last_exit,
            self.cpu,
            self.memory,
            self.memory_peak,
            self.pids,
            self.oom,
            self.activity,
            self.checkout,
            self.disk,
            self.disk_budget,
            self.sent,
            self.received,
            self.connections,
            self.refused,
            self.open,
        ]
    }
}

#[cfg(test)]
mod tests;
