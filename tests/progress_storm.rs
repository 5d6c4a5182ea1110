//! A progress-file write storm costs keel a bounded number of reads: an agent writing its
//! `$KEEL_PROGRESS` in a tight loop (tens of thousands of writes a second) is read a few times
//! a second (`progress_reads` in `keel status UNIT --json`), and liveness still works — the
//! storm's heartbeats keep it running, its progress is seen, and the silence after it is a
//! stall. The daemon's CPU during a storm is measured by `scripts/bench --only storm`.

mod common;
use common::wait::{self, wait_for, PATIENCE};
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

/// The number the storm last wrote to its progress file (host side).
fn last_written(d: &Daemon) -> u64 {
    std::fs::read_to_string(d.task_dir("storm").join("run/progress"))
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0)
}

fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

fn detail(d: &Daemon) -> Value {
    let out = d.keel(&["status", "storm", "--json"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["tasks"][0].clone()
}

#[test]
fn a_write_storm_is_read_a_few_times_a_second_and_liveness_still_works() {
    if !require_root("progress storm") {
        return;
    }
    let d = Daemon::start("progress-storm");
    // Writes its progress file (a new number each time) until /work/stop exists, says how many
    // writes it made, then falls silent.
    d.write_unit(
        "storm",
        r#"Unit(
            command: ["/bin/sh", "-c", "i=0; while [ ! -e /work/stop ]; do i=$((i+1)); echo $i > $KEEL_PROGRESS; done; echo $i > /work/count.tmp; mv /work/count.tmp /work/count; exec sleep 600"],
            liveness: Liveness(heartbeat_timeout: "2s", startup_grace: "0s", on_stall: Report, signals: [Heartbeat]),
            resources: Resources(cpu: 1.0, memory: "64M"),
        )"#,
    );
    d.wait_state("storm", "running", PATIENCE);
    let started = Instant::now();
    let storm_began_ms = wait::unix_now_ms();
    // A storm of a few seconds, and of enough writes to tell reads per write from reads per
    // second (however fast this machine writes).
    wait_for(
        Duration::from_secs(240),
        "the storm's 10,000th write",
        || {
            (last_written(&d) >= 10_000 && started.elapsed() >= Duration::from_secs(3))
                .then_some(())
        },
    );
    let during = detail(&d);
    assert_eq!(during["state"], "running", "{during}");
    assert_eq!(during["liveness"], "running", "{during}");
    // Progress seen during the storm (a read may find the file between `>`'s truncation and
    // its write: that one counts as a heartbeat alone).
    let changed = during["progress_changed_ms"].as_u64().unwrap_or(0);
    assert!(changed >= storm_began_ms, "{during}");
    std::fs::write(d.task_dir("storm").join("work/stop"), "").unwrap();
    let count = d.task_dir("storm").join("work/count");
    let writes: u64 = wait_for(PATIENCE, "the storm's count of writes", || {
        std::fs::read_to_string(&count).ok()?.trim().parse().ok()
    });
    let storm_secs = started.elapsed().as_secs_f64();
    // The storm's last write was seen, at its time (the file's mtime; coarse clocks and the
    // wall/monotonic mapping get 50 ms).
    let progress = d.task_dir("storm").join("run/progress");
    let written_ms = unix_ms(std::fs::metadata(&progress).unwrap().modified().unwrap());
    let seen = wait_for(PATIENCE, "the storm's last write seen", || {
        let task = detail(&d);
        let last = task["last_activity_ms"].as_u64()?;
        (last + 50 >= written_ms).then_some(task)
    });
    assert_eq!(seen["progress"], writes.to_string(), "{seen}");
    let reads = seen["detail"]["liveness"]["progress_reads"]
        .as_u64()
        .unwrap();
    // Designed: one read per 250 ms window, and one per verdict due (every heartbeat_timeout).
    // The bound is per second of the storm, with slack: a slower machine only reads less.
    let bound = 10 + (10.0 * (storm_secs + 1.0)) as u64;
    eprintln!("storm: {writes} writes in {storm_secs:.1}s, {reads} reads (bound {bound})");
    assert!(
        reads <= bound,
        "{reads} reads of the progress file for {writes} writes in {storm_secs:.1}s (bound \
         {bound})\n{seen}"
    );
    assert!(
        writes >= 20 * reads,
        "{writes} writes, {reads} reads: not coalesced\n{seen}"
    );
    assert!(reads >= 2, "the storm was read at all: {seen}");
    // After the storm, silence: the stall is detected.
    let stalled = wait_for(PATIENCE, "the silent agent stalled", || {
        let task = d.task("storm")?;
        (task["state"] == "stalled").then_some(task)
    });
    assert_eq!(stalled["liveness"], "stalled", "{stalled}");
    // Quiet now: no more reads.
    let after = detail(&d)["detail"]["liveness"]["progress_reads"].as_u64();
    assert!(after.is_none_or(|n| n <= reads + 2), "{after:?} vs {reads}");
}
