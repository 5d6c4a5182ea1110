//! Adoption identity: a restarted daemon takes back a recorded shim only if the pid still
//! names that shim — the same start time, inside the task's own cgroup. A pid that now names
//! another process is not adopted (the attempt is settled as `lost`, saying why), and that
//! process is neither killed nor signalled, then or at the daemon's shutdown.

mod common;
use common::*;
use keel::daemon::record::ShimIdentity;
use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

const WITHIN: Duration = Duration::from_secs(30);

/// The v2 hierarchy's mount point: `/sys/fs/cgroup/unified` on a hybrid host.
fn v2_mount() -> PathBuf {
    let unified = PathBuf::from("/sys/fs/cgroup/unified");
    if unified.join("cgroup.procs").exists() {
        unified
    } else {
        PathBuf::from("/sys/fs/cgroup")
    }
}

/// A cgroup of the test's own in the v2 hierarchy (none of the daemon's): what it created is
/// killed and removed, leaf first, when dropped.
struct ForeignCgroup {
    /// The directories created, outermost first; the last is the leaf.
    created: Vec<PathBuf>,
}

impl ForeignCgroup {
    /// `<tree>-foreign` beside the test's own cgroup, and so beside the daemon's tree (`<tree>`
    /// is that of `task_cgroup`, `…/<tree>/tasks/<unit>`).
    fn beside_the_tree(task_cgroup: &str) -> Self {
        let tree = task_cgroup
            .rsplit('/')
            .nth(2)
            .expect("…/<tree>/tasks/<unit>");
        let own = v2_cgroup_of(std::process::id());
        let dir = v2_mount()
            .join(own.trim_start_matches('/'))
            .join(format!("{tree}-foreign"));
        Self::create(vec![dir])
    }

    /// The last two components of `task_cgroup` (`tasks/<unit>`) at the hierarchy's root: a
    /// cgroup whose whole path is a proper suffix of the task's.
    fn a_suffix_of(task_cgroup: &str) -> Self {
        let parts: Vec<&str> = task_cgroup.trim_start_matches('/').split('/').collect();
        assert!(
            parts.len() > 2,
            "{task_cgroup:?}: too short to take a suffix of"
        );
        let parent = v2_mount().join(parts[parts.len() - 2]);
        let leaf = parent.join(parts[parts.len() - 1]);
        assert!(
            !parent.exists(),
            "{} exists already: not the test's to use",
            parent.display()
        );
        Self::create(vec![parent, leaf])
    }

    fn create(dirs: Vec<PathBuf>) -> Self {
        let mut cgroup = ForeignCgroup {
            created: Vec::new(),
        };
        for dir in dirs {
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            cgroup.created.push(dir);
        }
        cgroup
    }

