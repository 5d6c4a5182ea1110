//! The loop never waits (issue 18): a base tree of 100,000 files is built in a worker while
//! the daemon answers `keel health`, serves `keel status` (showing `preparing`) and detects
//! another task's stall; a job past its deadline fails its task with the step, the path and
//! the limit; `keel rm --force` of a hanging removal is answered after its deadline while the
//! loop serves; a stop during a preparation completes at once and kills the worker.
//!
//! The repositories are made with `git fast-import` in the test's scratch directory (on
//! whatever filesystem the temporary directory is: a tmpfs is fine).

mod checkout_support;
mod common;
mod jobs_support;
use common::wait::wait_for;
use common::*;
use jobs_support::*;
use std::time::{Duration, Instant};

const BIG: usize = 100_000;

/// An agent that heartbeats until `/work/stop-beating` exists, then hangs silently.
const BEATING: &str = r#"Unit(
    command: ["/bin/sh", "-c", "while [ ! -e /work/stop-beating ]; do echo beat > $KEEL_PROGRESS; sleep 0.1; done; exec sleep 600"],
    liveness: Liveness(heartbeat_timeout: "1s", startup_grace: "0s"),
    resources: Resources(cpu: 0.2, memory: "64M"),
    restart: Never,
)"#;

#[test]
fn the_loop_serves_health_status_and_stall_detection_while_a_big_base_tree_is_built() {
    if !checkout_support::ready("jobs: big base") {
        return;
    }
    let d = Daemon::start("jobs-big");
    let repo = many_files_repo(&d.scratch.dir, BIG);
    d.write_unit("beating", BEATING);
    d.wait_state("beating", "running", Duration::from_secs(20));
    let probe = HealthProbe::start(&d, Duration::from_millis(50));
    d.write_unit("big", &counting_unit(&repo, ""));
    // Being prepared: `starting`, with its preparation in status.
    let shown = wait_for(Duration::from_secs(30), "big preparing", || {
        preparing(&d, "big")
    });
    let big = d.task("big").unwrap();
    assert_eq!(big["state"], "starting", "{big}");
    assert!(shown["step"].is_string(), "{shown}");
    let table = stdout_of(&d.keel(&["status"]));
    assert!(table.contains("preparing: "), "{table}");
    let full = stdout_of(&d.keel(&["status", "big"]));
    assert!(full.contains("preparing"), "{full}");
    // The other task's heartbeat stops: its stall is seen while the build still runs.
    let stopped_beating = Instant::now();
    std::fs::write(d.task_dir("beating").join("work/stop-beating"), "").unwrap();
    // `restart: Never`: stalled, then failed as stalled.
    wait_for(Duration::from_secs(30), "beating's stall", || {
        d.task("beating")
            .filter(|t| t["state"] == "stalled" || t["last_exit"] == "stalled")
    });
    // On time: within its 1 s timeout and the slack of a busy 2-core machine.
    assert!(
        stopped_beating.elapsed() < Duration::from_secs(15),
        "the stall was seen {:?} after the heartbeats stopped",
        stopped_beating.elapsed()
    );
    assert!(
        preparing(&d, "big").is_some(),
        "the stall was not seen during the build (it ended first): {:?}",
        d.task("big")
    );
    let done = d.wait_state("big", "succeeded", Duration::from_secs(300));
    let (times, misses) = probe.finish();
    assert_eq!(misses, 0, "keel health went unanswered {misses} times");
    assert!(times.len() > 10, "only {} probes", times.len());
    assert_eq!(done["attempt"], 1, "{done}");
    let count = std::fs::read_to_string(d.task_dir("big").join("checkpoint/count")).unwrap();
    assert_eq!(
        count.trim(),
        BIG.to_string(),
        "the agent saw a partial checkout"
    );
    // No worker is left once the jobs are done.
    wait_until(Duration::from_secs(20), "workers gone", || {
        worker_pids(&d).is_empty()
    });
}

