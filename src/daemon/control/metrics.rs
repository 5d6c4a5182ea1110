//! `keel metrics` (and what `keel daemon --metrics` serves, `metrics_server.rs`): a snapshot
//! of what the daemon holds in memory, the live attempts' cgroup counters (cgroupfs: kernel
//! memory, never a disk) and the relays' last reports (keel's own small files), rendered by
//! [`crate::metrics`]. Nothing in a task's checkout is read.

use crate::daemon::record::TaskState;
use crate::daemon::{slices, Daemon, Task};
use crate::metrics::{DaemonFigures, NetworkFigures, Snapshot, TaskFigures};
use crate::protocol::Response;

impl Daemon {
    pub(super) fn metrics_request(&self) -> Response {
        Response::Metrics {
            text: self.metrics_text(),
        }
    }

    /// The text format of the daemon's figures now.
    pub(in crate::daemon) fn metrics_text(&self) -> String {
        crate::metrics::render(&self.metrics_snapshot())
    }

    fn metrics_snapshot(&self) -> Snapshot {
        let now_ms = crate::state::now_ms();
        let tasks: Vec<TaskFigures> = (self.tasks.values())
            .map(|t| self.task_figures(t, now_ms))
            .collect();
        Snapshot {
            daemon: DaemonFigures {
                version: env!("CARGO_PKG_VERSION").to_string(),
                cgroup_mode: self.cgroup_mode(),
                start_time_seconds: self.instance.started_ms as f64 / 1000.0,
                loop_lag_seconds: self.events.last_tick.elapsed().as_secs_f64(),
                queue_length: tasks.iter().filter(|t| t.state == "queued").count(),
                invalid_units: self.units.invalid.len(),
                scrape_connections: self.metrics_server.as_ref().map_or(0, |s| s.connections()),
            },
            tasks,
        }
    }

    fn task_figures(&self, t: &Task, now_ms: u64) -> TaskFigures {
        let r = &t.record;
        // As `keel status` says it: a paused attempt is `paused`.
        let paused = r.paused.is_some() && t.shim.is_some();
        let live = matches!(
            r.state,
            TaskState::Running | TaskState::Stalled | TaskState::Stopping
        );
        let stats = live
            .then(|| slices::slice_of(&self.slices, &t.name))
            .flatten()
            .and_then(|cgroup| cgroup.stats().ok());
        let activity_ages = match self.liveness.view(t, &self.store.dirs) {
            Some(view) => (view.signals.iter())
                .filter_map(|&(kind, _, last_ms)| {
                    let age = now_ms.saturating_sub(last_ms?) as f64 / 1000.0;
                    Some((kind.to_string(), age))
                })
                .collect(),
            None => Vec::new(),
        };
        let disk = self.disk_figures(t);
        TaskFigures {
            unit: t.name.clone(),
            state: match paused {
                true => "paused".to_string(),
                false => r.state.to_string(),
            },
            attempts: r.attempt,
            restarts: r.restarts.len(),
            consecutive_failures: r.consecutive_failures,
            last_exit: r.last_exit.map(|e| e.to_string()),
            cpu_usec: stats.as_ref().map(|s| s.cpu_usage_usec),
            memory_bytes: stats.as_ref().map(|s| s.memory_current),
            memory_peak_bytes: stats.as_ref().and_then(|s| s.memory_peak),
            pids: stats.as_ref().map(|s| s.pids_current),
            oom_kills: stats.as_ref().map(|s| s.oom_kills),
            activity_ages,
            checkout_bytes: t.checkout_bytes,
            disk_bytes: disk.map(|d| d.0),
            disk_budget_bytes: disk.map(|d| d.1),
            network: self.network_figures(t),
        }
    }

    /// The relay's last report, summed over destinations: only for a task that has a relay.
    fn network_figures(&self, t: &Task) -> Option<NetworkFigures> {
        if !t.network.as_ref().is_some_and(|n| n.has_relay()) {
            return None;
        }
        let run_dir = self.store.dirs.run_dir(&t.name);
        let report = crate::daemon::network::read_report(&run_dir)?;
        Some(NetworkFigures {
            sent_bytes: report.allowed.iter().map(|a| a.bytes_out).sum(),
            received_bytes: report.allowed.iter().map(|a| a.bytes_in).sum(),
            connections: report.allowed.iter().map(|a| a.connections).sum(),
            refused: report.refused.iter().map(|r| r.count).sum(),
            open_connections: report.open_connections,
        })
    }
}
