//! The cgroup module on a real kernel, as root: limits enforced, OOM watched, escapees killed,
//! trees removed. Each test builds its own tree `keel-test-<pid>-<n>` and moves a helper `sleep`
//! into it (never the test runner itself, which other tests share); a guard kills everything in
//! that tree (cgroup.kill: only processes this test started live there) and removes it, even
//! when the test fails.

// A test crate: its `pre_exec` (joining the cgroups between fork and exec, as the shim does)
// is unsafe by its nature; the block's comment says why it is sound.
#![allow(unsafe_code)]

mod common;

use common::{require_root, KillOnDrop};
use keel::cgroup::{
    detect, join_v1, CgroupError, CgroupFs, Layout, Limits, Mode, RealFs, Removal, TaskCgroup,
    Tree, V1Controller, V1_TASKS, V2_TASKS,
};
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static TREES: AtomicUsize = AtomicUsize::new(0);

/// Removes a test tree from every hierarchy, whatever state the test left it in.
struct Cleanup {
    layout: Layout,
    name: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let v2_root = self.layout.v2_base.join(&self.name);
        if v2_root.exists() {
            // Kills the helper and the task processes this test started, escapees included.
            let _ = RealFs.write(&v2_root.join("cgroup.kill"), "1");
        }
        for base in self.layout.bases() {
            remove_tree(&base.join(&self.name));
        }
    }
}

