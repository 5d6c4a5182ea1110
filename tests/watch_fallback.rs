//! Watches the kernel refuses never lose a task: with the test hook
//! `KEEL_TEST_REFUSE_WATCH` (a registration fails with ENOSPC, as a kernel out of epoll or
//! inotify watches would), a shim's end is still seen, a stop and a shutdown complete,
//! heartbeats are still counted and a stall detected — by a timer — `keel status` says so, and
//! the watch is recovered once the kernel allows (`KEEL_TEST_REFUSE_WATCH_WHILE`: the refusal
//! lasts while a file exists).

mod common;
use common::wait::{holds_throughout, wait_for, PATIENCE};
use common::*;
use serde_json::Value;
use std::time::Duration;

const SMALL: &str = r#"resources: Resources(cpu: 0.2, memory: "64M")"#;
const ENOSPC: &str = "epoll: No space left on device";

/// A daemon whose `kinds` registrations are refused (while `while_file`, if given, exists).
fn refusing_daemon(name: &str, kinds: &str, while_file: Option<&str>) -> Daemon {
    let mut d = Daemon::prepare(name);
    d.env.push(("KEEL_TEST_REFUSE_WATCH".into(), kinds.into()));
    if let Some(file) = while_file {
        let path = d.scratch.dir.join(file);
        std::fs::write(&path, "").unwrap();
        d.env
            .push(("KEEL_TEST_REFUSE_WATCH_WHILE".into(), path_str(&path)));
    }
    d.spawn();
    d
}

/// Wait until `unit`'s status satisfies `check` (with the daemon's log on a timeout).
fn wait_task(d: &Daemon, unit: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(PATIENCE, what, || {
            last = d.task(unit).unwrap_or_default();
            check(&last).then(|| last.clone())
        })
    }));
    found.unwrap_or_else(|_| panic!("{unit}: {what}: {last}\n{}", d.daemon_log()))
}

fn watch_note(task: &Value) -> String {
    task["watch"].as_str().unwrap_or_default().to_string()
}

/// An agent that waits for `/work/go`, then exits 3.
fn exits_on_go() -> String {
    format!(
        r#"Unit(
            command: ["/bin/sh", "-c", "while [ ! -e /work/go ]; do sleep 0.1; done; exit 3"],
            restart: Never,
            {SMALL},
        )"#
    )
}

fn sleeper() -> String {
    format!(
        r#"Unit(
            command: ["/bin/sleep", "600"],
            stop: Stop(timeout: "5s"),
            {SMALL},
        )"#
    )
}

#[test]
fn a_shim_the_kernel_will_not_watch_is_seen_to_end_and_stops_and_shutdown_complete() {
    if !require_root("refused shim watch") {
        return;
    }
    let mut d = refusing_daemon("refuse-shim", "shim,oom", None);
    d.write_unit("exits", &exits_on_go());
    d.write_unit("stops", &sleeper());
    d.write_unit("stays", &sleeper());
    for unit in ["exits", "stops", "stays"] {
        let task = d.wait_state(unit, "running", PATIENCE);
        let note = watch_note(&task);
        assert!(
            note.contains(&format!("shim exit: polled every 1s ({ENOSPC})")),
            "{unit}: {task}"
        );
        assert!(
            note.contains("OOM kills: polled every 1s"),
            "{unit}: {task}"
        );
    }
    let log = d.daemon_log();
    assert!(
        log.contains("exits: cannot watch its shim exit (epoll: No space left on device)"),
        "{log}"
    );
    // The table says so too.
    let table = stdout_of(&d.keel(&["status"]));
    assert!(table.contains("watch: polling"), "{table}");
    let one = stdout_of(&d.keel(&["status", "exits"]));
    assert!(
        one.contains(&format!(
            "watch        shim exit: polled every 1s ({ENOSPC})"
        )),
        "{one}"
    );

    // The agent exits 3: recorded as such, not shown running for ever.
    std::fs::write(d.task_dir("exits").join("work/go"), "").unwrap();
    let ended = wait_task(&d, "exits", "recorded exited with 3", |t| {
        t["state"] == "failed"
    });
    assert_eq!(ended["last_exit"], "exit:3", "{ended}");
    assert!(
        ended["watch"].is_null(),
        "no live attempt, no note: {ended}"
    );

    // A stop completes (the client waits for the attempt's end).
    let stop = d.keel(&["stop", "stops"]);
    assert!(stop.status.success(), "{}", stderr_of(&stop));
    wait_task(&d, "stops", "stopped", |t| t["state"] == "stopped");

    // And a shutdown with a live attempt whose shim is not watched.
    let stays_pid = d.task("stays").unwrap()["pid"].as_i64().unwrap();
    let status = d.shutdown().expect("the daemon ran");
    assert!(status.success(), "shutdown: {status}\n{}", d.daemon_log());
    assert!(
        !std::path::Path::new(&format!("/proc/{stays_pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{stays_pid}/stat"))
                .is_ok_and(|s| s.contains(") Z ")),
        "the shim of stays was stopped by the shutdown"
    );
}

