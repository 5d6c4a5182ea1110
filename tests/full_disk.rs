//! keel on a full state disk: the state directory is a 2 MiB tmpfs, filled to the last byte
//! while a task runs. Requests that must be recorded are refused with a message naming the
//! state directory and the lack of space, nothing is done that was not recorded, the daemon
//! keeps running, no torn or temporary file is left; once space returns, keel works again.
//! And a full log disk (the task's `run/` a tmpfs of its own): the agent's output never blocks
//! it, its heartbeats go on, and the gap is noted in its log once space returns.

mod common;
use common::tmpfs::{Fixture, Tmpfs};
use common::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Fill the filesystem of `dir` with `dir/filler` until a write fails with ENOSPC.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 4096];
    loop {
        if let Err(e) = file.write_all(&chunk) {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            return path;
        }
    }
}

/// Every file below `dir` whose name matches `select`.
fn files(dir: &Path, select: &dyn Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else if select(&entry.file_name().to_string_lossy()) {
                found.push(path);
            }
        }
    }
    found
}

/// `running` is recorded at the spawn; the shim writes `run/shim.ron` once it has exec'd (the
/// agent runs by then). A disk filled before that would fail the shim's own set-up instead.
fn shim_set_up(d: &Daemon, unit: &str) {
    let record = d.task_dir(unit).join("run/shim.ron");
    wait_until(Duration::from_secs(10), "the shim's record", || {
        record.exists()
    });
}

/// No temporary file of an atomic write is left, every state file parses, every journal line
/// is whole.
fn assert_state_intact(state: &Path) {
    let temps = files(state, &|n| n.starts_with('.') && n.contains(".tmp."));
    assert!(temps.is_empty(), "temporary files left: {temps:?}");
    let records = files(state, &|n| n.ends_with(".ron"));
    assert!(records.len() >= 4, "{records:?}");
    for record in records {
        let text = std::fs::read_to_string(&record).unwrap();
        ron::from_str::<ron::Value>(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}\n{text}", record.display()));
    }
    let journal = std::fs::read_to_string(state.join("events.jsonl")).unwrap();
    for line in journal.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("torn journal line {line:?}: {e}"));
    }
}

const STEADY: &str = r#"Unit(
    command: ["/bin/sh", "-c", "while :; do echo tick; echo tick > $KEEL_PROGRESS; sleep 0.2; done"],
    resources: Resources(cpu: 0.1, memory: "32M", pids: 16),
    liveness: Liveness(heartbeat_timeout: "10m", startup_grace: "10m"),
    stop: Stop(timeout: "5s"),
)"#;
const LATE: &str = r#"Unit(
    command: ["/bin/sh", "-c", "echo late; exec sleep 600"],
    resources: Resources(cpu: 0.1, memory: "32M", pids: 16),
)"#;

