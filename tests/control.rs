//! The daemon and its clients: stop escalation, one daemon per state directory, clear errors,
//! bad unit files, the units directory watched live, add/rm/kill/logs/events.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};
use wait::{holds_throughout, Lines, PATIENCE};

#[test]
fn stop_escalates_to_sigkill_after_the_timeout() {
    let d = Daemon::start("stop");
    d.write_unit(
        "stubborn",
        r#"Unit(
    command: ["/bin/sh", "-c", "trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.1; done"],
    stop: Stop(signal: "SIGTERM", timeout: "1s"),
    restart: Always,
)"#,
    );
    d.wait_state("stubborn", "running", PATIENCE);
    let log = d.task_dir("stubborn").join("run/output.log");
    wait_until(PATIENCE, "agent ready", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("ready")
    });
    let started = Instant::now();
    let out = d.keel(&["stop", "stubborn"]);
    let took = started.elapsed();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        stdout_of(&out).contains("stubborn: stopped"),
        "{}",
        stdout_of(&out)
    );
    assert!(
        took >= Duration::from_millis(950),
        "stop returned after {took:?}"
    );
    let task = d.task("stubborn").unwrap();
    assert_eq!(task["state"], "stopped");
    assert_eq!(task["last_exit"], "signal:SIGKILL");
    assert!(std::fs::read_to_string(&log).unwrap().contains("got TERM"));
    let events: Vec<String> = d
        .events(Some("stubborn"))
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    assert!(events.contains(&"stop-timeout".to_string()), "{events:?}");
    // Stopped is final: the Always policy does not bring it back (a negative check).
    holds_throughout(Duration::from_secs(1), "stubborn stays stopped", || {
        d.task("stubborn").unwrap()["state"] == "stopped"
    });
    // And `keel start` does.
    assert!(d.keel(&["start", "stubborn"]).status.success());
    d.wait_state("stubborn", "running", PATIENCE);
}

