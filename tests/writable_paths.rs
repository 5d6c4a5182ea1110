//! `sandbox.writable` never gives the agent the host: `keel check` refuses `/` and the host's
//! system directories at the entry (file:line:col); the daemon refuses, at the start and
//! before anything runs, a writable path in its own state or units directory or in a git
//! repository (the task fails `spawn-failed`, the reason in `keel status` and the journal).

mod common;

use common::sandbox::run_agent;
use common::{keel_bin, require_root, stderr_of, Daemon, Scratch};
use std::path::Path;
use std::process::Command;

fn keel_check(file: &Path, state: Option<&Path>) -> std::process::Output {
    let mut command = Command::new(keel_bin());
    if let Some(state) = state {
        command.arg("--state").arg(state);
    }
    command.arg("check").arg(file).output().unwrap()
}

#[test]
fn keel_check_refuses_the_root_directory_at_its_entry() {
    let scratch = Scratch::new("wp-root");
    let file = scratch.dir.join("root.ron");
    std::fs::write(
        &file,
        "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(writable: [\"/srv/data\",\n                               \"/\"]),\n)\n",
    )
    .unwrap();
    let out = keel_check(&file, None);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    let expected = format!(
        "{}:4:32: sandbox.writable[1]: is the root directory",
        file.display()
    );
    assert!(stderr_of(&out).contains(&expected), "{}", stderr_of(&out));

    // The host's system directories, and capabilities that act across uids, likewise.
    std::fs::write(
        &file,
        "Unit(command: [\"agent\"], sandbox: Sandbox(writable: [\"/etc/keel\"], capabilities: [\"CAP_DAC_OVERRIDE\", \"CAP_SETUID\"]))\n",
    )
    .unwrap();
    let out = keel_check(&file, None);
    assert_eq!(out.status.code(), Some(1));
    let stderr = stderr_of(&out);
    for needle in [
        ":1:54: sandbox.writable[0]: \"/etc/keel\" lies inside the host's system directory /etc",
        ":1:83: sandbox.capabilities[0]: CAP_DAC_OVERRIDE",
        ":1:103: sandbox.capabilities[1]: CAP_SETUID",
    ] {
        assert!(stderr.contains(needle), "{needle:?} in {stderr}");
    }

    // A directory of one's own is fine.
    std::fs::write(
        &file,
        "Unit(command: [\"agent\"], sandbox: Sandbox(writable: [\"/var/lib/app\", \"/tmp/x\"]))\n",
    )
    .unwrap();
    let out = keel_check(&file, None);
    assert!(out.status.success(), "{}", stderr_of(&out));
}

#[test]
fn keel_check_refuses_its_state_directory() {
    let scratch = Scratch::new("wp-check-state");
    let state = scratch.dir.join("state");
    let file = scratch.dir.join("u.ron");
    let inside = state.join("tasks/other/work");
    std::fs::write(
        &file,
        format!("Unit(command: [\"agent\"], sandbox: Sandbox(writable: [{inside:?}]))\n"),
    )
    .unwrap();
    let out = keel_check(&file, Some(&state));
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    let expected = format!(
        "{}:1:54: sandbox.writable[0]: {:?} lies inside keel's state directory {}",
        file.display(),
        inside.display().to_string(),
        state.display()
    );
    assert!(stderr_of(&out).contains(&expected), "{}", stderr_of(&out));
    // Another state directory: nothing to say.
    let out = keel_check(&file, Some(&scratch.dir.join("elsewhere")));
    assert!(out.status.success(), "{}", stderr_of(&out));
}

