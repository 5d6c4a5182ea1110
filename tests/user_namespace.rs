//! Every sandboxed task in a user namespace of its own (issue 17), checked through the real
//! daemon: the agent is uid 0 inside, but its ids map to a block of 65536 unprivileged host
//! ids — so a root-owned 0600 file on the host is unreadable while a 0644 one beside it is
//! not; another task's processes and a host process stay out of reach even through a
//! directory both tasks share (`sandbox.writable`); and `sandbox.user` still names the uid
//! the agent sees, mapped into the block on the host while its files in `/work` keep the uid
//! on disk.
//!
//! Needs root (the daemon's sandboxes), python3 (tests/userns_support) and `setpriv`.

mod common;
mod userns_support;

use common::sandbox::{line, run_agent, HostDir};
use common::*;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::Duration;
use userns_support::*;

/// How a start goes: the daemon's clone (on a sandbox template or building the whole plan),
/// or a spare shim — made for the task's restart, before that restart was known (on its copy,
/// or in full).
#[derive(Clone, Copy, Debug)]
enum StartPath {
    Template,
    InFull,
    Spare,
    SpareInFull,
}

/// A default task started by `path` reads `/proc/self/uid_map` `0 <first> 65536`, is uid and
/// gid 0 inside, and its user namespace is not the host's.
fn a_default_task_is_root_of_its_own_block(path: StartPath, tag: &str) {
    let (templates, spares) = match path {
        StartPath::Template => (true, false),
        StartPath::InFull => (false, false),
        StartPath::Spare => (true, true),
        StartPath::SpareInFull => (false, true),
    };
    let d = common::sandbox::daemon_starting(tag, templates, spares);
    let script = "echo uid_map-begin; cat /proc/self/uid_map; echo uid_map-end; \
        echo gid_map-begin; cat /proc/self/gid_map; echo gid_map-end; \
        echo \"uid $(id -u)\"; echo \"gid $(id -g)\"; \
        echo \"userns $(readlink /proc/self/ns/user)\"";
    let (task, out) = match spares {
        true => common::sandbox::run_agent_on_spare(&d, "map", script, ""),
        false => run_agent(&d, "map", script, ""),
    };
    assert_eq!(task["state"], "succeeded", "{path:?}: {task}\n{out}");
    let shim_log = std::fs::read_to_string(d.task_dir("map").join("run/shim.log")).unwrap();
    assert_eq!(
        shim_log.contains("spare shim took attempt 2 of map"),
        spares,
        "{path:?}: {shim_log}"
    );
    let uid_first = mapped_block("uid_map", &section(&out, "uid_map"));
    let gid_first = mapped_block("gid_map", &section(&out, "gid_map"));
    assert_eq!(
        uid_first, gid_first,
        "{path:?}: one block for uids and gids: {out}"
    );
    assert_eq!(line(&out, "uid "), "0", "{path:?}: {out}");
    assert_eq!(line(&out, "gid "), "0", "{path:?}: {out}");
    let host = std::fs::read_link("/proc/self/ns/user").unwrap();
    assert_ne!(line(&out, "userns "), host.display().to_string(), "{out}");
    if spares {
        d.keel(&["stop", "keep"]);
    }
}

#[test]
fn on_a_template_a_default_task_is_root_of_its_own_block() {
    if ready("on_a_template_a_default_task_is_root_of_its_own_block") {
        a_default_task_is_root_of_its_own_block(StartPath::Template, "userns-map-tpl");
    }
}

#[test]
fn in_full_a_default_task_is_root_of_its_own_block() {
    if ready("in_full_a_default_task_is_root_of_its_own_block") {
        a_default_task_is_root_of_its_own_block(StartPath::InFull, "userns-map-full");
    }
}

#[test]
fn on_a_spare_a_default_task_is_root_of_its_own_block() {
    if ready("on_a_spare_a_default_task_is_root_of_its_own_block") {
        a_default_task_is_root_of_its_own_block(StartPath::Spare, "userns-map-spare");
    }
}

#[test]
fn on_a_spare_in_full_a_default_task_is_root_of_its_own_block() {
    if ready("on_a_spare_in_full_a_default_task_is_root_of_its_own_block") {
        a_default_task_is_root_of_its_own_block(StartPath::SpareInFull, "userns-map-spare-full");
    }
}

