//! `keel status` as a person reads it, through the real daemon: `--watch` redraws frames that
//! follow a task and survive the daemon going away and coming back; `keel status UNIT` shows a
//! real task's exits and cgroup figures; a harvest that could not fast-forward shows as a kept
//! branch; an unknown unit is a clear error.

mod checkout_support;
mod common;
use common::*;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `keel status` text (no colour: stdout is a pipe).
fn status_text(d: &Daemon, args: &[&str]) -> String {
    let mut full = vec!["status"];
    full.extend_from_slice(args);
    let out = d.keel(&full);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let text = stdout_of(&out);
    assert!(!text.contains('\x1b'), "colour into a pipe: {text:?}");
    text
}

#[test]
fn watch_redraws_as_a_task_moves_and_rides_out_a_daemon_restart() {
    if !require_root("status_watch") {
        return;
    }
    let mut d = Daemon::start("status-watch");
    d.write_unit(
        "mover",
        r#"Unit(command: ["/bin/sh", "-c", "while [ ! -e /run/keel/checkpoint/go ]; do sleep 0.05; done"], restart: Never)"#,
    );
    d.wait_state("mover", "running", Duration::from_secs(10));
    let mut watch = Command::new(keel_bin())
        .arg("--state")
        .arg(d.state())
        .args(["status", "--watch", "0.2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read the frames as they come.
    let seen = Arc::new(Mutex::new(String::new()));
    let reader = {
        let (mut stdout, seen) = (watch.stdout.take().unwrap(), Arc::clone(&seen));
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stdout.read(&mut buf) {
                seen.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let frames_now = || {
        seen.lock()
            .unwrap()
            .matches("keel status every 200ms")
            .count()
    };
    let wait_for = |what: &str, check: &dyn Fn(&str) -> bool| {
        wait_until(Duration::from_secs(20), what, || {
            check(&seen.lock().unwrap())
        })
    };
    wait_for("a frame with mover running", &|t| {
        t.contains("\nmover              running")
    });
    std::fs::write(d.task_dir("mover").join("checkpoint/go"), "").unwrap();
    wait_for("a frame with mover succeeded", &|t| {
        t.contains("\nmover              succeeded")
    });
    // The daemon goes away and comes back: the watch says so, then finds it again.
    d.shutdown();
    wait_for("a frame saying the daemon is down", &|t| {
        t.contains("keel daemon is not running")
    });
    let before_restart = frames_now();
    d.spawn();
    wait_until(Duration::from_secs(20), "frames after the restart", || {
        frames_now() >= before_restart + 3
    });
    let asked = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watch.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = watch.wait().unwrap();
    let ended_in = asked.elapsed();
    reader.join().unwrap();
    assert!(status.success(), "Ctrl-C is a clean end: {status:?}");
    assert!(
        ended_in < Duration::from_secs(2),
        "took {ended_in:?} to end"
    );
    let text = seen.lock().unwrap().clone();
    assert!(!text.contains('\x1b'), "escapes into a pipe: {text:?}");
    let frames: Vec<&str> = text
        .split("keel status every 200ms")
        .filter(|f| !f.is_empty())
        .collect();
    let state_of = |frame: &str| {
        frame
            .lines()
            .find(|l| l.starts_with("mover "))
            .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
    };
    let running = frames
        .iter()
        .position(|f| state_of(f).as_deref() == Some("running"))
        .unwrap();
    let succeeded = frames
        .iter()
        .position(|f| state_of(f).as_deref() == Some("succeeded"))
        .unwrap();
    assert!(running < succeeded, "{text}");
    let down = frames
        .iter()
        .position(|f| f.contains("keel daemon is not running"))
        .unwrap();
    assert!(succeeded < down, "{text}");
    assert!(frames[down].contains("trying again every 200ms"), "{text}");
    assert!(
        frames[down..].iter().any(|f| state_of(f).is_some()),
        "the watch did not find the daemon again:\n{text}"
    );
    // Each frame whole: the daemon's line or the down line, never a torn table.
    for frame in &frames {
        assert!(
            frame.contains("daemon pid ") || frame.contains("not running"),
            "{frame}"
        );
    }
    for line in text.lines() {
        assert!(
            line.chars().count() <= 100 || line.contains("not running"),
            "{line}"
        );
    }
}

#[test]
fn status_unit_shows_a_real_tasks_exits_and_cgroup_figures() {
    if !require_root("status_unit") {
        return;
    }
    let d = Daemon::start("status-unit");
    // Two failed attempts, then one that stays.
    d.write_unit(
        "third",
        r#"Unit(
    command: ["/bin/sh", "-c", "if [ $KEEL_ATTEMPT -lt 3 ]; then echo no; exit 3; fi; exec sleep 60"],
    restart: OnFailure,
    backoff: Backoff(initial: "100ms"),
    resources: Resources(cpu: 0.5, memory: "128M", pids: 64, cpu_limit: Some(1.5),
                         memory_limit: Some("256M")),
)"#,
    );
    // On a hybrid host the shim joins the v1 cgroups an instant after it runs: wait for the
    // attempt's figures.
    let counted = |t: &serde_json::Value, key: &str| t[key].as_u64().is_some_and(|n| n > 0);
    wait_until(
        Duration::from_secs(20),
        "attempt 3 running, counted",
        || {
            d.task("third").is_some_and(|t| {
                t["attempt"] == 3
                    && t["state"] == "running"
                    && counted(&t, "pids")
                    && counted(&t, "memory_bytes")
            })
        },
    );
    let text = status_text(&d, &["third"]);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("third running since ") && lines[0].contains("attempt 3"),
        "{text}"
    );
    assert!(lines[0].contains("last exit exit:3"), "{text}");
    let unit_file = format!("  unit file    {}", d.units().join("third.ron").display());
    assert!(lines.contains(&unit_file.as_str()), "{text}");
    assert!(
        text.contains("recent exits (newest first)\n  #2    exit:3"),
        "{text}"
    );
    assert!(text.contains("\n  #1    exit:3"), "{text}");
    assert!(text.contains("(request 0.5, limit 1.5 CPU)"), "{text}");
    assert!(text.contains(" now of 256M ("), "{text}");
    assert!(text.contains(", request 128M"), "{text}");
    let pids = lines
        .iter()
        .find(|l| l.starts_with("  pids "))
        .unwrap_or_else(|| panic!("no pids line:\n{text}"));
    assert!(pids.contains(" of 64: "), "{text}");
    assert!(
        text.contains("restart        OnFailure; 2 of 5 restarts used within 1h"),
        "{text}"
    );
    assert!(text.contains("(keel logs third)"), "{text}");
    assert!(text.contains("liveness       running"), "{text}");
    // The same through --json: the stable structure, with the detail.
    let out = d.keel(&["status", "third", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let task = &json["tasks"][0];
    let detail = &task["detail"];
    let exits = detail["recent_exits"].as_array().unwrap();
    assert_eq!(exits.len(), 2, "{detail}");
    assert_eq!(exits[0]["attempt"], 1);
    assert_eq!(exits[1]["exit"], "exit:3");
    assert!(exits[1]["ended_ms"].as_u64() >= exits[1]["started_ms"].as_u64());
    assert_eq!(detail["memory_limit_bytes"], 256 << 20);
    assert_eq!(detail["pids_limit"], 64);
    let shim = task["pid"].as_i64().unwrap();
    let processes = detail["processes"].as_array().unwrap();
    assert!(
        processes.iter().any(|p| p.as_i64() == Some(shim)),
        "{detail}"
    );
    assert!(task["memory_bytes"].as_u64().unwrap() > 0, "{task}");
    // The table has no detail.
    assert!(d.status()["tasks"][0]["detail"].is_null());
}

#[test]
fn an_unknown_unit_is_a_clear_error_that_lists_nothing_else() {
    let d = Daemon::start("status-unknown");
    d.write_unit("real", r#"Unit(command: ["/bin/sleep", "30"])"#);
    for args in [
        vec!["status", "nope"],
        vec!["status", "nope", "--watch", "0.2"],
    ] {
        let out = d.keel(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr_of(&out);
        assert!(err.contains("unknown unit \"nope\""), "{err}");
        assert!(!err.contains("real"), "{err}");
        assert_eq!(stdout_of(&out), "", "{args:?}");
    }
    // A period that is no number says where the unit goes.
    let out = d.keel(&["status", "--watch", "real"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_of(&out).contains("keel status UNIT --watch"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn a_branch_kept_by_a_harvest_shows_in_the_table_and_in_full() {
    if !require_root("status_kept") {
        return;
    }
    let d = Daemon::start("status-kept");
    let repo = d.scratch.dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |args: &[&str]| checkout_support::git(&repo, args);
    git(&["init", "-q", "-b", "main"]);
    git(&["config", "user.name", "Test Author"]);
    git(&["config", "user.email", "author@example.com"]);
    std::fs::write(repo.join("f.txt"), "base\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "base"]);
    // Attempt 1 commits and fails (its branch is harvested); attempt 2 commits again and waits
    // while main's copy of the branch moves elsewhere.
    let script = "git config user.email a@b; git config user.name agent; \
        echo $KEEL_ATTEMPT > a$KEEL_ATTEMPT.txt; git add -A; git commit -qm attempt$KEEL_ATTEMPT; \
        if [ $KEEL_ATTEMPT = 1 ]; then exit 1; fi; \
        while [ ! -e /run/keel/checkpoint/go ]; do sleep 0.05; done";
    d.write_unit(
        "k",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", {script:?}], repo: Some(Repo(path: {repo:?}, base: "main")), restart: OnFailure, backoff: Backoff(initial: "100ms"))"#,
            repo = repo.display().to_string()
        ),
    );
    wait_until(Duration::from_secs(30), "attempt 2 running", || {
        d.task("k")
            .is_some_and(|t| t["attempt"] == 2 && t["state"] == "running")
    });
    let tree = git(&["rev-parse", "keel/k^{tree}"]);
    let diverged = git(&[
        "commit-tree",
        "-p",
        "keel/k",
        "-m",
        "elsewhere",
        tree.trim(),
    ]);
    git(&["update-ref", "refs/heads/keel/k", diverged.trim()]);
    std::fs::write(d.task_dir("k").join("checkpoint/go"), "").unwrap();
    d.wait_state("k", "succeeded", Duration::from_secs(20));
    // Listed by a job after the harvest (keel status never runs git itself).
    wait_until(Duration::from_secs(30), "the kept branch listed", || {
        d.task("k")
            .is_some_and(|t| t["kept_branches"] == serde_json::json!(["keel/k@2"]))
    });
    let table = status_text(&d, &[]);
    let row = table.lines().find(|l| l.starts_with("k ")).unwrap();
    assert!(row.contains("kept keel/k@2"), "{table}");
    assert!(table.contains("1 worth a look"), "{table}");
    let full = status_text(&d, &["k"]);
    assert!(
        full.contains("  kept         keel/k@2  (a harvest could not fast-forward"),
        "{full}"
    );
    assert!(
        full.contains("  branch       keel/k from main at "),
        "{full}"
    );
    assert!(full.contains("\n  #2    exit:0"), "{full}");
    assert!(full.contains("\n  #1    exit:1"), "{full}");
}
