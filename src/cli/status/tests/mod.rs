use super::table::*;
use super::*;
use crate::cli::format::{strip_ansi, Tone};
use crate::protocol::{
    CheckoutInfo, DaemonInfo, ExitInfo, LivenessInfo, NetworkInfo, RestartInfo, SignalInfo,
    StatusReport, TaskDetail, TaskInfo,
};

pub(super) fn task(unit: &str, state: &str) -> TaskInfo {
    serde_json::from_value(serde_json::json!({
        "unit": unit, "state": state, "attempt": 1, "generation": 1,
        "restarts": 0, "unit_changed": false,
    }))
    .unwrap()
}

pub(super) fn report(tasks: Vec<TaskInfo>) -> StatusReport {
    StatusReport {
        daemon: DaemonInfo {
            pid: 1,
            started_ms: 0,
            state_dir: "/var/lib/keel".into(),
            units_dir: "/var/lib/keel/units".into(),
            cgroup_mode: "v2".into(),
            disk_budgets: String::new(),
            under_init: false,
        },
        tasks,
        invalid_units: vec!["x.ron:1:1: bad".into()],
    }
}

/// Every line of both renderings within [`WIDTH`], and the coloured one is the plain one
/// with colours.
fn both(report: &StatusReport, now: u64) -> (String, String) {
    let plain = render(report, now, false);
    let coloured = render(report, now, true);
    assert!(!plain.contains('\x1b'), "colour without asking: {plain}");
    assert!(
        coloured.contains('\x1b'),
        "no colour when asked: {coloured}"
    );
    assert_eq!(strip_ansi(&coloured), plain);
    for line in plain.lines() {
        assert!(line.chars().count() <= WIDTH, "too wide: {line}");
    }
    (plain, coloured)
}

#[test]
fn the_table_fits_100_columns_whatever_the_names_reasons_and_figures() {
    let mut big = task(&"a-very-long-unit-name-".repeat(5), "backoff");
    big.attempt = u32::MAX;
    big.pid = Some(4_194_303);
    big.since_ms = Some(0);
    big.backoff_until_ms = Some(5_000);
    big.last_exit = Some("signal:SIGRTMIN+12".into());
    big.restarts = 4;
    big.reason = Some("a long reason ".repeat(10));
    big.cpu_percent = Some(12_345.6);
    big.memory_bytes = Some(u64::MAX);
    big.kept_branches = vec!["keel/a@2".into()];
    let mut running = task("worker", "running");
    running.cpu_percent = Some(187.4);
    running.memory_bytes = Some(3 << 30);
    let mut r = report(vec![big, running]);
    r.daemon.cgroup_mode = format!(
        "unavailable: cannot create {}",
        "/sys/fs/cgroup/x".repeat(8)
    );
    r.invalid_units[0] = format!("x.ron:1:1: {}", "a long message ".repeat(9));
    let (plain, _) = both(&r, 1_000);
    // Read whole, wrapped: why cgroups are unavailable, the state directory, a unit's error.
    let squash = |t: &str| t.replace("\n  ", "").replace(' ', "");
    let joined = squash(&plain);
    assert!(
        joined.contains(&squash(&format!("cgroups {}", r.daemon.cgroup_mode))),
        "{plain}"
    );
    assert!(joined.contains("state/var/lib/keel"), "{plain}");
    assert!(
        joined.contains(&squash(&format!("invalid: {}", r.invalid_units[0]))),
        "{plain}"
    );
    assert!(plain.contains("restart in 4.0s"), "{plain}");
    assert!(plain.contains(" 187% "), "{plain}");
    assert!(plain.contains("    3G "), "{plain}");
    let row = plain.lines().find(|l| l.starts_with("a-very")).unwrap();
    assert!(row.ends_with('…'), "a long note is cut: {row}");
    // The columns stay in place: the state of each row starts at the same column.
    let worker = plain.lines().find(|l| l.starts_with("worker")).unwrap();
    assert_eq!(worker.find("running"), Some(19), "{worker}");
    assert_eq!(row.chars().skip(19).take(7).collect::<String>(), "backoff");
}