#[test]
fn a_refused_shim_watch_is_recovered_when_the_kernel_allows() {
    if !require_root("recovered shim watch") {
        return;
    }
    let d = refusing_daemon("recover-shim", "shim", Some("refuse"));
    d.write_unit("exits", &exits_on_go());
    let task = d.wait_state("exits", "running", PATIENCE);
    assert!(watch_note(&task).contains("shim exit: polled"), "{task}");
    // Still refused: the note stays (the retries fail).
    holds_throughout(Duration::from_millis(1500), "the note stays", || {
        watch_note(&d.task("exits").unwrap()).contains("shim exit: polled")
    });
    std::fs::remove_file(d.scratch.dir.join("refuse")).unwrap();
    wait_task(&d, "exits", "the watch recovered (the note gone)", |t| {
        t["state"] == "running" && t["watch"].is_null()
    });
    assert!(
        d.daemon_log()
            .contains("exits: its shim exit is watched again"),
        "{}",
        d.daemon_log()
    );
    // Watched by the kernel now: the end is seen as before.
    std::fs::write(d.task_dir("exits").join("work/go"), "").unwrap();
    let ended = wait_task(&d, "exits", "exited 3", |t| t["state"] == "failed");
    assert_eq!(ended["last_exit"], "exit:3", "{ended}");
}

#[test]
fn a_refused_progress_watch_still_sees_heartbeats_and_stalls_and_is_recovered() {
    if !require_root("refused progress watch") {
        return;
    }
    let d = refusing_daemon("refuse-progress", "progress", Some("refuse"));
    // Heartbeats (changing content) until /work/quiet exists, silence until /work/go, then
    // heartbeats again.
    d.write_unit(
        "beats",
        &format!(
            r#"Unit(
            command: ["/bin/sh", "-c", "i=0; while [ ! -e /work/quiet ]; do echo beat $i > $KEEL_PROGRESS; i=$((i+1)); sleep 0.3; done; while [ ! -e /work/go ]; do sleep 0.1; done; while true; do echo again $i > $KEEL_PROGRESS; i=$((i+1)); sleep 0.3; done"],
            liveness: Liveness(heartbeat_timeout: "2s", startup_grace: "0s", on_stall: Report, signals: [Heartbeat]),
            {SMALL},
        )"#
        ),
    );
    let task = d.wait_state("beats", "running", PATIENCE);
    let note = watch_note(&task);
    assert!(
        note.contains("progress file: polled every 1s (inotify: No space left on device)"),
        "{task}"
    );
    // Heartbeats seen by the timer: alive well past its heartbeat_timeout, progress seen.
    holds_throughout(Duration::from_secs(5), "beats stays running", || {
        d.task("beats").unwrap()["state"] == "running"
    });
    let alive = d.task("beats").unwrap();
    assert_eq!(alive["last_activity_kind"], "progress", "{alive}");
    assert!(
        alive["progress"]
            .as_str()
            .unwrap_or_default()
            .starts_with("beat "),
        "{alive}"
    );
    // Silence: the stall is still detected.
    std::fs::write(d.task_dir("beats").join("work/quiet"), "").unwrap();
    let stalled = wait_task(&d, "beats", "stalled", |t| t["state"] == "stalled");
    assert_eq!(stalled["liveness"], "stalled", "{stalled}");
    // inotify allows again: the watch is recovered, and the heartbeats bring it back.
    std::fs::remove_file(d.scratch.dir.join("refuse")).unwrap();
    wait_task(&d, "beats", "the watch recovered (the note gone)", |t| {
        t["watch"].is_null()
    });
    assert!(
        d.daemon_log()
            .contains("beats: its progress file is watched again"),
        "{}",
        d.daemon_log()
    );
    std::fs::write(d.task_dir("beats").join("work/go"), "").unwrap();
    let back = wait_task(&d, "beats", "running again", |t| t["state"] == "running");
    assert!(
        back["progress"]
            .as_str()
            .unwrap_or_default()
            .starts_with("again "),
        "{back}"
    );
}

