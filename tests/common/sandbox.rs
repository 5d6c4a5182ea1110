//! Helpers of the sandbox tests: an agent run to its end, the lines it printed, and host
//! paths and mounts of the test's own that go away with it.

use super::Daemon;
use std::time::Duration;

/// Run `script` as a unit (restart: Never) and return its output once it has ended.
pub fn run_agent(d: &Daemon, unit: &str, script: &str, extra: &str) -> (serde_json::Value, String) {
    d.write_unit(
        unit,
        &format!(r#"Unit(command: ["/bin/sh", "-c", {script:?}], restart: Never, {extra})"#),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let task = loop {
        let task = d.task(unit);
        if let Some(t) = &task {
            if t["state"] == "succeeded" || t["state"] == "failed" {
                break t.clone();
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{unit}: {task:?}\n{}",
            d.daemon_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = std::fs::read_to_string(d.task_dir(unit).join("run/output.log")).unwrap_or_default();
    (task, out)
}

pub fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key:?} line in:\n{out}"))
        .trim()
}

/// A directory of the test's own under /var/tmp, removed at the end.
pub struct HostDir(pub std::path::PathBuf);

impl HostDir {
    pub fn new(name: &str) -> HostDir {
        let dir =
            std::path::PathBuf::from(format!("/var/tmp/keel-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        HostDir(dir)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Unmounts (lazily) a mount the test made, whatever happens.
pub struct Unmount(pub std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// The mount table an agent sees, without what differs between two daemons by construction
/// (mount ids, peer group numbers, the scratch directory's name): mount point, root of the
/// mount, mount options, propagation, filesystem type and its options, sorted.
pub fn mount_table(d: &Daemon, unit: &str, extra: &str) -> Vec<String> {
    let script = "cat /proc/self/mountinfo";
    let (task, out) = run_agent(d, unit, script, extra);
    let shim_log = || std::fs::read_to_string(d.task_dir(unit).join("run/shim.log"));
    assert_eq!(
        task["state"],
        "succeeded",
        "{task}\n{out}\n{:?}\n{}",
        shim_log(),
        d.daemon_log()
    );
    let scratch = d.scratch.dir.display().to_string();
    let mut lines: Vec<String> = out
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let dash = fields.iter().position(|f| *f == "-").unwrap();
            let super_opts = fields.get(dash + 3).copied().unwrap_or("");
            // Propagation (`shared:N`, `master:N`) by kind: the peer group numbers differ.
            let propagation: Vec<&str> = fields[6..dash]
                .iter()
                .map(|f| f.split(':').next().unwrap_or(f))
                .collect();
            format!(
                "{} {} {} {} [{}] {}",
                fields[4].replace(&scratch, "<scratch>"),
                fields[3].replace(&scratch, "<scratch>"),
                fields[5],
                fields[dash + 1],
                propagation.join(","),
                super_opts
            )
        })
        .collect();
    lines.sort();
    lines
}

/// A daemon that starts tasks one way: on sandbox templates or building each sandbox in full
/// (`KEEL_NO_SANDBOX_TEMPLATES`), and through a spare shim or the daemon's own clone
/// (`KEEL_NO_SPARE`). With spares, a task `keep` runs (spares are made while tasks run; one
/// without a checkout starts on a template, when they are on, which the spare then copies)
/// and a spare shim is ready when this returns.
pub fn daemon_starting(tag: &str, templates: bool, spares: bool) -> Daemon {
    let mut d = Daemon::prepare(tag);
    if !templates {
        d.env.push(("KEEL_NO_SANDBOX_TEMPLATES".into(), "1".into()));
    }
    if !spares {
        d.env.push(("KEEL_NO_SPARE".into(), "1".into()));
    }
    d.spawn();
    if spares {
        d.write_unit(
            "keep",
            r#"Unit(command: ["/bin/sh", "-c", "exec sleep 120"], restart: Never)"#,
        );
        d.wait_state("keep", "running", Duration::from_secs(20));
        wait_for_a_spare(&d);
    }
    d
}

/// Wait until the daemon holds a spare shim: a child of its whose fd 3 is a socket (a
/// shim's is its attempt lock).
pub fn wait_for_a_spare(d: &Daemon) {
    let daemon = d.child.as_ref().unwrap().id();
    let spares = || -> usize {
        std::fs::read_to_string(format!("/proc/{daemon}/task/{daemon}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/fd/3"))
                    .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
            })
            .count()
    };
    super::wait_until(Duration::from_secs(20), "a spare shim", || spares() == 1);
}
