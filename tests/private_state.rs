//! Keel's files are private whatever the mode of the state directory the operator made: a
//! state directory made 0755, a daemon under umask 022, a task with a repository and an `env`
//! secret — and an unprivileged user (uid 65534, through `setpriv`) can read none of the unit
//! copy, the output log, the journal, a base tree's file or the checkout's; while root's
//! `keel status` works and a `sandbox.user` task still writes its `/work` (and commits),
//! checkpoint and progress. And an earlier installation's wider modes are tightened at start.
//!
//! Needs root (the daemon's sandboxes and mounts) and the `setpriv` and `git` commands.

mod checkout_support;
mod common;

use checkout_support::{git, init_repo};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const SECRET: &str = "sk-private-state-test-4242";
const NOBODY: u32 = 65534;

fn ready(test: &str) -> bool {
    if !checkout_support::ready(test) {
        return false;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        assert!(
            !privileged_required(),
            "{test}: needs the setpriv command (util-linux)"
        );
        eprintln!("{test}: skipped: no setpriv command");
        return false;
    }
    true
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// `setpriv` to uid/gid 65534 without supplementary groups, then `args`.
fn as_nobody(args: &[&str], path: &Path) -> Output {
    Command::new("setpriv")
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
        ])
        .args(args)
        .arg(path)
        .output()
        .unwrap()
}

/// `path` exists (root sees it) and uid 65534 cannot read it: permission denied.
fn assert_hidden(what: &str, path: &Path) {
    assert!(
        std::fs::symlink_metadata(path).is_ok(),
        "{what}: {} should exist",
        path.display()
    );
    let out = as_nobody(&["cat"], path);
    assert!(
        !out.status.success() && stderr_of(&out).contains("Permission denied"),
        "{what}: {} is readable by uid {NOBODY} (or failed otherwise): {}{}",
        path.display(),
        stdout_of(&out),
        stderr_of(&out)
    );
}

/// A daemon fixture whose state directory is made 0755 by the "operator" (the test), with
/// `prepare` run on it before the daemon starts; the daemon runs under umask 022.
fn daemon_on_open_state(name: &str, prepare: impl FnOnce(&Path)) -> Daemon {
    let mut d = Daemon::prepare(name);
    // What nobody must be able to reach: the scratch directory itself (and /tmp) are open.
    set_mode(&d.scratch.dir, 0o755);
    set_mode(&d.units(), 0o755);
    std::fs::create_dir(d.state()).unwrap();
    set_mode(&d.state(), 0o755);
    prepare(&d.state());
    // The daemon inherits this process's umask: the operator's usual 022.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    d.spawn();
    let pid = d.child.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status.lines().any(|l| l == "Umask:\t0022"),
        "the daemon should run under umask 022:\n{status}"
    );
    d
}

