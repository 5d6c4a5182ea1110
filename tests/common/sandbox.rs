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
    mount_table_of(d, unit, extra, false)
}

/// [`mount_table`], of the task's restart on the spare made for it ([`run_agent_on_spare`]).
pub fn mount_table_on_spare(d: &Daemon, unit: &str, extra: &str) -> Vec<String> {
    mount_table_of(d, unit, extra, true)
}

fn mount_table_of(d: &Daemon, unit: &str, extra: &str, on_spare: bool) -> Vec<String> {
    let script = "cat /proc/self/mountinfo";
    let (task, out) = match on_spare {
        true => run_agent_on_spare(d, unit, script, extra),
        false => run_agent(d, unit, script, extra),
    };
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

/// Where the host tells attempt 1 of [`run_agent_on_spare`] that the spare for its restart
/// is ready: a file in the task's checkpoint directory.
const SPARE_READY: &str = "spare-ready";

/// Run `script` as `unit` on a spare shim and return its output once it has ended. A spare
/// is PID 1 of a PID namespace owned by one task's user namespace (src/sandbox/spare.rs):
/// the daemon makes it for the task it started last, for that task's restart, so a task's
/// first start never takes one. Attempt 1 here waits until the spare for this task is
/// there, then fails; attempt 2 (`restart: OnFailure`) runs `script` on it. Needs a task
/// running besides (spares are made while tasks run: [`daemon_starting`]).
pub fn run_agent_on_spare(
    d: &Daemon,
    unit: &str,
    script: &str,
    extra: &str,
) -> (serde_json::Value, String) {
    d.write_unit(
        unit,
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", {:?}], {RESTART_ON_SPARE}, {extra})"#,
            on_its_restart(script)
        ),
    );
    let (task, _) = let_its_restart_take_a_spare(d, unit);
    let out = std::fs::read_to_string(d.task_dir(unit).join("run/output.log")).unwrap_or_default();
    (task, out)
}

/// [`run_agent_on_spare`]'s restart policy (for a unit written by hand): attempt 1 fails,
/// attempt 2 is the last whatever its end.
pub const RESTART_ON_SPARE: &str = r#"restart: OnFailure, backoff: Backoff(initial: "100ms"), restart_limit: RestartLimit(count: 1, within: "1h")"#;

/// [`run_agent_on_spare`]'s command: `script` at attempt 2, after attempt 1 waited for the
/// spare and failed (for a unit written by hand).
pub fn on_its_restart(script: &str) -> String {
    format!(
        "if [ \"$KEEL_ATTEMPT\" = 1 ]; then \
         while [ ! -e \"$KEEL_CHECKPOINT_DIR/{SPARE_READY}\" ]; do sleep 0.05; done; exit 1; fi\n{script}"
    )
}

/// For a unit written with [`on_its_restart`] and [`RESTART_ON_SPARE`]: wait until its
/// attempt 1 runs and the daemon holds a spare made for its user namespace, let attempt 1
/// end, and wait for attempt 2's end; the task as status shows it then, and the spare's pid.
pub fn let_its_restart_take_a_spare(d: &Daemon, unit: &str) -> (serde_json::Value, i32) {
    let spare = wait_for_its_spare(d, unit);
    (let_it_restart(d, unit), spare)
}

/// Wait until attempt 1 of `unit` (written with [`on_its_restart`]) runs and the daemon holds
/// a spare shim made for its user namespace (PID 1 of a PID namespace it owns); its pid.
pub fn wait_for_its_spare(d: &Daemon, unit: &str) -> i32 {
    use keel::sys::pidns::{owner_of, NamespaceId};
    use std::os::fd::AsFd;
    let ns = |path: String| -> Option<NamespaceId> {
        let file = std::fs::File::open(path).ok()?;
        NamespaceId::of(file.as_fd()).ok()
    };
    let owner = |pid: i32| -> Option<NamespaceId> {
        let file = std::fs::File::open(format!("/proc/{pid}/ns/pid")).ok()?;
        NamespaceId::of(owner_of(file.as_fd()).ok()?.as_fd()).ok()
    };
    let first = d.wait_state(unit, "running", Duration::from_secs(30));
    let shim = first["pid"].as_i64().unwrap() as i32;
    let userns = super::wait::wait_for(Duration::from_secs(30), "attempt 1's agent", || {
        ns(format!("/proc/{}/ns/user", super::first_child(shim)?)).filter(|&userns| {
            // The shim's own is the host's; its agent's is the task's.
            ns(format!("/proc/{shim}/ns/user")) != Some(userns)
        })
    });
    let daemon = d.child.as_ref().unwrap().id();
    super::wait::wait_for(Duration::from_secs(30), "a spare for the task", || {
        std::fs::read_to_string(format!("/proc/{daemon}/task/{daemon}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .find(|&pid| {
                std::fs::read_link(format!("/proc/{pid}/fd/3"))
                    .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                    && owner(pid) == Some(userns)
            })
    })
}

/// Let attempt 1 of `unit` (written with [`on_its_restart`]) end, and wait for attempt 2's
/// end; the task as status shows it then.
pub fn let_it_restart(d: &Daemon, unit: &str) -> serde_json::Value {
    std::fs::write(d.task_dir(unit).join("checkpoint").join(SPARE_READY), "").unwrap();
    super::wait::wait_for(Duration::from_secs(30), "attempt 2's end", || {
        let task = d.task(unit)?;
        let ended = task["state"] == "succeeded" || task["state"] == "failed";
        (ended && task["attempt"] == 2).then_some(task)
    })
}
