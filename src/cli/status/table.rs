//! The status table: the daemon's line, a summary of what needs attention, one line a task, at
//! most [`WIDTH`] columns; and the tone (colour) a task's state gets, which the detail view
//! shares.

use crate::cli::format::{fit, fit_visible, paint, wrap, Tone};
use crate::fmt::{ago, duration_precise, format_bytes};
use crate::protocol::{StatusReport, TaskInfo};
use std::time::Duration;

/// Every line of the table fits this many columns.
pub const WIDTH: usize = 100;

/// The table: the daemon, a summary of what needs attention, one line a task; at most
/// [`WIDTH`] columns whatever the names, reasons and figures.
pub(super) fn render_table(report: &StatusReport, now: u64, colour: bool) -> String {
    let d = &report.daemon;
    // Read whole: wrapped, not cut (a path, why cgroups are unavailable).
    let mut lines = wrap(
        &format!(
            "daemon pid {} up {} · cgroups {}{} · state {}",
            d.pid,
            ago(Some(d.started_ms), now).trim_end_matches(" ago"),
            d.cgroup_mode,
            if d.under_init {
                " · under keel init"
            } else {
                ""
            },
            d.state_dir,
        ),
        WIDTH,
    );
    if !d.disk_budgets.is_empty() {
        lines.extend(wrap(&format!("disk budgets: {}", d.disk_budgets), WIDTH));
    }
    if !report.tasks.is_empty() {
        lines.push(summary(&report.tasks, colour));
    }
    lines.push(format!(
        "{:<18} {:<9} {:>4} {:>7} {:>5} {:>6} {:>5} {:<14} {}",
        "UNIT", "STATE", "TRY", "PID", "CPU", "MEM", "SINCE", "LAST EXIT", "NOTE"
    ));
    for task in &report.tasks {
        lines.push(row(task, now, colour));
        // Too long for the note: a line of its own under the task's.
        if let Some(preparing) = &task.preparing {
            lines.push(format!("{:<18} preparing: {}", "", preparing.text()));
        }
    }
    if report.tasks.is_empty() {
        lines.push("(no units: add one with `keel add FILE.ron`)".into());
    }
    for invalid in &report.invalid_units {
        let mut wrapped = wrap(&format!("invalid: {invalid}"), WIDTH);
        wrapped[0] = wrapped[0].replacen("invalid:", &paint("invalid:", Tone::Bad, colour), 1);
        lines.extend(wrapped);
    }
    let mut out = String::new();
    for line in lines {
        out.push_str(&fit_visible(&line, WIDTH));
        out.push('\n');
    }
    out
}

/// Whether a task needs a person (`Bad`), is worth a look (`Warn`), is fine (`Good`), or has
/// nothing going on (`Quiet`).
pub fn tone(task: &TaskInfo) -> Tone {
    // A start the host refused (`blocked: …`) waits for a person to fix the host.
    let blocked = task.state == "queued"
        && (task.reason.as_deref()).is_some_and(|r| r.starts_with(BLOCKED_PREFIX));
    if blocked || matches!(task.state.as_str(), "failed" | "stalled") {
        return Tone::Bad;
    }
    let waiting = task.state == "queued" && task.reason.is_some();
    if waiting
        || matches!(task.state.as_str(), "backoff" | "stopping")
        || task.liveness.as_deref() == Some("no-progress")
        || task.unit_file_missing
        || task.watch.is_some()
        || !task.kept_branches.is_empty()
        || task.unreviewed
        || task.restarts >= RESTART_LOOP
    {
        return Tone::Warn;
    }
    match task.state.as_str() {
        "running" | "starting" | "succeeded" => Tone::Good,
        _ => Tone::Quiet,
    }
}

/// How the reason of a queued task whose start the host refused begins (the daemon's
/// `lifecycle::blocked`).
pub const BLOCKED_PREFIX: &str = "blocked: ";

/// This many restarts counted toward the limit look like a loop.
const RESTART_LOOP: usize = 3;

