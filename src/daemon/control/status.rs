//! `keel status`: every task in a line's worth of figures, and one task in full
//! ([`TaskDetail`]) when the client names it.

use crate::checkout;
use crate::daemon::record::{PastExit, TaskState};
use crate::daemon::{slices, Daemon, Task};
use crate::protocol::{
    CheckoutInfo, DaemonInfo, ExitInfo, LivenessInfo, NetworkInfo, PreparingInfo, Response,
    RestartInfo, SignalInfo, StatusReport, TaskDetail, TaskInfo,
};
use crate::unit::Unit;

impl Daemon {
    /// The report, from what is in memory: no walk, no git (a job refreshes the checkouts'
    /// figures, at most once a minute per task; the last ones known are shown).
    pub(super) fn status(&mut self, only: Option<&str>) -> Response {
        if let Some(unit) = only {
            if let Err(e) = self.known(unit) {
                return *e;
            }
        }
        self.refresh_disk_use(only);
        let tasks = self
            .tasks
            .values()
            .filter(|t| only.is_none_or(|u| u == t.name))
            .map(|t| {
                let mut info = self.task_info(t);
                if only.is_some() {
                    info.detail = Some(self.task_detail(t));
                }
                info
            })
            .collect();
        Response::Status(StatusReport {
            daemon: DaemonInfo {
                pid: std::process::id() as i32,
                started_ms: self.instance.started_ms,
                state_dir: self.store.dirs.root.display().to_string(),
                units_dir: self.units.dir.display().to_string(),
                cgroup_mode: self.cgroup_mode(),
                disk_budgets: self.disk.enforcement().to_string(),
                under_init: self.instance.under_init.is_some(),
            },
            tasks,
            invalid_units: self.units.invalid.values().cloned().collect(),
        })
    }

    fn task_info(&self, t: &Task) -> TaskInfo {
        let r = &t.record;
        let figures = slices::slice_figures(t, &self.slices);
        let live = self.liveness.view(t, &self.store.dirs);
        // A paused attempt shows as `paused` (its record's state stays running or stalled).
        let paused = r.paused.as_ref().filter(|_| t.shim.is_some());
        let since_ms = match r.state {
            _ if paused.is_some() => paused.map(|p| p.since_ms),
            s if s.is_final() => r.finished_ms,
            TaskState::Queued => r.finished_ms.or(Some(r.submitted_ms)),
            TaskState::Backoff => r.finished_ms,
            _ => r.started_ms,
        };
        TaskInfo {
            unit: t.name.clone(),
            state: match paused {
                Some(_) => "paused".to_string(),
                None => r.state.to_string(),
            },
            attempt: r.attempt,
            generation: r.generation,
            pid: t.shim.as_ref().map(|s| s.pid),
            since_ms,
            backoff_until_ms: r.backoff_until_ms,
            last_exit: r.last_exit.map(|e| e.to_string()),
            restarts: r.restarts.len(),
            // A start the host refused says so (`blocked: …`) over the scheduler's wait.
            reason: match (&t.waiting, r.state, paused) {
                (_, _, Some(pause)) => Some(pause.reason.clone()),
                (Some(waiting), TaskState::Queued, _) if r.blocked.is_none() => {
                    Some(waiting.to_string())
                }
                _ => r.reason.clone(),
            },
            progress: crate::daemon::last_progress_line(&self.store.dirs.run_dir(&t.name)),
            unit_changed: r.state.has_attempt() && t.accepted_text != t.unit_text,
            unit_file_missing: !t.seen_file,
            cpu_usec: figures.map(|f| f.cpu_usec),
            cpu_percent: figures.and_then(|f| f.cpu_percent),
            memory_bytes: figures.map(|f| f.memory),
            memory_peak_bytes: figures.and_then(|f| f.memory_peak),
            pids: figures.map(|f| f.pids),
            checkout_bytes: t.checkout_bytes,
            disk_bytes: self.disk_figures(t).map(|f| f.0),
            disk_budget: self.disk_figures(t).map(|f| f.1),
            last_activity_ms: live.as_ref().and_then(|l| l.last_activity.map(|a| a.0)),
            last_activity_kind: live
                .as_ref()
                .and_then(|l| l.last_activity.map(|a| a.1.to_string())),
            liveness: live.as_ref().map(|l| l.verdict.to_string()),
            progress_changed_ms: live.and_then(|l| l.progress_changed_ms),
            watch: self.watch_note(t),
            kept_branches: t.kept_branches.clone(),
            unreviewed: r.state.is_final() && t.work.as_ref().is_some_and(|w| w.unreviewed()),
            preparing: t.preparing.as_ref().map(|_| self.preparing_info(&t.name)),
            network: self.network_info(t),
            paused_since_ms: paused.map(|p| p.since_ms),
            frozen: paused.map(|_| t.frozen),
            detail: None,
        }
    }

