//! The queue as the daemon runs it: capacity from `keel.ron`, reservations from units,
//! priorities, `max_running`, refusals at `keel add` — checked on the real daemon and its
//! journal.

mod common;
use common::*;
use std::time::Duration;

fn write_config(d: &Daemon, text: &str) {
    std::fs::create_dir_all(d.state()).unwrap();
    std::fs::write(d.state().join("keel.ron"), text).unwrap();
}

/// Starting/ending events of every unit, in journal order, as (+1 | -1).
fn concurrency_peak(d: &Daemon) -> usize {
    let (mut now, mut peak) = (0i64, 0i64);
    for event in d.events(None) {
        match event["event"].as_str() {
            Some("starting") => now += 1,
            Some("exited") => now -= 1,
            _ => {}
        }
        peak = peak.max(now);
    }
    peak as usize
}

#[test]
fn three_one_cpu_tasks_on_two_cpus_run_two_at_a_time() {
    let mut d = Daemon::prepare("capacity-cpu");
    write_config(&d, r#"Config(capacity: Capacity(cpu: 2.0))"#);
    d.spawn();
    let hold = |name: &str| {
        // Each runs until its release file appears (written from the test into /work).
        format!(
            r#"Unit(command: ["/bin/sh", "-c", "while [ ! -e /work/release ]; do sleep 0.05; done"], resources: Resources(cpu: 1.0), restart: Never, priority: {})"#,
            match name {
                "a" => 2,
                "b" => 1,
                _ => 0,
            }
        )
    };
    for name in ["a", "b", "c"] {
        d.write_unit(name, &hold(name));
    }
    d.wait_state("a", "running", Duration::from_secs(10));
    d.wait_state("b", "running", Duration::from_secs(10));
    let waiting = d.wait_state("c", "queued", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(500));
    let waiting = d.task("c").unwrap_or(waiting);
    assert_eq!(waiting["state"], "queued", "the third must wait: {waiting}");
    assert_eq!(
        waiting["reason"], "needs 1 CPU, 0 free",
        "status says why: {waiting}"
    );
    // One ends: the third starts.
    std::fs::write(d.task_dir("a").join("work/release"), "").unwrap();
    d.wait_state("a", "succeeded", Duration::from_secs(10));
    d.wait_state("c", "running", Duration::from_secs(10));
    assert_eq!(d.task("b").unwrap()["state"], "running");
    for name in ["b", "c"] {
        std::fs::write(d.task_dir(name).join("work/release"), "").unwrap();
        d.wait_state(name, "succeeded", Duration::from_secs(10));
    }
    assert_eq!(concurrency_peak(&d), 2);
}

#[test]
fn priorities_order_the_queue() {
    let mut d = Daemon::prepare("priorities");
    // One at a time, and the queue filled before the first start: keel.ron holds the line
    // with max_running while the units are written, then a reload lets them through.
    write_config(
        &d,
        r#"Config(capacity: Capacity(cpu: 64.0, max_running: Some(1)))"#,
    );
    d.spawn();
    d.write_unit(
        "blocker",
        r#"Unit(command: ["/bin/sh", "-c", "while [ ! -e /work/release ]; do sleep 0.05; done"], restart: Never, priority: 100)"#,
    );
    d.wait_state("blocker", "running", Duration::from_secs(10));
    for (name, priority) in [("low", -5), ("mid", 0), ("high", 7), ("mid2", 0)] {
        d.write_unit(
            name,
            &format!(r#"Unit(command: ["/bin/true"], restart: Never, priority: {priority})"#),
        );
        // Distinct submission times for the two of equal priority.
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_until(Duration::from_secs(5), "all four queued", || {
        ["low", "mid", "high", "mid2"]
            .iter()
            .all(|u| d.task(u).is_some_and(|t| t["state"] == "queued"))
    });
    let reason = d.task("high").unwrap()["reason"].clone();
    assert_eq!(reason, "1 of 1 running (max_running)");
    std::fs::write(d.task_dir("blocker").join("work/release"), "").unwrap();
    for name in ["low", "mid", "high", "mid2"] {
        d.wait_state(name, "succeeded", Duration::from_secs(15));
    }
    let order: Vec<String> = d
        .events(None)
        .iter()
        .filter(|e| e["event"] == "starting" && e["unit"] != "blocker")
        .map(|e| e["unit"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(order, ["high", "mid", "mid2", "low"]);
}

#[test]
fn fifty_short_tasks_through_max_running_four_never_exceed_four() {
    let mut d = Daemon::prepare("max-running");
    write_config(
        &d,
        r#"Config(capacity: Capacity(cpu: 64.0, memory: "512G", max_running: Some(4)))"#,
    );
    d.spawn();
    for i in 0..50 {
        d.write_unit(
            &format!("t{i:02}"),
            r#"Unit(command: ["/bin/sh", "-c", "sleep 0.05"], restart: Never, resources: Resources(cpu: 0.1, memory: "64M"))"#,
        );
    }
    wait_until(Duration::from_secs(120), "all 50 succeeded", || {
        let tasks = d.status()["tasks"].as_array().cloned().unwrap_or_default();
        tasks.len() == 50 && tasks.iter().all(|t| t["state"] == "succeeded")
    });
    let starts = d
        .events(None)
        .iter()
        .filter(|e| e["event"] == "starting")
        .count();
    assert_eq!(starts, 50);
    let peak = concurrency_peak(&d);
    assert!(peak <= 4, "{peak} attempts ran at once");
    assert!(peak >= 2, "the queue ran tasks side by side (peak {peak})");
}

#[test]
fn a_unit_that_can_never_fit_is_refused_at_add_with_the_numbers() {
    let mut d = Daemon::prepare("never-fits");
    write_config(&d, r#"Config(capacity: Capacity(cpu: 2.0, memory: "4G"))"#);
    d.spawn();
    let file = d.scratch.dir.join("huge.ron");
    std::fs::write(
        &file,
        r#"Unit(command: ["/bin/true"], resources: Resources(cpu: 4.0))"#,
    )
    .unwrap();
    let out = d.keel(&["add", &path_str(&file)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("needs 4 CPU but capacity is 2 CPU"),
        "{}",
        stderr_of(&out)
    );
    assert!(!d.units().join("huge.ron").exists(), "nothing installed");
    // Dropped straight into the units directory, it waits and says why; the rest still runs.
    d.write_unit(
        "huge",
        r#"Unit(command: ["/bin/true"], resources: Resources(memory: "8G"))"#,
    );
    d.write_unit("small", r#"Unit(command: ["/bin/true"], restart: Never)"#);
    d.wait_state("small", "succeeded", Duration::from_secs(10));
    let huge = d.wait_state("huge", "queued", Duration::from_secs(5));
    wait_until(Duration::from_secs(5), "the reason is shown", || {
        d.task("huge").is_some_and(|t| {
            t["reason"]
                .as_str()
                .is_some_and(|r| r.contains("needs 8G memory but capacity is 4G"))
        })
    });
    drop(huge);
}

#[test]
fn a_malformed_keel_ron_stops_the_daemon_with_file_line_col() {
    let d = Daemon::prepare("bad-config");
    write_config(
        &d,
        "Config(\n    capacity: Capacity(cpu: 2.0, memroy: \"4G\"),\n)\n",
    );
    let out = std::process::Command::new(keel_bin())
        .arg("--state")
        .arg(d.state())
        .arg("daemon")
        .arg("--units")
        .arg(d.units())
        .env("KEEL_ID_CLAIMS_DIR", d.scratch.dir.join("id-claims"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(err.contains("keel.ron:2:34"), "{err}");
    assert!(err.contains("memroy"), "{err}");
}

#[test]
fn a_bad_keel_ron_at_reload_keeps_the_old_configuration() {
    let mut d = Daemon::prepare("reload-config");
    write_config(&d, r#"Config(capacity: Capacity(max_running: Some(1)))"#);
    d.spawn();
    write_config(&d, r#"Config(capacity: Capacity(max_running: Some(0)))"#);
    let out = d.keel(&["reload"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout_of(&out));
    assert!(
        stderr_of(&out).contains("previous configuration stays in force"),
        "{}",
        stderr_of(&out)
    );
    assert!(d.keel(&["health"]).status.success(), "the daemon lives on");
    // The old limit still holds.
    let hold = r#"Unit(command: ["/bin/sh", "-c", "while [ ! -e /work/release ]; do sleep 0.05; done"], restart: Never, resources: Resources(cpu: 0.1))"#;
    d.write_unit("one", hold);
    d.wait_state("one", "running", Duration::from_secs(10));
    d.write_unit("two", hold);
    d.wait_state("two", "queued", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(d.task("two").unwrap()["state"], "queued");
    // A good file lifts the limit.
    write_config(&d, r#"Config(capacity: Capacity(max_running: Some(2)))"#);
    assert!(d.keel(&["reload"]).status.success());
    d.wait_state("two", "running", Duration::from_secs(10));
    for name in ["one", "two"] {
        std::fs::write(d.task_dir(name).join("work/release"), "").unwrap();
        d.wait_state(name, "succeeded", Duration::from_secs(10));
    }
}

#[test]
fn removing_a_running_task_lets_the_next_one_start() {
    let mut d = Daemon::prepare("rm-frees");
    write_config(&d, r#"Config(capacity: Capacity(max_running: Some(1)))"#);
    d.spawn();
    // Slow to stop: the removal finishes well after the units directory's rescan.
    d.write_unit(
        "first",
        r#"Unit(command: ["/bin/sh", "-c", "trap 'sleep 0.5; exit 0' TERM; while :; do sleep 0.05; done"], resources: Resources(cpu: 0.1))"#,
    );
    d.wait_state("first", "running", Duration::from_secs(10));
    d.write_unit(
        "second",
        r#"Unit(command: ["sleep", "60"], resources: Resources(cpu: 0.1))"#,
    );
    d.wait_state("second", "queued", Duration::from_secs(5));
    let out = d.keel(&["rm", "first"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    d.wait_state("second", "running", Duration::from_secs(10));
}

#[test]
fn a_bad_edit_of_keel_ron_never_keeps_the_daemon_down() {
    let mut d = Daemon::prepare("config-fallback");
    write_config(&d, r#"Config(capacity: Capacity(max_running: Some(1)))"#);
    d.spawn();
    assert!(d.shutdown().unwrap().success());
    // Edited while no daemon ran (or before a crash), never reloaded: a typo.
    write_config(&d, r#"Config(capacity: Capacity(max_runing: Some(3)))"#);
    d.spawn();
    assert!(
        d.daemon_log()
            .contains("running on the last configuration that loaded"),
        "{}",
        d.daemon_log()
    );
    // And it is the old limit that holds.
    let hold = r#"Unit(command: ["sleep", "60"], resources: Resources(cpu: 0.1))"#;
    d.write_unit("a", hold);
    d.write_unit("b", hold);
    wait_until(Duration::from_secs(10), "one runs, one waits", || {
        let states: Vec<String> = ["a", "b"]
            .iter()
            .filter_map(|u| d.task(u))
            .map(|t| t["state"].as_str().unwrap_or("").to_string())
            .collect();
        states.iter().filter(|s| *s == "running").count() == 1
            && states.iter().filter(|s| *s == "queued").count() == 1
    });
}
