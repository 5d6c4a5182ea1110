//! Restart policy end to end: attempts, environment contract, backoff growth, restart limit.

mod common;
use common::*;
use std::time::Duration;

/// An agent that exits 1 on attempts 1–3 and 0 on attempt 4, recording what it saw.
#[test]
fn fails_three_times_then_succeeds_with_the_right_environment() {
    let d = Daemon::start("flaky");
    let seen = d.task_dir("flaky").join("work/seen.txt");
    let script = format!(
        r#"echo "$0 $KEEL_ATTEMPT $KEEL_RESUMED $KEEL_LAST_EXIT" >> {seen}; [ "$KEEL_ATTEMPT" -ge 4 ]"#,
        seen = "/work/seen.txt"
    );
    d.write_unit(
        "flaky",
        &format!(
            r#"Unit(
    command: ["/bin/sh", "-c", {script:?}, "first"],
    resume_command: Some(["/bin/sh", "-c", {script:?}, "resume"]),
    restart: OnFailure,
    backoff: Backoff(initial: "100ms", max: "1s", factor: 2.0),
)"#
        ),
    );
    let task = d.wait_state("flaky", "succeeded", Duration::from_secs(20));
    assert_eq!(task["attempt"], 4);
    assert_eq!(task["last_exit"], "exit:0");
    let lines: Vec<String> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        lines,
        [
            "first 1 0 ",
            "resume 2 1 exit:1",
            "resume 3 1 exit:1",
            "resume 4 1 exit:1"
        ]
    );
    // The journal tells the same story: three backoffs, then success.
    let events: Vec<String> = d
        .events(Some("flaky"))
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        events.iter().filter(|e| *e == "backoff").count(),
        3,
        "{events:?}"
    );
    assert_eq!(events.last().unwrap(), "succeeded");
    // The accepted copy of the unit was written once, for attempt 1: restarts of an unchanged
    // unit do not write it again (it predates attempt 2's start).
    let accepted = d.task_dir("flaky").join("unit.ron");
    let text = std::fs::read_to_string(&accepted).unwrap();
    assert!(text.contains("OnFailure"), "{text}");
    let written_ms = std::fs::metadata(&accepted)
        .unwrap()
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let second_start = d
        .events(Some("flaky"))
        .iter()
        .filter(|e| e["event"] == "starting")
        .nth(1)
        .and_then(|e| e["ts_ms"].as_u64())
        .expect("attempt 2's start in the journal");
    assert!(
        written_ms < second_start,
        "unit.ron rewritten at {written_ms}, after attempt 2 started at {second_start}"
    );
}

#[test]
fn restart_limit_fails_the_task_and_backoff_grows_then_caps() {
    let d = Daemon::start("limit");
    d.write_unit(
        "crashy",
        r#"Unit(
    command: ["/bin/sh", "-c", "exit 7"],
    restart: Always,
    backoff: Backoff(initial: "100ms", max: "400ms", factor: 2.0),
    restart_limit: RestartLimit(count: 5, within: "1h"),
)"#,
    );
    let task = d.wait_state("crashy", "failed", Duration::from_secs(20));
    assert_eq!(task["attempt"], 6, "5 restarts after the first attempt");
    assert_eq!(task["last_exit"], "exit:7");
    let reason = task["reason"].as_str().unwrap();
    assert!(
        reason.contains("restart limit reached: 5 restarts within 1h"),
        "{reason}"
    );

    // Delays between an exit and the next start, from the journal's timestamps.
    let events = d.events(Some("crashy"));
    let mut delays = Vec::new();
    let mut exited_at = None;
    for e in &events {
        match e["event"].as_str().unwrap() {
            "exited" => exited_at = e["ts_ms"].as_u64(),
            "starting" => {
                if let Some(t) = exited_at.take() {
                    delays.push(e["ts_ms"].as_u64().unwrap() - t);
                }
            }
            _ => {}
        }
    }
    assert_eq!(delays.len(), 5, "{delays:?}");
    // Expected 100, 200, 400, 400, 400 ms, ±10% jitter. Each measured gap also holds two
    // fsynced state writes and a scheduling round: generous slack above, none below.
    let expected = [100u64, 200, 400, 400, 400];
    for (got, want) in delays.iter().zip(expected) {
        assert!(
            *got as f64 >= want as f64 * 0.89 && (*got as f64) <= want as f64 * 1.11 + 400.0,
            "delays {delays:?} not close to {expected:?}"
        );
    }
    // The delays the daemon decided, from the journal: exact growth and cap (±10% jitter).
    let decided: Vec<f64> = events
        .iter()
        .filter(|e| e["event"] == "backoff")
        .map(|e| {
            let detail = e["detail"].as_str().unwrap();
            let text = detail.trim_start_matches("restart in ");
            if let Some(ms) = text.strip_suffix("ms") {
                ms.parse::<f64>().unwrap()
            } else {
                text.trim_end_matches('s').parse::<f64>().unwrap() * 1000.0
            }
        })
        .collect();
    assert_eq!(decided.len(), 5, "{decided:?}");
    for (got, want) in decided.iter().zip(expected) {
        assert!(
            (*got - want as f64).abs() <= want as f64 * 0.1 + 1.0,
            "decided {decided:?} vs {expected:?}"
        );
    }
    // Failed means no further start.
    std::thread::sleep(Duration::from_millis(800));
    let task = d.task("crashy").unwrap();
    assert_eq!(task["state"], "failed");
    assert_eq!(task["attempt"], 6);

    // `keel start` tries again with a fresh limit.
    let out = d.keel(&["start", "crashy"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let task = d.wait_state("crashy", "failed", Duration::from_secs(20));
    assert_eq!(task["attempt"], 12);
}

#[test]
fn never_policy_reports_failure_with_its_exit_code() {
    let d = Daemon::start("never");
    d.write_unit(
        "once",
        r#"Unit(command: ["/bin/sh", "-c", "kill -9 $$"], restart: Never)"#,
    );
    let task = d.wait_state("once", "failed", Duration::from_secs(10));
    assert_eq!(task["last_exit"], "signal:SIGKILL");
    assert_eq!(task["attempt"], 1);
}

#[test]
fn missing_program_is_reported_not_retried_forever() {
    let d = Daemon::start("noprog");
    d.write_unit(
        "ghost",
        r#"Unit(command: ["no-such-agent-binary"], restart: Never)"#,
    );
    let task = d.wait_state("ghost", "failed", Duration::from_secs(10));
    // Distinct from any exit code the agent could have chosen.
    assert_eq!(task["last_exit"], "spawn-failed");
    let reason = task["reason"].as_str().unwrap();
    assert!(
        reason.contains("spawn failed: no-such-agent-binary: No such file or directory"),
        "{reason}"
    );
}