/// `1 needs attention, 2 worth a look · 5 tasks: 1 failed, 2 running, …`.
fn summary(tasks: &[TaskInfo], colour: bool) -> String {
    const ORDER: [&str; 10] = [
        "failed",
        "stalled",
        "backoff",
        "stopping",
        "queued",
        "starting",
        "running",
        "paused",
        "succeeded",
        "stopped",
    ];
    let mut parts = Vec::new();
    for state in ORDER {
        let of_state: Vec<&TaskInfo> = tasks.iter().filter(|t| t.state == state).collect();
        let worst = of_state.iter().map(|t| tone(t)).min_by_key(|t| rank(*t));
        if let Some(worst) = worst {
            let words = format!("{} {state}", of_state.len());
            parts.push(paint(&words, worst, colour));
        }
    }
    let bad = tasks.iter().filter(|t| tone(t) == Tone::Bad).count();
    let warn = tasks.iter().filter(|t| tone(t) == Tone::Warn).count();
    let need = |b: usize| {
        let verb = if b == 1 { "needs" } else { "need" };
        paint(&format!("{b} {verb} attention"), Tone::Bad, colour)
    };
    let look = |w: usize| paint(&format!("{w} worth a look"), Tone::Warn, colour);
    let verdict = match (bad, warn) {
        (0, 0) => paint("all fine", Tone::Good, colour),
        (0, w) => look(w),
        (b, 0) => need(b),
        (b, w) => format!("{}, {}", need(b), look(w)),
    };
    // The verdict first: a narrow cut loses the counts, never it.
    format!(
        "{verdict} · {} task{}: {}",
        tasks.len(),
        if tasks.len() == 1 { "" } else { "s" },
        parts.join(", ")
    )
}

/// The most alarming tone first.
fn rank(tone: Tone) -> u8 {
    match tone {
        Tone::Bad => 0,
        Tone::Warn => 1,
        Tone::Good => 2,
        Tone::Quiet => 3,
    }
}

fn row(task: &TaskInfo, now: u64, colour: bool) -> String {
    let state = paint(&format!("{:<9}", fit(&task.state, 9)), tone(task), colour);
    let dash = || "-".to_string();
    let line = format!(
        "{:<18} {state} {:>4} {:>7} {:>5} {:>6} {:>5} {:<14} {}",
        fit(&task.unit, 18),
        fit(&task.attempt.to_string(), 4),
        task.pid.map_or_else(dash, |p| p.to_string()),
        task.cpu_percent
            .map_or_else(dash, |p| fit(&format!("{p:.0}%"), 5)),
        task.memory_bytes
            .map_or_else(dash, |m| fit(&format_bytes(m, false), 6)),
        fit(ago(task.since_ms, now).trim_end_matches(" ago"), 5),
        fit(task.last_exit.as_deref().unwrap_or("-"), 14),
        note(task, now, colour)
    );
    line.trim_end().to_string()
}

/// What the person should know beyond the figures, the most important first (the line is cut
/// at [`WIDTH`]).
pub(super) fn note(task: &TaskInfo, now: u64, colour: bool) -> String {
    let mut parts = Vec::new();
    if task.unit_file_missing {
        parts.push(paint(
            "unit file missing (keel rm forgets the task)",
            Tone::Warn,
            colour,
        ));
    }
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
        parts.push(paint("no progress", Tone::Warn, colour));
    }
    if task.watch.is_some() {
        // What is polled and why: `keel status UNIT`.
        parts.push(paint("watch: polling", Tone::Warn, colour));
    }
    if !task.kept_branches.is_empty() {
        parts.push(paint(
            &format!("kept {}", task.kept_branches.join(", ")),
            Tone::Warn,
            colour,
        ));
    }
    if task.unreviewed {
        parts.push(paint("unreviewed (keel diff)", Tone::Warn, colour));
    }
    if task.network.as_ref().is_some_and(|n| n.mode == "host") {
        // Not contained: `network: Host` (`keel status UNIT` says more).
        parts.push(paint("host network", Tone::Warn, colour));
    }
    if task.restarts >= RESTART_LOOP {
        parts.push(paint(
            &format!("{} restarts", task.restarts),
            Tone::Warn,
            colour,
        ));
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
    parts.join(" · ")
}
