//! Notifications end to end (docs/notifications.md): a real daemon runs `keel.ron`'s hooks on
//! journaled events — the event on stdin and in `KEEL_EVENT_*`, a hung hook killed at its
//! timeout with its process group, a burst coalesced, a missing program journaled.

mod common;
use common::wait::{wait_for, PATIENCE};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A daemon whose `keel.ron` holds `notify` (not started yet), and a directory for its hooks.
fn daemon_with(name: &str, notify: &str) -> (Daemon, PathBuf) {
    let d = Daemon::prepare(name);
    let hooks = d.scratch.dir.join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::create_dir_all(d.state()).unwrap();
    let notify = notify.replace("HOOKS", &path_str(&hooks));
    std::fs::write(
        d.state().join("keel.ron"),
        format!("Config(notify: [{notify}])"),
    )
    .unwrap();
    (d, hooks)
}

/// [`daemon_with`], and `HOOKS/hook.sh` a shell script of `body`.
fn daemon_with_script(name: &str, notify: &str, body: &str) -> (Daemon, PathBuf) {
    let (d, hooks) = daemon_with(name, notify);
    std::fs::write(hooks.join("hook.sh"), format!("#!/bin/sh\n{body}\n")).unwrap();
    (d, hooks)
}

/// A unit that fails at once and is not restarted.
const FAILS: &str = r#"Unit(command: ["/bin/sh", "-c", "exit 3"], restart: Never)"#;

fn journal_events(d: &Daemon, name: &str) -> Vec<Value> {
    d.events(None)
        .into_iter()
        .filter(|e| e["event"] == name)
        .collect()
}

fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie no one has reaped yet is dead too.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[test]
fn a_hook_gets_the_failed_event_on_stdin_and_in_its_environment() {
    let (mut d, hooks) = daemon_with_script(
        "notify-failed",
        r#"Notify(on: [Failed], command: ["/bin/sh", "HOOKS/hook.sh", "HOOKS/out"],
                  env: {"TOPIC": "agents"})"#,
        r#"grep SigIgn /proc/self/status > "$1.signals"
cat > "$1.json.tmp"; env > "$1.env"; mv "$1.json.tmp" "$1.json""#,
    );
    // The daemon's secrets and switches are its own: none reaches a hook.
    d.env
        .push(("KEEL_SECRET_TEST_TOKEN".into(), "sk-daemon-secret".into()));
    d.env
        .push(("ANTHROPIC_API_KEY".into(), "sk-ant-daemon-secret".into()));
    d.spawn();
    d.write_unit("fails", FAILS);
    d.wait_state("fails", "failed", PATIENCE);
    let out = hooks.join("out.json");
    let text = wait_for(PATIENCE, "the hook's copy of its stdin", || {
        std::fs::read_to_string(&out).ok()
    });
    assert_eq!(text.lines().count(), 1, "one line of JSON: {text}");
    let event: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(event["unit"], "fails");
    assert_eq!(event["event"], "Failed");
    assert_eq!(event["journal_event"], "failed");
    assert_eq!(event["attempt"], 1);
    assert_eq!(event["count"], 1);
    assert_eq!(event["state_dir"], path_str(&d.state()));
    // The same event as the journal's.
    let journaled = journal_events(&d, "failed");
    assert_eq!(journaled.len(), 1, "{journaled:?}");
    assert_eq!(event["time"], journaled[0]["time"]);
    assert_eq!(event["detail"], journaled[0]["detail"]);
    let env = std::fs::read_to_string(hooks.join("out.env")).unwrap();
    for line in [
        "KEEL_EVENT_UNIT=fails",
        "KEEL_EVENT_NAME=Failed",
        "KEEL_EVENT_JOURNAL=failed",
        "KEEL_EVENT_ATTEMPT=1",
        "KEEL_EVENT_COUNT=1",
    ] {
        assert!(env.lines().any(|l| l == line), "{line} missing:\n{env}");
    }
    assert!(
        env.lines().any(|l| l.starts_with("KEEL_EVENT_JSON={")),
        "{env}"
    );
    assert!(env.lines().any(|l| l == "TOPIC=agents"), "{env}");
    assert!(env.lines().any(|l| l.starts_with("PATH=/")), "{env}");
    assert!(!env.contains("daemon-secret"), "{env}");
    assert!(!env.contains("KEEL_ID_CLAIMS_DIR"), "{env}");
    // The daemon ignores SIGPIPE; its hooks (and what they start) do not.
    let signals = std::fs::read_to_string(hooks.join("out.signals")).unwrap();
    assert_eq!(signals.trim(), "SigIgn:\t0000000000000000", "{signals}");
    assert!(journal_events(&d, "notify-failed").is_empty());
    d.shutdown();
}

