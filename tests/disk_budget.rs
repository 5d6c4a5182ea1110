//! Disk budgets (issue 22 item 3), on a small tmpfs state directory: what one task writes must
//! not fill the state filesystem.
//! - The progress file is capped: a task appending 96 MiB to it on a 48 MiB state filesystem
//!   finishes its writes (no ENOSPC), the file keeps its length and its last line, and its
//!   blocks on disk end within the cap.
//! - `disk_reserve`: with the state filesystem filled below it, a new task waits with the
//!   figures as its reason while one already running is left alone; it starts once space
//!   returns.
//! - `resources.disk`: a task writing past its budget is stopped, last exit `disk`, `failed`
//!   (not restarted), and its directory's disk use stays within the budget plus the slack
//!   (what it writes in two looks and its stop); without `resources.disk`, half the state
//!   filesystem is its budget. A disk stop decided before a daemon crash still ends as `disk`.

mod common;
use common::tmpfs::Fixture;
use common::wait::{wait_for, PATIENCE};
use common::*;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MIB: u64 = 1 << 20;
/// `PROGRESS_CAP` (64 KiB) and `PROGRESS_KEEP` (16 KiB) of `src/daemon/progress_cap.rs`.
const PROGRESS_CAP: u64 = 64 << 10;

#[test]
fn a_progress_file_flood_is_capped_and_does_not_fill_the_state_filesystem() {
    if !require_root("progress file cap") {
        return;
    }
    let f = Fixture::start("progress-cap", "48m", None);
    let d = &f.daemon;
    // 96 chunks of 1 MiB of lines ("flooded\\n") appended (`>>`: O_APPEND), each followed by a line, a pause between
    // them (the cap is applied when the daemon reads the file, at most every 250 ms: what is
    // written in between is the slack); then the outcome in /work/result.
    d.write_unit(
        "flood",
        r#"Unit(
            command: ["/bin/sh", "-c", "for i in $(seq 1 96); do yes flooded | head -c 1048576 >> $KEEL_PROGRESS || { echo failed at $i > /work/result; exec sleep 600; }; echo step $i >> $KEEL_PROGRESS; sleep 0.1; done; echo done > /work/result; exec sleep 600"],
            resources: Resources(cpu: 1.0, memory: "256M"),
        )"#,
    );
    d.wait_state("flood", "running", PATIENCE);
    let result = d.task_dir("flood").join("work/result");
    let outcome = wait_for(Duration::from_secs(240), "the flood's outcome", || {
        std::fs::read_to_string(&result).ok()
    });
    assert_eq!(outcome.trim(), "done", "{}", d.daemon_log());
    let progress = d.task_dir("flood").join("run/progress");
    // Its length is what was written; its last line is the last step.
    let meta = std::fs::metadata(&progress).unwrap();
    assert!(meta.len() >= 96 * MIB, "{meta:?}");
    let task = d.task("flood").unwrap();
    assert_eq!(task["progress"], "step 96", "{task}");
    // The last write was read, and the file capped after it.
    let on_disk = wait_for(PATIENCE, "the progress file within its cap", || {
        let blocks = std::fs::metadata(&progress).ok()?.blocks() * 512;
        (blocks <= PROGRESS_CAP).then_some(blocks)
    });
    eprintln!(
        "progress file: {} bytes long, {on_disk} bytes on disk",
        meta.len()
    );
    assert!(d.daemon_log().contains("progress file over 64 KiB on disk"));
}

/// Fill the filesystem of `dir` with `dir/filler` until only `leave` bytes are free (to
/// unprivileged writers, as keel counts).
fn fill_leaving(dir: &Path, leave: u64) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 1 << 20];
    loop {
        let v = nix::sys::statvfs::statvfs(dir).unwrap();
        let free = v.blocks_available() * v.fragment_size();
        if free <= leave {
            return path;
        }
        let n = (free - leave).min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..n]).unwrap();
        file.sync_all().unwrap();
    }
}

