//! `keel init` as the real PID 1 of a new PID namespace (`unshare -p -f --mount-proc`):
//! essential units' exit codes pass through, orphans are reaped, SIGTERM shuts down in order,
//! a killed daemon is respawned with its tasks kept.

mod common;
use common::*;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `keel init` as PID 1 of a new PID namespace. `--kill-child`: if the test dies, killing
/// `unshare` (done by the guard) takes keel init, and with it the whole namespace.
fn init_in_pid_namespace(scratch: &Scratch) -> KillOnDrop {
    init_in_pid_namespace_with(scratch, &[])
}

/// The same, with `companion` as `keel init`'s command (after `--`).
fn init_in_pid_namespace_with(scratch: &Scratch, companion: &[&str]) -> KillOnDrop {
    let log = std::fs::File::create(scratch.dir.join("init.log")).unwrap();
    let child = Command::new("unshare")
        // The test drives the daemon from outside its PID namespace, as a container's host.
        .env("KEEL_ACCEPT_OUTSIDE_CLIENTS", "1")
        // Claims on blocks of host ids of its own, as tests/common gives every daemon.
        .env("KEEL_ID_CLAIMS_DIR", scratch.dir.join("id-claims"))
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(keel_bin())
        .arg("init")
        .arg("--state")
        .arg(scratch.dir.join("state"))
        .arg("--units")
        .arg(scratch.dir.join("units"))
        .arg("--cgroup-name")
        .arg(scratch.cgroup_name())
        .args(if companion.is_empty() {
            &[][..]
        } else {
            &["--"][..]
        })
        .args(companion)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// Run a `keel` client against the state directory of `scratch`.
fn keel_cli(scratch: &Scratch, args: &[&str]) -> std::process::Output {
    keel_at(&scratch.dir.join("state"), args)
}

fn write_unit(scratch: &Scratch, name: &str, text: &str) {
    std::fs::write(scratch.dir.join("units").join(format!("{name}.ron")), text).unwrap();
}

fn wait_exit(child: &mut Child, within: Duration, scratch: &Scratch) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "keel init did not exit within {within:?}\n{}",
                std::fs::read_to_string(scratch.dir.join("init.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The host pid of `keel init` (the child of `unshare --fork`).
fn init_pid(unshare: &Child) -> i32 {
    forked_child(unshare)
}

#[test]
fn essential_unit_exit_code_passes_through() {
    if !require_root("essential_unit_exit_code_passes_through") {
        return;
    }
    for (script, expected) in [
        ("exit 0", 0),
        ("exit 1", 1),
        ("exit 42", 42),
        ("exit 255", 255),
        ("kill -TERM $$", 128 + 15),
    ] {
        let scratch = Scratch::new("essential");
        // A stale exit status from an earlier init must not be taken for this daemon's.
        std::fs::create_dir_all(scratch.dir.join("state")).unwrap();
        std::fs::write(scratch.dir.join("state/exit-status"), "77\n").unwrap();
        write_unit(
            &scratch,
            "main",
            &format!(
                r#"Unit(command: ["/bin/sh", "-c", {script:?}], restart: Never, essential: true)"#
            ),
        );
        // A neighbour that must be stopped in order when the essential unit ends.
        write_unit(
            &scratch,
            "side",
            r#"Unit(command: ["/bin/sh", "-c", "exec sleep 60"])"#,
        );
        let mut child = init_in_pid_namespace(&scratch);
        let status = wait_exit(&mut child, Duration::from_secs(30), &scratch);
        assert_eq!(
            status.code(),
            Some(expected),
            "{script}: {status:?}\n{}",
            std::fs::read_to_string(scratch.dir.join("init.log")).unwrap_or_default()
        );
    }
}

#[test]
fn a_thousand_double_forked_orphans_are_all_reaped() {
    if !require_root("a_thousand_double_forked_orphans_are_all_reaped") {
        return;
    }
    let scratch = Scratch::new("orphans");
    // Each orphan's parent exits at once (double fork); the orphan marks a file and exits.
    // Then, with every orphan done, the agent counts zombies left in the namespace.
    let script = format!(
        r#"i=0; while [ $i -lt 1000 ]; do (sh -c 'echo >> {marks}' &); i=$((i+1)); done
           n=0; while [ "$(wc -l < {marks})" -lt 1000 ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done
           sleep 1
           z=$(cat /proc/[0-9]*/stat 2>/dev/null | awk '$3 == "Z"' | wc -l)
           echo "orphans $(wc -l < {marks}) zombies $z"
           [ "$(wc -l < {marks})" -eq 1000 ] && [ "$z" -eq 0 ]"#,
        marks = "/work/marks"
    );
    write_unit(
        &scratch,
        "forker",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", {script:?}], restart: Never, essential: true)"#
        ),
    );
    let mut child = init_in_pid_namespace(&scratch);
    let status = wait_exit(&mut child, Duration::from_secs(120), &scratch);
    let output = std::fs::read_to_string(scratch.dir.join("state/tasks/forker/run/output.log"))
        .unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{output}");
    assert!(output.contains("orphans 1000 zombies 0"), "{output}");
}

#[test]
fn sigterm_to_pid_1_stops_tasks_in_order() {
    if !require_root("sigterm_to_pid_1_stops_tasks_in_order") {
        return;
    }
    let scratch = Scratch::new("sigterm");
    let note = scratch.dir.join("state/tasks/polite/work/note");
    write_unit(
        &scratch,
        "polite",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", "trap 'echo stopped-cleanly > {note}; exit 0' TERM; echo up; while :; do sleep 0.1; done"], stop: Stop(timeout: "10s"))"#,
            note = "/work/note"
        ),
    );
    let mut child = init_in_pid_namespace(&scratch);
    let log = scratch.dir.join("state/tasks/polite/run/output.log");
    wait_until(Duration::from_secs(10), "task up", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("up")
    });
    let pid = init_pid(&child);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(20), &scratch);
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(&note).unwrap().trim(),
        "stopped-cleanly"
    );
}

