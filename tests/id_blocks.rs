//! The tasks' blocks of host ids as the daemon hands them out: one per task from `keel.ron`'s
//! range, persisted in `state.ron` before the spawn uses it (and in the attempt's spec), kept
//! across attempts and daemon restarts, free again at `keel rm`; a start with every block
//! held waits without spending the task's attempts.

mod common;
use common::*;
use keel::sandbox::spec::{attempt_path, AttemptSpec, IdBlock};
use std::time::Duration;

const FIRST: u32 = 0x7000_0000;
const SECOND: u32 = 0x7001_0000;

fn write_config(d: &Daemon, text: &str) {
    std::fs::create_dir_all(d.state()).unwrap();
    std::fs::write(d.state().join("keel.ron"), text).unwrap();
}

fn block(first: u32) -> Option<IdBlock> {
    Some(IdBlock {
        first,
        count: 65536,
    })
}

/// The block the spec of `unit`'s current attempt maps.
fn spec_block(d: &Daemon, unit: &str) -> Option<IdBlock> {
    let path = attempt_path(&d.task_dir(unit).join("run"));
    // The clone writes the spec once the agent has started: wait for it.
    let mut spec: Option<AttemptSpec> = None;
    wait_until(Duration::from_secs(10), "the attempt's spec", || {
        spec = keel::state::read_ron(&path).ok().flatten();
        spec.is_some()
    });
    let spec = spec.unwrap();
    spec.sandbox.expect("a sandboxed attempt").id_block
}

const LONG: &str = r#"Unit(command: ["sleep", "300"], resources: Resources(cpu: 0.1))"#;

