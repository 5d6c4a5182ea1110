//! `keel pause` / `keel resume` on a real daemon and real cgroups: the task's cgroup is frozen
//! (`cgroup.freeze`), its progress file stops changing, its liveness is not judged on frozen
//! time, the pause survives a SIGKILL of the daemon, and a paused task can still be stopped
//! (thawed first: it sees its stop signal) or removed.

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;
use wait::{holds_throughout, wait_for};

/// Small reservations: several tasks run side by side on a 2-core machine.
const SMALL: &str = r#"resources: Resources(cpu: 0.2, memory: "64M")"#;

/// Writes `step N` to its progress file every 100 ms; stalled after 1 s of silence, and
/// restarted then (`on_stall: Restart`): a stall verdict would show as a second attempt.
fn ticker() -> String {
    format!(
        r#"Unit(
            command: ["/bin/sh", "-c", "trap 'echo term > /work/got-term; exit 0' TERM; i=0; while :; do i=$((i+1)); echo step $i > $KEEL_PROGRESS; sleep 0.1; done"],
            liveness: Liveness(heartbeat_timeout: "1s", startup_grace: "0s", on_stall: Restart),
            backoff: Backoff(initial: "100ms"),
            stop: Stop(timeout: "10s"),
            {SMALL},
        )"#
    )
}

fn progress(d: &Daemon, unit: &str) -> String {
    std::fs::read_to_string(d.task_dir(unit).join("run/progress")).unwrap_or_default()
}

/// Wait until the progress file's content changes from what it is now.
fn progress_moves(d: &Daemon, unit: &str, what: &str) {
    let before = progress(d, unit);
    wait_until(Duration::from_secs(10), what, || {
        progress(d, unit) != before
    });
}

fn events_named(d: &Daemon, unit: &str, name: &str) -> Vec<Value> {
    d.events(Some(unit))
        .into_iter()
        .filter(|e| e["event"] == name)
        .collect()
}

/// Wait until the task shows `paused` and the kernel has frozen it.
fn wait_frozen(d: &Daemon, unit: &str) -> Value {
    wait_for(Duration::from_secs(10), "paused and frozen", || {
        d.task(unit)
            .filter(|t| t["state"] == "paused" && t["frozen"] == true)
    })
}

fn ok(d: &Daemon, args: &[&str]) -> String {
    let out = d.keel(args);
    assert!(
        out.status.success(),
        "keel {args:?}: {}{}\n{}",
        stdout_of(&out),
        stderr_of(&out),
        d.daemon_log()
    );
    stdout_of(&out)
}

/// Nothing changes in the progress file for `window`, and the task stays paused in attempt 1.
fn stays_frozen(d: &Daemon, unit: &str, window: Duration, what: &str) {
    let frozen_at = progress(d, unit);
    holds_throughout(window, what, || {
        progress(d, unit) == frozen_at
            && d.task(unit)
                .is_some_and(|t| t["state"] == "paused" && t["attempt"] == 1)
    });
}