#[test]
fn a_full_state_disk_is_refused_clearly_loses_nothing_and_recovers() {
    if !require_root("a_full_state_disk_is_refused_clearly_loses_nothing_and_recovers") {
        return;
    }
    let f = Fixture::start("full-disk", "2m", None);
    let d = &f.daemon;
    let state = d.state();
    let state_name = path_str(&state);
    d.write_unit("steady", STEADY);
    let before = d.wait_state("steady", "running", Duration::from_secs(10));
    shim_set_up(d, "steady");

    let filler = fill(&state);
    // A new unit: its start cannot be recorded, so it is not started; it waits and says why.
    d.write_unit("late", LATE);
    let mut reason = String::new();
    wait_until(
        Duration::from_secs(10),
        "late deferred for want of space",
        || {
            reason = d
                .task("late")
                .map(|t| t["reason"].as_str().unwrap_or("").to_string())
                .unwrap_or_default();
            reason.contains("No space left on device")
        },
    );
    assert!(reason.starts_with("start deferred"), "{reason}");
    assert!(reason.contains(&state_name), "{reason}");
    assert_eq!(d.task("late").unwrap()["state"], "queued");
    // Journal appends on the full disk (each SIGHUP journals a reload): a line cut short at
    // the last free byte is taken back, not left to run into the next line.
    let pid = nix::unistd::Pid::from_raw(d.child.as_ref().unwrap().id() as i32);
    for _ in 0..50 {
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
        // Spread out, so that each is handled on its own (the scenario, not a wait).
        std::thread::sleep(Duration::from_millis(10));
    }
    // A stop cannot be recorded: refused, with the state directory and the fix; the task runs on.
    let out = d.keel(&["stop", "steady"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(err.contains(&state_name), "{err}");
    assert!(err.contains("no space left on its filesystem"), "{err}");
    assert!(err.contains("nothing was done"), "{err}");
    // Negative check: the refused stop is not carried out later either.
    wait::holds_throughout(Duration::from_secs(1), "steady runs on", || {
        let steady = d.task("steady").unwrap();
        steady["state"] == "running" && steady["pid"] == before["pid"]
    });
    // The daemon lives and says what happened, naming the file and the error.
    assert!(d.keel(&["health"]).status.success());
    let log = d.daemon_log();
    assert!(
        log.contains(&format!(
            "{state_name}/tasks/late/state.ron: No space left on device"
        )),
        "{log}"
    );
    assert!(log.contains("steady: stop not carried out"), "{log}");
    assert!(
        !log.lines()
            .any(|l| l.ends_with("steady: stopping (SIGTERM, SIGKILL after 5.0s)")),
        "an unrecorded stop: {log}"
    );
    assert_state_intact(&state);

    // Space returns: the deferred start goes through (retried every 5 s), requests work.
    std::fs::remove_file(&filler).unwrap();
    d.wait_state("late", "running", Duration::from_secs(15));
    let out = d.keel(&["stop", "steady"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    d.wait_state("steady", "stopped", Duration::from_secs(10));
    assert_state_intact(&state);
    let late = d.task("late").unwrap();

    // All of it is on disk: a restarted daemon finds both as they were.
    let Fixture { mut daemon, _tmpfs } = f;
    daemon.crash();
    daemon.spawn();
    let again = daemon.wait_state("late", "running", Duration::from_secs(10));
    assert_eq!(again["pid"], late["pid"], "re-adopted, not restarted");
    assert_eq!(daemon.task("steady").unwrap()["state"], "stopped");
    drop(daemon);
}

#[test]
fn a_shutdown_on_a_full_disk_leaves_tasks_to_the_next_daemon() {
    if !require_root("a_shutdown_on_a_full_disk_leaves_tasks_to_the_next_daemon") {
        return;
    }
    let mut f = Fixture::start("full-shutdown", "2m", None);
    f.daemon.write_unit("steady", STEADY);
    let before = f
        .daemon
        .wait_state("steady", "running", Duration::from_secs(10));
    let shim = before["pid"].as_i64().unwrap() as i32;
    shim_set_up(&f.daemon, "steady");
    let filler = fill(&f.daemon.state());
    // The stop that would record the task as interrupted cannot be written: rather than wait
    // forever (or stop it unrecorded), the daemon goes and leaves it running.
    let status = f.daemon.shutdown().unwrap();
    assert!(status.success(), "{status}\n{}", f.daemon.daemon_log());
    let log = f.daemon.daemon_log();
    assert!(
        log.contains("steady: left running: its stop could not be recorded"),
        "{log}"
    );
    assert!(log.contains("no space left on its filesystem"), "{log}");
    assert!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(shim), None).is_ok());
    assert_state_intact(&f.daemon.state());
    // Space returns: the next daemon re-adopts it, the same attempt.
    std::fs::remove_file(filler).unwrap();
    f.daemon.spawn();
    let again = f
        .daemon
        .wait_state("steady", "running", Duration::from_secs(10));
    assert_eq!(again["pid"], before["pid"]);
    assert_eq!(again["attempt"], 1);
}

/// 16 KiB of output and a heartbeat (`touch`: no space needed) in each round; the round's
/// number in the checkpoint, which is not on the full disk.
const CHATTY: &str = r#"Unit(
    command: ["/bin/sh", "-c", "s=x; for k in 1 2 3 4 5 6 7 8 9 10 11 12 13 14; do s=$s$s; done; i=0; while :; do i=$((i+1)); echo \"$i $s\"; touch $KEEL_PROGRESS; echo $i > $KEEL_CHECKPOINT_DIR/round; sleep 0.02; done"],
    resources: Resources(cpu: 0.2, memory: "32M", pids: 16),
    liveness: Liveness(heartbeat_timeout: "10m", progress_timeout: "10m", startup_grace: "10m", signals: [Heartbeat]),
    stop: Stop(timeout: "5s"),
)"#;

/// Rounds the agent must get through on the full disk: 64 × 16 KiB is 16 times a pipe's
/// buffer, so an agent whose output blocked could not.
const ROUNDS_ON_A_FULL_DISK: u64 = 64;
const ROUND_BYTES: u64 = 16 * 1024;

#[test]
fn a_full_log_disk_never_blocks_the_agent_and_the_gap_is_noted() {
    if !require_root("a_full_log_disk_never_blocks_the_agent_and_the_gap_is_noted") {
        return;
    }
    // The task's run/ (output.log, progress) on a 1 MiB tmpfs; the state beside it is not full.
    let mut daemon = Daemon::prepare("full-log");
    let run = daemon.task_dir("chatty").join("run");
    let tmpfs = Tmpfs::mount(&run, "1m", &daemon.scratch.dir);
    daemon.spawn();
    // Held together so that the daemon goes first, also when the test fails.
    let f = Fixture {
        daemon,
        _tmpfs: tmpfs,
    };
    let d = &f.daemon;
    d.write_unit("chatty", CHATTY);
    let before = d.wait_state("chatty", "running", wait::PATIENCE);
    shim_set_up(d, "chatty");
    let round_file = d.task_dir("chatty").join("checkpoint/round");
    let round = || -> Option<u64> {
        std::fs::read_to_string(&round_file)
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let log = run.join("output.log");
    wait_until(wait::PATIENCE, "output captured", || {
        std::fs::metadata(&log).is_ok_and(|m| m.len() > 0)
    });

    let filler = fill(&run);
    let logged_at_fill = std::fs::metadata(&log).unwrap().len();
    let first = wait::wait_for(wait::PATIENCE, "the agent's round", round);
    wait::wait_for(
        wait::PATIENCE,
        "the agent to go on writing on the full disk",
        || round().filter(|&r| r >= first + ROUNDS_ON_A_FULL_DISK),
    );
    let logged = std::fs::metadata(&log).unwrap().len();
    assert!(
        logged - logged_at_fill < ROUND_BYTES,
        "the disk was not full: the log grew from {logged_at_fill} to {logged}"
    );
    // The daemon sees heartbeats made after all that output: they went on.
    let since = wait::unix_now_ms();
    let task = wait::wait_for(wait::PATIENCE, "a heartbeat seen after the rounds", || {
        d.task("chatty").filter(|t| {
            t["last_activity_kind"] == "heartbeat"
                && t["last_activity_ms"].as_u64().is_some_and(|at| at >= since)
        })
    });
    assert_eq!(task["state"], "running", "{task}");
    assert_eq!(task["liveness"], "running", "{task}");
    assert_eq!(task["pid"], before["pid"], "the same attempt: {task}");

    // Space returns: the next write notes what was dropped, on its own line, then output
    // goes on (the first line after the note may be the tail of a round cut by the drop).
    std::fs::remove_file(&filler).unwrap();
    let whole_round = |line: &str| {
        let (number, rest) = line.split_once(' ')?;
        let number = number.parse::<u64>().ok()?;
        (rest.len() as u64 == ROUND_BYTES && rest.bytes().all(|b| b == b'x')).then_some(number)
    };
    let (text, at, line) = wait::wait_for(wait::PATIENCE, "the dropped-bytes note", || {
        let text = std::fs::read_to_string(&log).ok()?;
        let at = text.find("[keel: ")?;
        let line = text[at..].lines().next()?.to_string();
        let resumed = text[at + line.len()..].lines().find_map(whole_round)?;
        assert!(resumed > first + ROUNDS_ON_A_FULL_DISK, "round {resumed}");
        Some((text, at, line))
    });
    assert!(at == 0 || text.as_bytes()[at - 1] == b'\n', "{line}");
    let dropped: u64 = line
        .strip_prefix("[keel: ")
        .and_then(|rest| rest.strip_suffix(" bytes of output dropped: No space left on device]"))
        .unwrap_or_else(|| panic!("not a dropped-bytes note: {line:?}"))
        .parse()
        .unwrap();
    // Every round on the full disk, but for what the log grew by (under one round).
    assert!(
        dropped >= (ROUNDS_ON_A_FULL_DISK - 1) * ROUND_BYTES,
        "{dropped} bytes dropped"
    );
    assert_eq!(
        text.matches("[keel: ").count(),
        1,
        "one note for the one gap"
    );
    assert_eq!(d.task("chatty").unwrap()["pid"], before["pid"]);
    drop(f);
}