#[test]
fn a_root_owned_0600_file_on_the_host_is_unreadable_inside() {
    let test = "a_root_owned_0600_file_on_the_host_is_unreadable_inside";
    if !ready(test) {
        return;
    }
    // A world-traversable directory of the test's own, on no hidden list.
    let dir = HostDir::new("userns-files");
    set_mode(&dir.0, 0o755);
    let secret = dir.0.join("secret");
    let open = dir.0.join("open");
    std::fs::write(&secret, "root-only-4711\n").unwrap();
    std::fs::write(&open, "for-everyone\n").unwrap();
    set_mode(&secret, 0o600);
    set_mode(&open, 0o644);
    for file in [&secret, &open] {
        let meta = std::fs::metadata(file).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{}", file.display());
    }
    let d = Daemon::start("userns-files");
    let script = format!(
        "if cat {secret} 2>/tmp/e; then echo 'secret read'; else echo \"secret $(cat /tmp/e)\"; fi; \
         echo \"open $(cat {open})\"; echo \"owner $(stat -c %u:%g {secret})\"",
        secret = secret.display(),
        open = open.display()
    );
    let (task, out) = run_agent(&d, "files", &script, "");
    assert_eq!(task["state"], "succeeded", "{task}\n{out}");
    assert!(
        !out.contains("root-only-4711"),
        "the secret was read:\n{out}"
    );
    let refused = line(&out, "secret ");
    assert!(refused.contains("Permission denied"), "{out}");
    assert_eq!(line(&out, "open "), "for-everyone", "{out}");
    // The host's root is nobody inside: not the agent's own uid 0.
    assert_eq!(line(&out, "owner "), "65534:65534", "{out}");
}

/// A process the test started on the host: a `sleep` as uid 0 without any capability (its
/// bounding set emptied), as weak as an agent — only its uid protects it. Killed on drop.
fn weak_host_process() -> KillOnDrop {
    let child = Command::new("setpriv")
        .args(["--bounding-set=-all", "--inh-caps=-all", "sleep", "120"])
        .spawn()
        .expect("setpriv (util-linux)");
    let sleeper = KillOnDrop(child);
    let pid = sleeper.id() as i32;
    wait_until(
        Duration::from_secs(10),
        "the sleep without capabilities",
        || {
            std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                s.lines().any(|l| l == "CapPrm:\t0000000000000000") && s.contains("Name:\tsleep")
            })
        },
    );
    sleeper
}

