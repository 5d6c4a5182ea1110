//! The report as it may be shown on a terminal: every string in it — the agent's progress
//! line, reasons, exit notes, paths, names — with its control and invisible characters
//! escaped ([`crate::fmt::printable`]), so that what a task wrote cannot move the cursor,
//! retitle the terminal, hide a line or reorder the text a person reads. `--json` prints the
//! report as it came.
//!
//! Every struct is taken apart field by field (no `..`): a field added to the protocol does
//! not build here until it is said whether it is text to escape.

use crate::fmt::printable;
use crate::protocol::{
    CheckoutInfo, DaemonInfo, ExitInfo, LivenessInfo, NetworkInfo, RestartInfo, SignalInfo,
    StatusReport, TaskDetail, TaskInfo,
};

/// A copy of `report` whose every string is safe to print.
pub fn escaped(report: &StatusReport) -> StatusReport {
    let mut report = report.clone();
    let StatusReport {
        daemon,
        tasks,
        invalid_units,
    } = &mut report;
    let DaemonInfo {
        pid: _,
        started_ms: _,
        state_dir,
        units_dir,
        cgroup_mode,
        under_init: _,
        disk_budgets,
    } = daemon;
    texts([state_dir, units_dir, cgroup_mode, disk_budgets]);
    texts(invalid_units.iter_mut());
    tasks.iter_mut().for_each(task);
    report
}

fn task(task: &mut TaskInfo) {
    let TaskInfo {
        unit,
        state,
        attempt: _,
        generation: _,
        pid: _,
        since_ms: _,
        backoff_until_ms: _,
        last_exit,
        restarts: _,
        reason,
        progress,
        unit_changed: _,
        unit_file_missing: _,
        cpu_usec: _,
        cpu_percent: _,
        memory_bytes: _,
        memory_peak_bytes: _,
        pids: _,
        checkout_bytes: _,
        unreviewed: _,
        disk_bytes: _,
        disk_budget: _,
        last_activity_ms: _,
        last_activity_kind,
        liveness,
        progress_changed_ms: _,
        watch,
        kept_branches,
        preparing,
        network,
        paused_since_ms: _,
        frozen: _,
        detail,
    } = task;
    texts([unit, state]);
    texts(
        [
            last_exit,
            reason,
            progress,
            last_activity_kind,
            liveness,
            watch,
        ]
        .into_iter()
        .flatten(),
    );
    texts(kept_branches.iter_mut());
    texts(preparing.iter_mut().map(|p| &mut p.step));
    if let Some(NetworkInfo { mode, entries }) = network {
        texts([mode].into_iter().chain(entries.iter_mut()));
    }
    if let Some(d) = detail {
        self::detail(d);
    }
}

fn detail(d: &mut TaskDetail) {
    let TaskDetail {
        unit_file,
        command,
        log_path,
        started_ms: _,
        recent_exits,
        restart,
        checkout,
        liveness,
        cpu_limit: _,
        memory_limit_bytes: _,
        pids_limit: _,
        cpu_request: _,
        memory_request_bytes: _,
        processes: _,
        network_traffic,
        max_runtime_ms: _,
        ran_ms: _,
        paused_ms: _,
        max_total_runtime_ms: _,
        ran_total_ms: _,
    } = d;
    texts([unit_file, log_path]);
    // Destinations are what the agent asked for (a name it made up, say): escaped too.
    if let Some(traffic) = network_traffic {
        texts(traffic.allowed.iter_mut().map(|a| &mut a.destination));
        for r in &mut traffic.refused {
            texts([&mut r.destination, &mut r.reason]);
        }
    }
    texts(command.iter_mut().flatten());
    for e in recent_exits {
        let ExitInfo {
            attempt: _,
            exit,
            started_ms: _,
            ended_ms: _,
            note,
        } = e;
        texts([exit].into_iter().chain(note.as_mut()));
    }
    if let Some(RestartInfo {
        policy,
        limit: _,
        window_ms: _,
        consecutive_failures: _,
    }) = restart
    {
        texts([policy]);
    }
    if let Some(CheckoutInfo {
        path,
        repo,
        branch,
        base,
        base_commit,
    }) = checkout
    {
        texts([path, repo, branch, base, base_commit]);
    }
    if let Some(LivenessInfo {
        verdict,
        signals,
        heartbeat_timeout_ms: _,
        progress_timeout_ms: _,
        startup_grace_ms: _,
        on_stall,
        stall_at_ms: _,
        no_progress_at_ms: _,
        progress_reads: _,
    }) = liveness
    {
        texts([verdict, on_stall]);
        for SignalInfo {
            kind,
            counted: _,
            last_ms: _,
        } in signals
        {
            texts([kind]);
        }
    }
}

fn texts<'a>(all: impl IntoIterator<Item = &'a mut String>) {
    for text in all {
        if let std::borrow::Cow::Owned(shown) = printable(text) {
            *text = shown;
        }
    }
}