    /// The network of the live attempt's unit (parsed again only when the file was edited
    /// since it started), else of the unit file.
    fn network_info(&self, t: &Task) -> Option<NetworkInfo> {
        let edited = t.record.state.has_attempt() && t.accepted_text != t.unit_text;
        let accepted: Option<Unit> = match edited {
            true => t
                .accepted_text
                .as_deref()
                .and_then(|text| crate::unit::parse_unit(&self.units.file_of(&t.name), text).ok()),
            false => None,
        };
        let network = &accepted.as_ref().or(t.unit.as_ref())?.sandbox.network;
        Some(NetworkInfo {
            mode: network.mode().to_string(),
            entries: match network {
                crate::unit::Network::Allow(entries) => entries.clone(),
                _ => Vec::new(),
            },
        })
    }

    /// One task in full. Reads the checkout's record (keel's own small file): only for
    /// `keel status UNIT`, never for the table.
    fn task_detail(&self, t: &Task) -> TaskDetail {
        let r = &t.record;
        // The limits of the live (or last) attempt are those of the unit it started with.
        let accepted: Option<Unit> = t
            .accepted_text
            .as_deref()
            .and_then(|text| crate::unit::parse_unit(&self.units.file_of(&t.name), text).ok());
        let limits = accepted.as_ref().or(t.unit.as_ref());
        TaskDetail {
            unit_file: self.units.file_of(&t.name).display().to_string(),
            command: t.unit.as_ref().map(|u| u.command.0.clone()),
            log_path: crate::sandbox::spec::output_log_path(&self.store.dirs.run_dir(&t.name))
                .display()
                .to_string(),
            started_ms: r.started_ms,
            recent_exits: r.recent_exits.iter().map(exit_info).collect(),
            restart: t.unit.as_ref().map(|u| RestartInfo {
                policy: format!("{:?}", u.restart),
                limit: u.restart_limit.count,
                window_ms: u.restart_limit.within.0.as_millis() as u64,
                consecutive_failures: r.consecutive_failures,
            }),
            checkout: self.checkout_info(&t.name),
            liveness: self.liveness_info(t),
            cpu_limit: limits.and_then(|u| u.resources.cpu_limit),
            memory_limit_bytes: limits.map(|u| u.resources.memory_limit_bytes()),
            pids_limit: limits.map(|u| u64::from(u.resources.pids)),
            cpu_request: limits.map(|u| u.resources.cpu),
            memory_request_bytes: limits.map(|u| u.resources.memory.0),
            // keel's own small file (the relay's report), for `keel status UNIT` only.
            network_traffic: super::super::network::read_report(&self.store.dirs.run_dir(&t.name))
                .map(|report| crate::protocol::NetworkTraffic {
                    allowed: report.allowed,
                    refused: report.refused,
                    open_connections: report.open_connections,
                    updated_ms: report.updated_ms,
                }),
            max_runtime_ms: limits
                .and_then(|u| u.max_runtime)
                .map(|d| d.0.as_millis() as u64),
            ran_ms: (t.shim.is_some())
                .then(|| crate::daemon::runtime_limit::attempt_ran(t, std::time::Instant::now()))
                .flatten(),
            max_total_runtime_ms: limits
                .and_then(|u| u.max_total_runtime)
                .map(|d| d.0.as_millis() as u64),
            ran_total_ms: Some(
                r.ran_before_ms.saturating_add(
                    (t.shim.is_some())
                        .then(|| {
                            crate::daemon::runtime_limit::attempt_ran(t, std::time::Instant::now())
                        })
                        .flatten()
                        .unwrap_or(0),
                ),
            ),
            paused_ms: t.shim.is_some().then(|| {
                let now = t.paused_at.map_or(0, |at| at.elapsed().as_millis() as u64);
                r.paused_ms.saturating_add(now)
            }),
            processes: match r.state.has_attempt() {
                true => slices::slice_of(&self.slices, &t.name)
                    .and_then(|s| s.pids().ok())
                    .unwrap_or_default(),
                false => Vec::new(),
            },
        }
    }