/// A repository on `main` with a few files, in the (open) scratch directory.
fn make_repo(d: &Daemon) -> PathBuf {
    let repo = d.scratch.dir.join("repo");
    init_repo(&repo);
    std::fs::write(repo.join("f0.txt"), "a file of the repository\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "commit 0"]);
    repo
}

fn unit_with_repo(repo: &Path, script: &str, extra: &str) -> String {
    format!(
        r#"Unit(command: ["/bin/sh", "-c", {script:?}], repo: Some(Repo(path: {repo:?}, base: "main")), restart: Never, {extra})"#,
        repo = repo.display().to_string(),
    )
}

/// The one file `name` of a base tree under `state/bases`.
fn base_tree_file(state: &Path, name: &str) -> PathBuf {
    let bases = state.join("bases");
    let found: Vec<PathBuf> = std::fs::read_dir(&bases)
        .unwrap_or_else(|e| panic!("{}: {e}", bases.display()))
        .flatten()
        .map(|e| e.path().join("tree").join(name))
        .filter(|p| p.is_file())
        .collect();
    assert!(
        !found.is_empty(),
        "no base tree with {name} in {}",
        bases.display()
    );
    found[0].clone()
}

/// A file the agent wrote in its checkout, on the host (the overlay's upper layer, or a full
/// checkout's files).
fn checkout_file(d: &Daemon, unit: &str, name: &str) -> PathBuf {
    let checkout = d.task_dir(unit).join("checkout");
    ["upper", "files"]
        .iter()
        .map(|layer| checkout.join(layer).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not in the checkout of {unit}"))
}

fn wait_succeeded(d: &Daemon, unit: &str) {
    let task = d.wait_state(unit, "succeeded", Duration::from_secs(30));
    assert_eq!(
        task["last_exit"],
        "exit:0",
        "{unit}: {}\n{}",
        stdout_of(&d.keel(&["logs", unit])),
        std::fs::read_to_string(d.task_dir(unit).join("run/shim.log")).unwrap_or_default()
    );
}

#[test]
fn nothing_keel_writes_is_readable_by_another_user_in_a_state_directory_made_0755() {
    let test = "nothing_keel_writes_is_readable_by_another_user_in_a_state_directory_made_0755";
    if !ready(test) {
        return;
    }
    let d = daemon_on_open_state("private-open", |_| {});
    let repo = make_repo(&d);
    // The control: uid 65534 can reach and read what is not keel's, beside the state.
    let open = d.scratch.dir.join("open.txt");
    std::fs::write(&open, "open\n").unwrap();
    set_mode(&open, 0o644);
    let out = as_nobody(&["cat"], &open);
    assert!(
        out.status.success(),
        "setpriv cat as uid {NOBODY} of an open file: {}",
        stderr_of(&out)
    );

    let script = "set -e; echo \"token $TOKEN\"; echo \"$TOKEN\" > agent.txt; \
        echo working > $KEEL_PROGRESS";
    d.write_unit(
        "secret",
        &unit_with_repo(&repo, script, &format!(r#"env: {{"TOKEN": {SECRET:?}}}"#)),
    );
    wait_succeeded(&d, "secret");

    let unit_copy = d.task_dir("secret").join("unit.ron");
    let output_log = d.task_dir("secret").join("run/output.log");
    for path in [&unit_copy, &output_log] {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.contains(SECRET), "{}: {text}", path.display());
    }
    assert_hidden("the unit copy (its env)", &unit_copy);
    assert_hidden("the output log", &output_log);
    assert_hidden("the task record", &d.task_dir("secret").join("state.ron"));
    assert_hidden("the shims' log", &d.task_dir("secret").join("run/shim.log"));
    assert_hidden("the journal", &d.state().join("events.jsonl"));
    assert_hidden(
        "a file of the base tree",
        &base_tree_file(&d.state(), "f0.txt"),
    );
    assert_hidden(
        "a file of the checkout",
        &checkout_file(&d, "secret", "agent.txt"),
    );
    assert_hidden(
        "the task's git directory",
        &d.task_dir("secret").join("checkout/git/config"),
    );
    // The state directory itself is left as the operator made it.
    assert_eq!(mode_of(&d.state()), 0o755);

    // Root's client still works.
    let out = d.keel(&["status"]);
    assert!(out.status.success(), "keel status: {}", stderr_of(&out));
    assert!(stdout_of(&out).contains("secret"), "{}", stdout_of(&out));

    // A task run as another user still writes its /work (and commits there), its
    // checkpoint and its progress.
    let script = "set -e; test \"$(id -u)\" = 65534; echo by-user > user.txt; \
        git add user.txt; git commit -qm 'by the user'; \
        echo saved > /run/keel/checkpoint/saved; echo 'user progress' >> $KEEL_PROGRESS";
    d.write_unit(
        "user",
        &unit_with_repo(
            &repo,
            script,
            r#"sandbox: Sandbox(user: Some("65534:65534"))"#,
        ),
    );
    wait_succeeded(&d, "user");
    let checkpoint = d.task_dir("user").join("checkpoint/saved");
    assert_eq!(std::fs::read_to_string(&checkpoint).unwrap(), "saved\n");
    let progress = d.task_dir("user").join("run/progress");
    assert!(std::fs::read_to_string(&progress)
        .unwrap()
        .contains("user progress"));
    assert_eq!(
        std::fs::read_to_string(checkout_file(&d, "user", "user.txt")).unwrap(),
        "by-user\n"
    );
    wait_until(
        Duration::from_secs(20),
        "the user's commit harvested",
        || git(&repo, &["log", "--format=%s", "keel/user"]).starts_with("by the user\n"),
    );
    // Its files are its own, and hidden from every other user all the same.
    assert_hidden("the user's checkpoint", &checkpoint);
    assert_hidden("the user's progress", &progress);
    assert_hidden(
        "the user's base tree",
        &base_tree_file(&d.state(), "f0.txt"),
    );
}

#[test]
fn an_earlier_installation_s_open_directories_and_files_are_tightened_at_start() {
    let test = "an_earlier_installation_s_open_directories_and_files_are_tightened_at_start";
    if !ready(test) {
        return;
    }
    // What an earlier keel (or an operator's `mkdir -p` under umask 022) left.
    let d = daemon_on_open_state("private-earlier", |state| {
        for dir in ["tasks", "bases", "tasks/old"] {
            std::fs::create_dir(state.join(dir)).unwrap();
            set_mode(&state.join(dir), 0o755);
        }
        let unit_copy = state.join("tasks/old/unit.ron");
        std::fs::write(&unit_copy, format!("a secret: {SECRET}\n")).unwrap();
        set_mode(&unit_copy, 0o644);
        let journal = state.join("events.jsonl");
        std::fs::write(&journal, "").unwrap();
        set_mode(&journal, 0o644);
    });
    assert_eq!(mode_of(&d.state().join("tasks")), 0o700);
    assert_eq!(mode_of(&d.state().join("bases")), 0o700);
    assert_eq!(mode_of(&d.state().join("events.jsonl")), 0o600);
    assert_hidden("an old unit copy", &d.state().join("tasks/old/unit.ron"));
    assert_hidden("the journal", &d.state().join("events.jsonl"));
    let out = as_nobody(&["ls"], &d.state().join("tasks"));
    assert!(
        !out.status.success() && stderr_of(&out).contains("Permission denied"),
        "tasks/ is listable by uid {NOBODY}: {}",
        stdout_of(&out)
    );
    assert!(
        d.daemon_log().contains("made 0700"),
        "one line per entry tightened:\n{}",
        d.daemon_log()
    );
    let out = d.keel(&["status"]);
    assert!(out.status.success(), "keel status: {}", stderr_of(&out));
}