#[test]
fn a_hook_as_a_named_user_runs_as_that_user() {
    if !require_root("a_hook_as_a_named_user_runs_as_that_user") {
        return;
    }
    let (mut d, hooks) = daemon_with_script(
        "notify-user",
        r#"Notify(on: [Failed], command: ["/bin/sh", "HOOKS/hook.sh", "HOOKS/out"], user: Some("nobody"))"#,
        r#"id -u > "$1.tmp"; echo "$HOME $USER" >> "$1.tmp"; mv "$1.tmp" "$1""#,
    );
    // nobody may write there.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hooks, std::fs::Permissions::from_mode(0o777)).unwrap();
    d.spawn();
    d.write_unit("fails", FAILS);
    let out = hooks.join("out");
    let text = wait_for(PATIENCE, "the hook's id", || {
        std::fs::read_to_string(&out).ok()
    });
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(nobody.uid.to_string().as_str()),
        "{text}"
    );
    assert_eq!(
        lines.next(),
        Some(format!("{} nobody", nobody.dir.display()).as_str())
    );
    d.shutdown();
}

#[test]
fn a_hung_hook_is_killed_at_its_timeout_with_its_process_group() {
    let (mut d, hooks) = daemon_with_script(
        "notify-hung",
        r#"Notify(on: [Failed], command: ["/bin/sh", "HOOKS/hook.sh", "HOOKS"], timeout: Some("1s"))"#,
        r#"echo $$ > "$1/sh.tmp"; mv "$1/sh.tmp" "$1/sh.pid"
sleep 1000 &
echo $! > "$1/sleep.tmp"; mv "$1/sleep.tmp" "$1/sleep.pid"
wait"#,
    );
    d.spawn();
    d.write_unit("fails", FAILS);
    let sh = wait_for(PATIENCE, "the hook's pid", || {
        read_pid(&hooks.join("sh.pid"))
    });
    let sleep = wait_for(PATIENCE, "its child's pid", || {
        read_pid(&hooks.join("sleep.pid"))
    });
    // The daemon answers while its hook hangs.
    assert!(d.keel(&["health"]).status.success());
    let failed = wait_for(PATIENCE, "notify-failed in the journal", || {
        journal_events(&d, "notify-failed").into_iter().next()
    });
    let detail = failed["detail"].as_str().unwrap();
    assert!(
        detail.contains("did not end within its timeout of 1s"),
        "{detail}"
    );
    assert!(detail.contains(&format!("pid {sh}")), "{detail}");
    assert_eq!(failed["unit"], "fails");
    wait_for(PATIENCE, "the hook and its child gone", || {
        (gone(sh) && gone(sleep)).then_some(())
    });
    // Journaled once: no retry.
    assert_eq!(journal_events(&d, "notify-failed").len(), 1);
    assert!(d.keel(&["health"]).status.success());
    d.shutdown();
}

