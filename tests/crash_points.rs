//! The daemon dies at each named crash point (`KEEL_CRASH_AT`); a new daemon recovers, and no
//! attempt runs twice. The agent waits for the test's word (`work/release`), so an attempt
//! that was live at the crash is still live when the new daemon starts: it can only be
//! re-adopted, never settled from an exit record.

mod common;
use common::*;
use keel::sandbox::spec::ShimRecord;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// The agent appends `KEEL_ATTEMPT KEEL_LAST_EXIT` to `work/attempts.txt`, then runs until
/// `work/release` exists and exits 0.
const UNIT: &str = r#"Unit(command: ["/bin/sh", "-c", "echo $KEEL_ATTEMPT $KEEL_LAST_EXIT >> /work/attempts.txt; while [ ! -e /work/release ]; do sleep 0.05; done; exit 0"], restart: OnFailure, backoff: Backoff(initial: "100ms"))"#;

fn attempts_file(d: &Daemon) -> PathBuf {
    d.task_dir("job").join("work/attempts.txt")
}

/// A daemon that died at `point` (asserted by `die_at`) with unit `job` in its directory.
fn crashed_at(point: &str) -> Daemon {
    let d = Daemon::prepare(&format!("crash-{point}"));
    d.write_unit("job", UNIT);
    d.die_at(point);
    d
}

/// Let the agent finish; its task's status once it succeeded, and the attempts it recorded.
fn release_and_finish(d: &Daemon) -> (Value, String) {
    std::fs::write(d.task_dir("job").join("work/release"), "").unwrap();
    let task = d.wait_state("job", "succeeded", Duration::from_secs(30));
    let attempts = std::fs::read_to_string(attempts_file(d)).unwrap_or_default();
    (task, attempts)
}

fn crash_then_recover(point: &str) -> (Value, String, Daemon) {
    let mut d = crashed_at(point);
    d.spawn();
    let (task, attempts) = release_and_finish(&d);
    (task, attempts, d)
}

/// Crash at `point` while attempt 1's shim is being spawned or recorded; the shim outlives
/// the daemon, and the new daemon must take that very process back: same pid, journaled as an
/// adoption, one `starting` only, and the agent (still waiting) never run again.
fn crash_then_readopt(point: &str) -> (Value, String, Daemon) {
    let mut d = crashed_at(point);
    let run = d.task_dir("job").join("run");
    // The daemon died before its record named the shim: the shim names itself in run/shim.ron.
    let mut shim = None;
    wait_until(Duration::from_secs(15), "the shim's run/shim.ron", || {
        shim = keel::state::read_ron::<ShimRecord>(&run.join("shim.ron"))
            .ok()
            .flatten();
        shim.is_some()
    });
    let shim = shim.unwrap();
    assert_eq!(shim.generation, 1, "{shim:?}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", shim.pid)).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("shim"),
        "shim pid {} is not alive across the crash",
        shim.pid
    );
    wait_until(Duration::from_secs(15), "the agent started", || {
        std::fs::read_to_string(attempts_file(&d)).is_ok_and(|t| t == "1\n")
    });

    d.spawn();
    let task = d.wait_state("job", "running", Duration::from_secs(15));
    assert_eq!(task["pid"], shim.pid, "{task}\n{}", d.daemon_log());
    assert_eq!(task["attempt"], 1, "{task}");
    assert!(
        !run.join("exit.ron").exists(),
        "the agent ended before the restart: nothing was adopted"
    );
    let events = d.events(Some("job"));
    let adopted = format!("adopted shim pid {}", shim.pid);
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "running" && e["detail"] == adopted.as_str()),
        "no adoption of shim {} in the journal: {events:?}",
        shim.pid
    );
    let starts = events.iter().filter(|e| e["event"] == "starting").count();
    assert_eq!(starts, 1, "{events:?}");

    let (task, attempts) = release_and_finish(&d);
    assert_eq!(task["last_exit"], "exit:0", "{task}");
    (task, attempts, d)
}

#[test]
fn crash_after_persisting_the_start_runs_the_attempt_that_never_began_once_uncounted() {
    let (task, attempts, d) = crash_then_recover("after-persist-starting");
    // Attempt 1 was decided but its shim never existed: the new daemon starts it again,
    // without counting it (it never began), and it runs once.
    assert_eq!(attempts, "1\n");
    assert_eq!(task["attempt"], 1);
    let events = d.events(Some("job"));
    assert!(
        !events
            .iter()
            .any(|e| e["event"] == "exited"
                && e["detail"].as_str().unwrap_or("").starts_with("lost")),
        "{events:?}"
    );
    let starts = events.iter().filter(|e| e["event"] == "starting").count();
    assert_eq!(starts, 2, "decided twice, begun once: {events:?}");
}

#[test]
fn crash_after_spawning_readopts_the_shim_and_runs_nothing_twice() {
    let (task, attempts, _d) = crash_then_readopt("after-spawn");
    // The shim was spawned but its pid never recorded: it is found through run/shim.ron.
    assert_eq!(attempts, "1\n");
    assert_eq!(task["attempt"], 1);
}

#[test]
fn crash_in_the_middle_of_a_state_write_leaves_no_torn_file() {
    let (task, attempts, d) = crash_then_recover("mid-write");
    assert_eq!(task["attempt"], 1);
    assert_eq!(attempts, "1\n");
    // No temporary file survived recovery, and every state file parses.
    for entry in std::fs::read_dir(d.task_dir("job")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(!name.contains(".tmp."), "left behind: {name}");
    }
    let text = std::fs::read_to_string(d.task_dir("job").join("state.ron")).unwrap();
    assert!(text.contains("Succeeded"), "{text}");
}

#[test]
fn crash_in_the_middle_of_overwriting_a_record_keeps_the_old_one_whole() {
    // The daemon's durable writes for a new task: 1 state.ron (queued), 2 state.ron
    // (starting), 3 unit.ron, 4 state.ron (running) — the overwrite of the record after the
    // spawn, interrupted between the temp file's fsync and the rename. (run/attempt.ron is
    // written without fsync: it only matters while its shim lives.)
    let (task, attempts, d) = crash_then_readopt("mid-write:4");
    let record = std::fs::read_to_string(d.task_dir("job").join("state.ron")).unwrap();
    assert!(record.contains("Succeeded"), "{record}");
    assert_eq!(
        attempts, "1\n",
        "the live attempt was re-adopted, not run again"
    );
    assert_eq!(task["attempt"], 1);
    for entry in std::fs::read_dir(d.task_dir("job")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(!name.contains(".tmp."), "left behind: {name}");
    }
}
