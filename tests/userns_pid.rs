//! The task's PID namespace is owned by the task's user namespace (issue 17), checked from
//! the host for tasks a real daemon started: the owner of `/proc/<agent>/ns/pid`
//! (`NS_GET_USERNS`) is the agent's own user namespace, not the host's; the shim is PID 1 of
//! it and still a process of the host's user namespace. So on the daemon's clone and on a
//! spare shim (made for the task's restart), at every attempt (each in a PID namespace of
//! its own), and after a re-adoption by a restarted daemon.
//!
//! Needs root (the daemon's sandboxes).

mod common;
mod userns_support;

use common::wait::wait_for;
use common::*;
use keel::sys::pidns::{owner_of, NamespaceId};
use std::os::fd::AsFd;
use std::time::Duration;
use userns_support::*;

/// The identity of a `/proc/<pid>/ns/<kind>` namespace.
fn ns_id(pid: i32, kind: &str) -> NamespaceId {
    let file = std::fs::File::open(format!("/proc/{pid}/ns/{kind}")).unwrap();
    NamespaceId::of(file.as_fd()).unwrap()
}

/// The identity of the user namespace owning `pid`'s PID namespace.
fn pid_ns_owner(pid: i32) -> NamespaceId {
    let file = std::fs::File::open(format!("/proc/{pid}/ns/pid")).unwrap();
    let owner = owner_of(file.as_fd()).unwrap();
    NamespaceId::of(owner.as_fd()).unwrap()
}

/// The `NSpid:` line of `/proc/<pid>/status`: its pid in each PID namespace it is in.
fn ns_pids(pid: i32) -> Vec<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// What an attempt of `unit` looks like from the host, asserted: its agent's PID namespace
/// owned by the agent's user namespace (not the host's); the shim PID 1 there, in the host's
/// user namespace. Returns the attempt's PID namespace — its identity, and a descriptor that
/// keeps it (a namespace's inode number is reused once it is freed) — and the task's user
/// namespace.
fn assert_owned_by_the_task(d: &Daemon, unit: &str) -> ((NamespaceId, std::fs::File), NamespaceId) {
    let agent = agent_pid(d, unit);
    let shim = shim_pid(d, unit).unwrap();
    let host_userns = ns_id(std::process::id() as i32, "user");
    let task_userns = ns_id(agent, "user");
    assert_ne!(
        task_userns, host_userns,
        "{unit}: the agent is in the host's user namespace"
    );
    assert_eq!(
        pid_ns_owner(agent),
        task_userns,
        "{unit}: the agent's PID namespace is not owned by its user namespace"
    );
    let held = std::fs::File::open(format!("/proc/{agent}/ns/pid")).unwrap();
    let pid_ns = NamespaceId::of(held.as_fd()).unwrap();
    assert_ne!(pid_ns, ns_id(std::process::id() as i32, "pid"), "{unit}");
    assert_eq!(ns_id(shim, "pid"), pid_ns, "{unit}: the shim and its agent");
    let shim_pids = ns_pids(shim);
    assert_eq!(shim_pids.len(), 2, "{unit}: {shim_pids:?}");
    assert_eq!(shim_pids.last(), Some(&1), "{unit}: the shim is not PID 1");
    assert_eq!(
        ns_id(shim, "user"),
        host_userns,
        "{unit}: the shim left the host's user namespace"
    );
    assert_eq!(host_ids(shim, "Uid:"), vec![0, 0, 0, 0], "{unit}");
    ((pid_ns, held), task_userns)
}

const SLEEPER: &str = r#"Unit(command: ["/bin/sh", "-c", "exec sleep 120"], restart: Always, backoff: Backoff(initial: "100ms"))"#;

/// Kill `unit`'s agent (by its host pid) and wait for the next attempt to run.
fn restart(d: &Daemon, unit: &str, attempt: u32) {
    let agent = agent_pid(d, unit);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until(Duration::from_secs(30), "the next attempt", || {
        d.task(unit)
            .is_some_and(|t| t["state"] == "running" && t["attempt"] == attempt)
    });
}

