//! Fencing by generation: an attempt's result is read from `run/exit.ron` only when the record
//! is of that attempt's generation. A record of another generation is ignored — the attempt is
//! settled as `lost`, whatever the record claims — and the journal says so.

mod common;
use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::time::Duration;

const WITHIN: Duration = Duration::from_secs(30);

/// Journal entries of `unit` named `event`.
fn events_named(d: &Daemon, unit: &str, event: &str) -> Vec<Value> {
    d.events(Some(unit))
        .into_iter()
        .filter(|e| e["event"] == event)
        .collect()
}

/// Wait until `unit` has ended for good (`failed` or `succeeded`); its status then.
fn wait_final(d: &Daemon, unit: &str) -> Value {
    let mut task = Value::Null;
    wait_until(WITHIN, "the task settled", || {
        task = d.task(unit).unwrap_or(Value::Null);
        task["state"] == "failed" || task["state"] == "succeeded"
    });
    task
}

/// SIGKILL a shim by its pid and wait until it and every process of its sandbox (its PID
/// namespace) are gone. A shim killed so writes no exit record.
fn kill_shim(pid: i32) {
    let members = namespace_members(pid);
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    wait_until(WITHIN, "the shim and its agent gone", || {
        members().is_empty()
            && std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| s.contains(") Z "))
    });
}

#[test]
fn a_live_attempts_shim_dying_beside_an_older_generations_exit_record_is_fenced() {
    // Attempt 1 fails; attempt 2 (generation 2) runs until killed. One restart allowed: the
    // end of attempt 2, if it is a failure, is final.
    let d = Daemon::start("fence-older");
    d.write_unit(
        "job",
        r#"Unit(command: ["/bin/sh", "-c", "if [ -e /work/failed-once ]; then echo ready; exec sleep 600; fi; touch /work/failed-once; exit 1"],
            restart: OnFailure, backoff: Backoff(initial: "100ms"),
            restart_limit: RestartLimit(count: 1, within: "1h"))"#,
    );
    let task = d.wait_state("job", "running", WITHIN);
    wait_until(WITHIN, "attempt 2 running", || {
        d.task("job")
            .is_some_and(|t| t["attempt"] == 2 && t["state"] == "running")
    });
    let task = d.task("job").unwrap_or(task);
    let record = d.record("job");
    assert_eq!((record.attempt, record.generation), (2, 2), "{record:?}");
    let shim = record.shim.clone().expect("attempt 2's shim recorded").pid;
    assert_eq!(task["pid"], shim, "{task}");
    // The shim removes a stale exit record when it starts, before it copies any output: once
    // the agent's line is in the log, a record planted now stays.
    let log = d.task_dir("job").join("run/output.log");
    wait_until(
        WITHIN,
        "attempt 2's shim copying its agent's output",
        || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("ready")),
    );

    // Attempt 1's record, claiming success, where attempt 2's would be; then attempt 2's shim
    // dies without writing one.
    d.plant_exit_record("job", 1, 1);
    kill_shim(shim);

    let task = wait_final(&d, "job");
    assert_eq!(task["state"], "failed", "{task}");
    assert_eq!(task["last_exit"], "lost", "{task}");
    assert_eq!(task["attempt"], 2, "{task}");
    let fenced = events_named(&d, "job", "fenced");
    assert_eq!(fenced.len(), 1, "{fenced:?}\n{}", d.daemon_log());
    assert_eq!(fenced[0]["generation"], 2, "{fenced:?}");
    let detail = fenced[0]["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains("exit record of generation 1 ignored (current 2)"),
        "{detail}"
    );
    let exited = events_named(&d, "job", "exited");
    let last = exited.last().unwrap();
    assert_eq!(last["generation"], 2, "{exited:?}");
    assert!(
        last["detail"].as_str().unwrap_or("").starts_with("lost"),
        "{exited:?}"
    );
}

#[test]
fn an_exit_record_of_another_generation_is_ignored_when_a_restarted_daemon_settles() {
    let mut d = Daemon::start("fence-restart");
    d.write_unit("job", r#"Unit(command: ["sleep", "600"], restart: Never)"#);
    let task = d.wait_state("job", "running", WITHIN);
    let shim = task["pid"].as_i64().unwrap() as i32;
    // The daemon dies; while nobody watches, the shim dies too (no exit record) and a record
    // of another generation (a newer one: the shim leaves those alone) claims success.
    d.crash();
    let record = d.record("job");
    assert_eq!(record.generation, 1, "{record:?}");
    kill_shim(shim);
    d.plant_exit_record("job", 2, 2);

    d.spawn();
    let task = wait_final(&d, "job");
    assert_eq!(task["state"], "failed", "{task}");
    assert_eq!(task["last_exit"], "lost", "{task}");
    assert_eq!(task["attempt"], 1, "{task}");
    let exited = events_named(&d, "job", "exited");
    assert_eq!(exited.len(), 1, "{exited:?}");
    let detail = exited[0]["detail"].as_str().unwrap_or("");
    assert!(
        detail.starts_with("lost")
            && detail.contains("exit record of generation 2 ignored (current 1)"),
        "{detail}"
    );
    // Journaled as fenced too, as when a live shim's end finds such a record.
    let fenced = events_named(&d, "job", "fenced");
    assert_eq!(fenced.len(), 1, "{fenced:?}\n{}", d.daemon_log());
    assert_eq!(fenced[0]["generation"], 1, "{fenced:?}");
    assert!(
        fenced[0]["detail"]
            .as_str()
            .unwrap_or("")
            .contains("exit record of generation 2 ignored (current 1)"),
        "{fenced:?}"
    );
}