#[test]
fn a_killed_daemon_is_respawned_and_tasks_keep_running() {
    if !require_root("a_killed_daemon_is_respawned_and_tasks_keep_running") {
        return;
    }
    let scratch = Scratch::new("respawn");
    write_unit(
        &scratch,
        "worker",
        r#"Unit(command: ["/bin/sh", "-c", "while :; do echo tick; sleep 0.05; done"])"#,
    );
    let mut child = init_in_pid_namespace(&scratch);
    let state = scratch.dir.join("state");
    let status = |unit: &str| -> serde_json::Value {
        let out = Command::new(keel_bin())
            .arg("--state")
            .arg(&state)
            .args(["status", "--json"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["tasks"]
            .as_array()
            .and_then(|a| a.iter().find(|t| t["unit"] == unit).cloned())
            .unwrap_or_default()
    };
    wait_until(Duration::from_secs(10), "worker running", || {
        status("worker")["state"] == "running"
    });
    let shim = status("worker")["pid"].clone();
    // The daemon's host pid: the child of keel init named `keel daemon`.
    let init = init_pid(&child);
    let daemon = first_child(init).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // A new daemon answers, and it has re-adopted the same shim (pid inside the namespace).
    wait_until(
        Duration::from_secs(15),
        "respawned daemon re-adopted the worker",
        || {
            let s = status("worker");
            s["state"] == "running" && s["pid"] == shim
        },
    );
    assert_eq!(status("worker")["attempt"], 1);
    let pid = init_pid(&child);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let exit = wait_exit(&mut child, Duration::from_secs(40), &scratch);
    assert_eq!(exit.code(), Some(0));
}

/// An essential unit ends with 42 while a neighbour takes its time to stop; the daemon is
/// killed in the middle of that shutdown. The respawned daemon finishes the shutdown and
/// `keel init` still exits 42.
#[test]
fn a_shutdown_interrupted_by_a_daemon_crash_is_finished_with_the_same_status() {
    if !require_root("a_shutdown_interrupted_by_a_daemon_crash_is_finished_with_the_same_status") {
        return;
    }
    let scratch = Scratch::new("shutdown-crash");
    let flag = scratch.dir.join("state/tasks/main/work/go");
    write_unit(
        &scratch,
        "main",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", "while [ ! -e {flag} ]; do sleep 0.05; done; exit 42"], restart: Never, essential: true)"#,
            flag = "/work/go"
        ),
    );
    write_unit(
        &scratch,
        "side",
        r#"Unit(command: ["/bin/sh", "-c", "trap 'sleep 2; exit 0' TERM; while :; do sleep 0.1; done"], stop: Stop(timeout: "10s"))"#,
    );
    let mut child = init_in_pid_namespace(&scratch);
    let side_log = scratch.dir.join("state/tasks/side/state.ron");
    wait_until(Duration::from_secs(10), "side running", || {
        std::fs::read_to_string(&side_log)
            .unwrap_or_default()
            .contains("Running")
    });
    std::fs::write(&flag, "").unwrap();
    wait_until(Duration::from_secs(10), "side stopping", || {
        std::fs::read_to_string(&side_log)
            .unwrap_or_default()
            .contains("Stopping")
    });
    let init = init_pid(&child);
    let daemon: i32 = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children"))
        .unwrap()
        .split_whitespace()
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.contains("daemon"))
        })
        .unwrap()
        .parse()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(30), &scratch);
    assert_eq!(
        status.code(),
        Some(42),
        "{}",
        std::fs::read_to_string(scratch.dir.join("init.log")).unwrap_or_default()
    );
    // The neighbour was interrupted, not stopped for good: it resumes at the next start.
    let side = std::fs::read_to_string(&side_log).unwrap();
    assert!(side.contains("Queued"), "{side}");
}

