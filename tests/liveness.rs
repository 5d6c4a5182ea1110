//! Liveness on a real daemon: agents in their sandboxes write `$KEEL_PROGRESS`
//! (`/run/keel/progress`), print, compute or fall silent, and keel tells working from merely
//! running — on time, and without overlapping attempts when it restarts one.

mod common;
use common::*;
use serde_json::Value;
use std::time::{Duration, SystemTime};
use wait::holds_throughout;

/// Small reservations: several tasks run side by side on a 2-core machine.
/// A fifth of a core, capped there (a busy agent of these tests makes no CPU pressure).
const SMALL: &str = r#"resources: Resources(cpu: 0.2, memory: "64M", cpu_limit: Some(0.2))"#;

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The last write to the task's progress file (host side), unix ms.
fn last_heartbeat_ms(d: &Daemon, unit: &str) -> u64 {
    let meta = std::fs::metadata(d.task_dir(unit).join("run/progress")).unwrap();
    unix_ms(meta.modified().unwrap())
}

fn event<'a>(events: &'a [Value], name: &str, attempt: u64) -> Option<(usize, &'a Value)> {
    events
        .iter()
        .enumerate()
        .find(|(_, e)| e["event"] == name && e["attempt"] == attempt)
}

fn wait_task(d: &Daemon, unit: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        last = d.task(unit).unwrap_or_default();
        if check(&last) {
            return last;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "{unit}: {what} not seen: {last}\n{:?}\n{}",
        d.events(Some(unit)),
        d.daemon_log()
    );
}

fn alive(pid: i64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_silent_agent_is_stalled_on_time_and_restarted_as_stalled_without_overlap() {
    if !require_root("stall restart") {
        return;
    }
    let d = Daemon::start("live-stall");
    // Attempt 1 heartbeats every 200 ms for 3 s, then hangs; attempt 2 says what it was told.
    d.write_unit(
        "hang",
        &format!(
            r#"Unit(
            command: ["/bin/sh", "-c", "if [ $KEEL_ATTEMPT = 1 ]; then i=0; while [ $i -lt 15 ]; do echo beat $i > $KEEL_PROGRESS; i=$((i+1)); sleep 0.2; done; exec sleep 600; fi; echo $KEEL_LAST_EXIT > /work/last; exec sleep 600"],
            liveness: Liveness(heartbeat_timeout: "1s", startup_grace: "0s"),
            backoff: Backoff(initial: "100ms"),
            stop: Stop(timeout: "2s"),
            {SMALL},
        )"#
        ),
    );
    let running = d.wait_state("hang", "running", Duration::from_secs(10));
    assert_eq!(running["liveness"], "running", "{running}");
    // Attempt 1's sandbox (its PID namespace), to see it empty before attempt 2 runs.
    let first_sandbox = namespace_members(running["pid"].as_i64().unwrap() as i32);
    assert!(!first_sandbox().is_empty());
    let second = wait_task(&d, "hang", "attempt 2 running", |t| {
        t["attempt"] == 2 && t["state"] == "running"
    });
    assert_eq!(second["last_exit"], "stalled", "{second}");
    assert_ne!(second["pid"], running["pid"]);
    assert!(
        first_sandbox().is_empty(),
        "attempt 1 overlaps attempt 2: {:?}",
        first_sandbox()
    );
    let last = d.task_dir("hang").join("work/last");
    wait_until(
        Duration::from_secs(5),
        "attempt 2 wrote KEEL_LAST_EXIT",
        || std::fs::read_to_string(&last).is_ok_and(|t| t.ends_with('\n')),
    );
    assert_eq!(std::fs::read_to_string(&last).unwrap().trim(), "stalled");

    let events = d.events(Some("hang"));
    let (stalled_at, stalled) = event(&events, "stalled", 1).expect("a stalled entry");
    let heartbeat = last_heartbeat_ms(&d, "hang");
    let lateness = stalled["ts_ms"].as_i64().unwrap() - heartbeat as i64 - 1000;
    assert!(
        (-50..1000).contains(&lateness),
        "stall noticed {lateness} ms after its deadline: {stalled}"
    );
    assert!(
        stalled["detail"]
            .as_str()
            .unwrap()
            .contains("no heartbeat, output or CPU use for 1.0s"),
        "{stalled}"
    );
    // The stop, the end of attempt 1, then (only then) attempt 2.
    let (stopping, _) = event(&events, "stopping", 1).expect("stopping");
    let (exited, ended) = event(&events, "exited", 1).expect("exited");
    let (starting, _) = event(&events, "starting", 2).expect("starting");
    assert!(stalled_at < stopping && stopping < exited && exited < starting);
    assert!(ended["detail"]
        .as_str()
        .unwrap()
        .starts_with("stalled after"));
}

