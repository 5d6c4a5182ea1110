//! The sandbox, checked from inside by small test agents (shell scripts): the shim is PID 1
//! of the task's PID namespace, the host is read-only, keel's state and other tasks are out
//! of sight, privileges are gone.

mod common;
use common::sandbox::*;
use common::*;
use std::time::Duration;

#[test]
fn the_shim_is_pid_1_and_the_agent_has_no_privileges() {
    if !require_root("the_shim_is_pid_1_and_the_agent_has_no_privileges") {
        return;
    }
    let d = Daemon::start("sb-pid1");
    let script = r#"
        read -r stat < /proc/self/stat; set -- $stat; echo "parent $4"
        if [ -e /proc/1 ]; then echo "pid1 visible"; else echo "pid1 hidden"; fi
        cat /proc/1/mountinfo >/dev/null 2>&1 && echo "pid1 mountinfo readable" || echo "pid1 mountinfo unreadable"
        echo "procs $(ls -d /proc/[0-9]* | wc -l)"
        grep -E '^(NoNewPrivs|CapEff|CapBnd|CapPrm|CapAmb|Seccomp):' /proc/self/status | tr -d '\t' | sed 's/^/status /'
        echo "self $$"
        if unshare -U true 2>/tmp/e; then echo "userns ok"; else echo "userns $(cat /tmp/e)"; fi
        if unshare -r true 2>/tmp/e; then echo "userns-root ok"; else echo "userns-root $(cat /tmp/e)"; fi
        sh -c 'echo child ok' | sed 's/^/fork /'
        cp /bin/sh /work/rootsh
        if chmod 4755 /work/rootsh 2>/tmp/e; then echo "setuid ok"; else echo "setuid $(cat /tmp/e)"; fi
        chmod 755 /work/rootsh && echo "chmod ok"
    "#;
    let (task, out) = run_agent(&d, "pid1", script, "");
    assert_eq!(task["state"], "succeeded", "{out}");
    // The agent is PID 2, the shim's child: the shim is PID 1 of the task's namespace, and,
    // holding capabilities the agent lacks, invisible to it (hidepid=ptraceable).
    assert_eq!(line(&out, "parent "), "1", "{out}");
    assert!(out.contains("pid1 hidden"), "{out}");
    assert!(out.contains("pid1 mountinfo unreadable"), "{out}");
    // The shim, the agent's shell, and the few commands of the pipeline: no host process.
    let procs: usize = line(&out, "procs ").parse().unwrap();
    assert!(procs <= 5, "{procs} processes visible:\n{out}");
    for want in [
        "status NoNewPrivs:1",
        "status CapEff:0000000000000000",
        "status CapBnd:0000000000000000",
        "status CapPrm:0000000000000000",
        "status CapAmb:0000000000000000",
        "status Seccomp:2",
        "fork child ok",
    ] {
        assert!(out.contains(want), "missing {want}:\n{out}");
    }
    // The shim's first child: the daemon made the task's user namespace (a standalone shim,
    // which makes its own, has its maker as 2).
    assert_eq!(
        line(&out, "self "),
        "2",
        "the agent is the shim's first child"
    );
    assert!(out.contains("chmod ok"), "{out}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(d.task_dir("pid1").join("work/rootsh"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o7777, 0o755, "no setuid file may reach the host");
    for probe in ["userns ", "userns-root ", "setuid "] {
        let result = line(&out, probe);
        assert!(
            result.contains("Operation not permitted"),
            "{probe}{result}"
        );
    }
}

#[test]
fn the_host_is_read_only_and_keel_state_is_invisible() {
    if !require_root("the_host_is_read_only_and_keel_state_is_invisible") {
        return;
    }
    let d = Daemon::start("sb-ro");
    let state = d.state();
    let script = format!(
        r#"
        for p in /etc/keel-test /usr/keel-test /home/keel-test /root/../etc/x; do
            if touch "$p" 2>/tmp/err; then echo "write $p ok"; else echo "write $p $(cat /tmp/err)"; fi
        done
        if mount -o remount,rw / 2>/tmp/err; then echo "remount ok"; else echo "remount $(cat /tmp/err)"; fi
        if ls {state} >/dev/null 2>&1 && [ -n "$(ls -A {state} 2>/dev/null)" ]; then echo "state visible"; else echo "state hidden"; fi
        cat {state}/events.jsonl >/dev/null 2>&1 && echo "journal readable" || echo "journal unreadable"
        echo "shim root $(ls /proc/1/root/ 2>&1 | head -1)"
        echo "shadow $(head -c 20 /etc/shadow 2>/dev/null | wc -c)"
        echo hello > /work/from-inside && echo "work ok"
        echo tmp > /tmp/t && echo "tmp ok"
        echo home > "$HOME/h" && echo "home ok $HOME"
        echo p >> "$KEEL_PROGRESS" && echo "progress ok $KEEL_PROGRESS"
        echo c > "$KEEL_CHECKPOINT_DIR/c" && echo "checkpoint ok"
        echo x > /dev/null && echo "devnull ok"
        echo "pwd $(pwd)"
        "#,
        state = state.display()
    );
    let (task, out) = run_agent(&d, "ro", &script, "");
    assert_eq!(task["state"], "succeeded", "{out}");
    for path in ["/etc/keel-test", "/usr/keel-test", "/home/keel-test"] {
        let result = line(&out, &format!("write {path} "));
        assert!(result.contains("Read-only file system"), "{path}: {result}");
    }
    let remount = line(&out, "remount ");
    assert!(
        remount.to_lowercase().contains("permission denied"),
        "remount: {remount}"
    );
    let escape = line(&out, "write /root/../etc/x ");
    assert!(escape.contains("Read-only file system"), "{escape}");
    assert!(out.contains("state hidden"), "{out}");
    assert!(out.contains("journal unreadable"), "{out}");
    assert_eq!(
        line(&out, "shadow "),
        "0",
        "/etc/shadow must read as empty: {out}"
    );
    let shim_root = line(&out, "shim root ");
    assert!(
        shim_root.contains("Permission denied") || shim_root.contains("No such file"),
        "PID 1's root reached: {shim_root}"
    );
    for ok in [
        "work ok",
        "tmp ok",
        "home ok",
        "progress ok /run/keel/progress",
        "checkpoint ok",
        "devnull ok",
    ] {
        assert!(out.contains(ok), "missing {ok}:\n{out}");
    }
    assert_eq!(line(&out, "pwd "), "/work");
    // Writes landed in the task's own directories on the host, and nowhere else.
    assert_eq!(
        std::fs::read_to_string(d.task_dir("ro").join("work/from-inside")).unwrap(),
        "hello\n"
    );
    assert!(d.task_dir("ro").join("checkpoint/c").exists());
    assert!(!std::path::Path::new("/etc/keel-test").exists());
}

#[test]
fn tasks_cannot_see_each_others_files_or_tmp() {
    if !require_root("tasks_cannot_see_each_others_files_or_tmp") {
        return;
    }
    let d = Daemon::start("sb-neighbours");
    // A runs and keeps its /tmp marker and work file while B looks for them.
    d.write_unit(
        "a",
        r#"Unit(command: ["/bin/sh", "-c", "echo a > /tmp/a-marker; echo a > /work/a-file; exec sleep 60"])"#,
    );
    d.wait_state("a", "running", Duration::from_secs(10));
    wait_until(Duration::from_secs(5), "A wrote its file", || {
        d.task_dir("a").join("work/a-file").exists()
    });
    let a_work = d.task_dir("a").join("work");
    let script = format!(
        r#"
        [ -e /tmp/a-marker ] && echo "tmp shared" || echo "tmp private"
        [ -e {a_work}/a-file ] && echo "work visible" || echo "work hidden"
        ls /work | sed 's/^/own /'
        "#,
        a_work = a_work.display()
    );
    let (task, out) = run_agent(&d, "b", &script, "");
    assert_eq!(task["state"], "succeeded", "{out}");
    assert!(out.contains("tmp private"), "{out}");
    assert!(out.contains("work hidden"), "{out}");
    assert!(!out.contains("own a-file"), "{out}");
}

#[test]
fn the_default_network_is_the_tasks_own_and_host_is_an_opt_in_status_marks() {
    if !require_root("the_default_network_is_the_tasks_own_and_host_is_an_opt_in_status_marks") {
        return;
    }
    let d = Daemon::start("sb-net-default");
    let script = r#"echo "ifaces $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ' ')""#;
    // The default, Allow([]): a network namespace of its own, nothing out, only its lo.
    let (task, out) = run_agent(&d, "net-default", script, "");
    assert_eq!(task["state"], "succeeded", "{out}");
    assert_eq!(line(&out, "ifaces "), "lo");
    assert_eq!(task["network"]["mode"], "allow", "{task}");
    assert_eq!(task["network"]["entries"], serde_json::json!([]), "{task}");
    // Host: the host's interfaces, and keel status says so.
    let (task, out) = run_agent(&d, "net-host", script, "sandbox: Sandbox(network: Host)");
    assert_eq!(task["state"], "succeeded", "{out}");
    let host_dev = std::fs::read_to_string("/proc/net/dev").unwrap();
    let mut host: Vec<&str> = host_dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    host.sort();
    assert_eq!(line(&out, "ifaces "), host.join(" "));
    assert_eq!(task["network"]["mode"], "host", "{task}");
    let shown = stdout_of(&d.keel(&["status", "net-host"]));
    assert!(shown.contains("host (not contained"), "{shown}");
    // Allow with entries: the entries as written, counted in keel status UNIT.
    let (task, out) = run_agent(
        &d,
        "net-allow",
        script,
        r#"sandbox: Sandbox(network: Allow(["api.example.com", "host:11434"]))"#,
    );
    assert_eq!(task["state"], "succeeded", "{out}");
    assert_eq!(line(&out, "ifaces "), "lo");
    assert_eq!(
        task["network"]["entries"],
        serde_json::json!(["api.example.com", "host:11434"])
    );
    let shown = stdout_of(&d.keel(&["status", "net-allow"]));
    assert!(
        shown.contains("allow: 2 entries (api.example.com, host:11434)"),
        "{shown}"
    );
}

#[test]
fn network_none_has_only_loopback_and_user_runs_unprivileged() {
    if !require_root("network_none_has_only_loopback_and_user_runs_unprivileged") {
        return;
    }
    let d = Daemon::start("sb-net-user");
    let script = r#"
        echo "ifaces $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"
        echo "uid $(id -u) gid $(id -g)"
        grep '^Groups:' /proc/self/status | tr -d '\t' | sed 's/^/status /'
        echo x > /work/by-nobody && echo "work writable"
    "#;
    let (task, out) = run_agent(
        &d,
        "net",
        script,
        r#"sandbox: Sandbox(network: None, user: Some("65534:65534"))"#,
    );
    assert_eq!(task["state"], "succeeded", "{out}");
    assert_eq!(line(&out, "ifaces "), "lo");
    assert_eq!(line(&out, "uid "), "65534 gid 65534");
    assert!(
        out.contains("status Groups:\n") || line(&out, "status Groups:").is_empty(),
        "{out}"
    );
    assert!(out.contains("work writable"), "{out}");
}

#[test]
fn orphans_are_reaped_inside_and_killing_the_shim_ends_the_namespace() {
    if !require_root("orphans_are_reaped_inside_and_killing_the_shim_ends_the_namespace") {
        return;
    }
    let d = Daemon::start("sb-reap");
    d.write_unit(
        "fam",
        r#"Unit(command: ["/bin/sh", "-c", "(sh -c 'exit 0' &); (setsid sleep 600 &); sleep 0.5; echo zombies $(cat /proc/[0-9]*/stat 2>/dev/null | awk '$3 == \"Z\"' | wc -l); exec sleep 600"], restart: Never)"#,
    );
    let task = d.wait_state("fam", "running", Duration::from_secs(10));
    let log = d.task_dir("fam").join("run/output.log");
    wait_until(Duration::from_secs(5), "zombie count", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("zombies")
    });
    let out = std::fs::read_to_string(&log).unwrap();
    assert!(out.contains("zombies 0"), "{out}");
    let shim = task["pid"].as_i64().unwrap() as i32;
    let ns = std::fs::read_link(format!("/proc/{shim}/ns/pid_for_children")).unwrap();
    let members = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            .filter(|e| std::fs::read_link(e.path().join("ns/pid")).is_ok_and(|l| l == ns))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert!(
        members().len() >= 3,
        "shim, agent and the setsid escapee: {:?}",
        members()
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(shim),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until(Duration::from_secs(5), "namespace empty", || {
        members().is_empty()
    });
    let task = d.wait_state("fam", "failed", Duration::from_secs(5));
    assert_eq!(task["last_exit"], "lost");
}

#[test]
fn writable_and_hidden_paths_from_the_unit() {
    if !require_root("writable_and_hidden_paths_from_the_unit") {
        return;
    }
    let d = Daemon::start("sb-paths");
    let shared = d.scratch.dir.join("shared");
    let secret = d.scratch.dir.join("secret");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("key"), "s3cret").unwrap();
    let script = format!(
        r#"
        echo out > {shared}/from-agent && echo "shared ok"
        cat {secret}/key 2>/dev/null && echo "secret visible" || echo "secret hidden"
        "#,
        shared = shared.display(),
        secret = secret.display()
    );
    let extra = format!(
        r#"sandbox: Sandbox(writable: [{shared:?}], hidden: [{secret:?}])"#,
        shared = shared.display().to_string(),
        secret = secret.display().to_string()
    );
    let (task, out) = run_agent(&d, "paths", &script, &extra);
    assert_eq!(task["state"], "succeeded", "{out}");
    assert!(out.contains("shared ok"), "{out}");
    assert!(out.contains("secret hidden"), "{out}");
    assert_eq!(
        std::fs::read_to_string(shared.join("from-agent")).unwrap(),
        "out\n"
    );
}