    fn add(&self, pid: u32) {
        let leaf = self.created.last().unwrap();
        std::fs::write(leaf.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for ForeignCgroup {
    fn drop(&mut self) {
        for dir in self.created.iter().rev() {
            let _ = std::fs::write(dir.join("cgroup.kill"), "1");
            let deadline = std::time::Instant::now() + WITHIN;
            while dir.exists() && std::fs::remove_dir(dir).is_err() {
                if std::time::Instant::now() > deadline {
                    eprintln!("cannot remove {}", dir.display());
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The `0::` line of a process's /proc/<pid>/cgroup: its v2 cgroup.
fn v2_cgroup_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_default()
        .to_string()
}

/// A daemon whose task `job` (restart: Never) runs, SIGKILLed: the shim lives on and holds
/// the attempt lock, so a new daemon will adopt whatever the record names.
fn daemon_killed_under_a_running_task(name: &str) -> (Daemon, ShimIdentity) {
    let mut d = Daemon::start(name);
    d.write_unit("job", r#"Unit(command: ["sleep", "600"], restart: Never)"#);
    let task = d.wait_state("job", "running", WITHIN);
    d.crash();
    let shim = d.record("job").shim.expect("the running shim recorded");
    assert_eq!(task["pid"], shim.pid, "{task}");
    (d, shim)
}

/// A `sleep` of the test's own, started at a later clock tick than `than` (so that its start
/// time tells it apart from the shim's).
fn stranger_started_after(than: u64) -> KillOnDrop {
    loop {
        let child = KillOnDrop(
            Command::new("sleep")
                .arg("600")
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        );
        if keel::sys::process_start_time(child.id() as i32).unwrap() != than {
            return child;
        }
        drop(child);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Point the task's record at `pid` with `start_time`, as a pid reused after the shim's end
/// would look (the daemon is down: the file is the test's to write).
fn record_shim_as(d: &Daemon, pid: u32, start_time: u64) {
    let mut record = d.record("job");
    let shim = record.shim.as_mut().unwrap();
    shim.pid = pid as i32;
    shim.start_time = start_time;
    d.write_record("job", &record);
}

/// Start the daemon: the task must be settled as lost for `why`, the stranger not adopted,
/// and the stranger alive — after the recovery and after an orderly shutdown — until the test
/// kills it itself.
fn assert_not_adopted(d: &mut Daemon, mut stranger: KillOnDrop, why: &str) {
    let pid = stranger.id();
    d.spawn();
    let mut task = Value::Null;
    wait_until(WITHIN, "the task settled or adopted", || {
        task = d.task("job").unwrap_or(Value::Null);
        task["state"] == "failed" || task["pid"] == pid
    });
    assert_eq!(task["state"], "failed", "{task}\n{}", d.daemon_log());
    assert_eq!(task["last_exit"], "lost", "{task}");
    assert!(task["pid"].is_null(), "{task}");
    let events = d.events(Some("job"));
    let adopted = format!("adopted shim pid {pid}");
    assert!(
        !events.iter().any(|e| e["detail"] == adopted.as_str()),
        "{events:?}"
    );
    let exited: Vec<_> = events.iter().filter(|e| e["event"] == "exited").collect();
    assert_eq!(exited.len(), 1, "{exited:?}");
    let detail = exited[0]["detail"].as_str().unwrap_or("");
    assert!(
        detail.starts_with("lost") && detail.contains(why),
        "{detail}"
    );

    let alive_and_running = |stranger: &mut KillOnDrop| {
        stranger.try_wait().unwrap().is_none()
            && std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") S ") || s.contains(") R "))
    };
    assert!(alive_and_running(&mut stranger), "pid {pid} was signalled");
    assert!(d.shutdown().unwrap().success(), "{}", d.daemon_log());
    assert!(
        alive_and_running(&mut stranger),
        "pid {pid} was signalled at shutdown"
    );
    // Still alive until now: it dies of the test's own SIGKILL.
    stranger.kill().unwrap();
    assert_eq!(stranger.wait().unwrap().signal(), Some(libc::SIGKILL));
}

#[test]
fn a_recorded_pid_with_another_start_time_is_not_adopted() {
    if !require_root("adoption") {
        return;
    }
    let (mut d, shim) = daemon_killed_under_a_running_task("adopt-start-time");
    // The shim's pid now names the test's sleep (in the test's own cgroup); the record keeps
    // the shim's start time.
    let stranger = stranger_started_after(shim.start_time);
    record_shim_as(&d, stranger.id(), shim.start_time);
    assert_not_adopted(
        &mut d,
        stranger,
        "its shim's pid now belongs to another process",
    );
}

/// The test's sleep, with its true start time, in a cgroup of the test's (`foreign`, given the
/// task's cgroup) is recorded as the task's shim: refused by cgroup.
fn assert_foreign_cgroup_not_adopted(name: &str, foreign: impl FnOnce(&str) -> ForeignCgroup) {
    let (mut d, shim) = daemon_killed_under_a_running_task(name);
    let task_cgroup = v2_cgroup_of(shim.pid as u32);
    assert!(
        task_cgroup.ends_with("/tasks/job"),
        "the task has no v2 cgroup of its own to check against: {task_cgroup:?}"
    );
    let foreign = foreign(&task_cgroup);
    let stranger = stranger_started_after(shim.start_time);
    foreign.add(stranger.id());
    assert_ne!(v2_cgroup_of(stranger.id()), task_cgroup);
    let start_time = keel::sys::process_start_time(stranger.id() as i32).unwrap();
    record_shim_as(&d, stranger.id(), start_time);
    assert_not_adopted(
        &mut d,
        stranger,
        "its shim's pid names a process outside the task's cgroup",
    );
}

#[test]
fn a_recorded_pid_outside_the_tasks_cgroup_is_not_adopted() {
    if !require_root("adoption") {
        return;
    }
    assert_foreign_cgroup_not_adopted("adopt-cgroup", ForeignCgroup::beside_the_tree);
}

/// The cgroup check compares the whole path: a process in `/tasks/job`, whose path is the end
/// of the task's (`…/<tree>/tasks/job`), is not the task's shim either (a suffix match took
/// it for one).
#[test]
fn a_recorded_pid_in_a_cgroup_named_like_the_tasks_is_not_adopted() {
    if !require_root("adoption") {
        return;
    }
    assert_foreign_cgroup_not_adopted("adopt-lookalike", ForeignCgroup::a_suffix_of);
}