#[test]
fn heartbeats_without_a_change_are_no_progress_and_kill_leaves_the_task_failed() {
    if !require_root("no progress") {
        return;
    }
    let d = Daemon::start("live-noprogress");
    d.write_unit(
        "loop",
        &format!(
            r#"Unit(
            command: ["/bin/sh", "-c", "while true; do echo thinking > $KEEL_PROGRESS; sleep 0.2; done"],
            liveness: Liveness(heartbeat_timeout: "5s", progress_timeout: "1s", startup_grace: "0s", on_stall: Kill),
            {SMALL},
        )"#
        ),
    );
    let running = d.wait_state("loop", "running", Duration::from_secs(10));
    let pid = running["pid"].as_i64().unwrap();
    let failed = d.wait_state("loop", "failed", Duration::from_secs(15));
    assert_eq!(failed["last_exit"], "stalled", "{failed}");
    let reason = failed["reason"].as_str().unwrap();
    assert!(
        reason.contains("no-progress: progress file unchanged for 1.0s")
            && reason.contains("on_stall Kill"),
        "{reason}"
    );
    let events = d.events(Some("loop"));
    assert!(event(&events, "no-progress", 1).is_some(), "{events:?}");
    assert!(
        event(&events, "starting", 2).is_none(),
        "Kill never restarts"
    );
    assert!(!alive(pid), "the agent's shim is gone");
    assert_eq!(failed["attempt"], 1);
}

#[test]
fn output_and_cpu_count_only_when_listed() {
    if !require_root("signals") {
        return;
    }
    let d = Daemon::start("live-signals");
    let unit = |command: &str, signals: &str| {
        format!(
            r#"Unit(
            command: ["/bin/sh", "-c", "{command}"],
            liveness: Liveness(heartbeat_timeout: "1s", startup_grace: "0s", on_stall: Report{signals}),
            {SMALL},
        )"#
        )
    };
    let chatty = "while true; do echo tick; sleep 0.2; done";
    d.write_unit("chatty", &unit(chatty, ""));
    d.write_unit("chatty-unheard", &unit(chatty, ", signals: [Heartbeat]"));
    let busy = "while :; do :; done";
    d.write_unit("busy", &unit(busy, ", signals: [Cpu]"));
    d.write_unit("busy-unheard", &unit(busy, ", signals: [Heartbeat]"));
    d.write_unit("idle", &unit("exec sleep 600", ", signals: [Cpu]"));
    for unit in ["chatty", "chatty-unheard", "busy", "busy-unheard", "idle"] {
        d.wait_state(unit, "running", Duration::from_secs(10));
    }
    d.wait_state("chatty-unheard", "stalled", Duration::from_secs(30));
    d.wait_state("busy-unheard", "stalled", Duration::from_secs(30));
    d.wait_state("idle", "stalled", Duration::from_secs(30));
    // Several timeouts later (a negative check), the working ones still are.
    holds_throughout(
        Duration::from_secs(3),
        "chatty and busy not stalled",
        || {
            ["chatty", "busy"]
                .iter()
                .all(|u| d.task(u).unwrap()["state"] == "running")
        },
    );
    let chatty = d.task("chatty").unwrap();
    assert_eq!(chatty["state"], "running", "{chatty}");
    assert_eq!(chatty["liveness"], "running", "{chatty}");
    assert_eq!(chatty["last_activity_kind"], "output", "{chatty}");
    let busy = d.task("busy").unwrap();
    assert_eq!(busy["state"], "running", "{busy}");
    assert_eq!(busy["last_activity_kind"], "cpu", "{busy}");
    let unheard = d.task("chatty-unheard").unwrap();
    assert_eq!(unheard["state"], "stalled", "{unheard}");
    assert_eq!(
        unheard["last_activity_ms"],
        Value::Null,
        "output does not count"
    );
    let busy_unheard = d.task("busy-unheard").unwrap();
    assert_eq!(busy_unheard["state"], "stalled", "{busy_unheard}");
    assert_eq!(
        busy_unheard["last_activity_ms"],
        Value::Null,
        "CPU does not count"
    );
    assert!(
        busy_unheard["cpu_usec"].as_u64().unwrap() > 0,
        "{busy_unheard}"
    );
    for unit in ["chatty", "busy"] {
        let events = d.events(Some(unit));
        assert!(event(&events, "stalled", 1).is_none(), "{unit}: {events:?}");
    }
    let table = stdout_of(&d.keel(&["status"]));
    assert!(table.contains(" output "), "{table}");
}