#[test]
fn a_preparation_past_its_deadline_fails_its_task_with_the_message_and_the_loop_goes_on() {
    if !checkout_support::ready("jobs: deadline") {
        return;
    }
    let mut d = Daemon::prepare("jobs-deadline");
    std::fs::create_dir_all(d.state()).unwrap();
    std::fs::write(
        d.state().join("keel.ron"),
        r#"Config(jobs: Jobs(preparation_deadline: "2s"))"#,
    )
    .unwrap();
    d.env
        .push(("KEEL_TEST_WORKER_HANG".into(), "checkout".into()));
    d.spawn();
    let repo = many_files_repo(&d.scratch.dir, 10);
    let probe = HealthProbe::start(&d, Duration::from_millis(50));
    d.write_unit("hung", &counting_unit(&repo, ""));
    let failed = d.wait_state("hung", "failed", Duration::from_secs(60));
    let reason = failed["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "checkout preparation of {} took longer than 2",
            repo.display()
        )),
        "{failed}"
    );
    // The loop was never held: health answered throughout, and a plain task still runs.
    d.write_unit("plain", r#"Unit(command: ["/bin/true"], restart: Never)"#);
    d.wait_state("plain", "succeeded", Duration::from_secs(30));
    let (times, misses) = probe.finish();
    assert_eq!(misses, 0, "keel health went unanswered {misses} times");
    assert!(!times.is_empty());
    wait_until(Duration::from_secs(20), "the hung worker killed", || {
        worker_pids(&d).is_empty()
    });
    let log = d.daemon_log();
    assert!(log.contains("killing worker"), "{log}");
}