#[test]
fn a_paused_task_stops_writing_is_never_stalled_and_stays_paused_across_a_daemon_kill() {
    if !require_root("pause") {
        return;
    }
    let mut d = Daemon::start("pause-ticker");
    d.write_unit("tick", &ticker());
    let running = d.wait_state("tick", "running", Duration::from_secs(10));
    progress_moves(&d, "tick", "the agent writes its progress");

    let said = ok(&d, &["pause", "tick"]);
    assert!(said.contains("tick: paused"), "{said}");
    let paused = wait_frozen(&d, "tick");
    assert_eq!(paused["pid"], running["pid"], "the same attempt, frozen");
    assert_eq!(paused["reason"], "keel pause", "{paused}");
    assert!(paused["since_ms"].as_u64() >= running["since_ms"].as_u64());
    // Three stall thresholds of silence: no verdict, no restart.
    stays_frozen(&d, "tick", Duration::from_secs(3), "frozen, not stalled");
    let again = d.keel(&["pause", "tick"]);
    assert!(!again.status.success());
    assert!(
        stderr_of(&again).contains("already paused"),
        "{}",
        stderr_of(&again)
    );

    // The daemon dies: the cgroup stays frozen without it, and the next one keeps it paused.
    d.crash();
    let at_crash = progress(&d, "tick");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(progress(&d, "tick"), at_crash, "thawed while no daemon ran");
    d.spawn();
    let adopted = wait_frozen(&d, "tick");
    assert_eq!(adopted["pid"], running["pid"], "re-adopted, not restarted");
    assert_eq!(adopted["since_ms"], paused["since_ms"], "the same pause");
    stays_frozen(
        &d,
        "tick",
        Duration::from_secs(2),
        "still frozen after the restart",
    );

    let said = ok(&d, &["resume", "tick"]);
    assert!(said.contains("tick: resumed after"), "{said}");
    progress_moves(&d, "tick", "the agent writes again after the resume");
    let resumed = d.wait_state("tick", "running", Duration::from_secs(5));
    assert_eq!(resumed["attempt"], 1);
    assert_eq!(resumed["pid"], running["pid"]);
    assert_eq!(resumed["frozen"], Value::Null);
    // Its clocks run from the resume: writing every 100 ms, it stays running.
    holds_throughout(Duration::from_secs(2), "running after the resume", || {
        d.task("tick")
            .is_some_and(|t| t["state"] == "running" && t["attempt"] == 1)
    });
    assert!(
        events_named(&d, "tick", "stalled").is_empty(),
        "{:?}",
        d.events(Some("tick"))
    );
    assert_eq!(events_named(&d, "tick", "paused").len(), 1);
    let resumed_events = events_named(&d, "tick", "resumed");
    assert_eq!(resumed_events.len(), 1, "{resumed_events:?}");
    let detail = resumed_events[0]["detail"].as_str().unwrap();
    assert!(detail.starts_with("keel resume; paused for"), "{detail}");
    let detail = ok(&d, &["status", "tick"]);
    assert!(detail.contains("not counted"), "{detail}");
}