    /// How far `unit`'s preparation job has come (`queued` until a worker runs it).
    fn preparing_info(&self, unit: &str) -> PreparingInfo {
        match self.jobs.progress_of(unit) {
            None => PreparingInfo {
                step: "queued".to_string(),
                done: 0,
                total: 0,
            },
            Some(None) => PreparingInfo {
                step: "started".to_string(),
                done: 0,
                total: 0,
            },
            Some(Some(p)) => PreparingInfo {
                step: p.step.clone(),
                done: p.done,
                total: p.total,
            },
        }
    }

    fn checkout_info(&self, unit: &str) -> Option<CheckoutInfo> {
        let record = match checkout::record(&self.store.dirs, unit) {
            Ok(record) => record?,
            Err(e) => {
                log::warn!("{unit}: status: {e}");
                return None;
            }
        };
        Some(CheckoutInfo {
            path: checkout::checkout_dir(&self.store.dirs, unit)
                .display()
                .to_string(),
            repo: record.repo.display().to_string(),
            branch: record.branch,
            base: record.base,
            base_commit: record.base_commit,
        })
    }

    fn liveness_info(&self, t: &Task) -> Option<LivenessInfo> {
        let view = self.liveness.view(t, &self.store.dirs)?;
        Some(LivenessInfo {
            verdict: view.verdict.to_string(),
            signals: view
                .signals
                .iter()
                .map(|&(kind, counted, last_ms)| SignalInfo {
                    kind: kind.to_string(),
                    counted,
                    last_ms,
                })
                .collect(),
            heartbeat_timeout_ms: view.settings.heartbeat_timeout,
            progress_timeout_ms: view.settings.progress_timeout,
            startup_grace_ms: view.settings.startup_grace,
            on_stall: format!("{:?}", view.on_stall),
            stall_at_ms: view.stall_at_ms,
            no_progress_at_ms: view.no_progress_at_ms,
            progress_reads: view.progress_reads,
        })
    }

    /// What of the live attempt is checked on a timer because the kernel refused its watch.
    fn watch_note(&self, t: &Task) -> Option<String> {
        let shim = t.shim.as_ref().map(|s| s.token);
        let oom = t.oom.as_ref().map(|o| o.token);
        let notes: Vec<String> = [shim, oom]
            .into_iter()
            .flatten()
            .filter_map(|token| self.events.refused_note(token))
            .chain(self.liveness.note(&t.name))
            .collect();
        (!notes.is_empty()).then(|| notes.join("; "))
    }
}

fn exit_info(past: &PastExit) -> ExitInfo {
    ExitInfo {
        attempt: past.attempt,
        exit: past.exit.to_string(),
        started_ms: past.started_ms,
        ended_ms: past.ended_ms,
        note: past.note.clone(),
    }
}
