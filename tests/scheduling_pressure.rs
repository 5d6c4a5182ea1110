//! Pressure-aware admission on the real daemon (keel issue 22): busy tasks raise the CPU
//! pressure of keel's tasks past the threshold of `keel.ron`; the next queued task, whose
//! requests fit, waits and `keel status` says why; it starts once the pressure has fallen.

mod common;
use common::wait::{holds_throughout, wait_for};
use common::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// keel's `tasks/` in the v2 hierarchy: what the daemon reads the pressure from.
fn tasks_dir(d: &Daemon) -> PathBuf {
    cgroup_tree_dirs(&d.cgroup_name)
        .into_iter()
        .find(|dir| dir.ends_with("tasks") && dir.join("cgroup.procs").exists())
        .unwrap_or_else(|| panic!("no v2 tasks/ in {:?}", cgroup_tree_dirs(&d.cgroup_name)))
}

/// `some avg10` of `tasks/cpu.pressure`, in percent.
fn cpu_pressure(tasks: &std::path::Path) -> f64 {
    some_avg10(&tasks.join("cpu.pressure"))
}

/// The percentage a "cpu pressure 63% > 30%" reason gives, if it is one.
fn pressure_in(reason: &str) -> Option<f64> {
    let figure = reason
        .strip_prefix("cpu pressure ")?
        .strip_suffix("% > 30%")?;
    figure.parse().ok()
}

#[test]
fn busy_tasks_hold_the_next_start_until_cpu_pressure_falls() {
    if !require_root("cpu pressure") {
        return;
    }
    let mut d = Daemon::prepare("sched-pressure");
    std::fs::create_dir_all(d.state()).unwrap();
    std::fs::write(
        d.state().join("keel.ron"),
        "Config(pressure: Pressure(cpu: 30.0))",
    )
    .unwrap();
    d.spawn();
    // An idle agent that runs throughout: with nothing of keel's running, the first queued
    // task would start whatever the figure (it is then no task's doing).
    d.write_unit(
        "calm",
        r#"Unit(command: ["sleep", "1000"], resources: Resources(cpu: 0.25))"#,
    );
    d.wait_state("calm", "running", Duration::from_secs(20));
    // Four busy loops in one task, more than the CPUs here: some of keel's tasks wait for a
    // CPU nearly all the time. Requests are small: it is the pressure that holds the next.
    let spinners = std::iter::repeat_n("while :; do :; done &", 4).collect::<String>();
    d.write_unit(
        "busy",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", "{spinners} wait"], restart: Never, resources: Resources(cpu: 0.25), stop: Stop(timeout: "2s"))"#
        ),
    );
    d.wait_state("busy", "running", Duration::from_secs(20));
    let tasks = tasks_dir(&d);
    wait_until(Duration::from_secs(40), "cpu pressure above 50%", || {
        cpu_pressure(&tasks) > 50.0
    });
    d.write_unit(
        "next",
        r#"Unit(command: ["sleep", "1000"], resources: Resources(cpu: 0.25))"#,
    );
    let reason = wait_for(Duration::from_secs(10), "next waits on pressure", || {
        let task = d.task("next")?;
        assert_ne!(task["state"], "running", "started under pressure: {task}");
        let reason = task["reason"].as_str()?.to_string();
        pressure_in(&reason).map(|_| reason)
    });
    eprintln!("next waits: {reason}");
    assert!(pressure_in(&reason).unwrap() > 30.0, "{reason}");
    // It stays held while the busy task runs, the figure refreshed every 2 s, and the journal
    // has one `waiting` line for it, not one per reading.
    let mut figures = vec![reason.clone()];
    holds_throughout(Duration::from_secs(5), "next stays queued", || {
        let task = d.task("next").unwrap();
        if let Some(reason) = task["reason"].as_str() {
            if figures.last().map(String::as_str) != Some(reason) {
                figures.push(reason.to_string());
            }
        }
        task["state"] == "queued"
    });
    eprintln!("readings while held: {figures:?}");
    assert!(
        figures.len() >= 2,
        "the figure was not read again: {figures:?}"
    );
    let waiting: Vec<_> = d
        .events(Some("next"))
        .into_iter()
        .filter(|e| e["event"] == "waiting")
        .collect();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert!(
        pressure_in(waiting[0]["detail"].as_str().unwrap()).is_some(),
        "{waiting:?}"
    );
    // The busy task ends: the pressure decays (avg10: about 10 s to fall by e), and the
    // next starts without anything else happening — not before it has fallen.
    let out = d.keel(&["stop", "busy"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let stopped = Instant::now();
    d.wait_state("busy", "stopped", Duration::from_secs(10));
    let held_at = cpu_pressure(&tasks);
    if held_at > 35.0 {
        let task = d.task("next").unwrap();
        assert_eq!(task["state"], "queued", "started at {held_at}%: {task}");
    }
    d.wait_state("next", "running", Duration::from_secs(90));
    let after = cpu_pressure(&tasks);
    eprintln!(
        "next started {:.1}s after the busy task was stopped; cpu pressure now {after:.2}%",
        stopped.elapsed().as_secs_f64()
    );
    assert!(after <= 30.0, "started at {after}% (threshold 30%)");
}

#[test]
fn pressure_off_admits_on_requests_alone() {
    if !require_root("pressure off") {
        return;
    }
    let mut d = Daemon::prepare("sched-pressure-off");
    std::fs::create_dir_all(d.state()).unwrap();
    // Off: pressure never holds a start back, however high it is.
    std::fs::write(d.state().join("keel.ron"), "Config(pressure: Off)").unwrap();
    d.spawn();
    let spinners = std::iter::repeat_n("while :; do :; done &", 4).collect::<String>();
    d.write_unit(
        "busy",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", "{spinners} wait"], restart: Never, stop: Stop(timeout: "2s"))"#
        ),
    );
    d.wait_state("busy", "running", Duration::from_secs(20));
    let tasks = tasks_dir(&d);
    wait_until(Duration::from_secs(40), "cpu pressure above 50%", || {
        cpu_pressure(&tasks) > 50.0
    });
    d.write_unit("next", r#"Unit(command: ["sleep", "1000"])"#);
    d.wait_state("next", "running", Duration::from_secs(10));
}