#[test]
fn keep_tasks_is_refused_under_init() {
    if !require_root("keep_tasks_is_refused_under_init") {
        return;
    }
    let scratch = Scratch::new("keep-tasks");
    write_unit(&scratch, "w", r#"Unit(command: ["sleep", "60"])"#);
    let mut child = init_in_pid_namespace(&scratch);
    let keel = |args: &[&str]| keel_cli(&scratch, args);
    wait_until(Duration::from_secs(10), "daemon up", || {
        keel(&["health"]).status.success()
    });
    let out = keel(&["shutdown", "--keep-tasks"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("would end PID 1"),
        "{}",
        stderr_of(&out)
    );
    assert!(keel(&["health"]).status.success());
    assert!(keel(&["shutdown"]).status.success());
    let status = wait_exit(&mut child, Duration::from_secs(30), &scratch);
    assert_eq!(status.code(), Some(0));
}

/// Orphans whose every ancestor inside the namespace is gone are reparented to PID 1 itself
/// (not to a shim or the daemon): `keel init` reaps them all.
#[test]
fn orphans_reparented_to_pid_1_are_reaped_by_keel_init() {
    if !require_root("orphans_reparented_to_pid_1_are_reaped_by_keel_init") {
        return;
    }
    let scratch = Scratch::new("init-orphans");
    write_unit(&scratch, "idle", r#"Unit(command: ["sleep", "120"])"#);
    let mut child = init_in_pid_namespace(&scratch);
    let keel = |args: &[&str]| keel_cli(&scratch, args);
    wait_until(Duration::from_secs(10), "daemon up", || {
        keel(&["health"]).status.success()
    });
    let init = init_pid(&child);
    let marks = scratch.dir.join("marks");
    // Each orphan waits until its parent is gone, then records its parent pid as seen in the
    // namespace (read by the shell itself from /proc/self/stat, field 4).
    let script = format!(
        r#"i=0; while [ $i -lt 1000 ]; do (sh -c 'sleep 0.5; read -r l < /proc/self/stat; set -- $l; echo $4 >> {marks}' &); i=$((i+1)); done"#,
        marks = marks.display()
    );
    let status = Command::new("nsenter")
        .args([
            "-t",
            &init.to_string(),
            "-p",
            "-m",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .status()
        .unwrap();
    assert!(status.success());
    wait_until(Duration::from_secs(60), "1000 orphans reported", || {
        std::fs::read_to_string(&marks)
            .unwrap_or_default()
            .lines()
            .count()
            >= 1000
    });
    let parents = std::fs::read_to_string(&marks).unwrap();
    assert!(
        parents.lines().all(|p| p == "1"),
        "orphans not reparented to PID 1"
    );
    // None of them is left a zombie under keel init.
    wait_until(
        Duration::from_secs(10),
        "no zombie children of keel init",
        || {
            std::fs::read_to_string(format!("/proc/{init}/task/{init}/children"))
                .unwrap_or_default()
                .split_whitespace()
                .all(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/stat"))
                        .map(|s| !s.rsplit(')').next().unwrap_or("").trim().starts_with('Z'))
                        .unwrap_or(true)
                })
        },
    );
    assert!(keel(&["shutdown"]).status.success());
    let status = wait_exit(&mut child, Duration::from_secs(30), &scratch);
    assert_eq!(status.code(), Some(0));
}

/// `keel init -- COMMAND`: the command runs next to the daemon; when it exits, the tasks are
/// stopped in order and init exits with the command's status.
#[test]
fn a_companion_command_ends_init_with_its_status() {
    if !require_root("a_companion_command_ends_init_with_its_status") {
        return;
    }
    let scratch = Scratch::new("companion");
    let note = scratch.dir.join("state/tasks/polite/work/note");
    write_unit(
        &scratch,
        "polite",
        r#"Unit(command: ["/bin/sh", "-c", "trap 'echo stopped-cleanly > /work/note; exit 0' TERM; echo up; while :; do sleep 0.1; done"], stop: Stop(timeout: "10s"))"#,
    );
    let log = scratch.dir.join("state/tasks/polite/run/output.log");
    let script = format!(
        "n=0; until grep -q up {log} 2>/dev/null; do n=$((n+1)); [ $n -lt 200 ] || exit 99; sleep 0.05; done; exit 7",
        log = log.display()
    );
    let mut child = init_in_pid_namespace_with(&scratch, &["/bin/sh", "-c", &script]);
    let status = wait_exit(&mut child, Duration::from_secs(30), &scratch);
    let init_log = std::fs::read_to_string(scratch.dir.join("init.log")).unwrap_or_default();
    assert_eq!(status.code(), Some(7), "{init_log}");
    assert_eq!(
        std::fs::read_to_string(&note).unwrap_or_default().trim(),
        "stopped-cleanly",
        "{init_log}"
    );
    assert!(
        init_log.contains("companion command exited: status 7"),
        "{init_log}"
    );
}