#[test]
fn report_leaves_the_agent_running_and_a_heartbeat_brings_it_back() {
    if !require_root("report") {
        return;
    }
    let d = Daemon::start("live-report");
    // One heartbeat, silence until the test says go, then heartbeats again.
    d.write_unit(
        "shy",
        &format!(
            r#"Unit(
            command: ["/bin/sh", "-c", "echo hello > $KEEL_PROGRESS; while [ ! -e /work/go ]; do sleep 0.1; done; i=0; while true; do echo beat $i > $KEEL_PROGRESS; i=$((i+1)); sleep 0.2; done"],
            liveness: Liveness(heartbeat_timeout: "1s", startup_grace: "0s", on_stall: Report, signals: [Heartbeat, Output]),
            {SMALL},
        )"#
        ),
    );
    let running = d.wait_state("shy", "running", Duration::from_secs(10));
    let pid = running["pid"].as_i64().unwrap();
    let stalled = d.wait_state("shy", "stalled", Duration::from_secs(30));
    assert_eq!(stalled["pid"], pid, "Report kills nothing");
    assert_eq!(stalled["liveness"], "stalled");
    assert_eq!(stalled["progress"], "hello");
    // Negative check: longer than the timeout again, nothing is done to it.
    holds_throughout(
        Duration::from_millis(1500),
        "shy left stalled and alive",
        || d.task("shy").unwrap()["state"] == "stalled" && alive(pid),
    );
    std::fs::write(d.task_dir("shy").join("work/go"), "").unwrap();
    let back = d.wait_state("shy", "running", Duration::from_secs(30));
    assert_eq!(back["pid"], pid);
    assert_eq!(back["attempt"], 1);
    assert_eq!(back["liveness"], "running");
    let events = d.events(Some("shy"));
    let (stalled_at, _) = event(&events, "stalled", 1).unwrap();
    let back_at = events
        .iter()
        .rposition(|e| e["event"] == "running")
        .unwrap();
    assert!(stalled_at < back_at, "{events:?}");
    assert!(event(&events, "stopping", 1).is_none(), "{events:?}");
}

#[test]
fn an_adopted_attempt_is_still_watched() {
    if !require_root("adopted liveness") {
        return;
    }
    let mut d = Daemon::start("live-adopt");
    d.write_unit(
        "long",
        &format!(
            r#"Unit(
            command: ["/bin/sh", "-c", "i=0; while [ $i -lt 25 ]; do echo beat $i > $KEEL_PROGRESS; i=$((i+1)); sleep 0.2; done; exec sleep 600"],
            liveness: Liveness(heartbeat_timeout: "1500ms", startup_grace: "0s", on_stall: Report),
            {SMALL},
        )"#
        ),
    );
    let running = d.wait_state("long", "running", Duration::from_secs(10));
    // A few heartbeats under this daemon first (the scenario: an attempt well under way).
    std::thread::sleep(Duration::from_millis(500));
    d.crash();
    d.spawn();
    let adopted = d.wait_state("long", "running", Duration::from_secs(30));
    assert_eq!(adopted["pid"], running["pid"]);
    assert_eq!(adopted["liveness"], "running", "{adopted}");
    let stalled = d.wait_state("long", "stalled", Duration::from_secs(15));
    assert_eq!(stalled["pid"], running["pid"]);
    let events = d.events(Some("long"));
    let (_, entry) = event(&events, "stalled", 1).unwrap();
    let lateness = entry["ts_ms"].as_i64().unwrap() - last_heartbeat_ms(&d, "long") as i64 - 1500;
    assert!(
        (-50..1000).contains(&lateness),
        "stall noticed {lateness} ms after its deadline: {entry}"
    );
}
