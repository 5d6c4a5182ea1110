//! Restart recovery beyond a plain daemon crash: a simulated host reboot (state kept, every
//! process gone, a new boot id through the `KEEL_TEST_BOOT_ID` hook) resumes each running task
//! in its own checkout; a crash right after the start decision leaves the task queued; a
//! backoff deadline survives a daemon restart.

mod checkout_support;
mod common;
use checkout_support::{git, init_repo};
use common::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A repository on `main` with one commit.
fn make_repo(d: &Daemon) -> PathBuf {
    let repo = d.scratch.dir.join("repo");
    init_repo(&repo);
    std::fs::write(repo.join("f.txt"), "committed\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    repo
}

/// Each attempt appends what it was told and what it finds in its working directory.
const RECORDING: &str =
    "echo \"$KEEL_ATTEMPT $KEEL_RESUMED $KEEL_LAST_EXIT $(cat wip.txt 2>/dev/null)\" \
    >> /run/keel/checkpoint/seen; echo wip-$KEEL_ATTEMPT > wip.txt; exec sleep 300";

fn seen(d: &Daemon, unit: &str) -> String {
    std::fs::read_to_string(d.task_dir(unit).join("checkpoint/seen")).unwrap_or_default()
}

/// The pid recorded in a task's `run/shim.ron` (written once the shim has exec'd, which may be
/// a moment after its agent started).
fn shim_pid(d: &Daemon, unit: &str) -> i32 {
    let path = d.task_dir(unit).join("run/shim.ron");
    wait_until(Duration::from_secs(5), "the shim's record", || {
        path.exists()
    });
    let text = std::fs::read_to_string(&path).unwrap();
    text.split("pid:")
        .nth(1)
        .and_then(|rest| rest.trim().split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .unwrap()
}

#[test]
fn a_reboot_resumes_running_tasks_in_their_own_checkout() {
    if !require_root("reboot") {
        return;
    }
    let mut d = Daemon::prepare("reboot");
    d.env = vec![("KEEL_TEST_BOOT_ID".into(), "boot-one".into())];
    d.spawn();
    let repo = make_repo(&d);
    let with_repo = format!(
        r#"Unit(command: ["/bin/sh", "-c", {RECORDING:?}], repo: Some(Repo(path: {repo:?}, base: "main")), restart: Never)"#,
        repo = repo.display().to_string(),
    );
    // `restart: Never`: a reboot is not the agent's failure, the task resumes all the same.
    d.write_unit("co", &with_repo);
    d.write_unit(
        "plain",
        &format!(r#"Unit(command: ["/bin/sh", "-c", {RECORDING:?}], restart: OnFailure)"#),
    );
    for unit in ["co", "plain"] {
        d.wait_state(unit, "running", Duration::from_secs(30));
        wait_until(Duration::from_secs(10), "attempt 1 ran", || {
            seen(&d, unit).lines().count() == 1
        });
    }
    // The "power cut": the daemon and every shim die at once (by pid: the shims the fixture
    // recorded, each checked to be a `keel shim` of this state directory).
    let shims: Vec<i32> = ["co", "plain"].iter().map(|u| shim_pid(&d, u)).collect();
    d.crash();
    for &pid in &shims {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(String::from_utf8_lossy(&cmdline).contains(&*d.state().to_string_lossy()));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    }
    wait_until(Duration::from_secs(10), "the shims are gone", || {
        shims
            .iter()
            .all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
    });
    // The new boot.
    d.env = vec![("KEEL_TEST_BOOT_ID".into(), "boot-two".into())];
    d.spawn();
    for unit in ["co", "plain"] {
        wait_until(Duration::from_secs(30), "attempt 2 ran", || {
            seen(&d, unit).lines().count() == 2
        });
        let task = d.wait_state(unit, "running", Duration::from_secs(10));
        assert_eq!(task["attempt"], 2, "{task}");
        let lines = seen(&d, unit);
        assert_eq!(lines, "1 0  \n2 1 lost wip-1\n", "{unit}: {lines}");
        let exits: Vec<_> = d
            .events(Some(unit))
            .into_iter()
            .filter(|e| e["event"] == "exited")
            .collect();
        assert_eq!(exits.len(), 1, "{exits:?}");
        assert!(
            exits[0]["detail"].as_str().unwrap().contains("rebooted"),
            "{exits:?}"
        );
    }
    // The checkout's uncommitted file of attempt 1 was there for attempt 2 (above), in the
    // same checkout: its upper layer holds it.
    assert!(d.task_dir("co").join("checkout/upper").exists());
}

#[test]
fn a_crash_after_the_start_decision_leaves_the_task_queued() {
    let mut d = Daemon::prepare("crash-decide");
    let seen = d.task_dir("job").join("work/attempts.txt");
    d.write_unit(
        "job",
        r#"Unit(command: ["/bin/sh", "-c", "echo $KEEL_ATTEMPT >> /work/attempts.txt"], restart: Never)"#,
    );
    d.die_at("after-decide");
    // Nothing of the decision reached the disk or the journal.
    assert!(
        !d.events(Some("job"))
            .iter()
            .any(|e| e["event"] == "starting"),
        "{:?}",
        d.events(Some("job"))
    );
    // Hold the next daemon back from starting it (a held attempt lock defers any start), to
    // read what it recovered: the task as it was before the decision.
    let run = d.task_dir("job").join("run");
    std::fs::create_dir_all(&run).unwrap();
    let lock = std::fs::File::create(run.join("attempt.lock")).unwrap();
    let held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .unwrap();
    d.spawn();
    let task = wait::wait_for(wait::PATIENCE, "job's start deferred", || {
        d.task("job").filter(|t| {
            t["reason"]
                .as_str()
                .unwrap_or("")
                .contains("start deferred")
        })
    });
    assert_eq!(task["state"], "queued", "{task}");
    assert_eq!(task["attempt"], 0, "{task}");
    assert_eq!(task["generation"], 0, "{task}");
    assert!(!seen.exists(), "no attempt ran");
    drop(held);
    let task = d.wait_state("job", "succeeded", Duration::from_secs(20));
    // The first attempt is attempt 1.
    assert_eq!(task["attempt"], 1, "{task}");
    assert_eq!(std::fs::read_to_string(seen).unwrap(), "1\n");
}

#[test]
fn a_backoff_deadline_survives_a_daemon_restart() {
    let mut d = Daemon::start("backoff-restart");
    d.write_unit(
        "flaky",
        r#"Unit(command: ["/bin/sh", "-c", "exit 3"], restart: OnFailure, backoff: Backoff(initial: "4s", max: "4s"))"#,
    );
    let task = d.wait_state("flaky", "backoff", Duration::from_secs(20));
    let until = task["backoff_until_ms"].as_u64().unwrap();
    d.crash();
    d.spawn();
    let task = d.wait_state("flaky", "backoff", Duration::from_secs(20));
    assert_eq!(task["backoff_until_ms"].as_u64().unwrap(), until);
    assert_eq!(task["attempt"], 1);
    // Neither started early nor forgotten: attempt 2 begins at the recorded deadline.
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let task = d.task("flaky").unwrap();
        if task["attempt"].as_u64().unwrap() >= 2 {
            assert!(now_ms() + 50 >= until, "started before its deadline");
            break;
        }
        assert!(Instant::now() < deadline, "never restarted: {task}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
