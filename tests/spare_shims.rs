//! Spare shims (src/sandbox/spare.rs): a sandboxed start prepared ahead (for the task started
//! last: its restart) takes that start with the sandbox, PID namespace and cgroups of the
//! usual path; a spare that cannot take a
//! start changes nothing, and none outlives its use: none while nothing runs, none after its
//! daemon.

mod common;
use common::sandbox::*;
use common::*;
use std::time::Duration;

/// The daemon's spare shims not yet given a start: its children whose fd 3 is a socket (a
/// shim's fd 3 is its attempt lock), found through /proc — never by name.
fn spares_of(d: &Daemon) -> Vec<i32> {
    let daemon = d.child.as_ref().expect("a running daemon").id();
    std::fs::read_to_string(format!("/proc/{daemon}/task/{daemon}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/fd/3"))
                .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
        })
        .collect()
}

/// Wait for the daemon's one spare (made a moment after a start, while tasks run).
fn wait_for_spare(d: &Daemon) -> i32 {
    wait_until(Duration::from_secs(10), "a spare shim", || {
        spares_of(d).len() == 1
    });
    spares_of(d)[0]
}

fn shim_log(d: &Daemon, unit: &str) -> String {
    std::fs::read_to_string(d.task_dir(unit).join("run/shim.log")).unwrap_or_default()
}

fn keep_running(d: &Daemon, unit: &str) {
    d.write_unit(
        unit,
        r#"Unit(command: ["/bin/sh", "-c", "exec sleep 60"], restart: Never)"#,
    );
    d.wait_state(unit, "running", Duration::from_secs(10));
}

/// Whether process `pid` has ended (gone, or a zombie).
fn ended(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

#[test]
fn a_spare_takes_the_next_start_with_the_sandbox_of_the_usual_path() {
    if !require_root("a_spare_takes_the_next_start_with_the_sandbox_of_the_usual_path") {
        return;
    }
    let d = Daemon::start("spare");
    let mut usual = Daemon::prepare("spare-usual");
    usual.env.push(("KEEL_NO_SPARE".into(), "1".into()));
    usual.spawn();
    // Spares are made while tasks run.
    keep_running(&d, "keep");
    keep_running(&usual, "keep");
    let network = r#"sandbox: Sandbox(network: None)"#;
    // A spare is made for the task started last (PID 1 of a PID namespace of its user
    // namespace): each task's restart takes one (common::sandbox::run_agent_on_spare).
    // Both shapes: the host's network (an explicit opt-in) and a network of the task's own.
    let host = r#"sandbox: Sandbox(network: Host)"#;
    for (unit, extra) in [("plain", host), ("isolated", network)] {
        let a = mount_table_on_spare(&d, unit, extra);
        let log = shim_log(&d, unit);
        assert!(
            log.contains(&format!(
                "spare shim took attempt 2 of {unit} (its sandbox built on the copy it prepared)"
            )),
            "{unit}: {log}"
        );
        let b = mount_table(&usual, unit, extra);
        assert!(a.len() > 20, "{a:#?}");
        assert_eq!(a, b, "{unit}: a spare's sandbox vs the usual path's");
        assert!(!shim_log(&usual, unit).contains("spare"));
    }
    // Without templates the spare builds the whole plan, from the host's view it went back to.
    let mut full = Daemon::prepare("spare-full");
    full.env
        .push(("KEEL_NO_SANDBOX_TEMPLATES".into(), "1".into()));
    full.spawn();
    keep_running(&full, "keep");
    let c = mount_table_on_spare(&full, "plain", host);
    assert!(
        shim_log(&full, "plain").contains("(its sandbox built in full)"),
        "{}",
        shim_log(&full, "plain")
    );
    assert_eq!(c, mount_table(&usual, "plain", host), "in full, on a spare");
    full.keel(&["stop", "keep"]);
    // The host changes after the spare made its copy: the copy is not used, the change is seen.
    let host = HostDir::new("spare-host");
    let note = format!("cat {}/note", host.0.display());
    d.write_unit(
        "changed",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", {:?}], {RESTART_ON_SPARE})"#,
            on_its_restart(&note)
        ),
    );
    let spare = wait_for_its_spare(&d, "changed");
    nix::mount::mount(
        Some("tmpfs"),
        &host.0,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=1m"),
    )
    .unwrap();
    let unmount = Unmount(host.0.clone());
    std::fs::write(host.0.join("note"), "MOUNTED-AFTER-THE-COPY\n").unwrap();
    let task = let_it_restart(&d, "changed");
    let out = std::fs::read_to_string(d.task_dir("changed").join("run/output.log")).unwrap();
    drop(unmount);
    assert_eq!(task["state"], "succeeded", "{out}");
    let record = std::fs::read_to_string(d.task_dir("changed").join("run/shim.ron")).unwrap();
    assert!(record.contains(&format!("pid: {spare},")), "{record}");
    assert!(out.contains("MOUNTED-AFTER-THE-COPY"), "{out}");
    assert!(
        shim_log(&d, "changed").contains("(its sandbox built on the template)"),
        "{}",
        shim_log(&d, "changed")
    );
    // Inside: only the task's processes are seen (the spare, PID 1, and the agent's), and
    // the agent is in the task's cgroups, as on the usual path.
    let script = "echo seen=$(ls -d /proc/[0-9]* | wc -l); cat /proc/self/cgroup";
    let cgroups = |out: &str, tree: &str| -> Vec<String> {
        let mut lines: Vec<String> = out
            .lines()
            .filter(|l| !l.starts_with("seen="))
            .map(|l| l.replace(tree, "<tree>"))
            .collect();
        lines.sort();
        lines
    };
    let (task, out) = run_agent_on_spare(&d, "inside", script, "");
    assert_eq!(task["state"], "succeeded", "{out}");
    assert!(
        shim_log(&d, "inside").contains("spare shim took attempt 2 of inside"),
        "{}",
        shim_log(&d, "inside")
    );
    let seen: usize = line(&out, "seen=").parse().unwrap();
    assert!((2..=4).contains(&seen), "the sandbox sees others: {out}");
    let (task, usual_out) = run_agent(&usual, "inside", script, "");
    assert_eq!(task["state"], "succeeded", "{usual_out}");
    let ours = cgroups(&out, &d.cgroup_name);
    assert!(
        ours.iter()
            .any(|l| l.starts_with("0::") && l.ends_with("/tasks/inside")),
        "not in the task's v2 cgroup: {out}"
    );
    assert_eq!(ours, cgroups(&usual_out, &usual.cgroup_name));
    d.keel(&["stop", "keep"]);
    usual.keel(&["stop", "keep"]);
}

