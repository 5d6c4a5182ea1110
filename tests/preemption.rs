//! Preemption on the real daemon: a `preemptible: true` task of low priority is paused
//! (frozen: its progress stops) when a task of higher priority waits for CPU, never a task
//! that is not preemptible, and resumed once the other has finished; a task a person paused
//! is not resumed by keel.

mod common;
use common::*;
use std::time::Duration;
use wait::{holds_throughout, wait_for};

fn write_config(d: &Daemon, text: &str) {
    std::fs::create_dir_all(d.state()).unwrap();
    std::fs::write(d.state().join("keel.ron"), text).unwrap();
}

/// Writes a counter to its progress file every 50 ms.
fn ticker(priority: i32, preemptible: bool) -> String {
    format!(
        r#"Unit(
            command: ["/bin/sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > $KEEL_PROGRESS; sleep 0.05; done"],
            resources: Resources(cpu: 1.0, memory: "64M"),
            priority: {priority},
            preemptible: {preemptible},
        )"#
    )
}

fn progress(d: &Daemon, unit: &str) -> String {
    std::fs::read_to_string(d.task_dir(unit).join("run/progress")).unwrap_or_default()
}

fn frozen(d: &Daemon, unit: &str) -> bool {
    d.task(unit)
        .is_some_and(|t| t["state"] == "paused" && t["frozen"] == true)
}

