//! A start the host refuses (a `sandbox.user` it does not have, cgroups it cannot give) never
//! spends the task's restart budget: the task waits, `queued` with `blocked: …`, its attempt
//! number untouched, one `start-blocked` entry per reason, and starts once the host is fixed
//! (at `keel reload`, SIGHUP, or the periodic retry). Real daemon, as root.

mod common;
use common::wait::{holds_throughout, wait_for};
use common::*;
use std::process::Command;
use std::time::Duration;

/// A system user made for the test, removed at the end whatever happens.
struct TestUser(String);

impl TestUser {
    fn name() -> String {
        format!("keel-test-nouser-{}", std::process::id())
    }

    fn create(name: &str) -> TestUser {
        let out = Command::new("useradd")
            .args(["--no-create-home", "--system", name])
            .output()
            .expect("useradd");
        assert!(out.status.success(), "useradd: {}", stderr_of(&out));
        TestUser(name.to_string())
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.0).output();
    }
}

/// The agent says which attempt it is and whether it resumes.
const UNIT_BODY: &str = r#"command: ["/bin/sh", "-c", "echo attempt=$KEEL_ATTEMPT resumed=$KEEL_RESUMED"],
    restart: OnFailure,
    restart_limit: RestartLimit(count: 1, within: "1h"),"#;

fn start_blocked_count(d: &Daemon, unit: &str) -> usize {
    d.events(Some(unit))
        .iter()
        .filter(|e| e["event"] == "start-blocked")
        .count()
}

