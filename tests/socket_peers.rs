//! Who may talk to the control socket (issue 17, the red team's "root on the host through
//! another daemon"): an agent that finds another daemon's `keel.sock` — or its own daemon's
//! through a second path — is refused, and so is a client in another user namespace or inside
//! a keel task cgroup. Real daemons, real sandboxes, real namespaces and cgroups.

mod common;
use common::sandbox::{run_agent, HostDir, Unmount};
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The keel binary where a sandbox sees it: the agent's `/work` is its own, so the binary
/// under the build's target directory may be hidden; /var/tmp is the host's, read-only.
fn keel_in_sandbox(dir: &HostDir) -> PathBuf {
    let copy = dir.0.join("keel");
    if std::fs::hard_link(keel_bin(), &copy).is_err() {
        std::fs::copy(keel_bin(), &copy).unwrap();
    }
    copy
}

/// A daemon whose state and units live under /var/tmp (visible, read-only, in a default
/// sandbox; `/tmp` is the sandbox's own), cleaned up like any fixture.
fn daemon_under_var_tmp(name: &str) -> Daemon {
    let dir = PathBuf::from(format!("/var/tmp/keel-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("units")).unwrap();
    let scratch = Scratch { dir };
    let mut daemon = Daemon {
        cgroup_name: scratch.cgroup_name(),
        scratch,
        child: None,
        env: Vec::new(),
    };
    daemon.spawn();
    daemon
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The agent's script: `status` and `add` through the daemon at `state`, each followed by a
/// line with its exit code.
fn attack_script(keel: &Path, state: &Path, proof: &Path) -> String {
    format!(
        r#"K={keel}; S={state}
$K --state $S status; echo "status-exit=$?"
cat > /tmp/evil.ron <<'EOF'
Unit(command: ["/bin/sh", "-c", "echo pwned > {proof}"], restart: Never)
EOF
$K --state $S add /tmp/evil.ron; echo "add-exit=$?"
$K --state $S pause --all; echo "pause-exit=$?"
"#,
        keel = keel.display(),
        state = state.display(),
        proof = proof.display(),
    )
}

/// Both client commands failed with the daemon's refusal, and nothing was installed.
fn assert_refused(out: &str, daemon: &Daemon, units_before: &[String], proof: &Path) {
    assert!(
        out.contains("status-exit=1"),
        "status was not refused:\n{out}"
    );
    assert!(out.contains("add-exit=1"), "add was not refused:\n{out}");
    // Nor may it freeze its peers (or itself).
    assert!(
        out.contains("pause-exit=1"),
        "pause was not refused:\n{out}"
    );
    // The agent is told its user namespace (or PID namespace) is not the daemon's.
    let refusals = out.matches("keel: refused: ").count();
    assert_eq!(refusals, 3, "three refusals:\n{out}");
    assert_eq!(
        listing(&daemon.units()),
        units_before,
        "units directory changed"
    );
    assert!(daemon.task("evil").is_none(), "the unit was installed");
    assert!(!proof.exists(), "the installed unit ran on the host");
    let log = daemon.daemon_log();
    // The same refusal is logged once, not once per connection.
    assert_eq!(
        log.matches("control socket: refused a client (pid ")
            .count(),
        1,
        "the refusal is not logged exactly once:\n{log}"
    );
    // The daemon is unharmed.
    assert!(daemon.keel(&["health"]).status.success(), "{log}");
}

/// Make `state` and its socket reachable by any uid, as an operator's `chmod` might: the
/// agent (its own uid since tasks have a user namespace) then gets to the socket, and the
/// daemon's own check of the peer is what must refuse it.
fn open_up(state: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = state.join("keel.sock");
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666)).unwrap();
}

/// With the modes keel gives them, the agent does not reach another daemon's socket at all:
/// its uid is not the host's root, and the state directory is root's alone.
#[test]
fn the_agent_cannot_reach_a_socket_of_roots() {
    if !require_root("the_agent_cannot_reach_a_socket_of_roots") {
        return;
    }
    let a = Daemon::start("peers-modes");
    let b = daemon_under_var_tmp("peers-modes-b");
    let bin = HostDir::new("peers-modes-bin");
    let keel = keel_in_sandbox(&bin);
    let proof = bin.0.join("pwned");
    let script = attack_script(&keel, &b.state(), &proof);
    let (task, out) = run_agent(&a, "agent", &script, "");
    assert_eq!(task["state"], "succeeded", "{task}\n{out}");
    assert_eq!(
        out.matches("Permission denied").count(),
        3,
        "every command stopped at the socket's path:\n{out}"
    );
    assert!(b.task("evil").is_none(), "the unit was installed");
    assert!(!proof.exists(), "the installed unit ran on the host");
}

#[test]
fn another_daemons_socket_refuses_the_agent() {
    if !require_root("another_daemons_socket_refuses_the_agent") {
        return;
    }
    let a = Daemon::start("peers-a");
    let b = daemon_under_var_tmp("peers-b");
    let bin = HostDir::new("peers-bin");
    let keel = keel_in_sandbox(&bin);
    let proof = bin.0.join("pwned");
    let units_before = listing(&b.units());
    open_up(&b.state());
    let script = attack_script(&keel, &b.state(), &proof);
    let (task, out) = run_agent(&a, "agent", &script, "");
    assert_eq!(task["state"], "succeeded", "{task}\n{out}");
    assert_refused(&out, &b, &units_before, &proof);
    assert!(a.keel(&["health"]).status.success());
}

#[test]
fn this_daemons_socket_through_a_second_path_refuses_its_own_agent() {
    if !require_root("this_daemons_socket_through_a_second_path_refuses_its_own_agent") {
        return;
    }
    let a = Daemon::start("peers-own");
    let bin = HostDir::new("peers-own-bin");
    let keel = keel_in_sandbox(&bin);
    let proof = bin.0.join("pwned");
    // A's state directory at a second path: keel hides it by its own path only.
    let second = HostDir::new("peers-own-second");
    let status = Command::new("mount")
        .args(["--bind"])
        .arg(a.state())
        .arg(&second.0)
        .status()
        .unwrap();
    assert!(status.success(), "mount --bind");
    let _unmount = Unmount(second.0.clone());
    assert!(second.0.join("keel.sock").exists());
    assert!(listing(&a.units()).is_empty());
    open_up(&a.state());
    let script = attack_script(&keel, &second.0, &proof);
    let (task, out) = run_agent(&a, "agent", &script, "");
    assert_eq!(task["state"], "succeeded", "{task}\n{out}");
    // The agent's own unit is the only one.
    assert_refused(&out, &a, &["agent.ron".to_string()], &proof);
}

#[test]
fn a_client_in_another_user_namespace_is_refused() {
    if !require_root("a_client_in_another_user_namespace_is_refused") {
        return;
    }
    let a = Daemon::start("peers-userns");
    // Root in a user namespace of its own (uid 0 maps to the host's 0: SO_PEERCRED says 0).
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user"])
        .arg(keel_bin())
        .arg("--state")
        .arg(a.state())
        .arg("status")
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refused: the client is in user namespace"),
        "{stderr}"
    );
    assert!(a.daemon_log().contains("the client is in user namespace"));
    // The test's own namespaces: accepted.
    assert!(a.keel(&["status"]).status.success(), "{}", a.daemon_log());
}

