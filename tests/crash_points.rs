//! The daemon dies at each named crash point (`KEEL_CRASH_AT`); a new daemon recovers, and no
//! attempt runs twice.

mod common;
use common::*;
use std::time::Duration;

fn unit_recording_attempts(d: &Daemon) -> (String, std::path::PathBuf) {
    let seen = d.task_dir("job").join("work/attempts.txt");
    let text = format!(
        r#"Unit(command: ["/bin/sh", "-c", "echo $KEEL_ATTEMPT $KEEL_LAST_EXIT >> {seen}; sleep 1; exit 0"], restart: OnFailure, backoff: Backoff(initial: "100ms"))"#,
        seen = "/work/attempts.txt"
    );
    (text, seen)
}

fn crash_then_recover(point: &str) -> (serde_json::Value, String, Daemon) {
    let mut d = Daemon::prepare(&format!("crash-{point}"));
    let (text, seen) = unit_recording_attempts(&d);
    d.write_unit("job", &text);
    d.die_at(point);
    d.spawn();
    let task = d.wait_state("job", "succeeded", Duration::from_secs(15));
    let attempts = std::fs::read_to_string(&seen).unwrap_or_default();
    (task, attempts, d)
}

#[test]
fn crash_after_persisting_the_start_loses_an_attempt_that_never_ran() {
    let (task, attempts, d) = crash_then_recover("after-persist-starting");
    // Attempt 1 was decided but its shim never existed: recorded as lost, attempt 2 runs once.
    assert_eq!(attempts, "2 lost\n");
    assert_eq!(task["attempt"], 2);
    let exits: Vec<_> = d
        .events(Some("job"))
        .into_iter()
        .filter(|e| e["event"] == "exited")
        .collect();
    assert!(
        exits[0]["detail"].as_str().unwrap().starts_with("lost"),
        "{exits:?}"
    );
}

#[test]
fn crash_after_spawning_readopts_the_shim_and_runs_nothing_twice() {
    let (task, attempts, _d) = crash_then_recover("after-spawn");
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
    let (task, attempts, d) = crash_then_recover("mid-write:4");
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