#[test]
fn a_burst_of_a_hundred_exits_is_coalesced_into_a_few_runs_that_count_them_all() {
    let (mut d, hooks) = daemon_with(
        "notify-burst",
        r#"Notify(on: [Exited], command: ["/bin/sh", "-c", "cat >> HOOKS/runs.jsonl"], coalesce: Some("5s"))"#,
    );
    d.spawn();
    d.write_unit(
        "flaps",
        r#"Unit(
    command: ["/bin/sh", "-c", "exit 1"],
    restart: OnFailure,
    backoff: Backoff(initial: "1ms", max: "1ms", factor: 1.0),
    restart_limit: RestartLimit(count: 99, within: "1h"),
)"#,
    );
    d.wait_state("flaps", "failed", Duration::from_secs(120));
    let exits = journal_events(&d, "exited");
    assert_eq!(exits.len(), 100, "100 attempts, 100 exits");
    let runs = hooks.join("runs.jsonl");
    let read_runs = || -> Vec<Value> {
        std::fs::read_to_string(&runs)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let counted = |runs: &[Value]| {
        runs.iter()
            .map(|r| r["count"].as_u64().unwrap())
            .sum::<u64>()
    };
    // The last window's flush carries the rest.
    let all = wait_for(PATIENCE, "the counts to add up to 100", || {
        let runs = read_runs();
        (counted(&runs) == 100).then_some(runs)
    });
    // The first at once, then at most one per window: bounded by how long the burst lasted.
    let ts = |e: &Value| e["ts_ms"].as_u64().unwrap();
    let span_ms = ts(exits.last().unwrap()) - ts(&exits[0]);
    // (One more for the loop's own latency between a journal time and its round.)
    let bound = 3 + span_ms / 5000;
    let counts: Vec<u64> = all.iter().map(|r| r["count"].as_u64().unwrap()).collect();
    eprintln!(
        "burst of 100 exits over {span_ms} ms: {} runs, counts {counts:?}",
        all.len()
    );
    assert!(
        all.len() as u64 <= bound,
        "{} runs for a burst of {span_ms} ms: {all:?}",
        all.len()
    );
    assert!(all.len() < 100);
    assert!(all
        .iter()
        .all(|r| r["unit"] == "flaps" && r["event"] == "Exited"));
    assert_eq!(all[0]["count"], 1, "the first goes at once");
    assert!(journal_events(&d, "notify-failed").is_empty());
    d.shutdown();
}

#[test]
fn a_hook_whose_program_does_not_exist_is_journaled_and_the_daemon_goes_on() {
    let (mut d, hooks) = daemon_with(
        "notify-missing",
        r#"Notify(on: [Failed], command: ["keel-no-such-program-x7"]),
           Notify(on: [Failed], command: ["/bin/sh", "-c", "cat > HOOKS/second.tmp && mv HOOKS/second.tmp HOOKS/second"])"#,
    );
    d.spawn();
    d.write_unit("fails", FAILS);
    let failed = wait_for(PATIENCE, "notify-failed in the journal", || {
        journal_events(&d, "notify-failed").into_iter().next()
    });
    let detail = failed["detail"].as_str().unwrap();
    assert!(
        detail.contains("hook 1 (keel-no-such-program-x7)"),
        "{detail}"
    );
    assert!(detail.contains("exited 127"), "{detail}");
    // The other hook ran all the same; the daemon answers.
    wait_for(PATIENCE, "the second hook's output", || {
        hooks.join("second").exists().then_some(())
    });
    assert!(d.keel(&["health"]).status.success());
    let log = std::fs::read_to_string(d.state().join("notify.log")).unwrap();
    assert!(
        log.contains("cannot run keel-no-such-program-x7: No such file or directory"),
        "{log}"
    );
    // A later event runs the hook again (and fails again): one line per failure, no retries.
    d.write_unit("fails-too", FAILS);
    wait_for(PATIENCE, "a second notify-failed", || {
        (journal_events(&d, "notify-failed").len() == 2).then_some(())
    });
    assert!(d.keel(&["health"]).status.success());
    d.shutdown();
}

#[test]
fn a_bad_notify_stops_the_daemon_at_start_naming_file_line_col() {
    let (d, _) = daemon_with(
        "notify-bad",
        r#"Notify(on: [Failed, Exploded], command: ["x"])"#,
    );
    let out = d.daemon_command().output().unwrap();
    assert!(!out.status.success());
    let stderr = stderr_of(&out);
    let at = format!("{}:1:37:", path_str(&d.state().join("keel.ron")));
    assert!(stderr.contains(&at), "{at} not in:\n{stderr}");
    assert!(stderr.contains("Exploded"), "{stderr}");
}

