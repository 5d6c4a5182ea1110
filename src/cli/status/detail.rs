//! `keel status UNIT`: one task in full, a block a person reads top to bottom — what it is
//! doing, what it runs, where its work is, how its last attempts ended, whether it looks alive,
//! what it uses against its limits, where the restart policy stands, where its output is.

use super::table::{tone, WIDTH};
use crate::cli::format::{fit_visible, paint, Tone};
use crate::fmt::{ago, duration, duration_precise, format_bytes};
use crate::protocol::{NetworkTraffic, TaskDetail, TaskInfo};
use std::time::Duration;

/// Label column width.
const LABEL: usize = 12;

pub(super) fn render(task: &TaskInfo, d: &TaskDetail, now: u64, colour: bool) -> String {
    let mut out = Block::default();
    out.head(&headline(task, now, colour));
    out.field("unit file", &unit_file(task, d));
    if let Some(command) = &d.command {
        out.fit_field("command", &command.join(" "));
    }
    if let Some(reason) = &task.reason {
        out.fit_field("reason", reason);
    }
    if let Some(watch) = &task.watch {
        out.fit_field("watch", watch);
    }
    if let Some(runtime) = runtime(task, d) {
        out.fit_field("runtime", &runtime);
    }
    if let Some(preparing) = &task.preparing {
        out.fit_field("preparing", &preparing.text());
    }
    if let Some(progress) = &task.progress {
        let changed = task
            .progress_changed_ms
            .map(|at| format!(" (changed {})", ago(Some(at), now)))
            .unwrap_or_default();
        out.fit_field("progress", &format!("“{progress}”{changed}"));
    }
    if let Some(network) = &task.network {
        let tone = match network.mode.as_str() {
            "host" => Tone::Warn,
            _ => Tone::Good,
        };
        out.fit_field("network", &paint(&network.text(), tone, colour));
    }
    if let Some(traffic) = &d.network_traffic {
        network_traffic(&mut out, traffic, now, colour);
    }
    checkout(&mut out, task, d, colour);
    exits(&mut out, d, now, colour);
    liveness(&mut out, d, now, colour);
    cgroup(&mut out, task, d);
    disk(&mut out, task);
    restart(&mut out, task, d, now);
    out.top(
        "logs",
        &format!("{}  (keel logs {})", d.log_path, task.unit),
    );
    out.text
}

/// Lines of `label  value`; values that are paths are never cut, the others fit [`WIDTH`].
#[derive(Default)]
struct Block {
    text: String,
}

impl Block {
    fn head(&mut self, line: &str) {
        self.text.push_str(&fit_visible(line, WIDTH));
        self.text.push('\n');
    }
    /// A path or a list of names: shown whole.
    fn field(&mut self, label: &str, value: &str) {
        self.text.push_str(&format!("  {label:<LABEL$} {value}\n"));
    }
    /// A section of one line: `label  value` from the first column; shown whole.
    fn top(&mut self, label: &str, value: &str) {
        self.text
            .push_str(&format!("{label:<w$}{value}\n", w = LABEL + 3));
    }
    fn fit_field(&mut self, label: &str, value: &str) {
        let line = format!("  {label:<LABEL$} {value}");
        self.head(&line);
    }
}

fn headline(task: &TaskInfo, now: u64, colour: bool) -> String {
    let mut line = format!("{} {}", task.unit, paint(&task.state, tone(task), colour));
    if task.since_ms.is_some() {
        line.push_str(&format!(" since {}", ago(task.since_ms, now)));
    }
    line.push_str(&format!(
        " · attempt {} (generation {})",
        task.attempt, task.generation
    ));
    if let Some(pid) = task.pid {
        line.push_str(&format!(" · shim pid {pid}"));
    }
    if let Some(exit) = &task.last_exit {
        line.push_str(&format!(" · last exit {exit}"));
    }
    line
}

fn unit_file(task: &TaskInfo, d: &TaskDetail) -> String {
    let mut value = d.unit_file.clone();
    if task.unit_file_missing {
        value.push_str("  (missing: keel rm forgets the task)");
    } else if task.unit_changed {
        value.push_str("  (edited: applies at the next start)");
    }
    value
}