/// Task A and a host process each hand task B their `/proc/<pid>` directory through Unix
/// sockets in a directory both tasks share (`sandbox.writable`), and the test writes their
/// host pids there: B can neither signal them (`kill -0`: their pids are not in its PID
/// namespace), find them in its `/proc`, nor read what the kernel guards with a ptrace
/// check (`environ`, `maps`: `PTRACE_MODE_READ`, the check `ptrace` attach makes too), though
/// the directory it was given is real (the host process's `status`, readable by anyone,
/// reads). Without a user namespace of its own B passes that check: same uid 0, no
/// capability on either side.
#[test]
fn another_tasks_processes_and_a_host_process_are_out_of_reach_through_a_shared_directory() {
    let test =
        "another_tasks_processes_and_a_host_process_are_out_of_reach_through_a_shared_directory";
    if !ready(test) {
        return;
    }
    let dir = HostDir::new("userns-reach");
    let probe = write_probe(&dir);
    let shared = dir.0.join("shared");
    std::fs::create_dir(&shared).unwrap();
    set_mode(&shared, 0o755);
    let sleeper = weak_host_process();
    let d = Daemon::start("userns-reach");
    let writable = format!(
        "sandbox: Sandbox(writable: [{:?}])",
        shared.display().to_string()
    );
    let socket = |name: &str| shared.join(name).display().to_string();

    d.write_unit(
        "a",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", {give:?}], restart: Never, {writable})"#,
            give = format!("exec python3 {probe} give /proc/self {}", socket("a.sock"))
        ),
    );
    let a_ready = shared.join("a.sock.ready");
    wait_until(Duration::from_secs(30), "task A listening", || {
        a_ready.exists() || d.task("a").is_some_and(|t| t["state"] == "failed")
    });
    assert!(
        a_ready.exists(),
        "task A failed: {}\n{}",
        stdout_of(&d.keel(&["logs", "a"])),
        d.daemon_log()
    );
    let a_pid = agent_pid(&d, "a");
    let a_uid = host_ids(a_pid, "Uid:")[0];
    std::fs::write(shared.join("a.pid"), format!("{a_pid}\n")).unwrap();
    std::fs::write(shared.join("host.pid"), format!("{}\n", sleeper.id())).unwrap();
    let host_giver = KillOnDrop(
        Command::new("python3")
            .arg(&probe)
            .args([
                "give",
                &format!("/proc/{}", sleeper.id()),
                &socket("host.sock"),
            ])
            .spawn()
            .unwrap(),
    );

    let script = format!(
        r#"
        echo "b-block $(awk '{{print $2}}' /proc/self/uid_map)"
        for who in a host; do
            pid=$(cat {shared}/$who.pid)
            if kill -0 "$pid" 2>/tmp/e; then echo "kill-$who ok"; else echo "kill-$who $(cat /tmp/e)"; fi
            if [ -e /proc/$pid ]; then echo "proc-$who visible"; else echo "proc-$who hidden"; fi
            python3 {probe} take {shared}/$who.sock $who 2>&1
        done
        "#,
        shared = shared.display()
    );
    let (task, out) = run_agent(&d, "b", &script, &writable);
    assert_eq!(task["state"], "succeeded", "{task}\n{out}");
    for who in ["a", "host"] {
        let kill = line(&out, &format!("kill-{who} "));
        assert!(
            kill.contains("No such process") || kill.contains("not permitted"),
            "{who}: {out}"
        );
        assert_eq!(line(&out, &format!("proc-{who} ")), "hidden", "{out}");
        for file in ["environ", "maps"] {
            let read = line(&out, &format!("{who}-{file} "));
            assert!(read.starts_with("denied "), "{who}'s {file}: {out}");
        }
    }
    // A block per task: A's host uid is not one of B's.
    let b_first: u64 = line(&out, "b-block ").parse().unwrap();
    assert!(
        a_uid >= BLOCK_SIZE && !(b_first..b_first + BLOCK_SIZE).contains(&a_uid),
        "task A runs as host uid {a_uid}, task B's block starts at {b_first}"
    );
    // The host process's directory was really handed over: what anyone may read, B reads.
    assert_eq!(line(&out, "host-status "), "ok", "{out}");
    // Nothing reached the host process.
    let mut sleeper = sleeper;
    assert!(sleeper.try_wait().unwrap().is_none(), "the host sleep died");
    drop(host_giver);
    d.keel(&["stop", "a"]);
}

#[test]
fn sandbox_user_is_the_uid_inside_mapped_into_the_block_on_the_host() {
    let test = "sandbox_user_is_the_uid_inside_mapped_into_the_block_on_the_host";
    if !ready(test) {
        return;
    }
    let d = Daemon::start("userns-user");
    let script = "echo uid_map-begin; cat /proc/self/uid_map; echo uid_map-end; \
        echo \"ids $(id -u):$(id -g)\"; echo by-user > /work/by-user; echo ready; \
        while [ ! -e /run/keel/checkpoint/release ]; do sleep 0.05; done";
    d.write_unit(
        "user",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", {script:?}], restart: Never, sandbox: Sandbox(user: Some("1000:1000")))"#
        ),
    );
    let output = d.task_dir("user").join("run/output.log");
    let out = wait_output_line(&output, "ready");
    let agent = agent_pid(&d, "user");
    let first = mapped_block("uid_map", &section(&out, "uid_map"));
    assert_eq!(line(&out, "ids "), "1000:1000", "{out}");
    // On the host the agent is uid 1000 of its block, not the host's uid 1000.
    assert_eq!(host_ids(agent, "Uid:"), vec![first + 1000; 4], "{out}");
    assert_eq!(host_ids(agent, "Gid:"), vec![first + 1000; 4], "{out}");
    std::fs::write(d.task_dir("user").join("checkpoint/release"), "").unwrap();
    let task = d.wait_state("user", "succeeded", Duration::from_secs(30));
    assert_eq!(task["last_exit"], "exit:0", "{task}");
    // Its file in /work: owned by 1000 on disk (the mount maps the block back).
    let meta = std::fs::metadata(d.task_dir("user").join("work/by-user")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1000, 1000));
}