#[test]
fn a_second_daemon_on_the_same_state_refuses_naming_the_first() {
    let d = Daemon::start("twice");
    let pid = d.child.as_ref().unwrap().id();
    let out = std::process::Command::new(keel_bin())
        .args(["daemon", "--state"])
        .arg(d.state())
        .env("KEEL_ID_CLAIMS_DIR", d.scratch.dir.join("id-claims"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(err.contains(&format!("pid {pid}")), "{err}");
    assert!(err.contains("already uses this state directory"), "{err}");
    // The first one is unharmed.
    assert!(d.keel(&["health"]).status.success());
}

#[test]
fn clients_without_a_daemon_get_a_clear_error() {
    let scratch = Scratch::new("nodaemon");
    let state = scratch.dir.join("state");
    for args in [vec!["status"], vec!["stop", "x"], vec!["health"]] {
        let out = std::process::Command::new(keel_bin())
            .arg("--state")
            .arg(&state)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr_of(&out);
        assert!(
            err.contains("keel daemon is not running for state directory"),
            "{err}"
        );
        assert!(err.contains(&state.display().to_string()), "{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    // Usage errors exit 2.
    let out = std::process::Command::new(keel_bin())
        .arg("frobnicate")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn unknown_unit_is_named() {
    let d = Daemon::start("unknown");
    let out = d.keel(&["stop", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("unknown unit \"nope\""),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn garbage_in_the_units_directory_harms_nothing() {
    let d = Daemon::start("garbage");
    d.write_unit("good", r#"Unit(command: ["/bin/sh", "-c", "sleep 30"])"#);
    d.wait_state("good", "running", Duration::from_secs(10));
    d.write_unit("bad", "Unit(command: [\"x\"],\n  restart: Sometimes)");
    std::fs::write(d.units().join("binary.ron"), [0xff, 0xfe, 0, 1, 2]).unwrap();
    wait_until(PATIENCE, "both reported", || {
        d.status()["invalid_units"].as_array().unwrap().len() == 2
    });
    let status = d.status();
    let invalid: Vec<String> = status["invalid_units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(
        invalid.iter().any(|m| m.contains("bad.ron:2:")),
        "{invalid:?}"
    );
    assert_eq!(d.task("good").unwrap()["state"], "running");
    assert!(d.task("bad").is_none());
    // Fixing the file queues it.
    d.write_unit(
        "bad",
        r#"Unit(command: ["/bin/sh", "-c", "exit 0"], restart: Never)"#,
    );
    d.wait_state("bad", "succeeded", PATIENCE);
    assert!(d.keel(&["health"]).status.success());
}

/// How fast is for scripts/bench; here: each change is acted on, with no reload asked for.
#[test]
fn units_directory_changes_are_acted_on_live() {
    let d = Daemon::start("inotify");
    d.write_unit("watched", r#"Unit(command: ["/bin/sh", "-c", "sleep 30"])"#);
    let first = d.wait_state("watched", "running", PATIENCE);
    // An edit is noted, applied at the next start.
    d.write_unit(
        "watched",
        r#"Unit(command: ["/bin/sh", "-c", "echo v2; sleep 30"])"#,
    );
    wait_until(PATIENCE, "edit noticed", || {
        d.task("watched").unwrap()["unit_changed"] == true
    });
    assert_eq!(d.task("watched").unwrap()["pid"], first["pid"]);
    assert!(d.keel(&["restart", "watched"]).status.success());
    let log = d.task_dir("watched").join("run/output.log");
    wait_until(PATIENCE, "v2 running", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("v2")
    });
    // Removal stops and forgets the task.
    std::fs::remove_file(d.units().join("watched.ron")).unwrap();
    wait_until(PATIENCE, "task removed", || d.task("watched").is_none());
    assert!(
        !d.events(None).iter().any(|e| e["event"] == "reload"),
        "seen through the watch, not a reload"
    );
}

#[test]
fn add_rm_kill_logs_events_through_the_cli() {
    let d = Daemon::start("cli");
    let file = d.scratch.dir.join("talker.ron");
    std::fs::write(
        &file,
        r#"Unit(command: ["/bin/sh", "-c", "for i in 1 2 3; do echo line $i; done; echo err >&2; exec sleep 30"], restart: OnFailure, backoff: Backoff(initial: "100ms"))"#,
    )
    .unwrap();
    let out = d.keel(&["add", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(d.units().join("talker.ron").exists());
    d.wait_state("talker", "running", PATIENCE);
    wait_until(PATIENCE, "output captured", || {
        stdout_of(&d.keel(&["logs", "talker"])).contains("err")
    });
    assert_eq!(
        stdout_of(&d.keel(&["logs", "-n", "2", "talker"])),
        "line 3\nerr\n"
    );

    // kill: SIGKILL to the agent; OnFailure brings it back as attempt 2.
    let out = d.keel(&["kill", "talker"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    wait_until(Duration::from_secs(10), "attempt 2 running", || {
        let t = d.task("talker").unwrap();
        t["attempt"] == 2 && t["state"] == "running"
    });
    assert_eq!(d.task("talker").unwrap()["last_exit"], "signal:SIGKILL");

    let events = stdout_of(&d.keel(&["events", "talker"]));
    assert!(events.contains("exited  signal:SIGKILL"), "{events}");
    let json = stdout_of(&d.keel(&["events", "--json", "talker"]));
    for line in json.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["unit"], "talker");
        assert!(v["ts_ms"].as_u64().unwrap() > 0);
    }

    // A bad file is refused by `keel add` with file:line:col and not installed.
    let bad = d.scratch.dir.join("broken.ron");
    std::fs::write(&bad, "Unit(\n  command: [\"a\"],\n  colour: 3,\n)").unwrap();
    let out = d.keel(&["add", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("broken.ron:3:"),
        "{}",
        stderr_of(&out)
    );
    assert!(!d.units().join("broken.ron").exists());

    // rm stops it, removes the unit file and forgets it.
    let out = d.keel(&["rm", "talker"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(!d.units().join("talker.ron").exists());
    assert!(d.task("talker").is_none());
    assert!(!d.task_dir("talker").exists());
}

#[test]
fn control_socket_is_private() {
    let d = Daemon::start("socket");
    let mode = std::fs::metadata(d.state().join("keel.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn check_reports_file_line_col_and_exits_1() {
    let scratch = Scratch::new("check");
    let good = scratch.dir.join("good.ron");
    let bad = scratch.dir.join("bad.ron");
    std::fs::write(&good, r#"Unit(command: ["true"])"#).unwrap();
    std::fs::write(
        &bad,
        "Unit(\n    command: [\"true\"],\n    backoff: Backoff(initial: \"5x\"),\n)",
    )
    .unwrap();
    let out = std::process::Command::new(keel_bin())
        .args(["check"])
        .arg(&good)
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(err.contains(&format!("{}:3:", bad.display())), "{err}");
    let ok = std::process::Command::new(keel_bin())
        .arg("check")
        .arg(&good)
        .output()
        .unwrap();
    assert!(ok.status.success());
}

#[test]
fn peers_other_than_root_and_the_daemon_uid_are_refused() {
    if !require_root("peers_other_than_root_and_the_daemon_uid_are_refused") {
        return;
    }
    let d = Daemon::start("peercred");
    // Open the socket file to everyone so that only SO_PEERCRED stands in the way. The state
    // directory must be traversable too.
    let sock = d.state().join("keel.sock");
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    for dir in [d.scratch.dir.clone(), d.state()] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = std::process::Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(keel_bin())
        .arg("--state")
        .arg(d.state())
        .arg("status")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stdout_of(&out));
    assert!(
        stderr_of(&out).contains("uid 65534 may not control this daemon"),
        "{}",
        stderr_of(&out)
    );
    assert!(d.keel(&["health"]).status.success());
}

#[test]
fn logs_follow_streams_new_output() {
    let d = Daemon::start("follow");
    d.write_unit(
        "chatty",
        r#"Unit(command: ["/bin/sh", "-c", "i=0; while :; do echo n$i; i=$((i+1)); sleep 0.05; done"])"#,
    );
    d.wait_state("chatty", "running", PATIENCE);
    let mut child = KillOnDrop(
        std::process::Command::new(keel_bin())
            .arg("--state")
            .arg(d.state())
            .args(["logs", "-f", "chatty"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let lines = Lines::of(child.stdout.take().unwrap());
    let mut numbers = Vec::new();
    while numbers.len() < 30 {
        let line = lines.next_within(PATIENCE, "keel logs -f");
        numbers.push(line.trim_start_matches('n').parse::<u64>().unwrap());
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Consecutive lines, nothing lost or repeated while following.
    for pair in numbers.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "{numbers:?}");
    }
}

#[test]
fn sighup_reloads_the_units_directory() {
    let d = Daemon::start("sighup");
    d.write_unit("late", r#"Unit(command: ["/bin/sh", "-c", "sleep 30"])"#);
    let pid = d.child.as_ref().unwrap().id() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    wait_until(PATIENCE, "reload journaled", || {
        d.events(None).iter().any(|e| e["event"] == "reload")
    });
    d.wait_state("late", "running", PATIENCE);
    assert!(
        d.keel(&["health"]).status.success(),
        "SIGHUP must not end the daemon"
    );
}

#[test]
fn check_lists_every_problem_of_a_file_and_passes_the_examples() {
    let scratch = Scratch::new("checkall");
    let bad = scratch.dir.join("many.ron");
    std::fs::write(
        &bad,
        "Unit(\n    command: [\"true\"],\n    workdir: \"relative\",\n    backoff: Backoff(factor: 0.5),\n)",
    )
    .unwrap();
    let out = std::process::Command::new(keel_bin())
        .arg("check")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(err.contains("many.ron:3:"), "{err}");
    assert!(err.contains("many.ron:4:"), "{err}");
    // The units shipped in units/ (the tour) and units/examples/ (real agents) are valid.
    let ron_files = |dir: &str| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "ron"))
            .collect()
    };
    let mut examples = ron_files("units");
    assert!(examples.len() >= 3);
    let agents = ron_files("units/examples");
    for agent in ["claude-code", "codex", "aider", "shell-agent"] {
        assert!(
            agents.iter().any(|p| p.file_stem().unwrap() == agent),
            "units/examples/{agent}.ron is missing"
        );
    }
    examples.extend(agents);
    let out = std::process::Command::new(keel_bin())
        .arg("check")
        .args(&examples)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
}