/// `unit` waits, blocked with a reason holding `needle`, nothing of its attempts spent.
fn wait_blocked(d: &Daemon, unit: &str, needle: &str) -> serde_json::Value {
    let task = wait_for(Duration::from_secs(20), "the start blocked", || {
        d.task(unit).filter(|t| {
            t["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("blocked: "))
        })
    });
    let reason = task["reason"].as_str().unwrap();
    assert!(reason.contains(needle), "{reason}");
    assert_eq!(task["state"], "queued", "{task}");
    assert_eq!(task["attempt"], 0, "{task}");
    assert_eq!(task["restarts"], 0, "{task}");
    task
}

fn assert_never_failed(d: &Daemon, unit: &str) {
    let events = d.events(Some(unit));
    assert!(
        !events
            .iter()
            .any(|e| e["event"] == "failed" || e["event"] == "start-failed"),
        "{events:?}"
    );
}

fn assert_ran_first_attempt(d: &Daemon, unit: &str) {
    let task = d.wait_state(unit, "succeeded", Duration::from_secs(20));
    assert_eq!(task["attempt"], 1, "{task}");
    let out = std::fs::read_to_string(d.task_dir(unit).join("run/output.log")).unwrap_or_default();
    assert!(out.contains("attempt=1 resumed=0"), "{out}");
}

#[test]
fn a_sandbox_user_the_host_lacks_is_refused_by_add_warned_by_check_and_waited_for() {
    if !require_root(
        "a_sandbox_user_the_host_lacks_is_refused_by_add_warned_by_check_and_waited_for",
    ) {
        return;
    }
    let user = TestUser::name();
    // Gone from an earlier run that died before its guard.
    let _ = Command::new("userdel").arg(&user).output();
    let d = Daemon::start("nouser");
    let text = format!("Unit(\n    {UNIT_BODY}\n    sandbox: Sandbox(user: Some({user:?})),\n)\n");
    let file = d.scratch.dir.join("agent.ron");
    std::fs::write(&file, &text).unwrap();

    // `keel add` refuses it, with the fix; nothing installed.
    let out = d.keel(&["add", &path_str(&file)]);
    assert!(!out.status.success(), "{}", stdout_of(&out));
    let err = stderr_of(&out);
    assert!(
        err.contains(&format!("no such user {user:?} on this host")),
        "{err}"
    );
    assert!(
        err.contains(&format!("useradd --create-home {user}")),
        "{err}"
    );
    assert!(err.contains("user: None"), "{err}");
    assert!(!d.units().join("agent.ron").exists());
    // `keel check` passes it with a warning: the unit may be meant for another machine.
    let out = d.keel(&["check", &path_str(&file)]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    assert!(
        err.contains("warning") && err.contains("no such user"),
        "{err}"
    );

    // Written into the units directory by hand: the task waits, visibly.
    d.write_unit("agent", &text);
    wait_blocked(&d, "agent", &format!("no such user {user:?} on this host"));
    let shown = stdout_of(&d.keel(&["status", "agent"]));
    assert!(shown.contains("blocked: no such user"), "{shown}");
    assert_eq!(start_blocked_count(&d, "agent"), 1);
    // Retried at once at a reload: the same reason is not journaled again.
    let out = d.keel(&["reload"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    std::thread::sleep(Duration::from_millis(500));
    wait_blocked(&d, "agent", "no such user");
    assert_eq!(
        start_blocked_count(&d, "agent"),
        1,
        "{:?}",
        d.events(Some("agent"))
    );

    // The user made, a reload: it starts at attempt 1 and succeeds.
    let _made = TestUser::create(&user);
    let out = d.keel(&["reload"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_ran_first_attempt(&d, "agent");
    assert_never_failed(&d, "agent");
}

#[test]
fn cgroups_the_host_cannot_give_never_fail_the_task_and_it_starts_once_they_can() {
    if !require_root("cgroups_the_host_cannot_give_never_fail_the_task_and_it_starts_once_they_can")
    {
        return;
    }
    let mut d = Daemon::prepare("noslice");
    let refuse = d.scratch.dir.join("refuse-slice");
    std::fs::write(&refuse, "").unwrap();
    d.env.push((
        "KEEL_TEST_REFUSE_SLICE_WHILE".into(),
        refuse.display().to_string(),
    ));
    d.spawn();
    d.write_unit("agent", &format!("Unit(\n    {UNIT_BODY}\n)\n"));
    wait_blocked(&d, "agent", "cgroups unavailable");
    // Past a retry or two (5 s, then 10 s): still blocked, never failed, one journal entry.
    holds_throughout(Duration::from_secs(7), "the task stays blocked", || {
        d.task("agent").is_some_and(|t| {
            t["state"] == "queued"
                && t["attempt"] == 0
                && t["reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("blocked: cgroups unavailable"))
        })
    });
    assert_eq!(
        start_blocked_count(&d, "agent"),
        1,
        "{:?}",
        d.events(Some("agent"))
    );
    assert_never_failed(&d, "agent");

    // A daemon restart keeps it blocked, and does not journal the same reason again.
    d.shutdown();
    d.spawn();
    wait_blocked(&d, "agent", "cgroups unavailable");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        start_blocked_count(&d, "agent"),
        1,
        "{:?}",
        d.events(Some("agent"))
    );
    assert_eq!(
        d.record("agent")
            .blocked
            .as_deref()
            .map(|b| b.starts_with("cgroups unavailable")),
        Some(true)
    );

    // Stopped while blocked: stopped, the wait over (no `blocked` left to show or retry).
    let out = d.keel(&["stop", "agent"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    wait_for(Duration::from_secs(10), "the blocked task stopped", || {
        d.task("agent").filter(|t| t["state"] == "stopped")
    });
    assert_eq!(d.record("agent").blocked, None);
    // Started again while the host still refuses: blocked again (journaled anew: the wait
    // before the stop was over), never failed.
    let out = d.keel(&["start", "agent"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    wait_blocked(&d, "agent", "cgroups unavailable");
    assert_never_failed(&d, "agent");

    // The host fixed, SIGHUP: it starts at once, at attempt 1.
    std::fs::remove_file(&refuse).unwrap();
    let pid = d.child.as_ref().unwrap().id() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    assert_ran_first_attempt(&d, "agent");
    assert_never_failed(&d, "agent");
    assert_eq!(d.record("agent").blocked, None);
}

#[test]
fn a_start_the_shim_says_the_host_refused_gives_its_attempt_back_and_waits() {
    if !require_root("a_start_the_shim_says_the_host_refused_gives_its_attempt_back_and_waits") {
        return;
    }
    let mut d = Daemon::prepare("shimrefused");
    let refuse = d.scratch.dir.join("refuse-shim");
    std::fs::write(&refuse, "").unwrap();
    d.env.push((
        "KEEL_TEST_SHIM_REFUSE_WHILE".into(),
        refuse.display().to_string(),
    ));
    d.spawn();
    d.write_unit("agent", &format!("Unit(\n    {UNIT_BODY}\n)\n"));
    let task = wait_blocked(&d, "agent", "KEEL_TEST_SHIM_REFUSE_WHILE");
    assert!(task["generation"].as_u64().unwrap() >= 1, "{task}");
    assert_eq!(task["last_exit"], serde_json::Value::Null, "{task}");
    // A retry (5 s later) is refused again: still no attempt spent, one journal entry.
    wait_until(Duration::from_secs(15), "a second refused start", || {
        d.task("agent")
            .is_some_and(|t| t["generation"].as_u64().unwrap_or(0) >= 2)
    });
    wait_blocked(&d, "agent", "KEEL_TEST_SHIM_REFUSE_WHILE");
    assert_eq!(
        start_blocked_count(&d, "agent"),
        1,
        "{:?}",
        d.events(Some("agent"))
    );
    assert_never_failed(&d, "agent");
    let record = d.record("agent");
    assert_eq!(
        (record.attempt, record.restarts.len()),
        (0, 0),
        "{record:?}"
    );
    assert!(record.recent_exits.is_empty(), "{record:?}");

    std::fs::remove_file(&refuse).unwrap();
    let out = d.keel(&["reload"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_ran_first_attempt(&d, "agent");
    assert_never_failed(&d, "agent");
}
