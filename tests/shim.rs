//! `keel shim` run as the real binary: spec in, records and output log out.
//!
//! Each test works in its own temporary directory (removed at the end) and only ever signals
//! processes it started itself.

mod common;
use common::KillOnDrop;
use keel::sandbox::logs::{rotated_path, tail_lines};
use keel::sandbox::spec::{
    exit_record_path, kill_request_signal, output_log_path, shim_record_path, AttemptSpec,
    ExitRecord, ShimRecord,
};
use keel::state::{read_ron, write_ron};
use keel::sys::wait::AgentStatus;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "keel-shim-test-{}-{}-{name}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("run")).unwrap();
        fs::create_dir_all(dir.join("work")).unwrap();
        TempDir(dir)
    }
    fn run(&self) -> PathBuf {
        self.0.join("run")
    }
    fn spec(&self, argv: &[&str]) -> AttemptSpec {
        AttemptSpec {
            unit: "demo".into(),
            generation: 17,
            attempt: 2,
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![
                ("KEEL_UNIT".into(), "demo".into()),
                ("KEEL_ATTEMPT".into(), "2".into()),
            ],
            cwd: self.0.join("work"),
            run_dir: self.run(),
            log_max_bytes: 10 << 20,
            log_keep: 3,
            // The shim's own behaviour, without a sandbox (tests/sandbox.rs covers that).
            sandbox: None,
            cgroup_v1_procs: Vec::new(),
        }
    }
    fn output(&self) -> String {
        fs::read_to_string(output_log_path(&self.run())).unwrap_or_default()
    }
    fn shim_log(&self) -> String {
        fs::read_to_string(self.run().join("shim.log")).unwrap_or_default()
    }
    fn exit_record(&self) -> Option<ExitRecord> {
        read_ron(&exit_record_path(&self.run())).unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn sh(script: &str) -> Vec<&str> {
    vec!["sh", "-c", script]
}

/// Start `keel shim` on `spec` as the daemon would: stdin /dev/null, stdout+stderr to
/// `run/shim.log`.
fn start(dir: &TempDir, spec: &AttemptSpec, env: &[(&str, &str)]) -> KillOnDrop {
    let spec_path = dir.run().join("attempt.ron");
    write_ron(&spec_path, spec).unwrap();
    let log = fs::File::create(dir.run().join("shim.log")).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_keel"));
    command
        .arg("shim")
        .arg("--spec")
        .arg(&spec_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    for (name, value) in env {
        command.env(name, value);
    }
    KillOnDrop(command.spawn().unwrap())
}

fn wait(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("keel shim did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Run to completion; (shim exit code, exit record).
fn run(dir: &TempDir, spec: &AttemptSpec) -> (i32, ExitRecord) {
    let mut child = start(dir, spec, &[]);
    let status = wait(&mut child, Duration::from_secs(30));
    let record = dir
        .exit_record()
        .unwrap_or_else(|| panic!("no exit record; shim.log:\n{}", dir.shim_log()));
    (status.code().expect("the shim exits, not killed"), record)
}

fn wait_for_output(dir: &TempDir, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dir.output().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "{needle:?} never appeared in the output; shim.log:\n{}",
            dir.shim_log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Send `signal` to a child this test started (and has not reaped: its pid is still its own).
fn signal(pid: u32, signal: i32) {
    let pidfd = keel::sys::pidfd_open(pid as i32).expect("pidfd_open");
    keel::sys::pidfd_send_signal(&pidfd, signal).expect("pidfd_send_signal");
}

/// (state, ppid, pgrp, session) from /proc/<pid>/stat.
fn proc_stat(pid: i32) -> Option<(String, i32, i32, i32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
    Some((
        fields[0].to_string(),
        fields[1].parse().ok()?,
        fields[2].parse().ok()?,
        fields[3].parse().ok()?,
    ))
}

/// Children of `parent` found in /proc: (pid, state).
fn children_of(parent: i32) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some((state, ppid, _, _)) = proc_stat(pid) {
            if ppid == parent {
                found.push((pid, state));
            }
        }
    }
    found
}

#[test]
fn environment_contract() {
    let dir = TempDir::new("env");
    let mut spec = dir.spec(&sh(
        "echo \"$KEEL_UNIT $KEEL_ATTEMPT $FOO ${KEEL_STATE_DIR-unset} ${KEEL_CRASH_AT-unset} \
         ${KEEL_OTHER-unset} ${NOTIFY_SOCKET-unset} ${WATCHDOG_USEC-unset} ${LISTEN_FDS-unset} \
         $PLAIN\"; pwd -P",
    ));
    spec.env.push(("FOO".into(), "from-spec".into()));
    let mut child = start(
        &dir,
        &spec,
        &[
            ("FOO", "inherited"),
            ("KEEL_STATE_DIR", "/var/lib/keel"),
            ("KEEL_CRASH_AT", "nowhere"),
            ("KEEL_OTHER", "z"),
            ("NOTIFY_SOCKET", "/run/notify"),
            ("WATCHDOG_USEC", "100"),
            ("LISTEN_FDS", "1"),
            ("PLAIN", "kept"),
        ],
    );
    assert!(wait(&mut child, Duration::from_secs(10)).success());
    let cwd = fs::canonicalize(&spec.cwd).unwrap();
    assert_eq!(
        dir.output(),
        format!(
            "demo 2 from-spec unset unset unset unset unset unset kept\n{}\n",
            cwd.display()
        )
    );
}

#[test]
fn program_is_found_on_the_agents_path() {
    let dir = TempDir::new("path");
    let bin = dir.0.join("bin");
    fs::create_dir_all(&bin).unwrap();
    let script = bin.join("keel-test-agent");
    fs::write(&script, "#!/bin/sh\necho \"from script: $1\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let mut spec = dir.spec(&["keel-test-agent", "a b"]);
    spec.env
        .push(("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())));
    let (code, record) = run(&dir, &spec);
    assert_eq!((code, record.spawn_error), (0, None));
    assert_eq!(dir.output(), "from script: a b\n");
}

#[test]
fn stdout_and_stderr_keep_their_order() {
    let dir = TempDir::new("order");
    let spec = dir.spec(&sh(
        "i=0; while [ $i -lt 50 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done",
    ));
    let (code, _) = run(&dir, &spec);
    assert_eq!(code, 0);
    let expected: String = (0..50).map(|i| format!("out{i}\nerr{i}\n")).collect();
    assert_eq!(dir.output(), expected);
}

#[test]
fn exit_codes_pass_through() {
    for (script, code, status) in [
        ("exit 0", 0, AgentStatus::Exited(0)),
        ("exit 1", 1, AgentStatus::Exited(1)),
        ("exit 42", 42, AgentStatus::Exited(42)),
        ("kill -9 $$", 137, AgentStatus::Signaled(9)),
    ] {
        let dir = TempDir::new("codes");
        let (shim_code, record) = run(&dir, &dir.spec(&sh(script)));
        assert_eq!(shim_code, code, "{script}");
        assert_eq!(record.status, status, "{script}");
        assert_eq!((record.generation, record.attempt), (17, 2));
        assert_eq!(record.spawn_error, None);
        assert!(record.agent_pid > 0 && record.started_ms <= record.ended_ms);
    }
}

#[test]
fn agent_starts_clean_in_its_own_session() {
    let dir = TempDir::new("attrs");
    let spec = dir.spec(&sh("readlink /proc/self/fd/0; \
         grep -E '^Sig(Blk|Ign)' /proc/self/status; \
         ls /proc/self/fd | tr '\\n' ' '; echo; \
         yes | head -n 1; \
         exec cat /proc/self/stat"));
    let mut child = start(&dir, &spec, &[]);
    let shim_pid = child.id() as i32;
    assert!(wait(&mut child, Duration::from_secs(10)).success());
    let output = dir.output();
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines[0], "/dev/null");
    assert_eq!(lines[1], "SigBlk:\t0000000000000000");
    assert_eq!(lines[2], "SigIgn:\t0000000000000000");
    // 0, 1, 2 and the directory ls is reading: nothing leaked from the shim.
    assert_eq!(lines[3], "0 1 2 3 ");
    // `yes` died of SIGPIPE (default disposition), no "Broken pipe" complaint.
    assert_eq!(lines[4], "y");
    let stat = lines[5];
    let pid: i32 = stat.split(' ').next().unwrap().parse().unwrap();
    let fields: Vec<i32> = stat[stat.rfind(')').unwrap() + 4..]
        .split(' ')
        .take(3)
        .map(|f| f.parse().unwrap())
        .collect();
    assert_eq!(fields, [shim_pid, pid, pid], "ppid, pgrp, session");
    assert_eq!(lines.len(), 6);
}

#[test]
fn records_are_written_and_a_stale_exit_record_removed() {
    let dir = TempDir::new("records");
    let stale = ExitRecord {
        generation: 16,
        attempt: 1,
        status: AgentStatus::Exited(3),
        agent_pid: 1234,
        started_ms: 1,
        ended_ms: 2,
        spawn_error: None,
        host_refused: false,
    };
    write_ron(&exit_record_path(&dir.run()), &stale).unwrap();
    let spec = dir.spec(&sh(
        "trap 'exit 7' TERM; echo ready; while :; do sleep 0.05; done",
    ));
    let mut child = start(&dir, &spec, &[]);
    wait_for_output(&dir, "ready");

    let shim: ShimRecord = read_ron(&shim_record_path(&dir.run())).unwrap().unwrap();
    assert_eq!(shim.pid, child.id() as i32);
    assert_eq!(shim.generation, 17);
    assert_eq!(shim.boot_id, keel::sys::boot_id());
    assert_eq!(
        shim.start_time,
        keel::sys::process_start_time(shim.pid).unwrap()
    );
    assert!(dir.exit_record().is_none(), "the stale exit record is gone");

    // SIGTERM to the shim reaches the agent, which traps it and exits 7.
    signal(child.id(), libc::SIGTERM);
    let status = wait(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(7));
    let record = dir.exit_record().unwrap();
    assert_eq!(record.status, AgentStatus::Exited(7));
    assert_eq!((record.generation, record.attempt), (17, 2));
    assert_ne!(record.agent_pid, shim.pid);
    assert!(dir.shim_log().contains("forwarding SIGTERM"));
}

#[test]
fn kill_request_kills_an_agent_that_ignores_sigterm() {
    let dir = TempDir::new("kill");
    let spec = dir.spec(&sh("trap '' TERM; echo ready; sleep 30; echo survived"));
    let mut child = start(&dir, &spec, &[]);
    wait_for_output(&dir, "ready");
    signal(child.id(), libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "SIGTERM was ignored");
    let asked = Instant::now();
    signal(child.id(), kill_request_signal());
    let status = wait(&mut child, Duration::from_secs(10));
    assert!(asked.elapsed() < Duration::from_secs(5));
    assert_eq!(status.code(), Some(137));
    assert_eq!(dir.exit_record().unwrap().status, AgentStatus::Signaled(9));
    assert!(!dir.output().contains("survived"));
}

#[test]
fn missing_program_is_a_spawn_error() {
    let dir = TempDir::new("missing");
    let (code, record) = run(&dir, &dir.spec(&["keel-no-such-program-xyz", "-p", "hi"]));
    assert_eq!(code, 127);
    assert_eq!(record.status, AgentStatus::Exited(127));
    let message = "spawn failed: keel-no-such-program-xyz: No such file or directory \
                   (is it installed and on PATH?)";
    assert_eq!(record.spawn_error.as_deref(), Some(message));
    assert_eq!((record.generation, record.attempt), (17, 2));
    assert!(dir.output().contains(message));
    assert!(dir.shim_log().contains(message));
}

#[test]
fn bad_working_directory_is_a_spawn_error() {
    let dir = TempDir::new("cwd");
    let mut spec = dir.spec(&["true"]);
    spec.cwd = dir.0.join("no-such-dir");
    let (code, record) = run(&dir, &spec);
    assert_eq!(code, 127);
    assert!(record
        .spawn_error
        .unwrap()
        .starts_with("cannot enter the working directory"));
}

#[test]
fn setup_failures_exit_125() {
    // No spec at all: nothing to record, a message on stderr.
    let dir = TempDir::new("setup");
    let output = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["shim", "--spec"])
        .arg(dir.0.join("missing.ron"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot read the attempt spec"));

    // A spec, but the output log cannot be opened: recorded for the daemon.
    fs::create_dir_all(output_log_path(&dir.run())).unwrap();
    let (code, record) = run(&dir, &dir.spec(&["true"]));
    assert_eq!(code, 125);
    assert_eq!(record.status, AgentStatus::Exited(125));
    assert!(record
        .spawn_error
        .unwrap()
        .starts_with("cannot open the output log"));
}

#[test]
fn orphans_are_reaped() {
    let dir = TempDir::new("orphans");
    let spec = dir.spec(&sh(
        "i=0; while [ $i -lt 200 ]; do (sleep 0.2 &); i=$((i+1)); done; echo spawned; \
         sleep 1.5; echo done",
    ));
    let mut child = start(&dir, &spec, &[]);
    let shim = child.id() as i32;
    wait_for_output(&dir, "spawned");
    // Every orphan has ended by now (0.2 s each); none may linger as a zombie of the shim.
    std::thread::sleep(Duration::from_millis(700));
    let mut zombies = Vec::new();
    for _ in 0..3 {
        zombies = children_of(shim)
            .into_iter()
            .filter(|(_, state)| state == "Z")
            .collect();
        if zombies.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(zombies.is_empty(), "zombies of the shim: {zombies:?}");
    assert!(wait(&mut child, Duration::from_secs(10)).success());
    assert!(dir.output().ends_with("spawned\ndone\n"));
    assert!(
        dir.shim_log().contains("200 orphan(s) reaped"),
        "{}",
        dir.shim_log()
    );
}

#[test]
fn output_is_rotated() {
    let dir = TempDir::new("rotate");
    let mut spec = dir.spec(&sh(
        "i=0; while [ $i -lt 300 ]; do echo \"line $i ..........\"; i=$((i+1)); done",
    ));
    spec.log_max_bytes = 1000;
    spec.log_keep = 2;
    let (code, _) = run(&dir, &spec);
    assert_eq!(code, 0);
    let current = output_log_path(&dir.run());
    for path in [
        current.clone(),
        rotated_path(&current, 1),
        rotated_path(&current, 2),
    ] {
        let size = fs::metadata(&path).unwrap().len();
        assert!(size > 0 && size <= 1000, "{}: {size}", path.display());
    }
    assert!(!rotated_path(&current, 3).exists());
    assert_eq!(
        tail_lines(&current, 3),
        [
            "line 297 ..........",
            "line 298 ..........",
            "line 299 ..........",
        ]
    );
}

#[test]
fn a_fast_writer_is_not_held_back() {
    let dir = TempDir::new("flood");
    let mut spec = dir.spec(&["dd", "if=/dev/zero", "bs=1M", "count=50", "status=none"]);
    spec.log_max_bytes = 20 << 20;
    spec.log_keep = 2;
    let began = Instant::now();
    let (code, _) = run(&dir, &spec);
    let took = began.elapsed();
    assert_eq!(code, 0);
    assert!(took < Duration::from_secs(20), "50 MB took {took:?}");
    let current = output_log_path(&dir.run());
    let total: u64 = [
        current.clone(),
        rotated_path(&current, 1),
        rotated_path(&current, 2),
    ]
    .iter()
    .map(|p| fs::metadata(p).unwrap().len())
    .sum();
    assert_eq!(total, 50 << 20);
}

#[test]
fn the_agent_dies_with_its_shim() {
    let dir = TempDir::new("pdeath");
    let spec = dir.spec(&sh("echo ready; exec sleep 30"));
    let mut child = start(&dir, &spec, &[]);
    wait_for_output(&dir, "ready");
    let agent = children_of(child.id() as i32)
        .first()
        .map(|(pid, _)| *pid)
        .expect("the agent is a child of the shim");
    child.kill().unwrap(); // SIGKILL to the shim we started
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while proc_stat(agent).is_some_and(|(state, ..)| state != "Z") {
        assert!(Instant::now() < deadline, "agent {agent} outlived its shim");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_shim_survives_a_closed_stderr() {
    let dir = TempDir::new("epipe");
    let spec_path = dir.run().join("attempt.ron");
    write_ron(&spec_path, &dir.spec(&sh("sleep 0.2; echo hi"))).unwrap();
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_keel"))
            .arg("shim")
            .arg("--spec")
            .arg(&spec_path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = wait(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    assert_eq!(dir.exit_record().unwrap().status, AgentStatus::Exited(0));
    assert_eq!(dir.output(), "hi\n");
}
