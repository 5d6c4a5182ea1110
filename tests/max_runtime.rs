//! `max_runtime` on a real daemon: an attempt that runs past its budget is stopped and ends as
//! `timeout` (journaled, shown, a failure for the restart policy: the next attempt sees
//! `KEEL_LAST_EXIT=timeout`), and the time it spends paused (frozen) is not counted.

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;
use wait::wait_for;

const SMALL: &str = r#"resources: Resources(cpu: 0.2, memory: "64M")"#;

fn event(d: &Daemon, unit: &str, name: &str, attempt: u64) -> Value {
    d.events(Some(unit))
        .into_iter()
        .find(|e| e["event"] == name && e["attempt"] == attempt)
        .unwrap_or_else(|| {
            panic!(
                "no {name} for attempt {attempt}: {:?}",
                d.events(Some(unit))
            )
        })
}

fn ts(e: &Value) -> u64 {
    e["ts_ms"].as_u64().unwrap()
}

#[test]
fn an_attempt_past_its_max_runtime_ends_as_timeout_and_the_policy_restarts_it() {
    if !require_root("max_runtime") {
        return;
    }
    let d = Daemon::start("max-runtime");
    // Attempt 1 would run for 10 minutes; attempt 2 says what it was told, and succeeds.
    d.write_unit(
        "long",
        &format!(
            r#"Unit(
            command: ["/bin/sh", "-c", "if [ $KEEL_ATTEMPT = 1 ]; then exec sleep 600; fi; echo $KEEL_LAST_EXIT > /work/last"],
            max_runtime: Some("2s"),
            restart: OnFailure,
            backoff: Backoff(initial: "100ms"),
            stop: Stop(timeout: "2s"),
            {SMALL},
        )"#
        ),
    );
    d.wait_state("long", "running", Duration::from_secs(10));
    let done = d.wait_state("long", "succeeded", Duration::from_secs(30));
    assert_eq!(done["attempt"], 2, "{done}");
    let last = std::fs::read_to_string(d.task_dir("long").join("work/last")).unwrap();
    assert_eq!(last.trim(), "timeout");

    let started = event(&d, "long", "starting", 1);
    let timeout = event(&d, "long", "timeout", 1);
    assert!(
        ts(&timeout) >= ts(&started) + 2_000,
        "stopped before its budget: {started} {timeout}"
    );
    let detail = timeout["detail"].as_str().unwrap();
    assert!(detail.contains("max_runtime 2.0s"), "{detail}");
    let exited = event(&d, "long", "exited", 1);
    assert!(
        exited["detail"]
            .as_str()
            .unwrap()
            .starts_with("timeout after"),
        "{exited}"
    );
    // Shown in the task's recent exits.
    let status: Value = serde_json::from_slice(&d.keel(&["status", "long", "--json"]).stdout)
        .expect("status --json");
    let exits = &status["tasks"][0]["detail"]["recent_exits"];
    assert_eq!(exits[0]["exit"], "timeout", "{exits}");
    assert!(exits[0]["note"].as_str().unwrap().contains("max_runtime"));
}

#[test]
fn time_spent_paused_does_not_count_toward_max_runtime() {
    if !require_root("max_runtime and pause") {
        return;
    }
    let d = Daemon::start("max-runtime-pause");
    d.write_unit(
        "budget",
        &format!(
            r#"Unit(
            command: ["/bin/sh", "-c", "exec sleep 600"],
            max_runtime: Some("3s"),
            restart: Never,
            stop: Stop(timeout: "2s"),
            {SMALL},
        )"#
        ),
    );
    d.wait_state("budget", "running", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(1000));
    let out = d.keel(&["pause", "budget"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    // Paused for longer than its whole budget: it is not stopped meanwhile.
    std::thread::sleep(Duration::from_secs(4));
    let t = d.task("budget").unwrap();
    assert_eq!(t["state"], "paused", "{t}");
    let out = d.keel(&["resume", "budget"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(d.task("budget").unwrap()["state"], "running");
    let failed = wait_for(Duration::from_secs(15), "failed as timeout", || {
        d.task("budget").filter(|t| t["state"] == "failed")
    });
    assert_eq!(failed["last_exit"], "timeout", "{failed}");

    let started = ts(&event(&d, "budget", "starting", 1));
    let paused = ts(&event(&d, "budget", "paused", 1));
    let resumed = ts(&event(&d, "budget", "resumed", 1));
    let timeout = ts(&event(&d, "budget", "timeout", 1));
    let frozen = resumed - paused;
    assert!(frozen >= 4_000, "paused {frozen} ms");
    // Its 3 s of running: before the pause and after the resume (20 ms of slack for the
    // journal's stamps, which are not the clock the budget is measured on).
    let ran = (paused - started) + (timeout - resumed);
    assert!(ran + 20 >= 3_000, "stopped after running {ran} ms of 3 s");
    assert!(timeout >= started + 3_000 + frozen - 20);
}

#[test]
fn max_total_runtime_ends_the_task_for_good_across_its_attempts() {
    if !require_root("max_total_runtime") {
        return;
    }
    let d = Daemon::start("max-total-runtime");
    // Each attempt fails after a second; restarted whatever happens, until 2.5 s in all.
    d.write_unit(
        "loop",
        &format!(
            r#"Unit(
            command: ["/bin/sh", "-c", "sleep 1; exit 1"],
            max_total_runtime: Some("2500ms"),
            restart: Always,
            backoff: Backoff(initial: "100ms"),
            stop: Stop(timeout: "2s"),
            {SMALL},
        )"#
        ),
    );
    let failed = wait_for(Duration::from_secs(30), "failed", || {
        d.task("loop").filter(|t| t["state"] == "failed")
    });
    assert_eq!(failed["last_exit"], "timeout", "{failed}");
    let last = failed["attempt"].as_u64().unwrap();
    // Each attempt runs a second and its start's setup: the budget runs out in the 2nd or 3rd.
    assert!((2..=3).contains(&last), "{failed}");
    let reason = failed["reason"].as_str().unwrap();
    assert!(reason.contains("max_total_runtime spent"), "{reason}");
    let mut ran = 0;
    for attempt in 1..last {
        let exited = event(&d, "loop", "exited", attempt);
        assert!(
            exited["detail"].as_str().unwrap().starts_with("exit:1"),
            "{exited}"
        );
        ran += ts(&exited) - ts(&event(&d, "loop", "starting", attempt));
    }
    let timeout = event(&d, "loop", "timeout", last);
    let detail = timeout["detail"].as_str().unwrap();
    assert!(
        detail.contains("in all its attempts (max_total_runtime 2.5s"),
        "{detail}"
    );
    ran += ts(&timeout) - ts(&event(&d, "loop", "starting", last));
    // 50 ms of slack for the journal's stamps, which are not the budget's clock.
    assert!(ran + 50 >= 2_500, "stopped after {ran} ms in all");

    // `keel start` gives it a whole budget again: attempt 4 fails on its own.
    let out = d.keel(&["start", "loop"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    wait_until(Duration::from_secs(15), "attempt 4 ended", || {
        d.events(Some("loop"))
            .iter()
            .any(|e| e["event"] == "exited" && e["attempt"] == 4)
    });
    let exited = event(&d, "loop", "exited", 4);
    assert!(
        exited["detail"].as_str().unwrap().starts_with("exit:1"),
        "{exited}"
    );
}
