//! The daemon is not in the task's data path: SIGKILL it and the task runs on, its log grows;
//! a new daemon re-adopts the task and sees its end.

mod common;
use common::*;
use std::time::Duration;

fn log_len(d: &Daemon, unit: &str) -> u64 {
    std::fs::metadata(d.task_dir(unit).join("run/output.log"))
        .map(|m| m.len())
        .unwrap_or(0)
}

#[test]
fn task_outlives_a_killed_daemon_and_is_readopted() {
    let mut d = Daemon::start("crash");
    let flag = d.task_dir("steady").join("work/finish");
    d.write_unit(
        "steady",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", "while [ ! -e {flag} ]; do echo tick; sleep 0.05; done; exit 3"], restart: Never)"#,
            flag = "/work/finish"
        ),
    );
    let before = d.wait_state("steady", "running", Duration::from_secs(10));
    let shim_pid = before["pid"].as_i64().unwrap() as i32;
    wait_until(Duration::from_secs(5), "output", || {
        log_len(&d, "steady") > 0
    });

    d.crash();
    let size_at_crash = log_len(&d, "steady");
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        log_len(&d, "steady") > size_at_crash,
        "the agent's log stopped growing when the daemon died"
    );
    assert!(
        std::path::Path::new(&format!("/proc/{shim_pid}")).exists(),
        "shim died with the daemon"
    );

    // A new daemon re-adopts the same shim: same attempt, same pid, no second attempt.
    d.spawn();
    let after = d.wait_state("steady", "running", Duration::from_secs(10));
    assert_eq!(after["pid"].as_i64().unwrap() as i32, shim_pid);
    assert_eq!(after["attempt"], 1);
    assert!(
        d.events(Some("steady"))
            .iter()
            .any(|e| e["event"] == "running"
                && e["detail"].as_str().unwrap_or("").contains("adopted"))
    );

    // Its end is seen through the pidfd and the exit record, though it is not our child.
    std::fs::write(&flag, "").unwrap();
    let done = d.wait_state("steady", "failed", Duration::from_secs(10));
    assert_eq!(done["last_exit"], "exit:3");
    assert_eq!(done["attempt"], 1);
}

#[test]
fn a_task_that_ended_while_the_daemon_was_down_is_settled_from_its_exit_record() {
    let mut d = Daemon::start("settle");
    let flag = d.task_dir("quick").join("work/finish");
    d.write_unit(
        "quick",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", "while [ ! -e {flag} ]; do sleep 0.05; done; exit 0"], restart: OnFailure)"#,
            flag = "/work/finish"
        ),
    );
    d.wait_state("quick", "running", Duration::from_secs(10));
    d.crash();
    std::fs::write(&flag, "").unwrap();
    wait_until(Duration::from_secs(5), "exit record", || {
        d.task_dir("quick").join("run/exit.ron").exists()
    });
    d.spawn();
    let task = d.wait_state("quick", "succeeded", Duration::from_secs(10));
    assert_eq!(task["attempt"], 1, "a finished task must not run twice");
}

#[test]
fn finished_tasks_are_not_rerun_by_a_daemon_restart() {
    let mut d = Daemon::start("norerun");
    d.write_unit(
        "once",
        r#"Unit(command: ["/bin/sh", "-c", "exit 0"], restart: Never)"#,
    );
    d.wait_state("once", "succeeded", Duration::from_secs(10));
    d.shutdown();
    d.spawn();
    std::thread::sleep(Duration::from_millis(500));
    let task = d.task("once").unwrap();
    assert_eq!(task["state"], "succeeded");
    assert_eq!(task["attempt"], 1);
}

#[test]
fn orderly_shutdown_interrupts_tasks_and_the_next_daemon_resumes_them() {
    let mut d = Daemon::start("resume");
    let seen = d.task_dir("long").join("work/seen.txt");
    d.write_unit(
        "long",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", "echo $KEEL_ATTEMPT $KEEL_RESUMED $KEEL_LAST_EXIT >> {seen}; exec sleep 60"])"#,
            seen = "/work/seen.txt"
        ),
    );
    d.wait_state("long", "running", Duration::from_secs(10));
    // The agent has run (not just been spawned) before the shutdown interrupts it.
    wait_until(Duration::from_secs(5), "first attempt recorded", || {
        seen.exists()
    });
    let status = d.shutdown().unwrap();
    assert!(status.success());
    d.spawn();
    d.wait_state("long", "running", Duration::from_secs(10));
    wait_until(Duration::from_secs(5), "second attempt recorded", || {
        std::fs::read_to_string(&seen)
            .unwrap_or_default()
            .lines()
            .count()
            == 2
    });
    let text = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(text, "1 0\n2 1 signal:SIGTERM\n");
}