#[test]
fn a_low_priority_preemptible_task_makes_room_and_gets_it_back() {
    if !require_root("a_low_priority_preemptible_task_makes_room_and_gets_it_back") {
        return;
    }
    let mut d = Daemon::prepare("preempt");
    write_config(&d, r#"Config(capacity: Capacity(cpu: 2.0))"#);
    d.spawn();
    // The lowest priority, but not preemptible: never touched.
    d.write_unit("keep", &ticker(-5, false));
    d.write_unit("low", &ticker(0, true));
    d.wait_state("keep", "running", Duration::from_secs(20));
    d.wait_state("low", "running", Duration::from_secs(20));
    wait_until(Duration::from_secs(10), "low ticks", || {
        !progress(&d, "low").is_empty()
    });

    d.write_unit(
        "urgent",
        r#"Unit(command: ["/bin/sh", "-c", "while [ ! -e /work/release ]; do sleep 0.05; done"],
                resources: Resources(cpu: 1.0, memory: "64M"), priority: 5, restart: Never)"#,
    );
    d.wait_state("urgent", "running", Duration::from_secs(20));
    wait_until(Duration::from_secs(10), "low frozen", || frozen(&d, "low"));
    let low = d.task("low").unwrap();
    assert!(
        low["reason"]
            .as_str()
            .is_some_and(|r| r.contains("preempted for `urgent` (priority 5 > 0)")),
        "{low}"
    );
    assert_eq!(d.task("keep").unwrap()["state"], "running");
    // Frozen: its counter stands still; keep's goes on.
    let (low_at, keep_at) = (progress(&d, "low"), progress(&d, "keep"));
    holds_throughout(Duration::from_millis(600), "low stands still", || {
        progress(&d, "low") == low_at
    });
    assert_ne!(progress(&d, "keep"), keep_at, "keep was touched");

    // A task of lower priority queued meanwhile does not take the CPU low left: it waits
    // behind low, which resumes first.
    d.write_unit("lesser", &ticker(-10, false));
    let lesser = wait_for(Duration::from_secs(10), "lesser behind low", || {
        d.task("lesser").filter(|t| {
            t["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("behind `low` (priority 0)"))
        })
    });
    assert_eq!(lesser["state"], "queued", "{lesser}");

    // A maintenance window meanwhile: at its end the person's pauses are resumed, keel's is
    // not (urgent still runs in the CPU low left).
    for args in [["pause", "--all"], ["resume", "--all"]] {
        let out = d.keel(&args);
        assert!(out.status.success(), "keel {args:?}: {}", stderr_of(&out));
    }
    d.wait_state("urgent", "running", Duration::from_secs(10));
    holds_throughout(Duration::from_millis(2500), "low stays preempted", || {
        frozen(&d, "low")
            && d.task("low").unwrap()["reason"]
                .as_str()
                .is_some_and(|r| r.contains("preempted for `urgent`"))
    });

    // urgent ends: low is resumed, the same attempt, ticking again; lesser still waits.
    std::fs::write(d.task_dir("urgent").join("work/release"), "").unwrap();
    d.wait_state("urgent", "succeeded", Duration::from_secs(20));
    let low = d.wait_state("low", "running", Duration::from_secs(20));
    assert_eq!(low["attempt"], 1, "{low}");
    holds_throughout(Duration::from_millis(800), "lesser waits for room", || {
        d.task("lesser").is_some_and(|t| t["state"] == "queued")
    });
    let at = progress(&d, "low");
    wait_until(Duration::from_secs(10), "low ticks again", || {
        progress(&d, "low") != at
    });
    assert_paused_and_resumed(&d, "low");
    assert!(
        !d.events(Some("keep"))
            .iter()
            .any(|e| e["event"] == "paused" && e["detail"] != "keel pause --all"),
        "keep was paused by keel"
    );
    d.shutdown();
}

#[test]
fn keel_never_resumes_a_pause_a_person_asked_for() {
    if !require_root("keel_never_resumes_a_pause_a_person_asked_for") {
        return;
    }
    let mut d = Daemon::prepare("preempt-person");
    write_config(&d, r#"Config(capacity: Capacity(cpu: 2.0))"#);
    d.spawn();
    d.write_unit("low", &ticker(0, true));
    // Another preemptible task running: preemption's round runs every 2 s meanwhile.
    d.write_unit("other", &ticker(0, true));
    d.wait_state("low", "running", Duration::from_secs(20));
    d.wait_state("other", "running", Duration::from_secs(20));
    let out = d.keel(&["pause", "low"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    wait_until(Duration::from_secs(10), "low frozen", || frozen(&d, "low"));
    // Room for it and nothing waiting: still paused, as the person left it.
    let reason = wait_for(Duration::from_secs(5), "its reason", || {
        d.task("low")?["reason"].as_str().map(str::to_string)
    });
    holds_throughout(Duration::from_millis(5000), "low stays paused", || {
        frozen(&d, "low")
    });
    assert!(!reason.contains("preempted"), "{reason}");
    d.shutdown();
}

/// Paused by keel (preemption), as its record says.
fn paused_by_keel(d: &Daemon, unit: &str) -> bool {
    frozen(d, unit)
        && d.record(unit)
            .paused
            .is_some_and(|p| p.origin == keel::daemon::record::PauseOrigin::Keel)
}

/// A daemon with `config` and a preemptible ticker `low` (priority 0) running and ticking.
fn daemon_with_low(name: &str, config: &str) -> Daemon {
    let mut d = Daemon::prepare(name);
    write_config(&d, config);
    d.spawn();
    d.write_unit("low", &ticker(0, true));
    d.wait_state("low", "running", Duration::from_secs(20));
    wait_until(Duration::from_secs(10), "low ticks", || {
        !progress(&d, "low").is_empty()
    });
    d
}

/// The journal of `unit` has a `paused` and a `resumed` event.
fn assert_paused_and_resumed(d: &Daemon, unit: &str) {
    let events: Vec<String> = d
        .events(Some(unit))
        .iter()
        .filter_map(|e| e["event"].as_str().map(str::to_string))
        .collect();
    assert!(
        events.iter().any(|e| e == "paused") && events.iter().any(|e| e == "resumed"),
        "{events:?}"
    );
}

#[test]
fn a_task_waiting_for_max_running_preempts_a_lower_priority_one() {
    if !require_root("a_task_waiting_for_max_running_preempts_a_lower_priority_one") {
        return;
    }
    // CPU for both: only the count holds `high` back.
    let mut d = daemon_with_low(
        "preempt-maxrun",
        r#"Config(capacity: Capacity(cpu: 2.0, max_running: Some(1)))"#,
    );
    d.write_unit(
        "high",
        r#"Unit(command: ["/bin/sh", "-c", "while [ ! -e /work/release ]; do sleep 0.05; done"],
                resources: Resources(cpu: 0.25, memory: "64M"), priority: 5, restart: Never)"#,
    );
    // low is paused by keel (the slot is high's), and high runs in it.
    d.wait_state("high", "running", Duration::from_secs(20));
    wait_until(Duration::from_secs(10), "low paused by keel", || {
        paused_by_keel(&d, "low")
    });
    let low = d.task("low").unwrap();
    assert!(
        low["reason"]
            .as_str()
            .is_some_and(|r| r.contains("preempted for `high` (priority 5 > 0)")),
        "{low}"
    );
    let at = progress(&d, "low");
    holds_throughout(Duration::from_millis(600), "low stands still", || {
        progress(&d, "low") == at && d.task("high").is_some_and(|t| t["state"] == "running")
    });
    // high ends: low resumes, the same attempt, ticking again.
    std::fs::write(d.task_dir("high").join("work/release"), "").unwrap();
    d.wait_state("high", "succeeded", Duration::from_secs(20));
    let low = d.wait_state("low", "running", Duration::from_secs(20));
    assert_eq!(low["attempt"], 1, "{low}");
    assert!(d.record("low").paused.is_none(), "{low}");
    let at = progress(&d, "low");
    wait_until(Duration::from_secs(10), "low ticks again", || {
        progress(&d, "low") != at
    });
    assert_paused_and_resumed(&d, "low");
    d.shutdown();
}

/// `some avg10` of keel's `tasks/memory.pressure` (the v2 hierarchy: what the daemon reads).
fn memory_pressure(d: &Daemon) -> f64 {
    let tasks = cgroup_tree_dirs(&d.cgroup_name)
        .into_iter()
        .find(|dir| dir.ends_with("tasks") && dir.join("memory.pressure").exists())
        .expect("keel's tasks/ in the v2 hierarchy");
    some_avg10(&tasks.join("memory.pressure"))
}

/// Real memory pressure: a task whose 48M memory limit is smaller than the file it reads
/// again and again. The file is written with O_DIRECT (no page cache), so each read charges
/// its page cache to the task's memory cgroup, which must reclaim it to go on: the task stalls
/// in reclaim and on refaults of pages it just had (thrashing), which PSI counts as memory
/// pressure of its cgroup — in the v2 hierarchy, on hybrid hosts too. Page cache is
/// reclaimable: no OOM kill.
const THRASHER: &str = r#"Unit(
    command: ["/bin/sh", "-c", "dd if=/dev/zero of=big bs=1M count=160 oflag=direct status=none && while [ ! -e release ]; do cat big > /dev/null; done"],
    resources: Resources(cpu: 0.25, memory: "32M", memory_limit: Some("48M")),
    priority: 5,
    restart: Never,
)"#;

#[test]
fn memory_pressure_pauses_a_preemptible_task_and_resumes_it_once_it_falls() {
    if !require_root("memory_pressure_pauses_a_preemptible_task_and_resumes_it_once_it_falls") {
        return;
    }
    // A low threshold: one reader thrashing in 48M makes a few percent here.
    let mut d = daemon_with_low(
        "preempt-memory",
        r#"Config(capacity: Capacity(cpu: 2.0), pressure: Pressure(memory: 1.0))"#,
    );
    d.write_unit("thrash", THRASHER);
    d.wait_state("thrash", "running", Duration::from_secs(20));
    // The file must be on a disk: on a tmpfs it would be memory the task cannot give back.
    let work = d.task_dir("thrash").join("work");
    let fs = nix::sys::statfs::statfs(&work).unwrap();
    assert_ne!(
        fs.filesystem_type(),
        nix::sys::statfs::TMPFS_MAGIC,
        "{} is a tmpfs: point TMPDIR at a disk for this test",
        work.display()
    );
    let low = wait_for(Duration::from_secs(60), "low paused for memory", || {
        d.task("low").filter(|_| paused_by_keel(&d, "low"))
    });
    let figure = memory_pressure(&d);
    eprintln!(
        "low paused: {}; memory pressure now {figure:.2}%",
        low["reason"]
    );
    let reason = low["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("memory pressure ")
            && reason.ends_with("> 1% (preemptible, priority 0)"),
        "{low}"
    );
    // The thrasher is not preemptible: it runs on.
    assert_eq!(d.task("thrash").unwrap()["state"], "running");
    assert!(
        d.record("thrash").paused.is_none(),
        "the thrasher was paused"
    );
    // It stops: the figure decays under half the threshold and low is resumed, the same
    // attempt — not before the figure has fallen.
    std::fs::write(work.join("release"), "").unwrap();
    d.wait_state("thrash", "succeeded", Duration::from_secs(30));
    let low = wait_for(Duration::from_secs(90), "low resumed", || {
        d.task("low").filter(|t| t["state"] == "running")
    });
    let after = memory_pressure(&d);
    eprintln!("low resumed; memory pressure now {after:.2}%");
    assert!(after < 1.0, "resumed at {after}% (threshold 1%)");
    assert_eq!(low["attempt"], 1, "{low}");
    assert_paused_and_resumed(&d, "low");
    d.shutdown();
}