#[test]
fn pause_all_freezes_every_running_task_and_resume_all_thaws_them() {
    if !require_root("pause --all") {
        return;
    }
    let mut d = Daemon::start("pause-all");
    for unit in ["a", "b"] {
        d.write_unit(unit, &ticker());
    }
    d.write_unit(
        "done",
        &format!(r#"Unit(command: ["/bin/true"], restart: Never, {SMALL})"#),
    );
    for unit in ["a", "b"] {
        d.wait_state(unit, "running", Duration::from_secs(10));
    }
    d.wait_state("done", "succeeded", Duration::from_secs(10));

    let said = ok(&d, &["pause", "--all"]);
    assert!(said.contains("paused 2 tasks: a, b"), "{said}");
    for unit in ["a", "b"] {
        let t = wait_frozen(&d, unit);
        assert_eq!(t["reason"], "keel pause --all");
    }
    assert_eq!(d.task("done").unwrap()["state"], "succeeded");
    let table = ok(&d, &["status"]);
    assert!(table.contains("2 paused"), "{table}");
    // Nothing is left to pause; a finished task cannot be paused.
    let again = ok(&d, &["pause", "--all"]);
    assert!(
        again.contains("starts held until keel resume --all; no task paused"),
        "{again}"
    );
    let refused = d.keel(&["pause", "done"]);
    assert!(!refused.status.success());
    assert!(
        stderr_of(&refused).contains("done: cannot pause: succeeded: no attempt runs"),
        "{}",
        stderr_of(&refused)
    );
    let unknown = d.keel(&["pause", "nosuch"]);
    assert!(!unknown.status.success());
    assert!(stderr_of(&unknown).contains("unknown unit"));
    // A unit or --all: one of them.
    assert_eq!(d.keel(&["pause"]).status.code(), Some(2));
    assert_eq!(d.keel(&["pause", "a", "--all"]).status.code(), Some(2));

    // The window holds starts too, across a daemon kill: a unit added now stays queued.
    d.write_unit("late", &ticker());
    let late = wait_for(Duration::from_secs(10), "late held", || {
        d.task("late").filter(|t| {
            t["state"] == "queued"
                && t["reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("starts held by keel pause --all"))
        })
    });
    d.crash();
    d.spawn();
    wait_frozen(&d, "a");
    holds_throughout(Duration::from_millis(1500), "late stays queued", || {
        d.task("late").is_some_and(|t| t["state"] == "queued")
    });
    assert_eq!(d.task("late").unwrap()["reason"], late["reason"]);

    let said = ok(&d, &["resume", "--all"]);
    assert!(said.contains("the hold on starts ended"), "{said}");
    assert!(said.contains("resumed 2 tasks: a, b"), "{said}");
    for unit in ["a", "b"] {
        d.wait_state(unit, "running", Duration::from_secs(5));
        progress_moves(&d, unit, "writing again after resume --all");
    }
    d.wait_state("late", "running", Duration::from_secs(10));
    let refused = d.keel(&["resume", "a"]);
    assert!(stderr_of(&refused).contains("a: cannot resume: not paused"));
}

#[test]
fn a_paused_task_is_thawed_to_be_stopped_and_can_be_removed() {
    if !require_root("stop a paused task") {
        return;
    }
    let d = Daemon::start("pause-stop");
    d.write_unit("stopme", &ticker());
    d.write_unit("rmme", &ticker());
    d.wait_state("stopme", "running", Duration::from_secs(10));
    d.wait_state("rmme", "running", Duration::from_secs(10));
    ok(&d, &["pause", "stopme"]);
    ok(&d, &["pause", "rmme"]);
    wait_frozen(&d, "stopme");
    wait_frozen(&d, "rmme");

    let kill = d.keel(&["kill", "stopme"]);
    assert!(!kill.status.success());
    assert!(
        stderr_of(&kill).contains("stopme: paused: its processes are frozen"),
        "{}",
        stderr_of(&kill)
    );
    assert_eq!(d.task("stopme").unwrap()["liveness"], "paused");
    // The stop thaws it: the agent sees its SIGTERM and exits on its own, well before the
    // stop timeout's SIGKILL (10 s).
    ok(&d, &["stop", "stopme"]);
    let stopped = d.wait_state("stopme", "stopped", Duration::from_secs(15));
    assert_eq!(stopped["frozen"], Value::Null);
    let got_term = d.task_dir("stopme").join("work/got-term");
    assert_eq!(
        std::fs::read_to_string(&got_term)
            .unwrap_or_default()
            .trim(),
        "term",
        "the agent did not see its stop signal: {:?}\nshim: {}\n{}",
        d.events(Some("stopme")),
        std::fs::read_to_string(d.task_dir("stopme").join("run/shim.log")).unwrap_or_default(),
        d.daemon_log()
    );
    assert!(
        events_named(&d, "stopme", "stop-timeout").is_empty(),
        "SIGKILLed: {:?}",
        d.events(Some("stopme"))
    );
    let thawed = events_named(&d, "stopme", "resumed");
    assert_eq!(thawed.len(), 1, "{thawed:?}");
    assert_eq!(thawed[0]["detail"], "thawed to be stopped");
    // Started again, it is not paused.
    ok(&d, &["start", "stopme"]);
    d.wait_state("stopme", "running", Duration::from_secs(10));
    progress_moves(&d, "stopme", "a new attempt writes");

    let out = d.keel(&["rm", "rmme"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(d.task("rmme").is_none(), "{:?}", d.task("rmme"));
}

/// The daemon dies between recording a pause (or a resume) and carrying it out: the next one
/// makes the kernel agree with the record when it adopts the attempt.
#[test]
fn a_pause_or_resume_the_daemon_died_during_is_carried_out_at_adoption() {
    if !require_root("pause crash points") {
        return;
    }
    let mut d = Daemon::start("pause-crash");
    d.write_unit("tick", &ticker());
    let running = d.wait_state("tick", "running", Duration::from_secs(10));
    d.crash();

    for (point, verb, then) in [
        ("after-persist-paused", "pause", "paused"),
        ("after-persist-resumed", "resume", "running"),
    ] {
        // The client's request reaches a daemon that dies once it has recorded it.
        let state = d.state();
        let client = std::thread::spawn(move || {
            wait_until(Duration::from_secs(10), "the daemon answers", || {
                keel_at(&state, &["health"]).status.success()
            });
            keel_at(&state, &[verb, "tick"])
        });
        d.die_at(point);
        let answer = client.join().unwrap();
        assert!(
            !answer.status.success(),
            "{point}: answered {}",
            stdout_of(&answer)
        );
        d.spawn();
        let adopted = d.wait_state("tick", then, Duration::from_secs(10));
        assert_eq!(adopted["pid"], running["pid"], "{point}: re-adopted");
        match then {
            "paused" => {
                wait_frozen(&d, "tick");
                stays_frozen(&d, "tick", Duration::from_secs(2), "frozen at adoption");
            }
            _ => progress_moves(&d, "tick", "thawed at adoption"),
        }
        d.crash();
    }
    assert!(events_named(&d, "tick", "stalled").is_empty());
}