#[test]
fn below_disk_reserve_new_starts_wait_with_the_reason_and_start_once_space_returns() {
    if !require_root("disk_reserve") {
        return;
    }
    let f = Fixture::start(
        "disk-reserve",
        "64m",
        Some(r#"Config(disk_reserve: "24M")"#),
    );
    let d = &f.daemon;
    let sleeper =
        r#"Unit(command: ["sleep", "600"], resources: Resources(cpu: 0.1, memory: "64M"))"#;
    d.write_unit("before", sleeper);
    d.wait_state("before", "running", PATIENCE);
    let filler = fill_leaving(&d.state(), 12 << 20);
    // The daemon's next look sees it (the figures are measured every 2 s, off its loop).
    wait_until(PATIENCE, "the daemon seeing the reserve short", || {
        d.daemon_log()
            .contains("< disk_reserve 24M: new starts wait")
    });
    d.write_unit("after", sleeper);
    let waiting = wait_for(PATIENCE, "the new task waiting for disk space", || {
        let task = d.task("after")?;
        let reason = task["reason"].as_str()?.to_string();
        reason.contains("< disk_reserve").then_some((task, reason))
    });
    assert_eq!(waiting.0["state"], "queued", "{}", waiting.0);
    assert!(
        waiting.1.starts_with("state filesystem: ")
            && waiting.1.ends_with(" free < disk_reserve 24M"),
        "{}",
        waiting.1
    );
    // Looked at again: still waiting, and the running task was left alone.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(d.task("after").unwrap()["state"], "queued");
    assert_eq!(d.task("before").unwrap()["state"], "running");
    let out = d.keel(&["status", "after"]);
    assert!(
        stdout_of(&out).contains("free < disk_reserve 24M"),
        "{}",
        stdout_of(&out)
    );
    // Space returns: it starts within a look or two.
    std::fs::remove_file(&filler).unwrap();
    wait_until(PATIENCE, "the daemon seeing space back", || {
        d.daemon_log().contains("starts resume")
    });
    d.wait_state("after", "running", PATIENCE);
    let state = nix::sys::statvfs::statvfs(&d.state()).unwrap();
    assert!(state.blocks_available() * state.fragment_size() >= 24 << 20);
}

/// A task writing 1 MiB every 0.25 s into its work directory (up to `chunks`), with
/// `resources` as given.
fn writer(chunks: u32, resources: &str) -> String {
    format!(
        r#"Unit(
            command: ["/bin/sh", "-c", "for i in $(seq 1 {chunks}); do head -c 1048576 /dev/zero > /work/chunk.$i || exit 3; sleep 0.25; done; exec sleep 600"],
            resources: {resources},
            restart: Always,
        )"#
    )
}