fn checkout(out: &mut Block, task: &TaskInfo, d: &TaskDetail, colour: bool) {
    let Some(c) = &d.checkout else {
        return;
    };
    out.head("checkout");
    out.field("path", &c.path);
    out.field("repo", &c.repo);
    let short = &c.base_commit[..c.base_commit.len().min(12)];
    out.fit_field(
        "branch",
        &format!("{} from {} at {short}", c.branch, c.base),
    );
    if let Some(bytes) = task.checkout_bytes {
        out.fit_field(
            "disk",
            &format!(
                "{} of its own (git dir and changes)",
                format_bytes(bytes, true)
            ),
        );
    }
    if task.unreviewed {
        let note = paint("unreviewed", Tone::Warn, colour);
        out.field(
            "review",
            &format!("{note}: commits or changes not yet seen (keel diff)"),
        );
    }
    if !task.kept_branches.is_empty() {
        let note = paint(
            "a harvest could not fast-forward: merge by hand",
            Tone::Warn,
            colour,
        );
        out.field(
            "kept",
            &format!("{}  ({note})", task.kept_branches.join(", ")),
        );
    }
}

/// `network: Allow`'s relay figures: each destination reached (connections, bytes each
/// way), each refused (how often, when last), most recent first, at most a few of each.
fn network_traffic(out: &mut Block, traffic: &NetworkTraffic, now: u64, colour: bool) {
    const SHOWN: usize = 8;
    let mut allowed: Vec<_> = traffic.allowed.iter().collect();
    allowed.sort_by_key(|a| std::cmp::Reverse(a.last_ms));
    for (i, a) in allowed.iter().take(SHOWN).enumerate() {
        let label = if i == 0 { "reached" } else { "" };
        out.fit_field(
            label,
            &format!(
                "{} \u{d7}{} ({} out, {} in), {}",
                a.destination,
                a.connections,
                format_bytes(a.bytes_out, true),
                format_bytes(a.bytes_in, true),
                ago(Some(a.last_ms), now)
            ),
        );
    }
    let mut refused: Vec<_> = traffic.refused.iter().collect();
    refused.sort_by_key(|r| std::cmp::Reverse(r.last_ms));
    for (i, r) in refused.iter().take(SHOWN).enumerate() {
        let label = if i == 0 { "refused" } else { "" };
        let text = format!(
            "{} \u{d7}{}, {}: {}",
            r.destination,
            r.count,
            ago(Some(r.last_ms), now),
            r.reason
        );
        out.fit_field(label, &paint(&text, Tone::Warn, colour));
    }
    let more = allowed.len().saturating_sub(SHOWN) + refused.len().saturating_sub(SHOWN);
    if more > 0 {
        out.fit_field("", &format!("{more} more: keel status {{UNIT}} --json"));
    }
}

fn exits(out: &mut Block, d: &TaskDetail, now: u64, colour: bool) {
    if d.recent_exits.is_empty() {
        out.head(&format!("{:<w$}none yet", "recent exits", w = LABEL + 3));
        return;
    }
    out.head("recent exits (newest first)");
    for e in d.recent_exits.iter().rev() {
        let ok = e.exit == "exit:0";
        let how = paint(
            &format!("{:<14}", e.exit),
            if ok { Tone::Good } else { Tone::Bad },
            colour,
        );
        let ran = e.started_ms.map_or("-".to_string(), |s| {
            duration_precise(Duration::from_millis(e.ended_ms.saturating_sub(s)))
        });
        let mut line = format!(
            "  #{:<4} {how} ended {:<8} ran {ran}",
            e.attempt,
            ago(Some(e.ended_ms), now)
        );
        if let Some(note) = &e.note {
            line.push_str(&format!(" · {note}"));
        }
        out.head(&line);
    }
}

fn liveness(out: &mut Block, d: &TaskDetail, now: u64, colour: bool) {
    let Some(l) = &d.liveness else {
        return;
    };
    let verdict_tone = match l.verdict.as_str() {
        "running" => Tone::Good,
        "stalled" => Tone::Bad,
        _ => Tone::Warn,
    };
    out.head(&format!(
        "{:<w$}{} (on stall: {})",
        "liveness",
        paint(&l.verdict, verdict_tone, colour),
        l.on_stall,
        w = LABEL + 3
    ));
    for s in &l.signals {
        let seen = s
            .last_ms
            .map_or("not seen this attempt".to_string(), |at| ago(Some(at), now));
        let counted = if s.counted { "" } else { "  (not counted)" };
        out.fit_field(&s.kind, &format!("{seen}{counted}"));
    }
    let ms = |v: u64| duration_precise(Duration::from_millis(v));
    let until = |at: u64| {
        if at > now {
            format!("in {}", ms(at - now))
        } else {
            format!("since {}", ms(now - at))
        }
    };
    out.fit_field(
        "stalled",
        &format!(
            "{} without evidence (heartbeat_timeout {}, startup_grace {})",
            until(l.stall_at_ms),
            ms(l.heartbeat_timeout_ms),
            ms(l.startup_grace_ms)
        ),
    );
    if let Some(at) = l.no_progress_at_ms {
        out.fit_field(
            "no progress",
            &format!(
                "{} if the progress file does not change (progress_timeout {})",
                until(at),
                ms(l.progress_timeout_ms)
            ),
        );
    }
}