#[test]
fn a_stop_during_a_preparation_completes_at_once_uncounted_and_kills_the_worker() {
    if !checkout_support::ready("jobs: stop while preparing") {
        return;
    }
    let mut d = Daemon::prepare("jobs-stop");
    d.env
        .push(("KEEL_TEST_WORKER_HANG".into(), "checkout".into()));
    d.spawn();
    let repo = many_files_repo(&d.scratch.dir, 10);
    d.write_unit("held", &counting_unit(&repo, ""));
    wait_for(Duration::from_secs(30), "held preparing", || {
        preparing(&d, "held").filter(|p| p["step"] != "queued")
    });
    assert!(
        !worker_pids(&d).is_empty(),
        "no worker runs the preparation"
    );
    let started = Instant::now();
    let out = d.keel(&["stop", "held"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the stop waited for the preparation"
    );
    let stopped = d.wait_state("held", "stopped", Duration::from_secs(10));
    assert_eq!(
        stopped["attempt"], 0,
        "the attempt that never began counted: {stopped}"
    );
    assert!(stopped["preparing"].is_null(), "{stopped}");
    wait_until(Duration::from_secs(20), "the worker killed", || {
        worker_pids(&d).is_empty()
    });
}

#[test]
fn rm_force_and_prune_are_answered_when_their_job_ends_while_the_loop_serves() {
    if !checkout_support::ready("jobs: deferred answers") {
        return;
    }
    let mut d = Daemon::prepare("jobs-rm");
    std::fs::create_dir_all(d.state()).unwrap();
    std::fs::write(
        d.state().join("keel.ron"),
        r#"Config(jobs: Jobs(deadline: "3s"))"#,
    )
    .unwrap();
    d.env
        .push(("KEEL_TEST_WORKER_HANG".into(), "remove,prune".into()));
    d.spawn();
    let repo = many_files_repo(&d.scratch.dir, 10);
    d.write_unit("gone", &counting_unit(&repo, ""));
    d.wait_state("gone", "succeeded", Duration::from_secs(60));
    // keel prune: its worker hangs; the client waits, the loop does not.
    let state = d.state();
    let prune = std::thread::spawn(move || keel_at(&state, &["prune"]));
    let probe = HealthProbe::start(&d, Duration::from_millis(50));
    let pruned = prune.join().unwrap();
    let said = stderr_of(&pruned) + &stdout_of(&pruned);
    assert!(!pruned.status.success(), "{said}");
    assert!(said.contains("keel prune took longer than 3"), "{said}");
    // keel rm --force: the removal hangs past its deadline; the checkout is kept, and why.
    let state = d.state();
    let rm = std::thread::spawn(move || keel_at(&state, &["rm", "--force", "gone"]));
    let removed = rm.join().unwrap();
    let (times, misses) = probe.finish();
    let said = stdout_of(&removed);
    assert!(removed.status.success(), "{}", stderr_of(&removed));
    assert!(
        said.contains("task directory") && said.contains("took longer than 3"),
        "{said}"
    );
    assert!(d.task_dir("gone").join("checkout").is_dir());
    assert_eq!(misses, 0, "keel health went unanswered {misses} times");
    assert!(times.len() > 20, "only {} probes", times.len());
}

#[test]
fn a_shutdown_during_a_preparation_completes_and_the_next_daemon_starts_it_uncounted() {
    if !checkout_support::ready("jobs: shutdown while preparing") {
        return;
    }
    let mut d = Daemon::prepare("jobs-shutdown");
    d.env
        .push(("KEEL_TEST_WORKER_HANG".into(), "checkout".into()));
    d.spawn();
    let repo = many_files_repo(&d.scratch.dir, 10);
    d.write_unit("held", &counting_unit(&repo, ""));
    wait_for(Duration::from_secs(30), "held preparing", || {
        preparing(&d, "held").filter(|p| p["step"] != "queued")
    });
    let status = d.shutdown().expect("the daemon ran");
    assert!(status.success(), "{status}\n{}", d.daemon_log());
    assert!(worker_pids(&d).is_empty(), "a worker outlived the daemon");
    let record = d.record("held");
    assert_eq!(record.state.as_str(), "queued", "{record:?}");
    assert_eq!(record.attempt, 0, "{record:?}");
    // Without the hang, the next daemon prepares and runs it: attempt 1.
    d.env.clear();
    d.spawn();
    let done = d.wait_state("held", "succeeded", Duration::from_secs(60));
    assert_eq!(done["attempt"], 1, "{done}");
}

#[test]
fn a_worker_past_the_workers_memory_is_killed_and_its_start_deferred_with_the_reason() {
    if !checkout_support::ready("jobs: worker memory") {
        return;
    }
    let mut d = Daemon::prepare("jobs-oom");
    std::fs::create_dir_all(d.state()).unwrap();
    std::fs::write(
        d.state().join("keel.ron"),
        r#"Config(jobs: Jobs(memory: "96M"))"#,
    )
    .unwrap();
    d.env
        .push(("KEEL_TEST_WORKER_HOG".into(), "checkout".into()));
    d.spawn();
    let repo = many_files_repo(&d.scratch.dir, 10);
    d.write_unit("greedy", &counting_unit(&repo, ""));
    // The host's problem, not the unit's: queued again with the reason, no attempt counted.
    let task = wait_for(Duration::from_secs(60), "the OOM kill named", || {
        d.task("greedy").filter(|t| {
            t["reason"]
                .as_str()
                .is_some_and(|r| r.contains("killed by the OOM killer"))
        })
    });
    assert_eq!(task["attempt"], 0, "{task}");
    assert!(health_at(&d.state(), Duration::from_secs(5)).is_some());
    // The daemon itself stayed small.
    let pid = d.child.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert!(rss_kb < 64 * 1024, "the daemon holds {rss_kb} kB");
    let out = d.keel(&["rm", "greedy"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
}

#[test]
fn keel_harvest_is_answered_when_its_job_has_brought_the_branch_home() {
    if !checkout_support::ready("jobs: keel harvest") {
        return;
    }
    let d = Daemon::start("jobs-harvest");
    let repo = many_files_repo(&d.scratch.dir, 10);
    let commit = "git config user.email a@b; git config user.name agent; echo new > new.txt; \
        git add new.txt; git commit -qm from-the-task";
    d.write_unit(
        "h",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", {commit:?}], repo: Some(Repo(path: {repo:?}, base: "main")), restart: Never)"#,
            repo = repo.display().to_string()
        ),
    );
    // A final state means the harvest after the attempt is done.
    d.wait_state("h", "succeeded", Duration::from_secs(60));
    let log = checkout_support::git(&repo, &["log", "-1", "--format=%s", "keel/h"]);
    assert_eq!(log.trim(), "from-the-task");
    // Gone from the main repository: `keel harvest` brings it back, and says so.
    checkout_support::git(&repo, &["branch", "-D", "keel/h"]);
    let probe = HealthProbe::start(&d, Duration::from_millis(50));
    let out = d.keel(&["harvest", "h"]);
    let (_, misses) = probe.finish();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(stdout_of(&out).starts_with("h: "), "{}", stdout_of(&out));
    let log = checkout_support::git(&repo, &["log", "-1", "--format=%s", "keel/h"]);
    assert_eq!(log.trim(), "from-the-task");
    assert_eq!(misses, 0);
}
