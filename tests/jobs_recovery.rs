//! A daemon SIGKILLed while a worker builds a base tree of 100,000 files: the worker dies with
//! it (its death signal), the half-built tree is never trusted (no `ready` marker), and the
//! restarted daemon starts the task again without counting the attempt; the build completes
//! once, and the agent sees every file.

mod checkout_support;
mod common;
mod jobs_support;
use common::wait::wait_for;
use common::*;
use jobs_support::*;
use std::time::Duration;

const BIG: usize = 100_000;

/// The builds in progress under `STATE/bases` (`.<key>.tmp.<pid>.<n>`): their builders' pids.
fn builders(d: &Daemon) -> Vec<i32> {
    std::fs::read_dir(d.state().join("bases"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let (_, after) = name.split_once(".tmp.")?;
            after.split('.').next()?.parse().ok()
        })
        .collect()
}

#[test]
fn a_daemon_killed_mid_build_leaves_nothing_trusted_and_the_build_runs_once_uncounted() {
    if !checkout_support::ready("jobs: crash mid-build") {
        return;
    }
    let mut d = Daemon::start("jobs-crash");
    let repo = many_files_repo(&d.scratch.dir, BIG);
    d.write_unit("big", &counting_unit(&repo, ""));
    // A worker is writing the base tree.
    let builder = wait_for(Duration::from_secs(60), "a base tree build", || {
        builders(&d).into_iter().next()
    });
    assert!(
        worker_pids(&d).contains(&builder),
        "the builder is not a worker"
    );
    d.crash();
    // The worker dies with the daemon.
    wait_until(Duration::from_secs(20), "the worker's death", || {
        !std::path::Path::new(&format!("/proc/{builder}")).exists()
            || std::fs::read_to_string(format!("/proc/{builder}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
    });
    let record = d.record("big");
    assert_eq!(record.state.as_str(), "starting", "{record:?}");
    let bases = d.state().join("bases");
    let ready_bases = || {
        std::fs::read_dir(&bases)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().join("ready").is_file())
            .count()
    };
    assert_eq!(
        ready_bases(),
        0,
        "a base was marked ready before it was whole"
    );
    d.spawn();
    let done = d.wait_state("big", "succeeded", Duration::from_secs(300));
    assert_eq!(
        done["attempt"], 1,
        "the attempt that never began was counted: {done}"
    );
    let count = std::fs::read_to_string(d.task_dir("big").join("checkpoint/count")).unwrap();
    assert_eq!(
        count.trim(),
        BIG.to_string(),
        "the agent saw a partial base"
    );
    let events = d.events(Some("big"));
    let created = events
        .iter()
        .filter(|e| e["event"] == "checkout-created")
        .count();
    assert_eq!(created, 1, "{events:?}");
    let exited: Vec<_> = events.iter().filter(|e| e["event"] == "exited").collect();
    assert_eq!(exited.len(), 1, "one attempt ran: {exited:?}");
    assert_eq!(ready_bases(), 1);
    // The dead builder's half-made tree is gone or going (not reused: a new build made it).
    let log = d.daemon_log();
    assert!(
        log.contains("never began: queued again"),
        "no restart of the start: {log}"
    );
}
