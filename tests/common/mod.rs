//! A real daemon in a scratch state directory, driven through the real `keel` binary.
//! Every fixture cleans up after itself: it shuts its daemon down, kills (by pid) the shims it
//! started if any survived, and removes its directory.

#![allow(dead_code)]

pub mod sandbox;
pub mod tmpfs;
pub mod wait;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a daemon run with `KEEL_CRASH_AT` may take to reach its point (generous: a busy
/// 2-core CI machine).
pub const CRASH_DEADLINE: Duration = Duration::from_secs(30);

pub fn keel_bin() -> &'static str {
    env!("CARGO_BIN_EXE_keel")
}

/// Tests that need root: when `CI=true` or `KEEL_REQUIRE_PRIVILEGED=1`, a missing privilege is
/// a failure; elsewhere the test is skipped with a note.
pub fn require_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if privileged_required() {
        panic!("{test}: needs root (CAP_SYS_ADMIN for namespaces), and CI=true or KEEL_REQUIRE_PRIVILEGED=1 forbids skipping");
    }
    eprintln!("{test}: skipped: needs root");
    false
}

/// `CI=true` or `KEEL_REQUIRE_PRIVILEGED=1`: a missing privilege or tool fails the test.
pub fn privileged_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("KEEL_REQUIRE_PRIVILEGED").is_ok_and(|v| v == "1")
}

/// Run a `keel` client against the daemon of state directory `state`.
pub fn keel_at(state: &Path, args: &[&str]) -> Output {
    Command::new(keel_bin())
        .arg("--state")
        .arg(state)
        .args(args)
        .output()
        .unwrap()
}

/// The host pid of the child of `unshare --fork` (PID 1 of its namespace).
pub fn forked_child(unshare: &Child) -> i32 {
    let mut pid = None;
    wait_until(Duration::from_secs(5), "unshare forked", || {
        pid = first_child(unshare.id() as i32);
        pid.is_some()
    });
    pid.unwrap()
}

/// The first child of process `pid` (its main thread's), if it has one.
pub fn first_child(pid: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
}

pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "keel-test-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
                % 1_000_000
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("units")).unwrap();
        Scratch { dir }
    }
}

