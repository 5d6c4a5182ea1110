//! The daemon never dies of a client's, a unit's or a stray signal's mistake.

mod common;
use common::*;
use std::time::Duration;
use wait::{holds_throughout, PATIENCE};

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[test]
fn idle_clients_are_dropped_and_do_not_wedge_the_daemon() {
    let d = Daemon::start("idle-clients");
    let pid = d.child.as_ref().unwrap().id();
    let baseline = open_fds(pid);
    let sock = d.state().join("keel.sock");
    let idle: Vec<_> = (0..100)
        .map(|_| std::os::unix::net::UnixStream::connect(&sock).unwrap())
        .collect();
    wait_until(PATIENCE, "idle clients accepted", || {
        open_fds(pid) >= baseline + 100
    });
    // Others are still served while they idle.
    assert!(d.keel(&["health"]).status.success());
    d.write_unit(
        "ok",
        r#"Unit(command: ["/bin/sh", "-c", "exit 0"], restart: Never)"#,
    );
    d.wait_state("ok", "succeeded", PATIENCE);
    // After the client deadline (10 s) their descriptors are closed. What stays: the spare
    // shim made after the start (its socket and pidfd), and what the daemon holds for the
    // task while it exists (its user namespace, its claim on its block of host ids).
    let mut last;
    let listing = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| std::fs::read_link(e.path()).ok())
                    .map(|l| l.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10) + PATIENCE;
    while {
        last = open_fds(pid);
        last > baseline + 4
    } {
        assert!(
            std::time::Instant::now() < deadline,
            "idle clients not dropped: {last} descriptors against {baseline} before: {}",
            listing()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(idle);
}

#[test]
fn garbage_requests_get_errors_not_a_crash() {
    use std::io::{BufRead, BufReader, Write};
    let d = Daemon::start("garbage-requests");
    let sock = d.state().join("keel.sock");
    for junk in [
        &b"not json\n"[..],
        b"{\"verb\":\"nope\"}\n",
        b"{\"verb\":\"stop\"}\n",
        b"\xff\xfe\n",
    ] {
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        s.write_all(junk).unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        assert!(line.contains("\"error\""), "{line}");
        assert!(line.contains("malformed request"), "{line}");
    }
    assert!(d.keel(&["health"]).status.success());
}

/// A unit name from a client becomes a path under the state directory only once it is a valid
/// name: `keel harvest` of `../..` (the CLI would refuse it; a raw client need not) is refused.
#[test]
fn a_unit_name_that_climbs_out_of_the_state_directory_is_refused() {
    use std::io::{BufRead, BufReader, Write};
    let d = Daemon::start("climbing-name");
    let sock = d.state().join("keel.sock");
    for unit in ["../..", "../../tmp", "a/b", ""] {
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        let request = serde_json::json!({"verb": "harvest", "unit": unit});
        s.write_all(format!("{request}\n").as_bytes()).unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(reply["result"], "error", "{unit:?}: {line}");
        let message = reply["message"].as_str().unwrap_or_default();
        assert!(message.contains("unit name"), "{unit:?}: {line}");
    }
    assert!(d.keel(&["health"]).status.success());
}

#[test]
fn stray_signals_do_not_kill_the_daemon() {
    let d = Daemon::start("usr-signals");
    let pid = nix::unistd::Pid::from_raw(d.child.as_ref().unwrap().id() as i32);
    for signal in [
        nix::sys::signal::Signal::SIGUSR1,
        nix::sys::signal::Signal::SIGUSR2,
        nix::sys::signal::Signal::SIGHUP,
    ] {
        nix::sys::signal::kill(pid, signal).unwrap();
    }
    // Each was handled (SIGUSR1 logs a summary, SIGHUP journals a reload), and the daemon is
    // alive and answering afterwards.
    wait_until(PATIENCE, "SIGUSR1 and SIGHUP handled", || {
        d.daemon_log().contains("SIGUSR1: 0 tasks")
            && d.events(None).iter().any(|e| e["event"] == "reload")
    });
    assert!(d.keel(&["health"]).status.success(), "{}", d.daemon_log());
    let mut d = d;
    assert!(
        d.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "{}",
        d.daemon_log()
    );
}

#[test]
fn signals_the_shim_cannot_forward_are_refused() {
    let d = Daemon::start("bad-signal");
    d.write_unit("t", r#"Unit(command: ["sleep", "60"])"#);
    d.wait_state("t", "running", PATIENCE);
    let out = d.keel(&["kill", "-s", "SIGALRM", "t"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("SIGALRM cannot be sent to a task"),
        "{}",
        stderr_of(&out)
    );
    let task = d.task("t").unwrap();
    assert_eq!(task["state"], "running");
    assert_eq!(task["attempt"], 1);
    // And a unit naming one as its stop signal is refused with its position.
    let bad = d.scratch.dir.join("alarm.ron");
    std::fs::write(
        &bad,
        "Unit(\n  command: [\"x\"],\n  stop: Stop(signal: \"SIGALRM\"),\n)",
    )
    .unwrap();
    let out = d.keel(&["add", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("alarm.ron:3:"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn sigkill_as_stop_signal_kills_the_agents_whole_process_group() {
    let d = Daemon::start("stop-kill");
    d.write_unit(
        "family",
        r#"Unit(command: ["/bin/sh", "-c", "sleep 600 & echo started > /work/pids; wait"], stop: Stop(signal: "SIGKILL"))"#,
    );
    let task = d.wait_state("family", "running", PATIENCE);
    wait_until(PATIENCE, "child started", || {
        d.task_dir("family").join("work/pids").exists()
    });
    let members = namespace_members(task["pid"].as_i64().unwrap() as i32);
    let out = d.keel(&["stop", "family"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let task = d.task("family").unwrap();
    assert_eq!(task["state"], "stopped");
    assert_eq!(task["last_exit"], "signal:SIGKILL");
    wait_until(PATIENCE, "the agent's child is gone", || {
        members().is_empty()
    });
}

#[test]
fn a_start_during_a_stop_starts_again_afterwards() {
    let d = Daemon::start("start-during-stop");
    d.write_unit(
        "slow",
        r#"Unit(command: ["/bin/sh", "-c", "trap 'sleep 1; exit 0' TERM; echo ready; while :; do sleep 0.1; done"])"#,
    );
    d.wait_state("slow", "running", PATIENCE);
    let log = d.task_dir("slow").join("run/output.log");
    wait_until(PATIENCE, "trap installed", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("ready")
    });
    let state = d.state();
    let stopper = std::thread::spawn(move || {
        std::process::Command::new(keel_bin())
            .arg("--state")
            .arg(state)
            .args(["stop", "slow"])
            .output()
            .unwrap()
    });
    d.wait_state("slow", "stopping", PATIENCE);
    let out = d.keel(&["start", "slow"]);
    assert!(
        stdout_of(&out).contains("starts again once stopped"),
        "{}",
        stdout_of(&out)
    );
    stopper.join().unwrap();
    let task = d.wait_state("slow", "running", Duration::from_secs(10));
    assert_eq!(task["attempt"], 2);
}

#[test]
fn the_agent_gets_only_stdio_and_the_original_open_file_limit() {
    let d = Daemon::start("agent-fds");
    d.write_unit(
        "fds",
        r#"Unit(command: ["/bin/sh", "-c", "ls /proc/self/fd; echo nofile $(ulimit -Sn)"], restart: Never)"#,
    );
    d.wait_state("fds", "succeeded", PATIENCE);
    let out = std::fs::read_to_string(d.task_dir("fds").join("run/output.log")).unwrap();
    let fds: Vec<&str> = out.lines().filter(|l| !l.starts_with("nofile")).collect();
    // 0, 1, 2 and the one `ls` opens to read the directory: no attempt lock, no daemon fds.
    assert!(fds.len() <= 4 && fds[..3] == ["0", "1", "2"], "{out}");
    let (soft, _) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    assert!(
        out.contains(&format!("nofile {soft}")),
        "{out} (expected {soft})"
    );
}

#[test]
fn a_held_attempt_lock_defers_the_start_without_a_second_agent() {
    let d = Daemon::prepare("deferred");
    // A shim of an earlier attempt that nobody watches holds the lock (simulated here).
    let run = d.task_dir("held").join("run");
    std::fs::create_dir_all(&run).unwrap();
    let lock = std::fs::File::create(run.join("attempt.lock")).unwrap();
    nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map(|held| {
            let mut d = d;
            d.spawn();
            d.write_unit("held", r#"Unit(command: ["sleep", "60"])"#);
            wait_until(PATIENCE, "deferred", || {
                d.task("held").is_some_and(|t| {
                    t["reason"]
                        .as_str()
                        .unwrap_or("")
                        .contains("start deferred")
                })
            });
            // Negative check, across the 5 s retry: still queued, never started.
            holds_throughout(Duration::from_millis(5500), "held stays queued", || {
                let task = d.task("held").unwrap();
                task["state"] == "queued" && task["attempt"] == 0
            });
            let events = d.events(Some("held"));
            assert_eq!(
                events
                    .iter()
                    .filter(|e| e["event"] == "start-deferred")
                    .count(),
                1
            );
            assert!(!events.iter().any(|e| e["event"] == "starting"));
            drop(held);
            d.wait_state("held", "running", PATIENCE);
        })
        .map_err(|(_, e)| e)
        .unwrap();
}

#[test]
fn a_spec_that_cannot_be_written_abandons_the_attempt_and_its_agent() {
    // The daemon's clone writes run/attempt.ron once the agent has started; here it cannot (a
    // directory is in the way of its temporary file — `.attempt.ron.tmp.<pid>`, and the clone
    // is PID 1 of the task's namespace): the agent is killed, the reason is in run/shim.log and
    // the task's, and the attempt ends without a record — never an agent left unsupervised.
    let mut d = Daemon::prepare("spec-unwritable");
    let run = d.task_dir("job").join("run");
    std::fs::create_dir_all(run.join(".attempt.ron.tmp.1/in-the-way")).unwrap();
    d.spawn();
    d.write_unit(
        "job",
        r#"Unit(command: ["/bin/sh", "-c", "echo started >> /work/seen; sleep 3; echo survived >> /work/seen"], restart: Never)"#,
    );
    let task = d.wait_state("job", "failed", PATIENCE);
    let shim_log = std::fs::read_to_string(run.join("shim.log")).unwrap_or_default();
    assert!(
        shim_log.contains("cannot write the attempt spec"),
        "{shim_log}"
    );
    assert!(!run.join("exit.ron").exists(), "no shim ever ran");
    // Had the agent lived on, it would write its second line after 3 s (a negative check).
    let seen = || std::fs::read_to_string(d.task_dir("job").join("work/seen")).unwrap_or_default();
    holds_throughout(Duration::from_millis(3500), "the agent is gone", || {
        !seen().contains("survived")
    });
    assert_eq!(task["attempt"], 1, "{task}");
    assert_eq!(task["last_exit"], "lost", "{task}");
    assert!(
        task["reason"]
            .as_str()
            .unwrap_or("")
            .contains("spec could not be written"),
        "{task}"
    );
}
