//! `keel status [UNIT] [--json]`: one line a task, read at a glance; `--json` is the stable
//! [`crate::protocol::StatusReport`].

use super::format::{ago, duration_precise, fit};
use super::{request, CliError, CliResult};
use crate::daemon::queue::format_bytes;
use crate::protocol::{Request, Response, StatusReport, TaskInfo};
use crate::state::now_ms;
use std::path::Path;
use std::time::Duration;

pub fn run(state_dir: &Path, unit: Option<&str>, json: bool) -> CliResult {
    let response = request(
        state_dir,
        &Request::Status {
            unit: unit.map(str::to_string),
        },
        Some(Duration::from_secs(30)),
    )?;
    let report = match response {
        Response::Status(report) => report,
        Response::Error { message } => return Err(CliError(message)),
        other => return Err(CliError(format!("unexpected answer: {other:?}"))),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| CliError(e.to_string()))?
        );
    } else {
        print!("{}", render(&report, now_ms()));
    }
    Ok(())
}

/// The table, at most 100 columns wide.
pub fn render(report: &StatusReport, now: u64) -> String {
    let d = &report.daemon;
    let mut out = format!(
        "daemon pid {} up {} · state {} · cgroups {}{}\n",
        d.pid,
        ago(Some(d.started_ms), now).trim_end_matches(" ago"),
        d.state_dir,
        d.cgroup_mode,
        if d.under_init {
            " · under keel init"
        } else {
            ""
        }
    );
    out.push_str(&format!(
        "{:<18} {:<9} {:>3} {:>7} {:>5} {:>6} {:>7} {:<14} {}\n",
        "UNIT", "STATE", "TRY", "PID", "CPU", "MEM", "SINCE", "LAST EXIT", "NOTE"
    ));
    for task in &report.tasks {
        out.push_str(&fit(&row(task, now), 100));
        out.push('\n');
    }
    if report.tasks.is_empty() {
        out.push_str("(no units: add one with `keel add FILE.ron`)\n");
    }
    for invalid in &report.invalid_units {
        out.push_str(&fit(&format!("invalid: {invalid}"), 100));
        out.push('\n');
    }
    out
}

fn row(task: &TaskInfo, now: u64) -> String {
    let note = note(task, now);
    format!(
        "{:<18} {:<9} {:>3} {:>7} {:>5} {:>6} {:>7} {:<14} {}",
        fit(&task.unit, 18),
        task.state,
        task.attempt,
        task.pid.map_or("-".to_string(), |p| p.to_string()),
        task.cpu_percent
            .map_or("-".to_string(), |p| format!("{p:.0}%")),
        task.memory_bytes
            .map_or("-".to_string(), |m| format_bytes(m, false)),
        ago(task.since_ms, now).trim_end_matches(" ago"),
        fit(task.last_exit.as_deref().unwrap_or("-"), 14),
        note
    )
}

fn note(task: &TaskInfo, now: u64) -> String {
    let mut parts = Vec::new();
    if let Some(until) = task.backoff_until_ms {
        parts.push(format!(
            "restart in {}",
            duration_precise(Duration::from_millis(until.saturating_sub(now)))
        ));
    }
    if let Some(reason) = &task.reason {
        parts.push(reason.clone());
    }
    if task.liveness.as_deref() == Some("no-progress") {
        parts.push("no progress".into());
    }
    if let (Some(at), Some(kind)) = (task.last_activity_ms, &task.last_activity_kind) {
        // The last evidence of work: `heartbeat 12s ago` (short: the note is ~25 columns).
        parts.push(format!("{kind} {}", ago(Some(at), now)));
    } else if task.liveness.is_some() {
        parts.push("no activity yet".into());
    }
    if let Some(progress) = &task.progress {
        parts.push(format!("“{progress}”"));
    }
    if task.unit_changed {
        parts.push("unit edited: applies at next start".into());
    }
    if task.unit_file_missing {
        parts.push("unit file missing (keel rm forgets the task)".into());
    }
    parts.join(" · ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::DaemonInfo;

    #[test]
    fn table_fits_100_columns() {
        let task = TaskInfo {
            unit: "a-very-long-unit-name-that-goes-on-and-on".into(),
            state: "backoff".into(),
            attempt: 12,
            generation: 12,
            pid: Some(4_194_303),
            since_ms: Some(0),
            backoff_until_ms: Some(5_000),
            last_exit: Some("signal:SIGKILL".into()),
            restarts: 3,
            reason: Some("a long reason ".repeat(10)),
            progress: Some("step 3 of 9".into()),
            unit_changed: false,
            unit_file_missing: false,
            cpu_usec: Some(12_345_678),
            cpu_percent: Some(187.4),
            memory_bytes: Some(3 << 30),
            memory_peak_bytes: Some(4 << 30),
            pids: Some(42),
            checkout_bytes: Some(860_000),
            last_activity_ms: Some(988),
            last_activity_kind: Some("heartbeat".into()),
            liveness: Some("running".into()),
            progress_changed_ms: None,
        };
        let report = StatusReport {
            daemon: DaemonInfo {
                pid: 1,
                started_ms: 0,
                state_dir: "/var/lib/keel".into(),
                units_dir: "/var/lib/keel/units".into(),
                cgroup_mode: "none".into(),
                under_init: false,
            },
            tasks: vec![task],
            invalid_units: vec!["x.ron:1:1: bad".into()],
        };
        let text = render(&report, 1_000);
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "too wide: {line}");
        }
        assert!(text.contains("backoff"));
        assert!(text.contains("restart in 4.0s"));
        assert!(text.contains(" 187% "), "{text}");
        assert!(text.contains("3G"), "{text}");
        assert!(text.contains("invalid: x.ron:1:1: bad"));
    }

    #[test]
    fn a_running_task_shows_its_last_activity_and_a_missing_progress() {
        let task: TaskInfo = serde_json::from_value(serde_json::json!({
            "unit": "a", "state": "stalled", "attempt": 1, "generation": 1, "pid": 9,
            "since_ms": 0, "backoff_until_ms": null, "last_exit": null, "restarts": 0,
            "reason": null, "progress": "step 3", "unit_changed": false,
            "last_activity_ms": 88_000, "last_activity_kind": "heartbeat",
            "liveness": "no-progress",
        }))
        .unwrap();
        assert_eq!(
            note(&task, 100_000),
            "no progress · heartbeat 12s ago · “step 3”"
        );
        let quiet = TaskInfo {
            last_activity_ms: None,
            last_activity_kind: None,
            liveness: Some("running".into()),
            ..task
        };
        assert_eq!(note(&quiet, 100_000), "no activity yet · “step 3”");
    }
}