/// A daemon in a PID namespace of its own (as in a container, `unshare --pid`), its state
/// directory shared; a client in another PID namespace beside it (where another keel's agent
/// is) shows as pid 0 and is refused — unless the daemon was started to let its host in.
#[test]
fn a_client_outside_the_daemons_pid_namespace_is_refused_unless_let_in() {
    if !require_root("a_client_outside_the_daemons_pid_namespace_is_refused_unless_let_in") {
        return;
    }
    for let_in in [false, true] {
        let d = Daemon::prepare(if let_in {
            "peers-outside-in"
        } else {
            "peers-outside"
        });
        let daemon = d.daemon_command();
        let mut command = Command::new("unshare");
        command
            .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
            .arg(daemon.get_program())
            .args(daemon.get_args())
            .envs(d.daemon_envs())
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(d.scratch.dir.join("daemon.log")).unwrap());
        if let_in {
            command.env("KEEL_ACCEPT_OUTSIDE_CLIENTS", "1");
        }
        let _running = KillOnDrop(command.spawn().unwrap());
        let socket = d.state().join("keel.sock");
        wait_until(wait::PATIENCE, "the daemon's socket", || socket.exists());
        // From a PID namespace beside the daemon's.
        let sibling = || {
            Command::new("unshare")
                .args(["--pid", "--fork"])
                .arg(keel_bin())
                .arg("--state")
                .arg(d.state())
                .arg("status")
                .output()
                .unwrap()
        };
        if let_in {
            let mut out = sibling();
            wait_until(wait::PATIENCE, "the daemon answering", || {
                out = sibling();
                out.status.success()
            });
        } else {
            let mut out = sibling();
            // The socket may exist a moment before the daemon reads it: wait for an answer.
            wait_until(wait::PATIENCE, "an answer", || {
                out = sibling();
                stderr_of(&out).contains("refused")
            });
            let stderr = stderr_of(&out);
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            assert!(
                stderr.contains("outside the daemon's PID namespace"),
                "{stderr}"
            );
        }
    }
}