/// Write past the budget: stopped as `disk`, failed, its directory within budget + slack.
/// Returns the bytes left in its directory.
fn stopped_for_disk(d: &Daemon, unit: &str, budget: u64, expect: &str) -> u64 {
    let task = wait_for(
        Duration::from_secs(120),
        "the writer stopped for its budget",
        || {
            let task = d.task(unit)?;
            (task["state"] == "failed").then_some(task)
        },
    );
    assert_eq!(task["last_exit"], "disk", "{task}\n{}", d.daemon_log());
    let reason = task["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(expect), "{reason}");
    assert!(reason.contains("not restarted"), "{reason}");
    assert_eq!(task["restarts"], 0, "{task}");
    let used = keel::checkout::disk_bytes(&d.task_dir(unit));
    // The slack: 4 MiB/s for a look (2 s), a walk in a worker and the stop: 10 s allowed.
    let slack = 40 * MIB;
    eprintln!(
        "{unit}: budget {budget}, {used} bytes left on disk ({} MiB over)",
        used.saturating_sub(budget) >> 20
    );
    assert!(
        used > budget,
        "stopped before its budget was reached: {used} <= {budget}"
    );
    assert!(used <= budget + slack, "{used} > {budget} + {slack}");
    let events = d.events(Some(unit));
    assert!(
        events.iter().any(|e| e["event"] == "disk-budget"),
        "{events:?}"
    );
    used
}

#[test]
fn a_task_writing_past_resources_disk_is_stopped_as_disk_within_the_slack() {
    if !require_root("resources.disk") {
        return;
    }
    let f = Fixture::start("disk-budget", "192m", Some(r#"Config(disk_reserve: "0")"#));
    let d = &f.daemon;
    d.write_unit(
        "writer",
        &writer(
            150,
            r#"Resources(cpu: 0.5, memory: "256M", disk: Some("20M"))"#,
        ),
    );
    // While it writes, `keel status` shows its use against its budget.
    let task = wait_for(PATIENCE, "the writer's disk use in keel status", || {
        let task = d.task("writer")?;
        (task["disk_bytes"].as_u64()? > 0).then_some(task)
    });
    assert_eq!(task["disk_budget"], 20 * MIB, "{task}");
    let out = d.keel(&["status", "writer"]);
    assert!(
        stdout_of(&out).contains("20M budget ("),
        "{}",
        stdout_of(&out)
    );
    stopped_for_disk(d, "writer", 20 * MIB, "over resources.disk (20M)");
    // Measured, and the daemon says why not by the kernel (this state filesystem, a tmpfs or
    // a test-made one, has no project quotas enforced).
    let out = d.keel(&["status"]);
    assert!(
        stdout_of(&out).contains("disk budgets: measured ("),
        "{}",
        stdout_of(&out)
    );
    // Not restarted (restart: Always): still failed a look later.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(d.task("writer").unwrap()["state"], "failed");
    let out = d.keel(&["status", "writer"]);
    assert!(
        stdout_of(&out).contains("last exit disk"),
        "{}",
        stdout_of(&out)
    );
}

#[test]
fn without_resources_disk_half_the_state_filesystem_is_the_budget() {
    if !require_root("default disk budget") {
        return;
    }
    let f = Fixture::start("disk-default", "96m", Some(r#"Config(disk_reserve: "0")"#));
    let d = &f.daemon;
    d.write_unit(
        "writer",
        &writer(90, r#"Resources(cpu: 0.5, memory: "256M")"#),
    );
    stopped_for_disk(
        d,
        "writer",
        48 * MIB,
        "the default resources.disk, half the state filesystem",
    );
}

#[test]
fn a_disk_stop_survives_a_daemon_crash_and_still_ends_as_disk() {
    if !require_root("disk stop across a crash") {
        return;
    }
    let mut f = Fixture::start("disk-crash", "128m", Some(r#"Config(disk_reserve: "0")"#));
    // 30 MiB against a budget of 20, then deaf to SIGTERM (inherited across the exec): the
    // stop lasts its whole timeout, and the daemon is killed during it.
    f.daemon.write_unit(
        "deaf",
        r#"Unit(
            command: ["/bin/sh", "-c", "trap '' TERM; for i in $(seq 1 30); do head -c 1048576 /dev/zero > /work/chunk.$i; sleep 0.1; done; exec sleep 600"],
            resources: Resources(cpu: 0.5, memory: "256M", disk: Some("20M")),
            stop: Stop(timeout: "15s"),
            restart: Always,
        )"#,
    );
    let d = &f.daemon;
    wait_until(Duration::from_secs(120), "the disk stop decided", || {
        d.events(Some("deaf"))
            .iter()
            .any(|e| e["event"] == "disk-budget")
    });
    wait_until(PATIENCE, "the task stopping", || {
        d.task("deaf").is_some_and(|t| t["state"] == "stopping")
    });
    f.daemon.crash();
    f.daemon.spawn();
    let d = &f.daemon;
    let task = wait_for(
        Duration::from_secs(60),
        "the task settled after the crash",
        || {
            let task = d.task("deaf")?;
            (task["state"] == "failed").then_some(task)
        },
    );
    assert_eq!(task["last_exit"], "disk", "{task}\n{}", d.daemon_log());
    assert!(
        task["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("over resources.disk (20M)"),
        "{task}"
    );
    // Stopped once: one decision, journaled once.
    let stops = (d.events(Some("deaf")).iter())
        .filter(|e| e["event"] == "disk-budget")
        .count();
    assert_eq!(stops, 1);
}
