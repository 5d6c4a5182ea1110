//! A worker that SIGKILL does not end (issue 18): a process in uninterruptible sleep (a dead
//! NFS server, a FUSE daemon that never answers) outlives its kill. Made for real here with a
//! cgroup v1 freezer: a frozen task stays in the kernel's refrigerator (state D) with its
//! SIGKILL pending until it is thawed. The job past its deadline is killed, abandoned after
//! the grace, its task failed with the message, and its owner's next job runs; the worker,
//! thawed at last, dies and is reaped.

mod checkout_support;
mod common;
mod jobs_support;
use common::wait::wait_for;
use common::*;
use jobs_support::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const FREEZER: &str = "/sys/fs/cgroup/freezer";

/// A cgroup v1 freezer cgroup of the test's own: thawed and removed on drop (its processes,
/// killed already, then die).
struct Freezer {
    dir: PathBuf,
}

impl Freezer {
    fn new(name: &str) -> Option<Freezer> {
        if !Path::new(FREEZER).join("cgroup.procs").exists() {
            return None;
        }
        let dir = Path::new(FREEZER).join(format!("keel-test-{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        Some(Freezer { dir })
    }

    /// Move `pid` in and freeze the cgroup; wait until it is `FROZEN`.
    fn freeze(&self, pid: i32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
        std::fs::write(self.dir.join("freezer.state"), "FROZEN").unwrap();
        wait_until(Duration::from_secs(10), "the worker frozen", || {
            std::fs::read_to_string(self.dir.join("freezer.state"))
                .is_ok_and(|s| s.trim() == "FROZEN")
        });
    }

    fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("freezer.state"), "THAWED");
        // Its process has a SIGKILL pending: thawed, it dies; the cgroup empties.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::fs::remove_dir(&self.dir).is_err() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The state letter of `pid` (`/proc/<pid>/stat`), if it exists.
fn state_of(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().next().map(str::to_string)
}

#[test]
fn a_worker_that_does_not_die_of_its_kill_is_abandoned_and_its_owners_next_job_runs() {
    let test = "jobs: abandon a stuck worker";
    if !checkout_support::ready(test) {
        return;
    }
    let mut d = Daemon::prepare("jobs-abandon");
    std::fs::create_dir_all(d.state()).unwrap();
    std::fs::write(
        d.state().join("keel.ron"),
        r#"Config(jobs: Jobs(preparation_deadline: "4s"))"#,
    )
    .unwrap();
    let hang = d.scratch.dir.join("hang");
    std::fs::write(&hang, "").unwrap();
    d.env
        .push(("KEEL_TEST_WORKER_HANG".into(), "checkout".into()));
    d.env.push((
        "KEEL_TEST_WORKER_HANG_WHILE".into(),
        hang.to_string_lossy().into_owned(),
    ));
    d.spawn();
    // Declared after the daemon: dropped (thawed) first, so that the worker dies before the
    // daemon is shut down.
    let Some(freezer) = Freezer::new("abandon") else {
        assert!(
            !privileged_required(),
            "{test}: needs a cgroup v1 freezer at {FREEZER}"
        );
        eprintln!("{test}: skipped: no cgroup v1 freezer at {FREEZER}");
        return;
    };
    let repo = many_files_repo(&d.scratch.dir, 10);
    let probe = HealthProbe::start(&d, Duration::from_millis(50));
    d.write_unit("stuck", &counting_unit(&repo, ""));
    let worker = wait_for(Duration::from_secs(30), "the preparation's worker", || {
        worker_pids(&d).first().copied()
    });
    // Workers run with a modest open-file limit (jobs/process.rs), set as the worker starts:
    // a worker seen in its cgroup at once may not have set it yet.
    let nofile = || {
        let limits = std::fs::read_to_string(format!("/proc/{worker}/limits")).unwrap_or_default();
        limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap_or_default()
            .split_whitespace()
            .skip(3)
            .take(2)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    wait_for(
        Duration::from_secs(10),
        "the worker's open-file limit of 4096",
        || (nofile() == ["4096", "4096"]).then_some(()),
    );
    freezer.freeze(worker);
    // Killed at its deadline, it stays (frozen: state D); after the grace it is abandoned and
    // its task fails with what happened.
    let failed = d.wait_state("stuck", "failed", Duration::from_secs(60));
    let reason = failed["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "checkout preparation of {} took longer than 4",
            repo.display()
        )),
        "{failed}"
    );
    assert!(
        reason.contains("killed, but it did not exit (stuck in the kernel: state D"),
        "{failed}"
    );
    assert_eq!(
        state_of(worker).as_deref(),
        Some("D"),
        "the worker should still be there, frozen"
    );
    let log = d.daemon_log();
    assert!(
        log.contains("abandoned, its owner's next job may start"),
        "{log}"
    );
    // The owner's next job is not held behind the stuck one: a new attempt is prepared
    // (the hook off now) and runs.
    std::fs::remove_file(&hang).unwrap();
    let out = d.keel(&["start", "stuck"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    d.wait_state("stuck", "succeeded", Duration::from_secs(60));
    let count = std::fs::read_to_string(d.task_dir("stuck").join("checkpoint/count")).unwrap();
    assert_eq!(count.trim(), "10");
    let (times, misses) = probe.finish();
    assert_eq!(misses, 0, "keel health went unanswered {misses} times");
    assert!(!times.is_empty());
    // Thawed, the abandoned worker dies of its pending SIGKILL and the daemon reaps it.
    assert_eq!(freezer.pids(), vec![worker]);
    drop(freezer);
    wait_until(
        Duration::from_secs(20),
        "the abandoned worker reaped",
        || state_of(worker).is_none(),
    );
    wait_until(Duration::from_secs(20), "its end logged", || {
        d.daemon_log()
            .contains(&format!("worker {worker} of an abandoned job"))
    });
}