/// A keel tree of the test's own making in the v2 hierarchy (below the test's cgroup), with
/// or without `supervisor/` beside `tasks/`, and one task cgroup in it; removed at the end.
struct FakeTree {
    root: PathBuf,
    task: PathBuf,
}

impl FakeTree {
    fn new(name: &str, with_supervisor: bool) -> FakeTree {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let path = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
        let mount = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(PathBuf::from)
            .find(|m| m.join("cgroup.procs").exists())
            .unwrap();
        let root = mount
            .join(path.trim_start_matches('/'))
            .join(format!("{name}-{}", std::process::id()));
        let task = root.join("tasks").join("unit");
        std::fs::create_dir_all(&task).unwrap();
        if with_supervisor {
            std::fs::create_dir(root.join("supervisor")).unwrap();
        }
        FakeTree { root, task }
    }

    /// `keel --state STATE status` run from inside the task cgroup: moved there before it
    /// execs keel (it waits on its stdin until then).
    fn client_status(&self, state: &Path) -> std::process::Output {
        let mut child = Command::new("sh")
            .args(["-c", "read go; exec \"$0\" --state \"$1\" status"])
            .arg(keel_bin())
            .arg(state)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::fs::write(self.task.join("cgroup.procs"), child.id().to_string()).unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        child.wait_with_output().unwrap()
    }
}

impl Drop for FakeTree {
    fn drop(&mut self) {
        let _ = std::fs::write(self.task.join("cgroup.kill"), "1");
        for dir in [
            self.task.clone(),
            self.root.join("tasks"),
            self.root.join("supervisor"),
            self.root.clone(),
        ] {
            wait_until(std::time::Duration::from_secs(10), "cgroup removed", || {
                !dir.exists() || std::fs::remove_dir(&dir).is_ok()
            });
        }
    }
}

#[test]
fn a_client_inside_a_keel_task_cgroup_is_refused_in_the_daemons_namespaces() {
    if !require_root("a_client_inside_a_keel_task_cgroup_is_refused_in_the_daemons_namespaces") {
        return;
    }
    let a = Daemon::start("peers-cgroup");
    // Another keel's tree (any name: recognised by `supervisor/` beside `tasks/`).
    let tree = FakeTree::new("peers-fake-keel", true);
    let out = tree.client_status(&a.state());
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refused: the client is inside a keel sandbox (cgroup /")
            && stderr.contains("/tasks/unit)"),
        "{stderr}"
    );
    // The same layout without `supervisor/` is not keel's: accepted.
    let other = FakeTree::new("peers-not-keel", false);
    let out = other.client_status(&a.state());
    assert!(out.status.success(), "{}", stderr_of(&out));
}
