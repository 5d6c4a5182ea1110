//! Each attempt in its own cgroup, enforced by the kernel (on this hybrid host through the v1
//! controllers, with the v2 cgroup for CLONE_INTO_CGROUP and cgroup.kill): memory (OOM recorded
//! as `oom`, restarted per policy, the neighbour untouched), pids, CPU quota, teardown that
//! nothing escapes, and no cgroup left behind.

mod common;
use common::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The v2 cgroup of `unit` in daemon `d`'s tree.
fn v2_slice(d: &Daemon, unit: &str) -> PathBuf {
    cgroup_tree_dirs(&d.cgroup_name)
        .into_iter()
        .find(|dir| dir.ends_with(format!("tasks/{unit}")) && dir.join("cgroup.kill").exists())
        .unwrap_or_else(|| {
            panic!(
                "no v2 cgroup for {unit}: {:?}",
                cgroup_tree_dirs(&d.cgroup_name)
            )
        })
}

fn pids_of(slice: &std::path::Path) -> Vec<i32> {
    std::fs::read_to_string(slice.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[test]
fn an_agent_past_its_memory_limit_ends_as_oom_and_restarts_while_its_neighbour_runs_on() {
    if !require_root("oom") {
        return;
    }
    let d = Daemon::start("slice-oom");
    d.write_unit(
        "calm",
        r#"Unit(command: ["sleep", "60"], resources: Resources(cpu: 0.1, memory: "64M"))"#,
    );
    let calm = d.wait_state("calm", "running", Duration::from_secs(10));
    // Attempt 1 allocates without bound (`tail` keeps a line that never ends); attempt 2
    // records what it was told and waits.
    d.write_unit(
        "hog",
        r#"Unit(
            command: ["/bin/sh", "-c", "if [ $KEEL_ATTEMPT = 1 ]; then exec tail /dev/zero; fi; echo $KEEL_LAST_EXIT > /work/last; exec sleep 60"],
            restart: OnFailure,
            backoff: Backoff(initial: "100ms"),
            resources: Resources(cpu: 0.5, memory: "16M", memory_limit: Some("48M")),
        )"#,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let task = loop {
        let task = d.task("hog").unwrap_or_default();
        if task["attempt"] == 2 && task["state"] == "running" {
            break task;
        }
        assert!(
            Instant::now() < deadline,
            "no second attempt: {task}\n{}",
            d.daemon_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(task["last_exit"], "oom", "{task}");
    wait_until(Duration::from_secs(5), "the agent was told", || {
        d.task_dir("hog").join("work/last").exists()
    });
    let told = std::fs::read_to_string(d.task_dir("hog").join("work/last")).unwrap();
    assert_eq!(told.trim(), "oom");
    let events = d.events(Some("hog"));
    assert!(
        events.iter().any(|e| e["event"] == "oom-kill"),
        "the OOM kill is in the journal: {events:?}"
    );
    // The neighbour never noticed.
    let calm_after = d.task("calm").unwrap();
    assert_eq!(calm_after["state"], "running");
    assert_eq!(calm_after["pid"], calm["pid"]);
    assert_eq!(calm_after["attempt"], 1);
    assert!(d.keel(&["health"]).status.success());
}

#[test]
fn a_fork_bomb_is_held_at_pids_max() {
    if !require_root("fork bomb") {
        return;
    }
    let d = Daemon::start("slice-pids");
    // 40 background sleeps against pids.max 16 (the shim and the shell count too).
    d.write_unit(
        "bomb",
        r#"Unit(
            command: ["python3", "-c", "import os, time\nn = 0\nfor i in range(40):\n    try:\n        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n        n += 1\n    except OSError:\n        pass\nopen('/work/.count', 'w').write('started %d' % n)\nos.rename('/work/.count', '/work/count')\ntime.sleep(30)"],
            restart: Never,
            resources: Resources(cpu: 0.5, memory: "256M", pids: 16),
        )"#,
    );
    d.wait_state("bomb", "running", Duration::from_secs(10));
    let count = d.task_dir("bomb").join("work/count");
    wait_until(Duration::from_secs(10), "the loop finished", || {
        count.exists()
    });
    let slice = v2_slice(&d, "bomb");
    let running = pids_of(&slice).len();
    assert!(
        running <= 16,
        "{running} processes in a cgroup with pids.max 16"
    );
    let text = std::fs::read_to_string(&count).unwrap();
    let started: usize = text.trim().trim_start_matches("started ").parse().unwrap();
    assert!(started < 40, "some forks must have failed: {text}");
    let status = d.task("bomb").unwrap();
    assert!(status["pids"].as_u64().unwrap() <= 16, "{status}");
}

#[test]
fn a_cpu_limit_of_half_a_cpu_is_half_a_cpu() {
    if !require_root("cpu quota") {
        return;
    }
    let d = Daemon::start("slice-cpu");
    // The request is no cap (tests/scheduling_shares.rs): the limit is.
    d.write_unit(
        "spin",
        r#"Unit(command: ["/bin/sh", "-c", "while :; do :; done"], restart: Never, resources: Resources(cpu: 0.25, cpu_limit: Some(0.5)))"#,
    );
    d.wait_state("spin", "running", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let usage = |d: &Daemon| d.task("spin").unwrap()["cpu_usec"].as_u64().unwrap();
    let (u0, t0) = (usage(&d), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (u1, t1) = (usage(&d), Instant::now());
    let share = (u1 - u0) as f64 / (t1 - t0).as_micros() as f64;
    assert!(
        (0.35..=0.65).contains(&share),
        "cpu_limit: Some(0.5) got {share:.2} of a core"
    );
    // `keel status` shows the share too.
    let shown = d.task("spin").unwrap()["cpu_percent"].as_f64().unwrap();
    assert!((20.0..=80.0).contains(&shown), "shown {shown}%");
}

#[test]
fn stopping_a_task_kills_a_setsid_escapee_and_removes_its_cgroup() {
    if !require_root("escapee") {
        return;
    }
    let d = Daemon::start("slice-escape");
    d.write_unit(
        "escape",
        r#"Unit(command: ["/bin/sh", "-c", "setsid sh -c 'sleep 300 & sleep 300' & echo ok > /work/forked; exec sleep 300"], restart: Never, stop: Stop(timeout: "2s"))"#,
    );
    d.wait_state("escape", "running", Duration::from_secs(10));
    wait_until(Duration::from_secs(5), "escapee forked", || {
        d.task_dir("escape").join("work/forked").exists()
    });
    let slice = v2_slice(&d, "escape");
    // The shim, the agent, the setsid shell (or what it exec'd) and its sleeps.
    wait_until(
        Duration::from_secs(5),
        "the processes in the cgroup",
        || pids_of(&slice).len() >= 4,
    );
    let pids = pids_of(&slice);
    let out = d.keel(&["stop", "escape"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    wait_until(Duration::from_secs(10), "every process gone", || {
        pids.iter()
            .all(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    });
    wait_until(Duration::from_secs(5), "the cgroup removed", || {
        !slice.exists()
    });
    let leftovers: Vec<PathBuf> = cgroup_tree_dirs(&d.cgroup_name)
        .into_iter()
        .filter(|dir| dir.ends_with("escape"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn status_shows_the_cgroup_mode_and_shutdown_leaves_no_cgroup() {
    if !require_root("cgroup tree") {
        return;
    }
    let mut d = Daemon::start("slice-tree");
    d.write_unit(
        "busy",
        r#"Unit(command: ["/bin/sh", "-c", "head -c 20000000 /dev/zero | tail -c 1 > /dev/null; exec sleep 60"], resources: Resources(memory: "128M"))"#,
    );
    d.wait_state("busy", "running", Duration::from_secs(10));
    let status = d.status();
    let mode = status["daemon"]["cgroup_mode"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(mode == "v2" || mode.starts_with("hybrid"), "{mode}");
    // `running` comes with the spawn; on a hybrid host the shim joins the v1 memory and pids
    // cgroups an instant later, before it starts the agent.
    wait_until(Duration::from_secs(5), "the attempt's figures", || {
        let task = d.task("busy").unwrap();
        task["memory_bytes"].as_u64().unwrap() > 0 && task["pids"].as_u64().unwrap() >= 2
    });
    let table = String::from_utf8_lossy(&d.keel(&["status"]).stdout).to_string();
    assert!(table.contains(&format!("cgroups {mode}")), "{table}");
    // The daemon sits in its own leaf of the tree.
    let daemon_pid = d.child.as_ref().unwrap().id().to_string();
    let own = std::fs::read_to_string(format!("/proc/{daemon_pid}/cgroup")).unwrap();
    assert!(
        own.contains(&format!("{}/supervisor", d.cgroup_name)),
        "{own}"
    );
    assert!(!cgroup_tree_dirs(&d.cgroup_name).is_empty());
    assert!(d.shutdown().unwrap().success());
    assert!(
        cgroup_tree_dirs(&d.cgroup_name).is_empty(),
        "left behind: {:?}",
        cgroup_tree_dirs(&d.cgroup_name)
    );
}

#[test]
fn an_oom_kill_of_a_child_does_not_make_a_later_kill_an_oom() {
    if !require_root("oom of a child") {
        return;
    }
    let d = Daemon::start("slice-oom-child");
    // The shell survives its child's OOM kill and sleeps on.
    d.write_unit(
        "survivor",
        r#"Unit(command: ["/bin/sh", "-c", "tail /dev/zero; echo survived > /work/after; exec sleep 60"], restart: Never, resources: Resources(memory: "16M", memory_limit: Some("48M")))"#,
    );
    d.wait_state("survivor", "running", Duration::from_secs(10));
    wait_until(Duration::from_secs(15), "the child's OOM kill", || {
        d.task_dir("survivor").join("work/after").exists()
            && d.events(Some("survivor"))
                .iter()
                .any(|e| e["event"] == "oom-kill")
    });
    let out = d.keel(&["kill", "survivor"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let task = d.wait_state("survivor", "failed", Duration::from_secs(10));
    assert_eq!(task["last_exit"], "signal:SIGKILL", "{task}");
}

#[test]
fn a_wedged_shim_is_killed_with_its_whole_cgroup() {
    if !require_root("wedged shim") {
        return;
    }
    let d = Daemon::start("slice-wedged");
    d.write_unit(
        "wedged",
        r#"Unit(command: ["/bin/sh", "-c", "trap '' TERM; sleep 300 & exec sleep 300"], restart: Never, stop: Stop(timeout: "1s"))"#,
    );
    let task = d.wait_state("wedged", "running", Duration::from_secs(10));
    let shim = task["pid"].as_i64().unwrap() as i32;
    let slice = v2_slice(&d, "wedged");
    wait_until(Duration::from_secs(5), "agent processes", || {
        pids_of(&slice).len() >= 3
    });
    let pids = pids_of(&slice);
    // A stopped shim cannot act on the stop signal nor on the kill request: only the cgroup
    // can end the attempt (our own shim, by pid).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(shim),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    let out = d.keel(&["stop", "wedged"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let task = d.wait_state("wedged", "stopped", Duration::from_secs(15));
    // Killed by the cgroup: each exits (and is reaped) in its own time, the task's network
    // relay among them — not all in the instant the stop is recorded.
    wait_until(
        Duration::from_secs(15),
        "every process of the slice gone",
        || {
            pids.iter()
                .all(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
        },
    );
    wait_until(Duration::from_secs(5), "the cgroup removed", || {
        !slice.exists()
    });
    assert!(
        d.daemon_log().contains("killing its cgroup"),
        "{}",
        d.daemon_log()
    );
    drop(task);
}
