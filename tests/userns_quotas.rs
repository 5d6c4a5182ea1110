//! Per-user kernel quotas are the task's own (issue 17): a task holding inotify instances up
//! to the host's per-user limit leaves a new daemon able to start, and a task holding epoll
//! watches leaves the daemon answering, its watches charged to another user than root.
//! The host's sysctls are read, never lowered.
//!
//! Needs root (the daemon's sandboxes) and python3 (tests/userns_support).

mod common;
mod userns_support;

use common::sandbox::HostDir;
use common::*;
use std::process::Stdio;
use std::time::{Duration, Instant};
use userns_support::*;

fn sysctl(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// A unit that runs the probe's `action` with `bound`, reporting to `checkpoint/held` and
/// holding until `checkpoint/release` exists.
fn holding_unit(probe: &str, action: &str, bound: u64) -> String {
    let script = format!(
        "exec python3 {probe} {action} {bound} /run/keel/checkpoint/held /run/keel/checkpoint/release"
    );
    format!(r#"Unit(command: ["/bin/sh", "-c", {script:?}], restart: Never)"#)
}

/// Wait for the task's report ("<count> <why it stopped>"); panics with its log if it ended.
fn held(d: &Daemon, unit: &str) -> (u64, String) {
    let report = d.task_dir(unit).join("checkpoint/held");
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        if let Ok(text) = std::fs::read_to_string(&report) {
            break text;
        }
        let ended = d
            .task(unit)
            .is_some_and(|t| t["state"] == "failed" || t["state"] == "succeeded");
        assert!(
            !ended && Instant::now() < deadline,
            "{unit} holds nothing: {}\n{}",
            stdout_of(&d.keel(&["logs", unit])),
            d.daemon_log()
        );
        std::thread::sleep(Duration::from_millis(25));
    };
    let (count, why) = text.trim().split_once(' ').unwrap();
    (count.parse().unwrap(), why.to_string())
}

fn release(d: &Daemon, unit: &str) {
    std::fs::write(d.task_dir(unit).join("checkpoint/release"), "").unwrap();
    d.wait_state(unit, "succeeded", Duration::from_secs(30));
}

/// Start a second daemon on a state directory of its own while the first one's task holds
/// its inotify instances; `Ok` once it answers `keel status`, `Err` with its log if it exits
/// (or does not answer) first. Its fixture shuts it down on drop.
fn second_daemon(second: &mut Daemon) -> Result<(), String> {
    let log_path = second.scratch.dir.join("daemon.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let child = second
        .daemon_command()
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    second.child = Some(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if second.keel(&["status"]).status.success() {
            return Ok(());
        }
        if let Ok(Some(status)) = second.child.as_mut().unwrap().try_wait() {
            second.child = None;
            return Err(format!(
                "exited at start ({status}):\n{}",
                second.daemon_log()
            ));
        }
        if Instant::now() > deadline {
            return Err(format!("does not answer:\n{}", second.daemon_log()));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Inotify instances are counted per user (`fs.inotify.max_user_instances`, 128 by default):
/// a default task creates them until the kernel refuses or it holds that many — what made
/// every new keel daemon fail at start ("cannot initialise inotify … Too many open files")
/// when the task's uid was root's. While it holds them a second daemon starts and answers.
///
/// The kernel counts inotify instances in `ucounts`, charged up the chain of user namespaces:
/// to the task's uid in its namespace and then to the namespace's *owner* (the euid that
/// created it) in the parent (kernel/ucount.c `inc_ucount`). Measured on this kernel (6.18):
/// a process of host uid 100000 in a namespace root created was refused at the same count as
/// root itself; in one uid 100000 created, it held its full 128 beside root's. So this test
/// passes only if the task's user namespace is owned by its block, not by root.
#[test]
fn a_task_holding_its_inotify_limit_leaves_a_new_daemon_able_to_start() {
    let test = "a_task_holding_its_inotify_limit_leaves_a_new_daemon_able_to_start";
    if !ready(test) {
        return;
    }
    let limit = sysctl("/proc/sys/fs/inotify/max_user_instances");
    let dir = HostDir::new("userns-inotify");
    let probe = write_probe(&dir);
    let d = Daemon::start("userns-inotify");
    d.write_unit("hog", &holding_unit(&probe, "inotify", limit));
    let (count, why) = held(&d, "hog");
    let owner = user_namespace_owner(agent_pid(&d, "hog"));
    let mut second = Daemon::prepare("userns-inotify-2");
    let started = second_daemon(&mut second);
    let first_answers = d.keel(&["status"]).status.success();
    // Release before asserting: the host's other daemons must not wait on a failed test.
    release(&d, "hog");
    assert!(
        count >= limit * 3 / 4,
        "the task held only {count} of {limit} inotify instances ({why}): not a test of the quota"
    );
    if let Err(e) = started {
        panic!(
            "with {count} inotify instances held by a task ({why}) whose user namespace is \
             owned by host uid {owner}, a second daemon {e}"
        );
    }
    assert!(first_answers, "the first daemon stopped answering");
    assert!(second.keel(&["health"]).status.success());
}

/// How many watches the epoll task holds: the kernel's per-user limit here
/// (`fs.epoll.max_user_watches`, ~4% of low memory: 5.49 million on the 2-core CI host)
/// would cost ~1 GB of unreclaimable slab to exhaust (a watch is ~200 bytes), so the test
/// holds a bounded number (~40 MB) and asserts what decides whose limit they count against.
const EPOLL_WATCHES: u64 = 200_000;

/// Epoll watches are charged to the user of the real uid that created the epoll instance
/// (fs/eventpoll.c: `ep->user = get_current_user()`; `ep_insert` fails with ENOSPC once that
/// user's `epoll_watches` reach `max_user_watches`) — a per-uid count, not per user
/// namespace. A task whose watches exhausted root's allowance made every keel daemon reset
/// each client (`epoll_ctl` → ENOSPC). So: a task holds [`EPOLL_WATCHES`] watches (checked
/// in the holder's `/proc/<pid>/fdinfo`, one `tfd:` line per watch) while its real uid on the
/// host — the user they are charged to — is its block's, not root's (0); and the daemon
/// answers `keel health` and `keel status` meanwhile. Exhausting the real limit would cost
/// ~1 GB of kernel memory here; a per-uid count of another uid cannot reach root's.
#[test]
fn a_task_holding_epoll_watches_charges_its_own_user_and_the_daemon_answers() {
    let test = "a_task_holding_epoll_watches_charges_its_own_user_and_the_daemon_answers";
    if !ready(test) {
        return;
    }
    let limit = sysctl("/proc/sys/fs/epoll/max_user_watches");
    let bound = EPOLL_WATCHES.min(limit);
    let dir = HostDir::new("userns-epoll");
    let probe = write_probe(&dir);
    let d = Daemon::start("userns-epoll");
    d.write_unit("watches", &holding_unit(&probe, "epoll", bound));
    let (count, why) = held(&d, "watches");
    let holder = agent_pid(&d, "watches");
    let uids = host_ids(holder, "Uid:");
    let watches = epoll_watches_of(holder);
    let health = d.keel(&["health"]);
    let status = d.keel(&["status"]);
    release(&d, "watches");
    assert_eq!(
        (count, why.as_str()),
        (bound, "bound"),
        "the task's watches"
    );
    assert_eq!(watches, bound, "watches in /proc/{holder}/fdinfo");
    assert!(
        uids[0] >= BLOCK_SIZE,
        "the watches are charged to host uid {} (real uid of {holder}: {uids:?}): root's allowance",
        uids[0]
    );
    assert!(
        health.status.success(),
        "keel health: {}",
        stderr_of(&health)
    );
    assert!(
        status.status.success(),
        "keel status: {}",
        stderr_of(&status)
    );
    assert!(
        stdout_of(&status).contains("watches"),
        "{}",
        stdout_of(&status)
    );
}

/// The epoll watches process `pid` holds: `tfd:` lines of its epoll descriptors' fdinfo.
fn epoll_watches_of(pid: i32) -> u64 {
    let mut watches = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let is_epoll = std::fs::read_link(entry.path())
            .is_ok_and(|l| l.to_string_lossy() == "anon_inode:[eventpoll]");
        if is_epoll {
            let info = format!("/proc/{pid}/fdinfo/{}", entry.file_name().to_string_lossy());
            let text = std::fs::read_to_string(&info).unwrap_or_default();
            watches += text.lines().filter(|l| l.starts_with("tfd:")).count() as u64;
        }
    }
    watches
}

/// The host uid that owns the user namespace of host process `pid` (`NS_GET_OWNER_UID`,
/// ioctl_ns(2), asked through python3: no unsafe Rust in a test).
fn user_namespace_owner(pid: i32) -> String {
    let script = "import fcntl, os, struct, sys\n\
        fd = os.open(sys.argv[1], os.O_RDONLY)\n\
        uid = bytearray(4)\n\
        fcntl.ioctl(fd, 0xb704, uid)\n\
        print(struct.unpack('I', uid)[0])";
    let out = std::process::Command::new("python3")
        .args(["-c", script, &format!("/proc/{pid}/ns/user")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "NS_GET_OWNER_UID: {}",
        stderr_of(&out)
    );
    stdout_of(&out).trim().to_string()
}