#[test]
fn an_unreadable_record_does_not_start_a_second_agent() {
    let mut d = Daemon::start("unreadable");
    let seen = d.task_dir("precious").join("work/seen");
    d.write_unit(
        "precious",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", "echo started >> {seen}; exec sleep 60"])"#,
            seen = "/work/seen"
        ),
    );
    let before = d.wait_state("precious", "running", wait::PATIENCE);
    d.crash();
    std::fs::write(d.task_dir("precious").join("state.ron"), "garbage (").unwrap();
    d.spawn();
    // `running` with no pid while the daemon waits for the shim's record (a shim killed with
    // the daemon right after its spawn may not have written it yet). A busy CI machine may
    // take seconds: seen past 5 s under a full run beside a build.
    let mut after = serde_json::Value::Null;
    wait_until(wait::PATIENCE, "re-adopted", || {
        after = d.task("precious").unwrap_or_default();
        after["state"] == "running" && !after["pid"].is_null()
    });
    assert_eq!(
        after["pid"], before["pid"],
        "re-adopted from run/attempt.ron"
    );
    assert_eq!(after["attempt"], 1);
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "started\n");
    assert!(d.task_dir("precious").join("state.ron.unreadable").exists());
    assert!(d
        .events(Some("precious"))
        .iter()
        .any(|e| e["event"] == "record-unreadable"));
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim().starts_with('Z'))
}

#[test]
fn nothing_of_a_stopped_attempt_outlives_it() {
    let d = Daemon::start("leftover-group");
    // The leader exits at SIGTERM; its child ignores SIGTERM and would run on.
    d.write_unit(
        "fam",
        r#"Unit(command: ["/bin/sh", "-c", "trap 'exit 0' TERM; (trap '' TERM; exec sleep 600) & echo started > /work/pids; wait"], stop: Stop(timeout: "2s"))"#,
    );
    let task = d.wait_state("fam", "running", Duration::from_secs(5));
    wait_until(Duration::from_secs(5), "child started", || {
        d.task_dir("fam").join("work/pids").exists()
    });
    let members = namespace_members(task["pid"].as_i64().unwrap() as i32);
    assert!(members().len() >= 3, "shim, agent, child: {:?}", members());
    let out = d.keel(&["stop", "fam"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    wait_until(Duration::from_secs(2), "the ignoring child is gone", || {
        members().is_empty()
    });
}

/// A shim that is alive but not yet adopted (it had not said who it is when the daemon
/// started): a stop waits for it to be adopted, and then really stops it.
#[test]
fn a_stop_before_adoption_is_carried_out_at_adoption() {
    let mut d = Daemon::start("unadopted");
    d.write_unit("w", r#"Unit(command: ["sleep", "600"])"#);
    let before = d.wait_state("w", "running", Duration::from_secs(5));
    let shim = before["pid"].as_i64().unwrap() as i32;
    // The shim writes its record once it has exec'd (the agent starts before that).
    let shim_ron = d.task_dir("w").join("run/shim.ron");
    wait_until(Duration::from_secs(5), "the shim's record", || {
        shim_ron.exists()
    });
    d.crash();
    // Make the shim unidentifiable for a while: no pid in the record, no shim.ron.
    let record_path = d.task_dir("w").join("state.ron");
    let record = std::fs::read_to_string(&record_path).unwrap();
    let start = record.find("shim: Some(").unwrap();
    let end = start + record[start..].find("\n    )),").unwrap() + "\n    )),".len();
    std::fs::write(
        &record_path,
        format!("{}shim: None,{}", &record[..start], &record[end..]),
    )
    .unwrap();
    let aside = d.scratch.dir.join("shim.ron");
    std::fs::rename(&shim_ron, &aside).unwrap();
    d.spawn();
    let state = d.state();
    let stopper = std::thread::spawn(move || {
        std::process::Command::new(keel_bin())
            .arg("--state")
            .arg(state)
            .args(["stop", "w"])
            .output()
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        alive(shim),
        "nothing may stop a shim the daemon does not hold"
    );
    assert!(
        !stopper.is_finished(),
        "stop answered before the shim was even adopted"
    );
    std::fs::rename(&aside, &shim_ron).unwrap();
    let out = stopper.join().unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        stdout_of(&out).contains("w: stopped"),
        "{}",
        stdout_of(&out)
    );
    wait_until(Duration::from_secs(5), "shim gone", || !alive(shim));
}