#[test]
fn a_states_colour_says_whether_it_needs_a_person() {
    let failed = task("f", "failed");
    let mut no_progress = task("n", "running");
    no_progress.liveness = Some("no-progress".into());
    let running = task("r", "running");
    let stopped = task("s", "stopped");
    let mut waiting = task("w", "queued");
    waiting.reason = Some("needs 4 CPU, 1.5 free".into());
    let mut looping = task("l", "running");
    looping.restarts = 3;
    let mut kept = task("k", "succeeded");
    kept.kept_branches = vec!["keel/k@1".into()];
    assert_eq!(tone(&failed), Tone::Bad);
    assert_eq!(tone(&task("x", "stalled")), Tone::Bad);
    assert_eq!(tone(&no_progress), Tone::Warn);
    assert_eq!(tone(&waiting), Tone::Warn);
    assert_eq!(tone(&looping), Tone::Warn);
    assert_eq!(tone(&kept), Tone::Warn);
    assert_eq!(tone(&task("b", "backoff")), Tone::Warn);
    assert_eq!(tone(&running), Tone::Good);
    assert_eq!(tone(&task("d", "succeeded")), Tone::Good);
    assert_eq!(tone(&stopped), Tone::Quiet);
    assert_eq!(tone(&task("q", "queued")), Tone::Quiet);
    // A start the host refused needs a person to fix the host.
    let mut blocked = task("h", "queued");
    blocked.reason = Some("blocked: cgroups unavailable: no cgroup2 filesystem is mounted".into());
    assert_eq!(tone(&blocked), Tone::Bad);
    let all = vec![
        failed,
        no_progress,
        running,
        stopped,
        waiting,
        looping,
        kept,
    ];
    let (plain, coloured) = both(&report(all), 1_000);
    assert!(
        coloured.contains("\x1b[1;31mfailed   \x1b[0m"),
        "{coloured}"
    );
    assert!(coloured.contains("\x1b[32mrunning  \x1b[0m"), "{coloured}");
    let summary = plain.lines().nth(1).unwrap();
    assert_eq!(
        summary,
        "1 needs attention, 4 worth a look · 7 tasks: 1 failed, 1 queued, 3 running, \
         1 succeeded, 1 stopped"
    );
    assert!(plain.contains("kept keel/k@1"), "{plain}");
    assert!(plain.contains("3 restarts"), "{plain}");
    assert!(plain.contains("needs 4 CPU, 1.5 free"), "{plain}");
}

#[test]
fn a_running_task_shows_its_last_activity_and_a_missing_progress() {
    let mut task = task("a", "stalled");
    task.progress = Some("step 3".into());
    task.last_activity_ms = Some(88_000);
    task.last_activity_kind = Some("heartbeat".into());
    task.liveness = Some("no-progress".into());
    assert_eq!(
        note(&task, 100_000, false),
        "no progress · heartbeat 12s ago · “step 3”"
    );
    let quiet = TaskInfo {
        last_activity_ms: None,
        last_activity_kind: None,
        liveness: Some("running".into()),
        ..task
    };
    assert_eq!(note(&quiet, 100_000, false), "no activity yet · “step 3”");
}

pub(super) fn detailed() -> TaskInfo {
    let mut t = task("worker", "running");
    t.attempt = 3;
    t.generation = 4;
    t.pid = Some(4242);
    t.since_ms = Some(40_000);
    t.last_exit = Some("exit:1".into());
    t.restarts = 2;
    t.cpu_usec = Some(12_500_000);
    t.cpu_percent = Some(50.0);
    t.memory_bytes = Some(512 << 20);
    t.memory_peak_bytes = Some(768 << 20);
    t.pids = Some(7);
    t.checkout_bytes = Some(860 << 10);
    t.kept_branches = vec!["keel/worker@2".into()];
    t.detail = Some(TaskDetail {
        unit_file: "/u/worker.ron".into(),
        command: Some(vec!["/bin/agent".into(), "--fix".into()]),
        log_path: "/s/tasks/worker/run/output.log".into(),
        started_ms: Some(40_000),
        recent_exits: vec![
            ExitInfo {
                attempt: 1,
                exit: "exit:0".into(),
                started_ms: Some(1_000),
                ended_ms: 4_000,
                note: None,
            },
            ExitInfo {
                attempt: 2,
                exit: "signal:SIGKILL".into(),
                started_ms: Some(10_000),
                ended_ms: 30_000,
                note: Some("stopped by keel".into()),
            },
        ],
        restart: Some(RestartInfo {
            policy: "OnFailure".into(),
            limit: 5,
            window_ms: 3_600_000,
            consecutive_failures: 1,
        }),
        checkout: Some(CheckoutInfo {
            path: "/s/tasks/worker/checkout".into(),
            repo: "/src/app".into(),
            branch: "keel/worker".into(),
            base: "main".into(),
            base_commit: "0123456789abcdef0123".into(),
        }),
        liveness: Some(LivenessInfo {
            verdict: "running".into(),
            signals: vec![
                SignalInfo {
                    kind: "heartbeat".into(),
                    counted: true,
                    last_ms: Some(88_000),
                },
                SignalInfo {
                    kind: "cpu".into(),
                    counted: false,
                    last_ms: None,
                },
            ],
            heartbeat_timeout_ms: 300_000,
            progress_timeout_ms: 1_800_000,
            startup_grace_ms: 120_000,
            on_stall: "Restart".into(),
            stall_at_ms: 388_000,
            no_progress_at_ms: None,
            progress_reads: 12,
        }),
        cpu_limit: Some(2.0),
        memory_limit_bytes: Some(2 << 30),
        pids_limit: Some(1024),
        cpu_request: Some(0.25),
        memory_request_bytes: Some(512 << 20),
        processes: vec![4242, 4250],
        network_traffic: None,
        max_runtime_ms: None,
        ran_ms: None,
        paused_ms: None,
        max_total_runtime_ms: None,
        ran_total_ms: None,
    });
    t
}