/// A daemon that is not root, started in a cgroup not delegated to it (the test runner's, as
/// root's; on a hybrid host any), refuses to start and says what to set up: it could start
/// no task (src/cgroup/delegation.rs). The delegated case is tested in the VM
/// (tests/vm/rootless).
#[test]
fn a_daemon_without_privileges_refuses_to_start_and_says_why() {
    if !require_root("a_daemon_without_privileges_refuses_to_start_and_says_why") {
        return;
    }
    // The daemon itself runs as nobody here (setpriv), in a directory nobody owns.
    let scratch = Scratch::new("sb-unpriv");
    let state = scratch.dir.join("state");
    let units = scratch.dir.join("units");
    for dir in [&scratch.dir, &units] {
        nix::unistd::chown(dir, Some(65534.into()), Some(65534.into())).unwrap();
    }
    std::fs::write(
        units.join("t.ron"),
        r#"Unit(command: ["/bin/true"], restart: Never)"#,
    )
    .unwrap();
    let mut daemon = KillOnDrop(
        std::process::Command::new("setpriv")
            .args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
            ])
            .arg(keel_bin())
            .args(["daemon", "--state"])
            .arg(&state)
            .arg("--units")
            .arg(&units)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut exited = None;
    wait_until(Duration::from_secs(30), "the daemon to refuse", || {
        exited = daemon.try_wait().unwrap();
        exited.is_some()
    });
    let status = exited.unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut daemon.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        !status.success(),
        "the daemon exited with {status}: {stderr}"
    );
    for needle in ["uid 65534 (not root)", "Delegate=yes", "run keel as root"] {
        assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
    }
    assert!(
        !state.join("keel.sock").exists(),
        "the refused daemon left a control socket"
    );
}

