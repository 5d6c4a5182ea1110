//! The example units of `units/examples/` as users will copy them: each passes `keel check`
//! (tests/control.rs), and the shell agent runs for real under the daemon — progress seen in
//! `keel status --json`, killed, resumed from its checkpoint.

mod common;
use common::*;
use std::time::Duration;

const SHELL_AGENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/units/examples/shell-agent.ron"
);

/// The shipped unit, with fewer and shorter steps (its own `env` values, rewritten).
fn fast_shell_agent(steps: u32) -> String {
    let text = std::fs::read_to_string(SHELL_AGENT).unwrap();
    let env = r#"env: {"STEPS": "20", "STEP_SECONDS": "1"}"#;
    assert!(
        text.contains(env),
        "shell-agent.ron's env changed: update this test"
    );
    text.replace(
        env,
        &format!(r#"env: {{"STEPS": "{steps}", "STEP_SECONDS": "0.1"}}"#),
    )
}

fn step_of(progress: &serde_json::Value) -> u32 {
    progress
        .as_str()
        .and_then(|p| p.strip_prefix("step "))
        .and_then(|p| p.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn the_shell_agent_reports_progress_and_resumes_from_its_checkpoint() {
    if !require_root("the_shell_agent_reports_progress_and_resumes_from_its_checkpoint") {
        return;
    }
    let d = Daemon::start("shell-agent");
    d.write_unit("shell-agent", &fast_shell_agent(10));
    // Its progress line shows in `keel status --json` as it goes.
    let mut seen = 0;
    wait_until(Duration::from_secs(20), "step 3 reported", || {
        let task = d.task("shell-agent").unwrap_or_default();
        seen = step_of(&task["progress"]);
        seen >= 3
    });
    let task = d.task("shell-agent").unwrap();
    assert_eq!(task["state"], "running", "{task}");
    assert_eq!(task["attempt"], 1);
    // Killed mid-work (SIGKILL to its process group): the policy restarts it.
    let out = d.keel(&["kill", "shell-agent"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let done = d.wait_state("shell-agent", "succeeded", Duration::from_secs(60));
    assert_eq!(done["attempt"], 2, "{done}");
    assert_eq!(done["progress"], "step 10 of 10 done");
    let log = std::fs::read_to_string(d.task_dir("shell-agent").join("run/output.log")).unwrap();
    assert!(log.contains("attempt 1: starting from step 1"), "{log}");
    // Attempt 2 started after the last step attempt 1 recorded (at least the one seen), and
    // knew how attempt 1 ended.
    let resumed_after: u32 = log
        .lines()
        .find_map(|l| l.strip_prefix("attempt 2: resuming after step "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("attempt 2 did not resume from its checkpoint:\n{log}"));
    assert!(
        resumed_after >= 3,
        "resumed after step {resumed_after}\n{log}"
    );
    assert!(log.contains("(previous attempt: signal:SIGKILL)"), "{log}");
    // Work from before the kill was not redone: attempt 2 worked only on the steps after.
    let redone = log
        .lines()
        .skip_while(|l| !l.starts_with("attempt 2:"))
        .filter(|l| l.starts_with("working on step "))
        .count() as u32;
    assert_eq!(redone, 10 - resumed_after, "{log}");
    // Every step's result is there, once.
    let work = d.task_dir("shell-agent").join("work");
    for step in 1..=10 {
        let text = std::fs::read_to_string(work.join(format!("step-{step}.txt"))).unwrap();
        assert_eq!(text, format!("result of step {step}\n"));
    }
    let files = std::fs::read_dir(&work).unwrap().count();
    assert_eq!(files, 10, "only the ten results in /work");
}