#[test]
fn a_paused_task_says_since_when_and_its_runtime_leaves_out_the_frozen_time() {
    let mut t = detailed();
    t.state = "paused".into();
    t.since_ms = Some(40_000);
    t.reason = Some("keel pause".into());
    t.paused_since_ms = Some(40_000);
    t.frozen = Some(true);
    let d = t.detail.as_mut().unwrap();
    (d.max_runtime_ms, d.ran_ms, d.paused_ms) = (Some(8 * 3_600_000), Some(65_000), Some(60_000));
    let plain = render(&report(vec![t.clone()]), 100_000, false);
    assert!(plain.starts_with("worker paused since 1m ago"), "{plain}");
    assert!(plain.contains("  reason       keel pause"), "{plain}");
    assert!(
        plain.contains("  runtime      ran 1m of max_runtime 8h; paused 1m, not counted"),
        "{plain}"
    );
    // A total budget too.
    let d = t.detail.as_mut().unwrap();
    (d.max_total_runtime_ms, d.ran_total_ms) = (Some(86_400_000), Some(3_600_000));
    let plain = render(&report(vec![t.clone()]), 100_000, false);
    assert!(
        plain.contains(
            "ran 1m of max_runtime 8h; 1h of max_total_runtime 1d; paused 1m, not counted"
        ),
        "{plain}"
    );
    // Still freezing, and no budget.
    let d = t.detail.as_mut().unwrap();
    (d.max_total_runtime_ms, d.ran_total_ms) = (None, None);
    t.frozen = Some(false);
    let d = t.detail.as_mut().unwrap();
    (d.max_runtime_ms, d.paused_ms) = (None, Some(0));
    let plain = render(&report(vec![t.clone()]), 100_000, false);
    assert!(
        plain.contains("ran 1m (no max_runtime); the kernel is still freezing it"),
        "{plain}"
    );
    t.detail = None;
    let table = render(
        &report(vec![t.clone(), task("other", "running")]),
        100_000,
        false,
    );
    assert!(table.contains("1 running, 1 paused"), "{table}");
}

#[test]
fn one_task_in_full_reads_as_a_block() {
    let mut r = report(vec![detailed()]);
    r.invalid_units.clear();
    let (plain, coloured) = both(&r, 100_000);
    let lines: Vec<&str> = plain.lines().collect();
    assert_eq!(
        lines[0],
        "worker running since 1m ago · attempt 3 (generation 4) · shim pid 4242 · last exit exit:1"
    );
    for expected in [
        "  unit file    /u/worker.ron",
        "  command      /bin/agent --fix",
        "checkout",
        "  path         /s/tasks/worker/checkout",
        "  branch       keel/worker from main at 0123456789ab",
        "  disk         860K of its own (git dir and changes)",
        "  kept         keel/worker@2  (a harvest could not fast-forward: merge by hand)",
        "recent exits (newest first)",
        "  #2    signal:SIGKILL ended 1m ago   ran 20.0s · stopped by keel",
        "  #1    exit:0         ended 1m ago   ran 3.0s",
        "liveness       running (on stall: Restart)",
        "  heartbeat    12s ago",
        "  cpu          not seen this attempt  (not counted)",
        "  stalled      in 4m48s without evidence (heartbeat_timeout 5m0s, startup_grace 2m0s)",
        "cgroup",
        "  cpu          12.5s used, 50% of a core lately (request 0.25, limit 2 CPU)",
        "  memory       512M now of 2G (25%), peak 768M, request 512M",
        "  pids         7 of 1024: 4242 4250",
        "restart        OnFailure; 2 of 5 restarts used within 1h; 1 failures in a row",
        "logs           /s/tasks/worker/run/output.log  (keel logs worker)",
    ] {
        assert!(
            lines.contains(&expected),
            "missing {expected:?} in:\n{plain}"
        );
    }
    // Newest exit first.
    let newest = plain.find("#2").unwrap();
    assert!(newest < plain.find("#1").unwrap());
    assert!(coloured.contains("\x1b[1;31msignal:SIGKILL"), "{coloured}");
}