/// rmdir depth-first, retrying while killed processes exit.
fn remove_tree(dir: &Path) {
    let Ok(children) = RealFs.subdirs(dir) else {
        return;
    };
    for child in children {
        remove_tree(&dir.join(child));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Err(e) = std::fs::remove_dir(dir) {
        if e.raw_os_error() == Some(libc::ENOENT) || Instant::now() > deadline {
            if e.raw_os_error() != Some(libc::ENOENT) {
                eprintln!("cleanup: cannot remove {}: {e}", dir.display());
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct Fixture {
    tree: Tree,
    name: String,
    /// The process standing in for the daemon: it is what `Tree::setup_pid` moves.
    helper: KillOnDrop,
    _cleanup: Cleanup,
}

fn fixture(test: &str) -> Option<Fixture> {
    if !require_root(test) {
        return None;
    }
    let name = format!(
        "keel-test-{}-{}",
        std::process::id(),
        TREES.fetch_add(1, Ordering::SeqCst)
    );
    let layout = detect(&name).unwrap_or_else(|e| panic!("{test}: {e}"));
    let cleanup = Cleanup {
        layout: layout.clone(),
        name: name.clone(),
    };
    let helper = KillOnDrop(Command::new("sleep").arg("600").spawn().unwrap());
    let tree = Tree::setup_pid(layout, &name, helper.id() as i32)
        .unwrap_or_else(|e| panic!("{test}: setup: {e}"));
    Some(Fixture {
        tree,
        name,
        helper,
        _cleanup: cleanup,
    })
}

/// Limits that cap: a CPU limit of `cpu_limit` cores (a quarter core requested), a memory
/// limit of `memory_limit` (half of it requested).
fn limits(cpu_limit: f64, memory_limit: u64, pids: u32) -> Limits {
    Limits {
        cpu_request: 0.25,
        cpu_limit: Some(cpu_limit),
        memory_request: memory_limit / 2,
        memory_limit,
        pids,
    }
}

/// Debian's python, not a pyenv shim (a shell script that forks before it execs).
fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// Start `cmd` inside the task's cgroups: v2 `cgroup.procs` and the v1 files of
/// `TaskCgroup::v1_procs_files` (what the shim does with `join_v1`), between fork and exec.
fn spawn_in(task: &TaskCgroup, cmd: &mut Command) -> KillOnDrop {
    let v2_procs = task.v2_path().join("cgroup.procs");
    let v1_procs = task.v1_procs_files();
    // SAFETY: between fork and exec the closure only opens and writes cgroup files; std builds
    // the C strings of paths this short on the stack, so nothing allocates on success.
    unsafe {
        cmd.pre_exec(move || {
            RealFs.write(&v2_procs, "0")?;
            join_v1(&v1_procs).map_err(|e| std::io::Error::other(e.to_string()))
        });
    }
    KillOnDrop(cmd.spawn().expect("spawn into the task cgroup"))
}

fn cgroup_lines(pid: &str) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The lines of /proc/<pid>/cgroup keel moves: v2, cpu, cpuacct, memory, pids.
fn moved_hierarchy(line: &str) -> bool {
    let controllers = line.split(':').nth(1).unwrap_or("");
    controllers.is_empty()
        || controllers
            .split(',')
            .any(|c| ["cpu", "cpuacct", "memory", "pids"].contains(&c))
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat[stat.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .next()
                .unwrap_or("");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

fn wait_for(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn setup_moves_the_given_process_and_teardown_leaves_nothing() {
    let Some(fx) = fixture("setup_moves_the_given_process_and_teardown_leaves_nothing") else {
        return;
    };
    let layout = fx.tree.layout().clone();
    eprintln!("mode: {}", layout.mode);
    let helper = fx.helper.id().to_string();
    for line in cgroup_lines(&helper) {
        if moved_hierarchy(&line) {
            let leaf = format!("/{}/supervisor", fx.name);
            assert!(line.ends_with(&leaf), "{line} is not in {leaf}");
        }
    }
    for (i, base) in layout.bases().into_iter().enumerate() {
        let tasks = if i == 0 { V2_TASKS } else { V1_TASKS };
        assert!(base.join(&fx.name).join("supervisor").is_dir());
        assert!(
            base.join(&fx.name).join(tasks).is_dir(),
            "{}",
            base.display()
        );
    }

    let task = fx.tree.task("one").unwrap();
    task.create(&limits(1.0, 64 << 20, 64)).unwrap();
    assert_eq!(fx.tree.tasks_present(), vec!["one"]);
    let err = fx.tree.teardown().unwrap_err();
    assert!(
        matches!(err, CgroupError::TasksRemain { .. }),
        "teardown with a task left: {err}"
    );
    assert_eq!(task.try_remove().unwrap(), Removal::Removed);
    assert!(fx.tree.tasks_present().is_empty());

    fx.tree.teardown().unwrap();
    for base in layout.bases() {
        assert!(!base.join(&fx.name).exists(), "{} left", base.display());
    }
    // The helper is back where it (and this test) started.
    assert_eq!(cgroup_lines(&helper), cgroup_lines("self"));
}

#[test]
fn setup_again_over_an_existing_tree() {
    let Some(fx) = fixture("setup_again_over_an_existing_tree") else {
        return;
    };
    // What a restarted daemon does: setup again over the tree that exists, same process.
    let again = Tree::setup_pid(fx.tree.layout().clone(), &fx.name, fx.helper.id() as i32).unwrap();
    let task = again.task("t").unwrap();
    task.create(&limits(1.0, 64 << 20, 64)).unwrap();
    // An existing empty task cgroup is reused.
    task.create(&limits(0.5, 128 << 20, 32)).unwrap();
    task.remove_blocking(Duration::from_secs(5)).unwrap();
    again.teardown().unwrap();
}

#[test]
fn memory_limit_kills_an_allocator_and_the_oom_watch_fires() {
    let Some(fx) = fixture("memory_limit_kills_an_allocator_and_the_oom_watch_fires") else {
        return;
    };
    let task = fx.tree.task("oom").unwrap();
    task.create(&limits(1.0, 32 << 20, 64)).unwrap();
    let mut watch = task.oom_watch().unwrap();
    assert!(!watch.drain().unwrap(), "no OOM yet");

    let mut poll = mio::Poll::new().unwrap();
    let fd = watch.as_raw_fd();
    poll.registry()
        .register(
            &mut mio::unix::SourceFd(&fd),
            mio::Token(1),
            watch.interest(),
        )
        .unwrap();

    let started = Instant::now();
    let mut child = spawn_in(&task, Command::new("tail").arg("/dev/zero"));
    let status = child.wait().unwrap();
    let killed_after = started.elapsed();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");

    let mut events = mio::Events::with_capacity(4);
    poll.poll(&mut events, Some(Duration::from_secs(5)))
        .unwrap();
    assert!(!events.is_empty(), "the OOM watch did not fire");
    assert!(watch.drain().unwrap(), "drain() after an OOM kill");
    assert!(!watch.drain().unwrap(), "the counter rose once");
    let stats = task.stats().unwrap();
    assert!(stats.oom_kills >= 1, "{stats:?}");
    eprintln!(
        "32 MiB limit: `tail /dev/zero` SIGKILLed {killed_after:?} after spawn; peak {:?} B, \
         oom_kills {}",
        stats.memory_peak, stats.oom_kills
    );
    task.remove_blocking(Duration::from_secs(5)).unwrap();
}

/// Forks 40 sleepers, counting the forks that fail.
const FORK_BOMB: &str = r#"import os, time
ok = failed = 0
for _ in range(40):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        continue
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    ok += 1
print(ok, failed, flush=True)
time.sleep(60)
"#;

#[test]
fn pids_limit_holds_a_fork_bomb() {
    let Some(fx) = fixture("pids_limit_holds_a_fork_bomb") else {
        return;
    };
    let task = fx.tree.task("forks").unwrap();
    task.create(&limits(1.0, 256 << 20, 16)).unwrap();
    let mut child = spawn_in(
        &task,
        Command::new(python())
            .args(["-c", FORK_BOMB])
            .stdout(Stdio::piped()),
    );
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let counts: Vec<u32> = line
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let stats = task.stats().unwrap();
    eprintln!(
        "pids.max 16: {} forks succeeded, {} failed; pids.current {}",
        counts[0], counts[1], stats.pids_current
    );
    assert!(stats.pids_current <= 16, "{stats:?}");
    assert!(counts[0] <= 15, "{line}");
    assert!(counts[1] >= 25, "{line}");
    task.kill().unwrap();
    let _ = child.wait();
    task.remove_blocking(Duration::from_secs(5)).unwrap();
}

#[test]
fn cpu_quota_of_half_a_core() {
    let Some(fx) = fixture("cpu_quota_of_half_a_core") else {
        return;
    };
    let task = fx.tree.task("spin").unwrap();
    task.create(&limits(0.5, 64 << 20, 16)).unwrap();
    let mut child = spawn_in(
        &task,
        Command::new("sh").args(["-c", "while :; do :; done"]),
    );
    // Joined every hierarchy keel limits with.
    for line in cgroup_lines(&child.id().to_string()) {
        if moved_hierarchy(&line) {
            let v2 = line.starts_with("0::");
            let tasks = if v2 { V2_TASKS } else { V1_TASKS };
            let leaf = format!("/{}/{tasks}/spin", fx.name);
            assert!(line.ends_with(&leaf), "{line} is not in {leaf}");
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let (before, t0) = (task.stats().unwrap().cpu_usage_usec, Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (after, t1) = (task.stats().unwrap().cpu_usage_usec, Instant::now());
    let share = (after - before) as f64 / (t1 - t0).as_micros() as f64;
    eprintln!("cpu quota 0.5: the busy loop got {share:.3} of a core over 2 s");
    assert!((0.35..=0.65).contains(&share), "share {share:.3}");
    task.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    task.remove_blocking(Duration::from_secs(5)).unwrap();
}

#[test]
fn requests_are_weights_and_no_limit_lifts_a_cap() {
    let Some(fx) = fixture("requests_are_weights_and_no_limit_lifts_a_cap") else {
        return;
    };
    let task = fx.tree.task("weighed").unwrap();
    task.create(&limits(0.5, 64 << 20, 16)).unwrap();
    // The same (reused, empty) cgroup again, with requests only: the cap goes.
    let requests_only = Limits {
        cpu_request: 0.5,
        cpu_limit: None,
        memory_request: 32 << 20,
        memory_limit: 64 << 20,
        pids: 16,
    };
    task.create(&requests_only).unwrap();
    let read = |path: PathBuf| std::fs::read_to_string(&path).unwrap().trim().to_string();
    match fx.tree.mode() {
        Mode::V2 => {
            let dir = task.v2_path();
            assert_eq!(read(dir.join("cpu.weight")), "50");
            assert_eq!(read(dir.join("cpu.max")), "max 100000");
        }
        Mode::Hybrid => {
            let cpu = task.v1_path(V1Controller::Cpu).unwrap();
            assert_eq!(read(cpu.join("cpu.shares")), "512");
            assert_eq!(read(cpu.join("cpu.cfs_quota_us")), "-1");
            let memory = task.v1_path(V1Controller::Memory).unwrap();
            assert_eq!(
                read(memory.join("memory.soft_limit_in_bytes")),
                (32u64 << 20).to_string()
            );
            assert_eq!(
                read(memory.join("memory.limit_in_bytes")),
                (64u64 << 20).to_string()
            );
        }
    }
    task.remove_blocking(Duration::from_secs(5)).unwrap();
}

/// A double fork into a new session: the grandchild is no longer our descendant.
const ESCAPEE: &str = r#"import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(300)
    os._exit(0)
time.sleep(300)
"#;

#[test]
fn kill_takes_a_setsid_escapee_and_the_cgroup_goes() {
    let Some(fx) = fixture("kill_takes_a_setsid_escapee_and_the_cgroup_goes") else {
        return;
    };
    let task = fx.tree.task("escape").unwrap();
    task.create(&limits(1.0, 128 << 20, 64)).unwrap();
    let mut child = spawn_in(&task, Command::new(python()).args(["-c", ESCAPEE]));
    wait_for(Duration::from_secs(10), "the escapee", || {
        task.pids().is_ok_and(|pids| pids.len() == 2)
    });
    let pids = task.pids().unwrap();
    let escapee = *pids.iter().find(|p| **p != child.id() as i32).unwrap();
    assert!(alive(escapee));

    // The daemon learns "populated 0" from cgroup.events through epoll (POLLPRI), as here.
    let events = std::fs::File::open(task.v2_path().join("cgroup.events")).unwrap();
    let mut poll = mio::Poll::new().unwrap();
    poll.registry()
        .register(
            &mut mio::unix::SourceFd(&events.as_raw_fd()),
            mio::Token(0),
            mio::Interest::PRIORITY,
        )
        .unwrap();
    let mut ready = mio::Events::with_capacity(4);
    let start = Instant::now();
    task.kill().unwrap();
    let write_took = start.elapsed();
    while task.populated().unwrap() {
        assert!(start.elapsed() < Duration::from_secs(5), "still populated");
        poll.poll(&mut ready, Some(Duration::from_secs(1))).unwrap();
    }
    let empty_after = start.elapsed();
    task.remove_blocking(Duration::from_secs(5)).unwrap();
    let removed_after = start.elapsed();
    eprintln!(
        "cgroup.kill with a setsid escapee: write {write_took:?}, populated 0 after \
         {empty_after:?}, removed after {removed_after:?}"
    );
    for pid in pids {
        assert!(!alive(pid), "pid {pid} survived cgroup.kill");
    }
    assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
    assert!(!task.v2_path().exists());
    for file in task.v1_procs_files() {
        assert!(!file.parent().unwrap().exists());
    }
    // Already removed: nothing to kill, nothing to remove.
    task.kill().unwrap();
    assert_eq!(task.try_remove().unwrap(), Removal::Removed);
}

#[test]
fn clone_into_cgroup_through_open_v2_dir() {
    let Some(fx) = fixture("clone_into_cgroup_through_open_v2_dir") else {
        return;
    };
    let task = fx.tree.task("clone").unwrap();
    task.create(&limits(1.0, 64 << 20, 16)).unwrap();
    let dir = task.open_v2_dir().unwrap();
    let null = std::fs::File::open("/dev/null").unwrap();
    let program = std::ffi::CString::new("/bin/sleep").unwrap();
    let argv = [
        std::ffi::CString::new("sleep").unwrap(),
        std::ffi::CString::new("30").unwrap(),
    ];
    let request = keel::sys::SpawnRequest {
        program: &program,
        argv: &argv,
        envp: &[],
        stdin: null.as_raw_fd(),
        stdout: null.as_raw_fd(),
        stderr: null.as_raw_fd(),
        extra_flags: 0,
        pid_namespace: None,
        cgroup_fd: Some(dir.as_raw_fd()),
        keep_as_fd3: None,
        keep_fds: &[],
        nofile: None,
        signals_blocked: false,
    };
    let (pid, _pidfd) = keel::sys::spawn_with_pidfd(&request).unwrap();
    let v2_line = cgroup_lines(&pid.to_string())
        .into_iter()
        .find(|l| l.starts_with("0::"))
        .unwrap();
    let members = task.pids().unwrap();
    // Kill and reap before asserting, so that a failure leaves no child behind.
    task.kill().unwrap();
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
    task.remove_blocking(Duration::from_secs(5)).unwrap();
    assert!(
        v2_line.ends_with(&format!("/{}/tasks/clone", fx.name)),
        "{v2_line}"
    );
    assert_eq!(members, vec![pid]);
    assert!(matches!(
        status,
        nix::sys::wait::WaitStatus::Signaled(_, nix::sys::signal::Signal::SIGKILL, _)
    ));
}

#[test]
fn detection_on_this_host() {
    if !require_root("detection_on_this_host") {
        return;
    }
    let layout = detect("keel").unwrap();
    eprintln!("{} {:?}", layout.mode, layout);
    assert!(layout.v2_base.join("cgroup.procs").exists());
    if layout.mode == Mode::Hybrid {
        for (controller, base) in &layout.v1 {
            assert!(base.join("cgroup.procs").exists(), "{controller}");
        }
    }
}