/// Run an agent that would plant a file in `target` (a writable path the daemon must refuse),
/// and check that it was refused at the start, with `needle` in the reason, everywhere the
/// operator looks, and that nothing was written.
fn assert_refused_at_start(d: &Daemon, unit: &str, target: &Path, needle: &str) {
    std::fs::create_dir_all(target).unwrap();
    // What is there, but unit files (the test's own, in the units directory).
    let listing = || {
        let mut names: Vec<_> = std::fs::read_dir(target)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_none_or(|x| x != "ron"))
            .collect();
        names.sort();
        names
    };
    let before = listing();
    let planted = target.join("planted-by-agent");
    let script = format!("echo ran; echo x > {}", planted.display());
    let extra = format!(
        "sandbox: Sandbox(writable: [{:?}])",
        target.display().to_string()
    );
    let (task, out) = run_agent(d, unit, &script, &extra);
    assert_eq!(task["state"], "failed", "{task}\n{out}");
    assert_eq!(task["last_exit"], "spawn-failed", "{task}");
    let reason = task["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("sandbox.writable"), "{reason}");
    assert!(reason.contains(needle), "{needle:?} in {reason}");
    let journaled = d.events(Some(unit)).into_iter().any(|e| {
        e["event"] == "start-failed" && e["detail"].as_str().is_some_and(|r| r.contains(needle))
    });
    assert!(journaled, "{:#?}", d.events(Some(unit)));
    assert!(!out.contains("ran"), "the agent must not run: {out}");
    assert!(!planted.exists(), "{} was written", planted.display());
    assert_eq!(
        before,
        listing(),
        "nothing is written in {}",
        target.display()
    );
}

#[test]
fn the_daemon_refuses_a_writable_path_in_its_own_directories() {
    if !require_root("the_daemon_refuses_a_writable_path_in_its_own_directories") {
        return;
    }
    let d = Daemon::start("wp-state");
    // Another task's work directory, inside this daemon's state directory.
    let other = d.state().join("tasks/victim/work");
    assert_refused_at_start(&d, "in-state", &other, "lies inside keel's state directory");
    // The units directory itself: an agent there would write its own unit.
    let units = d.units();
    assert_refused_at_start(&d, "in-units", &units, "is keel's units directory");
    // The daemon is unharmed: a unit with a directory of its own runs.
    let own = d.scratch.dir.join("own");
    std::fs::create_dir_all(&own).unwrap();
    let extra = format!(
        "sandbox: Sandbox(writable: [{:?}])",
        own.display().to_string()
    );
    let script = format!("echo x > {}/ok && echo ran", own.display());
    let (task, out) = run_agent(&d, "own", &script, &extra);
    assert_eq!(task["state"], "succeeded", "{task}\n{out}");
    assert!(own.join("ok").exists());
}

fn git(args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git is installed");
    assert!(out.status.success(), "git {args:?}: {}", stderr_of(&out));
}

#[test]
fn the_daemon_refuses_a_writable_path_in_a_repository() {
    if !require_root("the_daemon_refuses_a_writable_path_in_a_repository") {
        return;
    }
    let d = Daemon::start("wp-git");
    // A work tree: sharing it shares its .git (hooks, config).
    let work_tree = d.scratch.dir.join("proj");
    git(&["init", "-q", work_tree.to_str().unwrap()]);
    assert_refused_at_start(&d, "work-tree", &work_tree, "covers the git repository");
    // Inside a bare repository, whose name the validator cannot know.
    let bare = d.scratch.dir.join("app.git");
    git(&["init", "-q", "--bare", bare.to_str().unwrap()]);
    assert_refused_at_start(
        &d,
        "bare",
        &bare.join("hooks"),
        "lies inside the git directory",
    );

    // A path in a .git is refused when the unit is read: the task never starts.
    d.write_unit(
        "dot-git",
        &format!(
            "Unit(command: [\"/bin/true\"], restart: Never, sandbox: Sandbox(writable: [{:?}]))",
            work_tree.join(".git/hooks").display().to_string()
        ),
    );
    common::wait_until(
        std::time::Duration::from_secs(20),
        "dot-git reported invalid",
        || {
            let status = d.status().to_string();
            status.contains("dot-git.ron:1:") && status.contains("lies in a git directory")
        },
    );
    assert!(
        d.task("dot-git").is_none_or(|t| t["last_exit"].is_null()),
        "{:?}",
        d.task("dot-git")
    );
}