#[test]
fn what_the_relay_let_through_and_refused_is_shown_escaped() {
    use crate::network::relay_protocol::{AllowedCount, RefusedCount};
    let mut t = detailed();
    let d = t.detail.as_mut().unwrap();
    d.network_traffic = Some(crate::protocol::NetworkTraffic {
        allowed: vec![AllowedCount {
            destination: "api.anthropic.com:443".into(),
            connections: 12,
            bytes_out: 3 << 20,
            bytes_in: 30 << 20,
            last_ms: 90_000,
        }],
        refused: vec![RefusedCount {
            destination: "evil\x1b[2J.example:443".into(),
            reason: "the name is not listed".into(),
            count: 3,
            first_ms: 10_000,
            last_ms: 40_000,
        }],
        open_connections: 1,
        updated_ms: 99_000,
    });
    let mut r = report(vec![t]);
    r.invalid_units.clear();
    let (plain, _) = both(&r, 100_000);
    assert!(
        plain.contains("  reached      api.anthropic.com:443 \u{d7}12 (3M out, 30M in), 10s ago"),
        "{plain}"
    );
    let refused = plain.lines().find(|l| l.contains("refused")).expect(&plain);
    assert!(
        refused.contains(".example:443 \u{d7}3, 1m ago: the name is not listed"),
        "{refused}"
    );
    assert!(!plain.contains('\x1b'), "{plain:?}");
}

#[test]
fn a_task_never_started_says_so_and_a_table_without_detail_stays_a_table() {
    let mut t = task("new", "queued");
    t.detail = Some(TaskDetail {
        unit_file: "/u/new.ron".into(),
        log_path: "/s/new/output.log".into(),
        ..TaskDetail::default()
    });
    let text = render(&report(vec![t.clone()]), 0, false);
    assert!(text.contains("recent exits   none yet"), "{text}");
    assert!(!text.contains("cgroup"), "{text}");
    t.detail = None;
    assert!(render(&report(vec![t]), 0, false).contains("UNIT "));
}

mod disk;
mod escaping;

#[test]
fn unreviewed_work_is_worth_a_look_in_the_table_in_full_and_in_json() {
    let mut t = task("w", "succeeded");
    assert_eq!(tone(&t), Tone::Good);
    t.unreviewed = true;
    assert_eq!(tone(&t), Tone::Warn);
    assert_eq!(note(&t, 100_000, false), "unreviewed (keel diff)");
    let mut full = detailed();
    full.unreviewed = true;
    let plain = render(&report(vec![full]), 100_000, false);
    assert!(
        plain
            .lines()
            .any(|l| l.starts_with("  review       unreviewed: ")),
        "{plain}"
    );
    let json = serde_json::to_value(&t).unwrap();
    assert_eq!(json["unreviewed"], true);
}

#[test]
fn a_source_checked_on_a_timer_is_worth_a_look_and_its_note_says_why() {
    let mut t = task("worker", "running");
    assert_eq!(tone(&t), Tone::Good);
    t.watch = Some("shim exit: polled every 1s (epoll: No space left on device)".into());
    assert_eq!(tone(&t), Tone::Warn);
    assert_eq!(note(&t, 100_000, false), "watch: polling");
    let mut full = detailed();
    full.watch = t.watch.clone();
    let plain = render(&report(vec![full]), 100_000, false);
    assert!(
        plain
            .lines()
            .any(|l| l
                == "  watch        shim exit: polled every 1s (epoll: No space left on device)"),
        "{plain}"
    );
}