#[test]
fn each_task_holds_its_own_block_until_it_is_removed() {
    let mut d = Daemon::prepare("id-blocks");
    write_config(
        &d,
        "Config(user_namespaces: UserNamespaces(first_id: 1879048192, blocks: 2))",
    );
    d.spawn();
    d.write_unit("a", LONG);
    d.wait_state("a", "running", Duration::from_secs(10));
    d.write_unit("b", LONG);
    d.wait_state("b", "running", Duration::from_secs(10));
    // The lowest free block each, in the record and in the spec the shim was given.
    assert_eq!(d.record("a").id_block, block(FIRST));
    assert_eq!(d.record("b").id_block, block(SECOND));
    assert_eq!(spec_block(&d, "a"), block(FIRST));
    assert_eq!(spec_block(&d, "b"), block(SECOND));

    // A third task finds every block held: its start waits, and says why.
    d.write_unit("c", LONG);
    wait_until(Duration::from_secs(10), "c's start deferred", || {
        d.events(Some("c")).iter().any(|e| {
            e["event"] == "start-deferred"
                && e["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("all 2 blocks of host ids are held"))
        })
    });
    let c = d.task("c").unwrap();
    assert_eq!(c["state"], "queued", "{c}");
    // Status says why, and the wait spent none of its attempts or restarts.
    assert!(
        c["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("start deferred: all 2 blocks")),
        "{c}"
    );
    assert_eq!(
        (c["attempt"].as_u64(), c["restarts"].as_u64()),
        (Some(0), Some(0)),
        "{c}"
    );
    assert!(
        !d.events(Some("c")).iter().any(|e| e["event"] == "starting"),
        "c never started"
    );

    // A daemon restart: every task resumes with the block its record holds (the queued c,
    // though it may be scheduled first, finds none free).
    assert!(d.shutdown().unwrap().success(), "{}", d.daemon_log());
    d.spawn();
    d.wait_state("a", "running", Duration::from_secs(10));
    d.wait_state("b", "running", Duration::from_secs(10));
    let (a, b) = (d.record("a"), d.record("b"));
    assert_eq!((a.attempt, a.id_block), (2, block(FIRST)));
    assert_eq!((b.attempt, b.id_block), (2, block(SECOND)));
    assert_eq!(spec_block(&d, "a"), block(FIRST));
    assert_eq!(d.task("c").unwrap()["state"], "queued");

    // Removing a frees its block: c starts with it, at its first attempt.
    let out = d.keel(&["rm", "a"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    d.wait_state("c", "running", Duration::from_secs(20));
    let c = d.record("c");
    assert_eq!((c.attempt, c.id_block), (1, block(FIRST)));
    assert_eq!(spec_block(&d, "c"), block(FIRST));
    assert!(d.shutdown().unwrap().success());
}

#[test]
fn with_user_namespaces_off_no_block_is_given_and_a_change_waits_for_the_next_start() {
    let mut d = Daemon::prepare("id-blocks-off");
    write_config(&d, "Config(user_namespaces: Off)");
    d.spawn();
    d.write_unit("a", LONG);
    d.wait_state("a", "running", Duration::from_secs(10));
    assert_eq!(d.record("a").id_block, None);
    assert_eq!(spec_block(&d, "a"), None);
    assert!(
        d.daemon_log().contains("user_namespaces: Off"),
        "the daemon says what Off gives up:\n{}",
        d.daemon_log()
    );
    // Turned on at a reload: the range was not checked at this start, so it waits for the
    // next one, and says so.
    write_config(&d, "Config()");
    let out = d.keel(&["reload"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    d.write_unit("b", LONG);
    d.wait_state("b", "running", Duration::from_secs(10));
    assert_eq!(d.record("b").id_block, None);
    assert!(
        d.daemon_log()
            .contains("user_namespaces changed: it takes effect at the next daemon start"),
        "{}",
        d.daemon_log()
    );
    // At the next start both tasks get a block each.
    assert!(d.shutdown().unwrap().success());
    d.spawn();
    d.wait_state("a", "running", Duration::from_secs(10));
    d.wait_state("b", "running", Duration::from_secs(10));
    let (a, b) = (d.record("a").id_block, d.record("b").id_block);
    let mut firsts = [a.unwrap().first, b.unwrap().first];
    firsts.sort();
    assert_eq!(firsts, [FIRST, SECOND]);
    assert_eq!(spec_block(&d, "b"), b);
    assert!(d.shutdown().unwrap().success());
}

/// A daemon that cannot make user namespaces — here one started chroot(2)ed, which the kernel
/// refuses CLONE_NEWUSER to — refuses to start, saying what to change, instead of failing
/// every sandboxed start and spending its tasks' restarts.
#[test]
fn a_daemon_that_cannot_make_user_namespaces_refuses_to_start() {
    if !require_root("a_daemon_that_cannot_make_user_namespaces_refuses_to_start") {
        return;
    }
    let d = Daemon::prepare("ids-chroot");
    let root = d.scratch.dir.join("chroot");
    std::fs::create_dir_all(&root).unwrap();
    // The host's / bound at `root` in a mount namespace of the test's own: the same paths,
    // but a root that is not its namespace's.
    let script = format!(
        "mount --rbind / {root} && exec chroot {root} \"$@\"",
        root = root.display()
    );
    let stderr = refused_at_start(&d, &script);
    assert!(
        stderr.contains("cannot make a user namespace for the tasks")
            && stderr.contains("chroot")
            && stderr.contains("user_namespaces: Off"),
        "{stderr}"
    );
}

/// Two daemons of one host (state directories of their own) sharing a claims directory, as
/// every daemon of a host shares `/run/keel/id-blocks`.
fn two_daemons(tag: &str, blocks: u32) -> (Daemon, Daemon, std::path::PathBuf) {
    let mut one = Daemon::prepare(&format!("{tag}-one"));
    let mut two = Daemon::prepare(&format!("{tag}-two"));
    // Under the first fixture's directory: removed with it.
    let claims = one.scratch.dir.join("host-claims");
    let config =
        format!("Config(user_namespaces: UserNamespaces(first_id: {FIRST}, blocks: {blocks}))");
    for d in [&mut one, &mut two] {
        write_config(d, &config);
        d.env = vec![("KEEL_ID_CLAIMS_DIR".into(), claims.display().to_string())];
    }
    (one, two, claims)
}

/// Whether process `pid` has a descriptor of the claims file in `claims`.
fn holds_claims_file(pid: i32, claims: &std::path::Path) -> bool {
    let file = claims.join("claims");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == file))
        })
        .unwrap_or(false)
}

#[test]
fn tasks_of_two_daemons_on_one_host_never_share_a_block() {
    if !require_root("tasks_of_two_daemons_on_one_host_never_share_a_block") {
        return;
    }
    let (mut one, mut two, claims) = two_daemons("ids-two", 2);
    one.spawn();
    two.spawn();
    one.write_unit("a", LONG);
    one.wait_state("a", "running", Duration::from_secs(10));
    assert_eq!(one.record("a").id_block, block(FIRST));
    // The other daemon's lowest block is claimed by the first's task: it takes the next.
    two.write_unit("b", LONG);
    two.wait_state("b", "running", Duration::from_secs(10));
    assert_eq!(two.record("b").id_block, block(SECOND));
    assert_eq!(spec_block(&two, "b"), block(SECOND));
    // Its second task finds no block free on the host, and says whose they are.
    two.write_unit("c", LONG);
    wait_until(Duration::from_secs(10), "c's start deferred", || {
        two.events(Some("c")).iter().any(|e| {
            e["event"] == "start-deferred"
                && e["detail"].as_str().is_some_and(|d| {
                    d.contains("all 2 blocks of host ids are held (1 by other keel daemons")
                })
        })
    });
    assert_eq!(two.task("c").unwrap()["state"], "queued");
    // The first daemon's task removed, its block is free on the host: c takes it.
    let out = one.keel(&["rm", "a"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    two.wait_state("c", "running", Duration::from_secs(20));
    assert_eq!(two.record("c").id_block, block(FIRST));
    assert_eq!(spec_block(&two, "c"), block(FIRST));
    for unit in ["b", "c"] {
        let shim = two.record(unit).shim.expect("a running shim").pid;
        assert!(
            holds_claims_file(shim, &claims),
            "{unit}'s shim holds its claim"
        );
    }
    assert!(one.shutdown().unwrap().success(), "{}", one.daemon_log());
    assert!(two.shutdown().unwrap().success(), "{}", two.daemon_log());
    assert!(claims.join("claims").exists());
}

#[test]
fn a_running_tasks_block_stays_claimed_when_its_daemon_is_killed() {
    if !require_root("a_running_tasks_block_stays_claimed_when_its_daemon_is_killed") {
        return;
    }
    let (mut one, mut two, claims) = two_daemons("ids-killed", 4);
    one.spawn();
    one.write_unit("a", LONG);
    one.wait_state("a", "running", Duration::from_secs(10));
    assert_eq!(one.record("a").id_block, block(FIRST));
    let shim = one.record("a").shim.expect("a running shim").pid;
    let mut agent = None;
    wait_until(Duration::from_secs(10), "a's agent", || {
        agent = first_child(shim);
        agent.is_some()
    });
    // The shim keeps the daemon's claim; the agent has none of it.
    assert!(holds_claims_file(shim, &claims), "the shim holds the claim");
    assert!(
        !holds_claims_file(agent.unwrap(), &claims),
        "the agent must not hold the claim"
    );
    // The daemon dies; its task runs on.
    one.crash();
    assert!(
        std::fs::metadata(format!("/proc/{shim}")).is_ok(),
        "the shim outlives its daemon"
    );
    // Another daemon's task does not get the running task's block.
    two.spawn();
    two.write_unit("b", LONG);
    two.wait_state("b", "running", Duration::from_secs(10));
    assert_eq!(two.record("b").id_block, block(SECOND));
    // The first daemon back: it adopts a, whose block its shim still holds.
    one.spawn();
    one.wait_state("a", "running", Duration::from_secs(10));
    let a = one.record("a");
    assert_eq!((a.attempt, a.id_block), (1, block(FIRST)));
    assert_eq!(a.shim.map(|s| s.pid), Some(shim), "adopted, not restarted");
    // Its next attempt (after a stop of the adopted one) keeps its block: the daemon claims
    // it again once that shim is gone.
    let out = one.keel(&["restart", "a"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    wait_until(Duration::from_secs(20), "a's second attempt", || {
        one.task("a")
            .is_some_and(|t| t["state"] == "running" && t["attempt"].as_u64() == Some(2))
    });
    assert_eq!(one.record("a").id_block, block(FIRST));
    assert_eq!(spec_block(&one, "a"), block(FIRST));
    // Its new shim (the daemon's clone, or a spare given the claim by SCM_RIGHTS) holds it.
    let shim = one.record("a").shim.expect("a running shim").pid;
    assert!(
        holds_claims_file(shim, &claims),
        "the new shim holds the claim"
    );
    // And b's daemon, starting another task, still finds FIRST taken.
    two.write_unit("c", LONG);
    two.wait_state("c", "running", Duration::from_secs(10));
    assert_eq!(two.record("c").id_block, block(0x7002_0000));
    assert!(one.shutdown().unwrap().success(), "{}", one.daemon_log());
    assert!(two.shutdown().unwrap().success(), "{}", two.daemon_log());
}

/// A state directory on a filesystem that cannot be idmapped (overlayfs here; tmpfs before
/// Linux 6.3, NFS) makes the daemon refuse to start, naming the kernel and the choices,
/// instead of failing every sandboxed start.
#[test]
fn a_state_directory_that_cannot_be_idmapped_refuses_the_start() {
    if !require_root("a_state_directory_that_cannot_be_idmapped_refuses_the_start") {
        return;
    }
    let d = Daemon::prepare("ids-noidmap");
    let base = d.scratch.dir.join("ovl");
    for sub in ["lower", "upper", "work"] {
        std::fs::create_dir_all(base.join(sub)).unwrap();
    }
    let state = d.state();
    std::fs::create_dir_all(&state).unwrap();
    // The state directory an overlay, in a mount namespace of the test's own.
    let script = format!(
        "mount -t overlay overlay -o lowerdir={b}/lower,upperdir={b}/upper,workdir={b}/work {s} && exec \"$@\"",
        b = base.display(),
        s = state.display()
    );
    let stderr = refused_at_start(&d, &script);
    assert!(
        stderr.contains("cannot idmap keel's state directory")
            && stderr.contains("ext4")
            && stderr.contains("user_namespaces: Off"),
        "{stderr}"
    );
}

/// `d`'s daemon started by `script` (sh, the daemon's command line as its arguments) in a
/// mount namespace of the test's own: it must exit at once with an error; its stderr.
fn refused_at_start(d: &Daemon, script: &str) -> String {
    let daemon = d.daemon_command();
    let out = std::process::Command::new("unshare")
        .args(["--mount", "sh", "-c", script, "sh"])
        .arg(daemon.get_program())
        .args(daemon.get_args())
        .envs(d.daemon_envs())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert!(!out.status.success(), "the daemon started: {stderr}");
    stderr
}

/// A daemon started with SIGCHLD ignored (a parent's disposition survives execve) still makes
/// its tasks' user namespaces — their maker must stay a zombie until its maps are written —
/// and runs a sandboxed task to its end.
#[test]
fn a_daemon_started_with_sigchld_ignored_makes_user_namespaces() {
    if !require_root("a_daemon_started_with_sigchld_ignored_makes_user_namespaces") {
        return;
    }
    let mut d = Daemon::prepare("ids-sigign");
    let daemon = d.daemon_command();
    let log = std::fs::File::create(d.scratch.dir.join("daemon.log")).unwrap();
    // bash (dash's trap does not hand an ignored SIGCHLD on to what it execs).
    let child = std::process::Command::new("bash")
        .args(["-c", "trap '' CHLD; exec \"$@\"", "bash"])
        .arg(daemon.get_program())
        .args(daemon.get_args())
        .envs(d.daemon_envs())
        .stdin(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    d.child = Some(child);
    let socket = d.state().join("keel.sock");
    wait_until(Duration::from_secs(20), "the daemon's socket", || {
        socket.exists() || d.child.as_mut().unwrap().try_wait().unwrap().is_some()
    });
    assert!(
        socket.exists(),
        "the daemon did not start: {}",
        d.daemon_log()
    );
    d.write_unit(
        "t",
        r#"Unit(command: ["/bin/sh", "-c", "grep -q 1879048192 /proc/self/uid_map"], restart: Never)"#,
    );
    d.wait_state("t", "succeeded", Duration::from_secs(30));
}