#[test]
fn at_most_four_hooks_run_at_once_and_the_rest_wait_their_turn() {
    // Each hook says it started, waits for the test's word, then says it ended.
    let (mut d, hooks) = daemon_with_script(
        "notify-cap",
        r#"Notify(on: [Failed], command: ["/bin/sh", "HOOKS/hook.sh", "HOOKS"], timeout: Some("2m"))"#,
        r#"echo "start $KEEL_EVENT_UNIT" >> "$1/log"
while [ ! -e "$1/release" ]; do sleep 0.05; done
echo "end $KEEL_EVENT_UNIT" >> "$1/log""#,
    );
    // Each hook says it started, waits for the test's word, then says it ended.

    d.spawn();
    for i in 0..10 {
        d.write_unit(&format!("fails-{i}"), FAILS);
    }
    let count = |what: &str| {
        std::fs::read_to_string(hooks.join("log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(what))
            .count()
    };
    wait_for(PATIENCE, "four hooks running", || {
        (count("start") == 4).then_some(())
    });
    wait_for(PATIENCE, "ten units failed", || {
        (journal_events(&d, "failed").len() == 10).then_some(())
    });
    common::wait::holds_throughout(Duration::from_secs(1), "no fifth hook", || {
        count("start") == 4
    });
    std::fs::write(hooks.join("release"), "").unwrap();
    wait_for(PATIENCE, "all ten hooks run and ended", || {
        (count("start") == 10 && count("end") == 10).then_some(())
    });
    assert!(journal_events(&d, "notify-dropped").is_empty());
    assert!(journal_events(&d, "notify-failed").is_empty());
    d.shutdown();
}

/// The webhook example of docs/notifications.md, against a listener of the test's on
/// loopback: the JSON line is the request's body.
#[test]
fn the_webhook_example_posts_the_event() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(!privileged_required(), "curl is needed");
        eprintln!("the_webhook_example_posts_the_event: skipped: no curl");
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (mut d, _) = daemon_with(
        "notify-webhook",
        &format!(
            r#"Notify(on: [Failed, Succeeded], command: ["curl", "-fsS", "-m", "8", "-H", "Content-Type: application/json",
                                          "--data-binary", "@-", "http://127.0.0.1:{port}/keel"])"#
        ),
    );
    let server = std::thread::spawn(move || {
        use std::io::{BufRead, Read, Write};
        let (stream, _) = listener.accept().unwrap();
        let mut reader = std::io::BufReader::new(stream);
        let mut head = Vec::new();
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            if line == "\r\n" || line.is_empty() {
                break;
            }
            head.push(line);
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let mut stream = reader.into_inner();
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .unwrap();
        (head, String::from_utf8(body).unwrap())
    });
    d.spawn();
    d.write_unit("fails", FAILS);
    wait_for(PATIENCE, "the webhook's request", || {
        server.is_finished().then_some(())
    });
    let (head, body) = server.join().unwrap();
    assert!(head[0].starts_with("POST /keel "), "{head:?}");
    let event: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(event["unit"], "fails");
    assert_eq!(event["event"], "Failed");
    // curl ended well (exit 0): nothing journaled against the hook.
    wait_for(PATIENCE, "the hook's end in the log", || {
        d.daemon_log().contains(") ended after").then_some(())
    });
    assert!(journal_events(&d, "notify-failed").is_empty());
    d.shutdown();
}

#[test]
fn hooks_written_later_apply_at_keel_reload() {
    let (mut d, hooks) = daemon_with("notify-reload", "");
    d.spawn();
    let notify = format!(
        r#"Config(notify: [Notify(on: [Failed], command: ["/bin/sh", "-c", "cat > {dir}/out.tmp && mv {dir}/out.tmp {dir}/out"])])"#,
        dir = path_str(&hooks)
    );
    std::fs::write(d.state().join("keel.ron"), notify).unwrap();
    let reload = d.keel(&["reload"]);
    assert!(reload.status.success(), "{}", stderr_of(&reload));
    d.write_unit("fails", FAILS);
    let text = wait_for(PATIENCE, "the hook's output", || {
        std::fs::read_to_string(hooks.join("out")).ok()
    });
    let event: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(event["event"], "Failed");
    d.shutdown();
}