fn cgroup(out: &mut Block, task: &TaskInfo, d: &TaskDetail) {
    let (Some(cpu_usec), Some(memory), Some(pids)) = (task.cpu_usec, task.memory_bytes, task.pids)
    else {
        return;
    };
    out.head("cgroup");
    let share = task
        .cpu_percent
        .map_or(String::new(), |p| format!(", {p:.0}% of a core lately"));
    // The request is the task's weight when CPUs are contended; only a limit caps it.
    let limit = match (d.cpu_request, d.cpu_limit) {
        (Some(request), Some(limit)) => format!(" (request {request}, limit {limit} CPU)"),
        (Some(request), None) => format!(" (request {request} CPU, no limit)"),
        (None, Some(limit)) => format!(" (limit {limit} CPU)"),
        (None, None) => String::new(),
    };
    out.fit_field(
        "cpu",
        &format!(
            "{} used{share}{limit}",
            duration_precise(Duration::from_micros(cpu_usec))
        ),
    );
    let peak = task.memory_peak_bytes.map_or(String::new(), |p| {
        format!(", peak {}", format_bytes(p, true))
    });
    let of = d.memory_limit_bytes.map_or(String::new(), |m| {
        format!(" of {} ({}%)", format_bytes(m, true), percent(memory, m))
    });
    let requested = d.memory_request_bytes.map_or(String::new(), |r| {
        format!(", request {}", format_bytes(r, true))
    });
    out.fit_field(
        "memory",
        &format!("{} now{of}{peak}{requested}", format_bytes(memory, true)),
    );
    let of = d.pids_limit.map_or(String::new(), |m| format!(" of {m}"));
    let listed: Vec<String> = d.processes.iter().map(i32::to_string).collect();
    let listed = match listed.is_empty() {
        true => String::new(),
        false => format!(": {}", listed.join(" ")),
    };
    out.fit_field("pids", &format!("{pids}{of}{listed}"));
}

/// The live attempt's disk use against its budget (`resources.disk`).
fn disk(out: &mut Block, task: &TaskInfo) {
    let (Some(bytes), Some(budget)) = (task.disk_bytes, task.disk_budget) else {
        return;
    };
    out.top(
        "disk",
        &format!(
            "{} of its {} budget ({}%, resources.disk)",
            format_bytes(bytes, true),
            format_bytes(budget, false),
            percent(bytes, budget)
        ),
    );
}

fn percent(part: u64, whole: u64) -> u64 {
    if whole == 0 {
        return 0;
    }
    (u128::from(part) * 100 / u128::from(whole)) as u64
}

fn restart(out: &mut Block, task: &TaskInfo, d: &TaskDetail, now: u64) {
    let Some(r) = &d.restart else {
        return;
    };
    let mut line = format!(
        "{}; {} of {} restarts used within {}",
        r.policy,
        task.restarts,
        r.limit,
        duration(Duration::from_millis(r.window_ms))
    );
    if r.consecutive_failures > 0 {
        line.push_str(&format!("; {} failures in a row", r.consecutive_failures));
    }
    if let Some(until) = task.backoff_until_ms {
        line.push_str(&format!(
            "; next start in {}",
            duration_precise(Duration::from_millis(until.saturating_sub(now)))
        ));
    }
    out.head(&format!("{:<w$}{line}", "restart", w = LABEL + 3));
}

/// `ran 1h2m of max_runtime 8h; 3h of max_total_runtime 1d; paused 5m, not counted`.
fn runtime(task: &TaskInfo, d: &TaskDetail) -> Option<String> {
    let ran = d.ran_ms?;
    let ms = |n: u64| duration(Duration::from_millis(n));
    let mut line = match d.max_runtime_ms {
        Some(max) => format!("ran {} of max_runtime {}", ms(ran), ms(max)),
        None => format!("ran {} (no max_runtime)", ms(ran)),
    };
    if let (Some(total), Some(max)) = (d.ran_total_ms, d.max_total_runtime_ms) {
        line.push_str(&format!("; {} of max_total_runtime {}", ms(total), ms(max)));
    }
    if let Some(paused) = d.paused_ms.filter(|&p| p > 0) {
        line.push_str(&format!("; paused {}, not counted", ms(paused)));
    }
    if task.frozen == Some(false) {
        line.push_str("; the kernel is still freezing it");
    }
    Some(line)
}