#[test]
fn a_task_being_prepared_shows_how_far_in_the_table_and_in_full() {
    let mut t = task("big", "starting");
    t.preparing = Some(crate::protocol::PreparingInfo {
        step: "base tree".into(),
        done: 24_600,
        total: 60_000,
    });
    let (plain, _) = both(&report(vec![t.clone()]), 0);
    assert!(
        plain.contains("preparing: base tree 41% (24,600 / 60,000 files)"),
        "{plain}"
    );
    let mut full = detailed();
    full.state = "starting".into();
    full.preparing = t.preparing.clone();
    let detail = render(&report(vec![full]), 100_000, false);
    assert!(
        detail.contains("  preparing    base tree 41% (24,600 / 60,000 files)"),
        "{detail}"
    );
    // Not counted (yet): the step alone.
    let mut queued = task("q", "starting");
    queued.preparing = Some(crate::protocol::PreparingInfo {
        step: "queued".into(),
        done: 0,
        total: 0,
    });
    let plain = render(&report(vec![queued]), 0, false);
    assert!(plain.contains("preparing: queued"), "{plain}");
    // In JSON, an object.
    let json = serde_json::to_value(&t).unwrap();
    assert_eq!(json["preparing"]["done"], 24_600);
    assert_eq!(json["preparing"]["step"], "base tree");
}

#[test]
fn the_network_is_shown_in_full_and_host_is_marked_not_contained() {
    let network = |mode: &str, entries: &[&str]| {
        let mut t = detailed();
        t.network = Some(NetworkInfo {
            mode: mode.into(),
            entries: entries.iter().map(|e| e.to_string()).collect(),
        });
        let mut r = report(vec![t]);
        r.invalid_units.clear();
        let (plain, coloured) = both(&r, 100_000);
        let line = plain
            .lines()
            .find(|l| l.starts_with("  network"))
            .unwrap_or_else(|| panic!("no network line in:\n{plain}"))
            .to_string();
        (line, coloured)
    };
    let (host, coloured) = network("host", &[]);
    assert_eq!(
        host,
        "  network      host (not contained: the host's whole network)"
    );
    assert!(
        coloured.contains("\x1b[33mhost (not contained"),
        "host is a warning: {coloured}"
    );
    let (allow, _) = network("allow", &["api.anthropic.com", "github.com:22", "@npm"]);
    assert_eq!(
        allow,
        "  network      allow: 3 entries (api.anthropic.com, github.com:22, @npm)"
    );
    let (nothing, _) = network("allow", &[]);
    assert_eq!(
        nothing,
        "  network      allow: nothing (its own lo only: Allow([]))"
    );
    let (none, _) = network("none", &[]);
    assert_eq!(none, "  network      none (its own lo only)");
    // The table marks a task with the host's network, and only that.
    let mut host = task("open", "running");
    host.network = Some(NetworkInfo {
        mode: "host".into(),
        entries: vec![],
    });
    let mut contained = task("closed", "running");
    contained.network = Some(NetworkInfo {
        mode: "allow".into(),
        entries: vec!["a.com".into()],
    });
    let table = render(&report(vec![host, contained]), 0, false);
    let row = |unit: &str| {
        table
            .lines()
            .find(|l| l.starts_with(unit))
            .unwrap_or_else(|| panic!("no row {unit}: {table}"))
            .to_string()
    };
    assert!(row("open ").contains("host network"), "{table}");
    assert!(!row("closed ").contains("network"), "{table}");
    // A task without a valid unit has no network line; the JSON names the mode and entries.
    let plain = render(&report(vec![detailed()]), 100_000, false);
    assert!(!plain.contains("  network"), "{plain}");
    let json = serde_json::to_value(NetworkInfo {
        mode: "allow".into(),
        entries: vec!["a.com".into()],
    })
    .unwrap();
    assert_eq!(
        json,
        serde_json::json!({"mode": "allow", "entries": ["a.com"]})
    );
}

#[test]
fn a_tasks_network_entries_are_escaped_before_they_are_shown() {
    let mut t = detailed();
    t.network = Some(NetworkInfo {
        mode: "allow".into(),
        entries: vec!["evil\x1b]0;title\x07.com".into()],
    });
    let plain = render(&report(vec![t]), 100_000, false);
    assert!(!plain.contains('\x1b'), "{plain:?}");
}