#[test]
fn the_agent_cannot_signal_its_shim() {
    if !require_root("the_agent_cannot_signal_its_shim") {
        return;
    }
    let d = Daemon::start("sb-signal-shim");
    let script = r#"kill -USR1 1; kill -TERM 1; sleep 0.3; echo survived"#;
    let (task, out) = run_agent(&d, "sig", script, "");
    assert_eq!(task["state"], "succeeded", "{out}");
    assert!(out.contains("survived"), "{out}");
}

#[test]
fn keel_check_checks_network_entries_and_lists_against_keel_ron() {
    let scratch = Scratch::new("sb-net-check");
    let config = scratch.dir.join("keel.ron");
    std::fs::write(
        &config,
        r#"Config(network: Network(lists: {"anthropic": ["api.anthropic.com"]}))"#,
    )
    .unwrap();
    let unit = scratch.dir.join("net.ron");
    let check = |text: &str| {
        std::fs::write(&unit, text).unwrap();
        std::process::Command::new(keel_bin())
            .arg("check")
            .arg("--config")
            .arg(&config)
            .arg(&unit)
            .output()
            .unwrap()
    };
    let out = check(
        "Unit(\n  command: [\"x\"],\n  sandbox: Sandbox(network: Allow([\"@anthropic\", \"*\", \"@npm\"])),\n)",
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout_of(&out));
    let errors = stderr_of(&out);
    let file = unit.display();
    assert!(
        errors.contains(&format!(
            "{file}:3:50: sandbox.network[1]: \"*\" is too broad"
        )),
        "{errors}"
    );
    assert!(
        errors.contains(&format!(
            "{file}:3:55: sandbox.network[2]: @npm: keel.ron's network lists have no list \"npm\" (it has @anthropic)"
        )),
        "{errors}"
    );
    let out = check(r#"Unit(command: ["x"], sandbox: Sandbox(network: Allow(["@anthropic"])))"#);
    assert!(out.status.success(), "{}", stderr_of(&out));
    // A configuration with an error is reported, and fails the check.
    std::fs::write(&config, r#"Config(network: Network(lists: {"a": ["@b"]}))"#).unwrap();
    let out = check(r#"Unit(command: ["x"])"#);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("network.lists[\"a\"][0]: @b"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn capabilities_that_reach_past_the_sandbox_are_refused() {
    let scratch = Scratch::new("sb-caps");
    for (cap, extra) in [
        ("CAP_SYS_PTRACE", ""),
        ("CAP_SYS_ADMIN", ""),
        ("CAP_DAC_READ_SEARCH", ""),
        // Only with the host's network (the default is a network of the task's own).
        ("CAP_NET_ADMIN", ", network: Host"),
    ] {
        let file = scratch.dir.join("caps.ron");
        std::fs::write(
            &file,
            format!("Unit(\n  command: [\"x\"],\n  sandbox: Sandbox(capabilities: [{cap:?}]{extra}),\n)"),
        )
        .unwrap();
        let out = std::process::Command::new(keel_bin())
            .arg("check")
            .arg(&file)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{cap} accepted");
        assert!(
            stderr_of(&out).contains("not grantable"),
            "{cap}: {}",
            stderr_of(&out)
        );
    }
    // CAP_NET_ADMIN is fine in a network namespace of the task's own.
    let file = scratch.dir.join("netadmin.ron");
    std::fs::write(
        &file,
        r#"Unit(command: ["x"], sandbox: Sandbox(network: None, capabilities: ["CAP_NET_ADMIN"]))"#,
    )
    .unwrap();
    let out = std::process::Command::new(keel_bin())
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
}

#[test]
fn a_writable_path_through_a_symlink_is_refused() {
    if !require_root("a_writable_path_through_a_symlink_is_refused") {
        return;
    }
    let d = Daemon::start("sb-symlink");
    let real = d.scratch.dir.join("real");
    std::fs::create_dir_all(&real).unwrap();
    let link = d.scratch.dir.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let extra = format!(
        r#"sandbox: Sandbox(writable: [{:?}])"#,
        link.display().to_string()
    );
    let (task, out) = run_agent(&d, "sym", "echo ran", &extra);
    assert_eq!(task["state"], "failed", "{out}");
    assert_eq!(task["last_exit"], "spawn-failed");
    let reason = task["reason"].as_str().unwrap();
    assert!(reason.contains("goes through a symlink"), "{reason}");
    assert!(!out.contains("ran"), "the agent must not run unsandboxed");
}

#[test]
fn an_unknown_user_blocks_the_start_before_anything_runs() {
    if !require_root("an_unknown_user_blocks_the_start_before_anything_runs") {
        return;
    }
    let d = Daemon::start("sb-nouser");
    d.write_unit(
        "nouser",
        r#"Unit(command: ["/bin/sh", "-c", "echo ran"], restart: Never,
            sandbox: Sandbox(user: Some("keel-no-such-user-xyz")))"#,
    );
    // A user this host does not have is the host's to create: the task waits, blocked, with
    // nothing spent (tests/host_side_refusals.rs has the rest).
    let task = common::wait::wait_for(Duration::from_secs(20), "the start blocked", || {
        d.task("nouser").filter(|t| {
            t["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("blocked: "))
        })
    });
    assert_eq!(task["state"], "queued", "{task}");
    assert_eq!(task["attempt"], 0, "{task}");
    let reason = task["reason"].as_str().unwrap();
    assert!(
        reason.contains("no such user") && reason.contains("keel-no-such-user-xyz"),
        "{reason}"
    );
    let out =
        std::fs::read_to_string(d.task_dir("nouser").join("run/output.log")).unwrap_or_default();
    assert!(!out.contains("ran"), "the agent must not run: {out}");
}