#[test]
fn a_client_the_daemon_cannot_accept_waits_and_is_answered_once_it_can() {
    if !require_root("refused accept") {
        return;
    }
    let mut d = Daemon::prepare("refuse-accept");
    let refuse = d.scratch.dir.join("refuse");
    d.env
        .push(("KEEL_TEST_REFUSE_WATCH".into(), "accept".into()));
    d.env
        .push(("KEEL_TEST_REFUSE_WATCH_WHILE".into(), path_str(&refuse)));
    d.spawn();
    std::fs::write(&refuse, "").unwrap();
    let mut client = KillOnDrop(
        std::process::Command::new(keel_bin())
            .arg("--state")
            .arg(d.state())
            .args(["status", "--json"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Not accepted while the hook refuses (EMFILE): the client waits in the backlog.
    wait_for(PATIENCE, "the refusal logged", || {
        d.daemon_log()
            .contains("control socket accept: Too many open files")
            .then_some(())
    });
    assert!(
        client.try_wait().unwrap().is_none(),
        "answered while refused"
    );
    std::fs::remove_file(&refuse).unwrap();
    let status = wait_for(PATIENCE, "the client answered", || {
        client.try_wait().unwrap()
    });
    assert!(status.success(), "{status}\n{}", d.daemon_log());
    let mut out = String::new();
    std::io::Read::read_to_string(client.stdout.as_mut().unwrap(), &mut out).unwrap();
    let report: Value = serde_json::from_str(&out).unwrap();
    assert!(report["daemon"]["pid"].is_number(), "{out}");
    assert!(
        d.daemon_log()
            .contains("control socket: accepting clients again"),
        "{}",
        d.daemon_log()
    );
}

#[test]
fn an_oom_kill_is_seen_while_the_oom_watch_is_refused() {
    if !require_root("refused oom watch") {
        return;
    }
    let d = refusing_daemon("refuse-oom", "oom", None);
    // The shell survives its child's OOM kill and sleeps on: only the timer's read of the
    // counter can tell (no exit follows).
    d.write_unit(
        "survivor",
        r#"Unit(command: ["/bin/sh", "-c", "tail /dev/zero; echo survived > /work/after; exec sleep 60"], restart: Never, resources: Resources(memory: "16M", memory_limit: Some("48M")))"#,
    );
    let task = d.wait_state("survivor", "running", PATIENCE);
    assert!(
        watch_note(&task).contains(&format!("OOM kills: polled every 1s ({ENOSPC})")),
        "{task}"
    );
    wait_for(PATIENCE, "the child's OOM kill journaled", || {
        (d.task_dir("survivor").join("work/after").exists()
            && d.events(Some("survivor"))
                .iter()
                .any(|e| e["event"] == "oom-kill"))
        .then_some(())
    });
}

#[test]
fn progress_events_the_loop_will_not_take_back_are_read_on_a_timer_until_it_does() {
    if !require_root("refused progress events") {
        return;
    }
    let d = refusing_daemon("refuse-events", "events", Some("refuse"));
    // Heartbeats with new content every 300 ms, until /work/quiet exists.
    d.write_unit(
        "beats",
        &format!(
            r#"Unit(
            command: ["/bin/sh", "-c", "i=0; while [ ! -e /work/quiet ]; do echo beat $i > $KEEL_PROGRESS; i=$((i+1)); sleep 0.3; done; exec sleep 600"],
            liveness: Liveness(heartbeat_timeout: "2s", startup_grace: "0s", on_stall: Report, signals: [Heartbeat]),
            {SMALL},
        )"#
        ),
    );
    // The first heartbeat's read ends with the descriptor out of the loop; the loop refuses it
    // back at the window's end.
    let task = wait_task(&d, "beats", "the note", |t| !t["watch"].is_null());
    assert!(
        watch_note(&task).contains(&format!("progress events: read every 250ms ({ENOSPC})")),
        "{task}"
    );
    holds_throughout(Duration::from_secs(5), "beats stays running", || {
        d.task("beats").unwrap()["state"] == "running"
    });
    let seen = d.task("beats").unwrap();
    let changed = seen["progress_changed_ms"].as_u64().unwrap_or(0);
    assert!(
        changed + 2_000 >= common::wait::unix_now_ms(),
        "progress seen lately: {seen}"
    );
    std::fs::remove_file(d.scratch.dir.join("refuse")).unwrap();
    wait_task(&d, "beats", "the note gone", |t| t["watch"].is_null());
    assert!(
        d.daemon_log()
            .contains("progress files' events are watched again"),
        "{}",
        d.daemon_log()
    );
    std::fs::write(d.task_dir("beats").join("work/quiet"), "").unwrap();
    wait_task(&d, "beats", "stalled", |t| t["state"] == "stalled");
}
