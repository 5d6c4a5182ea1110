//! `keel run`: a one-line task through the real daemon — its output followed, its exit status
//! kept, `--detach`, arguments that need quoting, and a bad flag refused before anything is
//! written.

mod common;
use common::wait::wait_for;
use common::*;
use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// `keel run ARGS` against `d`, its output once it has exited (within `secs`; killed if not).
fn run(d: &Daemon, args: &[&str], secs: u64) -> Output {
    let child = Command::new(keel_bin())
        .arg("--state")
        .arg(d.state())
        .arg("run")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let status = wait_for(Duration::from_secs(secs), "keel run to exit", || {
        child.try_wait().unwrap()
    });
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    Output {
        status,
        stdout,
        stderr,
    }
}

fn unit_files(d: &Daemon) -> Vec<String> {
    std::fs::read_dir(d.units())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ron"))
        .collect()
}

#[test]
fn a_run_prints_its_output_and_exits_with_its_status() {
    if !require_root("run_command") {
        return;
    }
    let d = Daemon::start("run-status");
    let ok = run(&d, &["--", "sh", "-c", "echo hi"], 60);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr_of(&ok));
    assert_eq!(stdout_of(&ok), "hi\n", "{}", stderr_of(&ok));
    let three = run(
        &d,
        &["--name", "three", "--", "sh", "-c", "echo bye; exit 3"],
        60,
    );
    assert_eq!(three.status.code(), Some(3), "{}", stderr_of(&three));
    assert_eq!(stdout_of(&three), "bye\n");
    let task = d.task("three").expect("the run is a task");
    assert_eq!(task["state"], "failed");
    assert_eq!(task["last_exit"], "exit:3");
    // A run is one attempt: nothing restarted it.
    assert_eq!(task["attempt"], 1);
    let killed = run(&d, &["--", "sh", "-c", "kill -TERM $$"], 60);
    assert_eq!(
        killed.status.code(),
        Some(128 + 15),
        "{}",
        stderr_of(&killed)
    );
    // The generated names: readable, unique.
    let names: Vec<String> = d.status()["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["unit"].as_str().unwrap().to_string())
        .collect();
    let generated: Vec<&String> = names.iter().filter(|n| n.starts_with("run-sh-")).collect();
    assert_eq!(generated.len(), 2, "{names:?}");
    assert_ne!(generated[0], generated[1]);
    // A name in use is refused, naming the flag.
    let again = run(&d, &["--name", "three", "--", "true"], 30);
    assert_eq!(again.status.code(), Some(125));
    assert!(
        stderr_of(&again).contains("--name"),
        "{}",
        stderr_of(&again)
    );
}

#[test]
fn detach_returns_once_accepted_and_the_task_is_in_status() {
    if !require_root("run_command") {
        return;
    }
    let d = Daemon::start("run-detach");
    let out = run(
        &d,
        &[
            "--detach",
            "--name",
            "bg",
            "--",
            "sh",
            "-c",
            "while :; do sleep 1; done",
        ],
        30,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "bg\n");
    d.wait_state("bg", "running", Duration::from_secs(30));
    let stopped = d.keel(&["stop", "bg"]);
    assert!(stopped.status.success(), "{}", stderr_of(&stopped));
}

#[test]
fn nasty_arguments_reach_the_command_as_they_were() {
    if !require_root("run_command") {
        return;
    }
    let d = Daemon::start("run-quoting");
    let nasty = [
        "double \"quotes\" and 'single'",
        "back\\slash \\n not a newline \\",
        "a real\nnewline\tand tab",
        "ünïcödé ✓ 日本語 🦀",
        "$HOME `id` $(id) ; | & > *",
        "",
        "--allow",
        "r#\"raw\"#",
    ];
    let mut args = vec!["--", "/bin/sh", "-c", "printf '%s\\0' \"$@\"", "sh"];
    args.extend(nasty);
    let out = run(&d, &args, 60);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let mut expected = nasty.join("\0");
    expected.push('\0');
    assert_eq!(stdout_of(&out), expected);
}

#[test]
fn a_bad_flag_value_is_refused_naming_the_flag_and_nothing_is_written() {
    if !require_root("run_command") {
        return;
    }
    let d = Daemon::start("run-bad-flag");
    let out = run(&d, &["--memory", "lots", "--", "true"], 30);
    assert_eq!(out.status.code(), Some(125), "{}", stdout_of(&out));
    let err = stderr_of(&out);
    assert!(err.starts_with("keel: --memory: "), "{err}");
    assert!(
        !err.contains(".ron:"),
        "the generated file is not the user's: {err}"
    );
    assert!(unit_files(&d).is_empty(), "{:?}", unit_files(&d));
    assert_eq!(d.status()["tasks"].as_array().unwrap().len(), 0);
    let cpu = run(&d, &["--cpu", "many", "--", "true"], 30);
    assert_eq!(cpu.status.code(), Some(2));
    assert!(stderr_of(&cpu).contains("--cpu"), "{}", stderr_of(&cpu));
    let allow = run(&d, &["--allow", "http://bad host/", "--", "true"], 30);
    assert_eq!(allow.status.code(), Some(125));
    assert!(
        stderr_of(&allow).contains("--allow http://bad host/"),
        "{}",
        stderr_of(&allow)
    );
    // Refused by the daemon (no such list in its keel.ron): told as the flag all the same.
    let list = run(&d, &["--allow", "@nosuch", "--", "true"], 30);
    assert_eq!(list.status.code(), Some(125));
    let err = stderr_of(&list);
    assert!(err.starts_with("keel: --allow @nosuch: "), "{err}");
    assert!(!err.contains(".ron:"), "{err}");
    assert!(unit_files(&d).is_empty(), "{:?}", unit_files(&d));
}

#[test]
fn a_missing_repository_is_refused_naming_the_flag() {
    if !require_root("run_command") {
        return;
    }
    let d = Daemon::start("run-bad-repo");
    let missing = d.scratch.dir.join("no-such-repo");
    let spec = format!("{}@main", missing.display());
    let out = run(&d, &["--repo", &spec, "--", "true"], 30);
    assert_eq!(out.status.code(), Some(125), "{}", stdout_of(&out));
    assert!(
        stderr_of(&out).starts_with("keel: --repo: "),
        "{}",
        stderr_of(&out)
    );
    assert!(unit_files(&d).is_empty(), "{:?}", unit_files(&d));
}

#[test]
fn ctrl_c_stops_the_task_and_the_run_exits_with_its_status() {
    if !require_root("run_command") {
        return;
    }
    let d = Daemon::start("run-ctrl-c");
    let script = "trap 'echo got-term; exit 5' TERM; echo started; while :; do sleep 0.1; done";
    let child = Command::new(keel_bin())
        .arg("--state")
        .arg(d.state())
        .args(["run", "--name", "fg", "--", "/bin/sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let lines = common::wait::Lines::of(child.stdout.take().unwrap());
    assert_eq!(
        lines.next_within(Duration::from_secs(30), "the task's first line"),
        "started"
    );
    // Ctrl-C: SIGINT to our own child, by its pid.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    // The shell may first say its `sleep` was terminated (the whole group gets the signal).
    let mut seen = Vec::new();
    while seen.last().map(String::as_str) != Some("got-term") {
        assert!(seen.len() < 5, "no trap line: {seen:?}");
        seen.push(lines.next_within(Duration::from_secs(30), "the trap's line"));
    }
    let status = wait_for(Duration::from_secs(60), "keel run to exit", || {
        child.try_wait().unwrap()
    });
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("fg: stopping"), "{stderr}");
    assert_eq!(d.task("fg").unwrap()["state"], "stopped");
}