#[test]
fn an_agent_that_ends_at_once_on_a_spare_is_reaped() {
    if !require_root("an_agent_that_ends_at_once_on_a_spare_is_reaped") {
        return;
    }
    // It ends before the spare has exec'd `keel shim`: its SIGCHLD must wait for the shim.
    let d = Daemon::start("spare-quick");
    keep_running(&d, "keep");
    for round in 0..3 {
        let unit = format!("quick{round}");
        let (task, out) = run_agent_on_spare(&d, &unit, "exit 3", "");
        assert!(
            shim_log(&d, &unit).contains("spare shim took attempt 2"),
            "{}",
            shim_log(&d, &unit)
        );
        assert_eq!(task["state"], "failed", "{task}\n{out}");
        assert_eq!(task["last_exit"], "exit:3", "{task}");
    }
    d.keel(&["stop", "keep"]);
}

#[test]
fn a_spare_changes_no_start_and_outlives_neither_the_tasks_nor_its_daemon() {
    if !require_root("a_spare_changes_no_start_and_outlives_neither_the_tasks_nor_its_daemon") {
        return;
    }
    let mut d = Daemon::start("spare-life");
    keep_running(&d, "keep");
    // Gone before its start: that start takes the usual path.
    let spare = wait_for_spare(&d);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(spare),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until(Duration::from_secs(5), "the spare killed", || ended(spare));
    let (task, out) = run_agent(&d, "after", "echo ran-after", "");
    assert_eq!(task["state"], "succeeded", "{out}");
    assert!(out.contains("ran-after"), "{out}");
    assert!(!shim_log(&d, "after").contains("spare"));
    assert!(
        d.daemon_log()
            .contains(&format!("spare shim {spare} ended before its start")),
        "{}",
        d.daemon_log()
    );
    // Nothing runs: no spare either.
    let spare = wait_for_spare(&d);
    d.keel(&["stop", "keep"]);
    wait_until(Duration::from_secs(10), "no spare while idle", || {
        spares_of(&d).is_empty() && ended(spare)
    });
    // Its daemon gone, a spare reads end-of-file and ends.
    keep_running(&d, "keep2");
    let spare = wait_for_spare(&d);
    d.crash();
    wait_until(
        Duration::from_secs(5),
        "the spare ended with its daemon",
        || ended(spare),
    );
    // The task itself runs on; the next daemon adopts it (and stops it at the end).
    d.spawn();
    d.wait_state("keep2", "running", Duration::from_secs(10));
    d.keel(&["stop", "keep2"]);
}