impl Scratch {
    /// A cgroup tree name unique to this scratch directory (`--cgroup-name`): tests run side
    /// by side, each daemon in its own tree.
    pub fn cgroup_name(&self) -> String {
        self.dir.file_name().unwrap().to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Whatever a daemon of this test left in its cgroup tree dies with the test.
        remove_cgroup_tree(&self.cgroup_name());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub struct Daemon {
    pub scratch: Scratch,
    pub child: Option<Child>,
    pub env: Vec<(String, String)>,
    /// This daemon's cgroup tree (`--cgroup-name`), unique per fixture: tests run side by side.
    pub cgroup_name: String,
}

impl Daemon {
    /// A scratch directory with `units/` but no daemon yet.
    pub fn prepare(name: &str) -> Self {
        let scratch = Scratch::new(name);
        Daemon {
            cgroup_name: scratch.cgroup_name(),
            scratch,
            child: None,
            env: Vec::new(),
        }
    }

    pub fn start(name: &str) -> Self {
        let mut d = Self::prepare(name);
        d.spawn();
        d
    }

    pub fn state(&self) -> PathBuf {
        self.scratch.dir.join("state")
    }
    pub fn units(&self) -> PathBuf {
        self.scratch.dir.join("units")
    }
    pub fn task_dir(&self, unit: &str) -> PathBuf {
        self.state().join("tasks").join(unit)
    }

    /// The variables [`Daemon::daemon_command`] sets, for a command that runs the daemon's
    /// program and arguments under a wrapper (`unshare`, `sh -c`).
    pub fn daemon_envs(&self) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        self.daemon_command()
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_os_string(), v?.to_os_string())))
            .collect()
    }

    /// `keel daemon` on this fixture's state, units and cgroup tree.
    pub fn daemon_command(&self) -> Command {
        let mut cmd = Command::new(keel_bin());
        cmd.arg("daemon")
            .arg("--state")
            .arg(self.state())
            .arg("--units")
            .arg(self.units())
            .arg("--cgroup-name")
            .arg(&self.cgroup_name)
            // Claims on blocks of host ids of the fixture's own (tests run side by side, each
            // expecting the lowest blocks); a test sharing one between daemons sets `env`.
            .env("KEEL_ID_CLAIMS_DIR", self.scratch.dir.join("id-claims"));
        cmd
    }

    /// Run a daemon with `KEEL_CRASH_AT=point` until it dies there (it must: the point is
    /// reached during start-up or at a start soon after). Asserts that it died of SIGKILL —
    /// what the crash hook (`state::crash_point`) raises — and that its log names the point,
    /// within [`CRASH_DEADLINE`]; a daemon still alive then is killed and the test fails.
    /// Its log is appended to `daemon.log`.
    pub fn die_at(&self, point: &str) {
        let (mut cmd, log_before) = self.logged_daemon_command();
        // The hook's line is a warning: no inherited KEEL_LOG may hide it.
        cmd.env_remove("KEEL_LOG").env("KEEL_CRASH_AT", point);
        let mut child = cmd.spawn().unwrap();
        let deadline = Instant::now() + CRASH_DEADLINE;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{point}: the daemon did not reach its crash point within {CRASH_DEADLINE:?}\n{}",
                    self.daemon_log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let log = self.daemon_log();
        let this_run = log.get(log_before..).unwrap_or_default();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL),
            "{point}: the daemon should have died of SIGKILL at its crash point, not {status}\n{this_run}"
        );
        assert!(
            this_run.contains(&format!("KEEL_CRASH_AT={point}: dying on purpose")),
            "{point}: the daemon died without reaching its crash point\n{this_run}"
        );
    }

    /// `keel daemon` with the test's environment, its output appended to `daemon.log`, and
    /// that log's length before it starts.
    fn logged_daemon_command(&self) -> (Command, usize) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.scratch.dir.join("daemon.log"))
            .unwrap();
        let log_before = log.metadata().unwrap().len() as usize;
        let mut cmd = self.daemon_command();
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        (cmd, log_before)
    }

    pub fn spawn(&mut self) {
        let (mut cmd, _) = self.logged_daemon_command();
        self.child = Some(cmd.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.keel(&["health"]).status.success() {
            if let Ok(Some(status)) = self.child.as_mut().unwrap().try_wait() {
                panic!("daemon exited at start ({status}):\n{}", self.daemon_log());
            }
            assert!(
                Instant::now() < deadline,
                "daemon does not answer:\n{}",
                self.daemon_log()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Run a client command against this daemon.
    pub fn keel(&self, args: &[&str]) -> Output {
        keel_at(&self.state(), args)
    }

    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.scratch.dir.join("daemon.log")).unwrap_or_default()
    }

    pub fn write_unit(&self, name: &str, text: &str) {
        let tmp = self.units().join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, self.units().join(format!("{name}.ron"))).unwrap();
    }

    /// `keel status --json`, parsed.
    pub fn status(&self) -> Value {
        let out = self.keel(&["status", "--json"]);
        assert!(
            out.status.success(),
            "status failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.daemon_log()
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub fn task(&self, unit: &str) -> Option<Value> {
        self.status()["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["unit"] == unit)
            .cloned()
    }

    /// Wait until `unit` is in `state`; panics with the daemon's log otherwise.
    pub fn wait_state(&self, unit: &str, state: &str, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            if let Some(task) = self.task(unit) {
                if task["state"] == state {
                    return task;
                }
                if Instant::now() > deadline {
                    panic!(
                        "{unit} is {} not {state} after {within:?}\n{}",
                        task,
                        self.daemon_log()
                    );
                }
            } else if Instant::now() > deadline {
                panic!("{unit} unknown after {within:?}\n{}", self.daemon_log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Journal entries, optionally of one unit.
    pub fn events(&self, unit: Option<&str>) -> Vec<Value> {
        let text = std::fs::read_to_string(self.state().join("events.jsonl")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| unit.is_none_or(|u| e["unit"] == u))
            .collect()
    }

    /// `tasks/<unit>/state.ron`, read with the daemon's own type.
    pub fn record(&self, unit: &str) -> keel::daemon::record::TaskRecord {
        let path = self.task_dir(unit).join("state.ron");
        keel::state::read_ron(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .unwrap_or_else(|| panic!("{}: missing", path.display()))
    }

    /// Replace `tasks/<unit>/state.ron` as the daemon writes it (temp file, fsync, rename,
    /// directory fsync). Only while no daemon of this fixture runs: it owns the file.
    pub fn write_record(&self, unit: &str, record: &keel::daemon::record::TaskRecord) {
        assert!(
            self.child.is_none(),
            "state.ron rewritten under a live daemon"
        );
        keel::state::write_ron(&self.task_dir(unit).join("state.ron"), record).unwrap();
    }

    /// Plant `tasks/<unit>/run/exit.ron` as a shim writes it (atomically): an agent of
    /// attempt `attempt`, generation `generation`, that exited 0.
    pub fn plant_exit_record(&self, unit: &str, generation: u64, attempt: u32) {
        let now = keel::state::now_ms();
        let record = keel::sandbox::spec::ExitRecord {
            generation,
            attempt,
            status: keel::sys::wait::AgentStatus::Exited(0),
            agent_pid: 1,
            started_ms: now.saturating_sub(1000),
            ended_ms: now,
            spawn_error: None,
            host_refused: false,
        };
        let run = self.task_dir(unit).join("run");
        keel::state::write_ron(&keel::sandbox::spec::exit_record_path(&run), &record).unwrap();
    }

    /// SIGKILL the daemon (not its tasks) and reap it.
    pub fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Orderly shutdown through the CLI; waits for the daemon to exit.
    pub fn shutdown(&mut self) -> Option<std::process::ExitStatus> {
        let _ = self.keel(&["shutdown"]);
        let mut child = self.child.take()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Pids of shims this daemon's state directory recorded (for cleanup by pid).
    fn recorded_shim_pids(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        if let Ok(entries) = std::fs::read_dir(self.state().join("tasks")) {
            for entry in entries.flatten() {
                let text =
                    std::fs::read_to_string(entry.path().join("run/shim.ron")).unwrap_or_default();
                if let Some(pid) = text
                    .split("pid:")
                    .nth(1)
                    .and_then(|rest| rest.trim().split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|p| p.parse().ok())
                {
                    pids.push(pid);
                }
            }
        }
        pids
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.shutdown();
        }
        // Anything our shims left behind: kill by the pids we recorded, checking that the pid
        // still runs `keel shim` (never by name across the machine).
        for pid in self.recorded_shim_pids() {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let ours = String::from_utf8_lossy(&cmdline).contains(&*self.state().to_string_lossy());
            if ours {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        // A crashed daemon (or a failed test) may leave its cgroup tree: kill what is in it
        // (our own processes, by their cgroup) and remove it.
        remove_cgroup_tree(&self.cgroup_name);
    }
}

/// The directories of cgroup tree `name` in every hierarchy, under this process's own cgroups
/// (where a daemon started by the test creates it), deepest first.
pub fn cgroup_tree_dirs(name: &str) -> Vec<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut roots = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        let mount = match controllers {
            "" => PathBuf::from("/sys/fs/cgroup/unified"),
            c if c.starts_with("name=") => continue,
            c => PathBuf::from("/sys/fs/cgroup").join(c.split(',').next().unwrap_or(c)),
        };
        // A pure v2 host mounts the unified hierarchy at /sys/fs/cgroup itself.
        let mount = if mount.exists() {
            mount
        } else {
            PathBuf::from("/sys/fs/cgroup")
        };
        roots.push(mount.join(path.trim_start_matches('/')).join(name));
    }
    let mut dirs = Vec::new();
    for root in roots {
        let mut stack = vec![root];
        while let Some(dir) = stack.pop() {
            if !dir.is_dir() {
                continue;
            }
            dirs.push(dir.clone());
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(entry.path());
                }
            }
        }
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    dirs
}

pub fn remove_cgroup_tree(name: &str) {
    let dirs = cgroup_tree_dirs(name);
    for dir in &dirs {
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    }
    for dir in &dirs {
        let deadline = Instant::now() + Duration::from_secs(2);
        while dir.exists() && std::fs::remove_dir(dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

pub fn wait_until(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        if Instant::now() > deadline {
            panic!("timed out after {within:?} waiting for: {what}");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

pub fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
pub fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run `cmd` with `input` on its stdin; its output (`what` names it if it cannot start).
pub fn output_with_input(cmd: &mut Command, input: &[u8], what: &str) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

pub fn path_str(path: &Path) -> String {
    path.display().to_string()
}

/// Host pids of every process in the PID namespace whose PID 1 is `shim` (the task's
/// sandbox): found through /proc/<pid>/ns/pid, never by name.
pub fn namespace_members(shim: i32) -> impl Fn() -> Vec<i32> {
    held_pid_namespace(&format!("/proc/{shim}/ns/pid_for_children"))
}

/// Host pids of every process in the PID namespace of `pid` (a container's init).
pub fn pid_namespace_of(pid: i32) -> impl Fn() -> Vec<i32> {
    held_pid_namespace(&format!("/proc/{pid}/ns/pid"))
}

/// The members of the PID namespace `path` names, asked later. Held open, the namespace
/// outlives its processes: its inode number (what `pid:[…]` names) cannot be given to a new
/// namespace — a later attempt's, another test's — while the test asks.
fn held_pid_namespace(path: &str) -> impl Fn() -> Vec<i32> {
    let held = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let ns = std::fs::read_link(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    move || {
        let _held = &held;
        pid_namespace_members(&ns)
    }
}

/// Host pids of the processes in PID namespace `ns` (a `pid:[…]` link).
pub fn pid_namespace_members(ns: &Path) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|l| l == ns))
        .collect()
}

/// A child process this test started, killed (by its pid) and reaped if the test ends — or
/// panics — while it still runs.
pub struct KillOnDrop(pub Child);

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The peak resident memory of process `pid` ("self" for this one) so far, in KiB (`VmHWM` of
/// /proc/<pid>/status).
pub fn peak_rss_kib(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// `some avg10` of a PSI file (`cpu.pressure`, `memory.pressure`, …), in percent.
pub fn some_avg10(file: &Path) -> f64 {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    text.lines()
        .find(|l| l.starts_with("some "))
        .and_then(|l| l.split_whitespace().find_map(|f| f.strip_prefix("avg10=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{}: {text:?}", file.display()))
}