#[test]
fn on_the_daemons_clone_the_pid_namespace_is_the_tasks() {
    let test = "on_the_daemons_clone_the_pid_namespace_is_the_tasks";
    if !ready(test) {
        return;
    }
    let mut d = common::sandbox::daemon_starting("userns-pid-clone", true, false);
    d.write_unit("sleeper", SLEEPER);
    d.wait_state("sleeper", "running", Duration::from_secs(20));
    let (first, userns) = assert_owned_by_the_task(&d, "sleeper");
    // The second attempt: a PID namespace of its own, of the same user namespace.
    restart(&d, "sleeper", 2);
    let (second, userns_again) = assert_owned_by_the_task(&d, "sleeper");
    assert_eq!(
        userns_again, userns,
        "the task's user namespace, kept across attempts"
    );
    assert_ne!(second.0, first.0, "two attempts in one PID namespace");
    let log = std::fs::read_to_string(d.task_dir("sleeper").join("run/shim.log")).unwrap();
    assert!(!log.contains("spare"), "{log}");
    // Re-adopted by a restarted daemon: the same shim, its namespaces unchanged.
    let shim = shim_pid(&d, "sleeper").unwrap();
    d.crash();
    d.spawn();
    let after = d.wait_state("sleeper", "running", Duration::from_secs(20));
    assert_eq!(after["pid"].as_i64().unwrap() as i32, shim, "{after}");
    assert_eq!(after["attempt"], 2, "{after}");
    assert_eq!(assert_owned_by_the_task(&d, "sleeper").0 .0, second.0);
    d.keel(&["stop", "sleeper"]);
    d.wait_state("sleeper", "stopped", Duration::from_secs(20));
}

#[test]
fn on_a_spare_the_pid_namespace_is_the_tasks() {
    let test = "on_a_spare_the_pid_namespace_is_the_tasks";
    if !ready(test) {
        return;
    }
    // A task `keep` runs, and a spare made after its start is ready: keep's, not ours.
    let d = common::sandbox::daemon_starting("userns-pid-spare", true, true);
    d.write_unit("sleeper", SLEEPER);
    d.wait_state("sleeper", "running", Duration::from_secs(20));
    let shim_log = || std::fs::read_to_string(d.task_dir("sleeper").join("run/shim.log")).unwrap();
    // A spare made for another task's user namespace is not taken.
    assert!(!shim_log().contains("spare shim took"), "{}", shim_log());
    let (first, userns) = assert_owned_by_the_task(&d, "sleeper");
    // The daemon makes the next spare for the task it started last: PID 1 of a PID
    // namespace of that task's user namespace, before the restart is known.
    let daemon = d.child.as_ref().unwrap().id();
    let spare = wait_for(Duration::from_secs(20), "a spare for sleeper", || {
        std::fs::read_to_string(format!("/proc/{daemon}/task/{daemon}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .find(|&pid| {
                let spare = std::fs::read_link(format!("/proc/{pid}/fd/3"))
                    .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"));
                spare
                    && std::fs::File::open(format!("/proc/{pid}/ns/pid"))
                        .ok()
                        .and_then(|f| owner_of(f.as_fd()).ok())
                        .and_then(|o| NamespaceId::of(o.as_fd()).ok())
                        == Some(userns)
            })
    });
    assert_eq!(ns_pids(spare).last(), Some(&1), "the spare is not PID 1");
    restart(&d, "sleeper", 2);
    // Said once the agent runs, which may be after the daemon saw the start.
    wait_until(Duration::from_secs(20), "the spare's start", || {
        shim_log().contains("spare shim took attempt 2 of sleeper")
    });
    // The spare is the attempt's shim (its record is written once it exec'd `keel shim`).
    let task = d.task("sleeper").unwrap();
    assert_eq!(task["pid"].as_i64(), Some(spare as i64), "{task}");
    wait_until(Duration::from_secs(20), "the shim's record", || {
        shim_pid(&d, "sleeper") == Some(spare)
    });
    let (second, userns_again) = assert_owned_by_the_task(&d, "sleeper");
    assert_eq!(userns_again, userns);
    assert_ne!(second.0, first.0, "two attempts in one PID namespace");
    d.keel(&["stop", "sleeper"]);
    d.keel(&["stop", "keep"]);
    d.wait_state("sleeper", "stopped", Duration::from_secs(20));
}
