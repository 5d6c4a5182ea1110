//! `keel metrics` and `keel daemon --metrics ADDR` on a real daemon: the text is read by
//! Prometheus' own parser (Python `prometheus_client`, `.ci/run` installs it) and its task
//! figures match `keel status --json`; it is served over loopback TCP and a Unix socket; a
//! scraper that sends nothing never stops the loop, connections past the cap are closed and
//! a silent one is closed at its deadline; a non-loopback address is refused before the
//! daemon starts. The Grafana dashboard asks only for metrics keel emits.

mod common;
use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::Duration;
use wait::{wait_for, PATIENCE};

const SMALL: &str = r#"resources: Resources(cpu: 0.2, memory: "64M")"#;

/// One sample as the parser read it.
#[derive(Debug)]
struct Sample {
    name: String,
    family_type: String,
    labels: Value,
    value: f64,
}

/// The samples of `text`, read by `prometheus_client.parser.text_string_to_metric_families`;
/// `None` (the test is skipped) when the parser is missing and skipping is allowed.
fn parse(text: &str) -> Option<Vec<Sample>> {
    const SCRIPT: &str = r#"
import json, sys
try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    sys.exit(3)
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        out.append({"name": s.name, "type": family.type, "labels": s.labels, "value": s.value})
print(json.dumps(out))
"#;
    let mut python = Command::new("python3");
    python.args(["-c", SCRIPT]);
    let out = output_with_input(&mut python, text.as_bytes(), "python3");
    if out.status.code() == Some(3) {
        let why = "python3 has no prometheus_client: python3 -m pip install \
                   prometheus-client==0.26.0 (.ci/run installs it)";
        assert!(!privileged_required(), "{why}");
        eprintln!("skipped: {why}");
        return None;
    }
    assert!(
        out.status.success(),
        "the Prometheus parser refused the text: {}\n{text}",
        stderr_of(&out)
    );
    let parsed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    Some(
        parsed
            .into_iter()
            .map(|s| Sample {
                name: s["name"].as_str().unwrap().to_string(),
                family_type: s["type"].as_str().unwrap().to_string(),
                labels: s["labels"].clone(),
                value: s["value"].as_f64().unwrap(),
            })
            .collect(),
    )
}

/// The value of `name` with these labels (all of them, and no others besides `unit`'s).
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && labels.iter().all(|(k, v)| s.labels[*k] == *v)
                && s.labels.as_object().unwrap().len() == labels.len()
        })
        .map(|s| s.value)
}

fn metrics(d: &Daemon) -> String {
    let out = d.keel(&["metrics"]);
    assert!(
        out.status.success(),
        "keel metrics: {}\n{}",
        stderr_of(&out),
        d.daemon_log()
    );
    stdout_of(&out)
}

/// A daemon of this fixture started with `--metrics ADDR` (and `env`), its log in
/// `daemon.log` as [`Daemon::spawn`]'s.
fn spawn_with_metrics(d: &mut Daemon, address: &str, env: &[(&str, &str)]) {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(d.scratch.dir.join("daemon.log"))
        .unwrap();
    let mut cmd = d.daemon_command();
    cmd.arg("--metrics")
        .arg(address)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    d.child = Some(cmd.spawn().unwrap());
    wait_until(Duration::from_secs(10), "the daemon answers", || {
        if let Ok(Some(status)) = d.child.as_mut().unwrap().try_wait() {
            panic!("daemon exited at start ({status}):\n{}", d.daemon_log());
        }
        d.keel(&["health"]).status.success()
    });
}

/// The loopback address the daemon said it serves (`--metrics 127.0.0.1:0` picks a port).
fn served_address(d: &Daemon) -> String {
    let log = d.daemon_log();
    let line = (log.lines())
        .find_map(|l| l.split("metrics: serving http://").nth(1))
        .unwrap_or_else(|| panic!("no `metrics: serving` line in the log:\n{log}"));
    line.split("/metrics").next().unwrap().to_string()
}

/// Send `request` and read the whole answer (the server closes the connection).
fn exchange(mut stream: impl Read + Write, request: &str) -> String {
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: keel\r\nUser-Agent: test\r\n\r\n")
}

fn tcp(address: &str) -> TcpStream {
    let stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream
}

/// The body of a 200 answer with the format's content type.
fn body_of(answer: &str) -> &str {
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    body
}

#[test]
fn keel_metrics_is_read_by_prometheus_parser_and_matches_keel_status() {
    if !require_root("metrics") {
        return;
    }
    let d = Daemon::start("metrics-status");
    let sleeper = format!(r#"Unit(command: ["sleep", "600"], restart: Never, {SMALL})"#);
    let quitter = format!(r#"Unit(command: ["/bin/sh", "-c", "exit 3"], restart: Never, {SMALL})"#);
    d.write_unit("sleeper", &sleeper);
    d.write_unit("quitter", &quitter);
    d.wait_state("sleeper", "running", PATIENCE);
    let quit = d.wait_state("quitter", "failed", PATIENCE);
    assert_eq!(quit["last_exit"], "exit:3");
    // Taken from one status and one scrape; memory and CPU move between the two, the rest not.
    let (status, samples) = wait_for(PATIENCE, "status and metrics agree on pids", || {
        let status = d.task("sleeper").unwrap();
        let samples = parse(&metrics(&d))?;
        let pids = value(&samples, "keel_task_pids", &[("unit", "sleeper")]);
        (status["pids"].as_f64().is_some() && pids == status["pids"].as_f64())
            .then_some((status, samples))
    });
    let sleeper = [("unit", "sleeper")];
    for state in keel::metrics::TASK_STATES {
        let labels = [("unit", "sleeper"), ("state", state)];
        let expected = if state == "running" { 1.0 } else { 0.0 };
        assert_eq!(
            value(&samples, "keel_task_state", &labels),
            Some(expected),
            "{state}"
        );
    }
    let attempts = value(&samples, "keel_task_attempts_total", &sleeper);
    assert_eq!(attempts, status["attempt"].as_f64());
    let restarts = value(&samples, "keel_task_restarts", &sleeper);
    assert_eq!(restarts, status["restarts"].as_f64());
    let memory = value(&samples, "keel_task_memory_bytes", &sleeper).expect("memory");
    let shown = status["memory_bytes"].as_f64().expect("status memory");
    assert!(
        (memory - shown).abs() <= (shown / 4.0).max(4.0 * 1024.0 * 1024.0),
        "memory {memory} in metrics, {shown} in status"
    );
    assert!(memory > 0.0);
    let cpu = value(&samples, "keel_task_cpu_seconds_total", &sleeper).expect("cpu");
    let cpu_shown = status["cpu_usec"].as_f64().unwrap() / 1e6;
    assert!(
        cpu >= cpu_shown,
        "cpu {cpu}s after status said {cpu_shown}s"
    );
    let cpu_type = samples
        .iter()
        .find(|s| s.name == "keel_task_cpu_seconds_total");
    assert_eq!(cpu_type.unwrap().family_type, "counter");
    // The liveness signal `keel status` names last has its age.
    if let Some(kind) = status["last_activity_kind"].as_str() {
        let labels = [("unit", "sleeper"), ("signal", kind)];
        let age = value(&samples, "keel_task_activity_age_seconds", &labels);
        assert!(age.is_some_and(|a| a >= 0.0), "{kind}: age {age:?}");
    }
    // The failed task: its state and how it ended.
    let failed = [("unit", "quitter"), ("state", "failed")];
    assert_eq!(value(&samples, "keel_task_state", &failed), Some(1.0));
    let exit = [("unit", "quitter"), ("kind", "exit"), ("exit", "exit:3")];
    assert_eq!(
        value(&samples, "keel_task_last_exit_info", &exit),
        Some(1.0)
    );
    assert_eq!(
        value(&samples, "keel_task_memory_bytes", &[("unit", "quitter")]),
        None
    );
    // The daemon's own.
    let version = [("version", env!("CARGO_PKG_VERSION"))];
    assert_eq!(value(&samples, "keel_build_info", &version), Some(1.0));
    let running = value(&samples, "keel_tasks", &[("state", "running")]);
    assert_eq!(running, Some(1.0));
    assert_eq!(
        value(&samples, "keel_tasks", &[("state", "failed")]),
        Some(1.0)
    );
    assert_eq!(value(&samples, "keel_queue_length", &[]), Some(0.0));
    let lag = value(&samples, "keel_daemon_loop_lag_seconds", &[]).expect("loop lag");
    assert!(lag >= 0.0);
}

#[test]
fn the_metrics_are_served_over_loopback_tcp_and_a_unix_socket() {
    if !require_root("metrics") {
        return;
    }
    let mut d = Daemon::prepare("metrics-tcp");
    spawn_with_metrics(&mut d, "127.0.0.1:0", &[]);
    let address = served_address(&d);
    assert!(address.starts_with("127.0.0.1:"), "{address}");
    d.write_unit(
        "web",
        &format!(r#"Unit(command: ["sleep", "600"], restart: Never, {SMALL})"#),
    );
    d.wait_state("web", "running", PATIENCE);
    let answer = exchange(tcp(&address), &get("/metrics"));
    let Some(samples) = parse(body_of(&answer)) else {
        return;
    };
    let labels = [("unit", "web"), ("state", "running")];
    assert_eq!(value(&samples, "keel_task_state", &labels), Some(1.0));
    // The scrape counts itself while it is answered.
    assert_eq!(value(&samples, "keel_metrics_connections", &[]), Some(1.0));
    let missing = exchange(tcp(&address), &get("/"));
    assert!(
        missing.starts_with("HTTP/1.1 404 Not Found\r\n"),
        "{missing}"
    );
    let bad = exchange(tcp(&address), "hello there\r\n\r\n");
    assert!(bad.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{bad}");
    d.shutdown();

    let mut u = Daemon::prepare("metrics-unix");
    let socket = u.scratch.dir.join("run/metrics.sock");
    spawn_with_metrics(&mut u, &format!("unix:{}", path_str(&socket)), &[]);
    let stream = UnixStream::connect(&socket).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let answer = exchange(stream, &get("/metrics"));
    assert!(
        body_of(&answer).contains("\nkeel_build_info{version="),
        "{answer}"
    );
    u.shutdown();
    assert!(!socket.exists(), "the socket file is left behind");
}

/// Whether the server has closed `stream` (a read sees its end), looked at without waiting.
fn closed(stream: &mut TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let ended = match stream.read(&mut [0u8; 64]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    stream.set_nonblocking(false).unwrap();
    ended
}

/// Send a request on a connection the server may have closed already: what it answered
/// (nothing, if it closed the connection unanswered).
fn try_exchange(mut stream: TcpStream, request: &str) -> String {
    let _ = stream.write_all(request.as_bytes());
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

fn connections(d: &Daemon) -> Option<f64> {
    value(&parse(&metrics(d))?, "keel_metrics_connections", &[])
}

#[test]
fn silent_scrapers_never_block_the_loop_are_capped_and_closed_at_their_deadline() {
    if !require_root("metrics") {
        return;
    }
    let mut d = Daemon::prepare("metrics-slow");
    // A deadline no step of this test comes near: the cap is what closes connections here.
    spawn_with_metrics(
        &mut d,
        "127.0.0.1:0",
        &[("KEEL_TEST_SCRAPE_DEADLINE_MS", "600000")],
    );
    let address = served_address(&d);
    let mut silent = tcp(&address);
    let mut partial = tcp(&address);
    partial.write_all(b"GET /metr").unwrap();
    if connections(&d).is_none() {
        return;
    }
    wait_for(PATIENCE, "both connections are open", || {
        (connections(&d) == Some(2.0)).then_some(())
    });
    // The loop answers its clients and other scrapers meanwhile.
    for args in [&["status"][..], &["health"]] {
        let out = d.keel(args);
        assert!(out.status.success(), "keel {args:?}: {}", stderr_of(&out));
    }
    let answer = exchange(tcp(&address), &get("/metrics"));
    assert!(body_of(&answer).contains("keel_build_info"));
    // Up to the cap, connections are held; the next is closed unanswered.
    let mut held: Vec<TcpStream> = (2..16).map(|_| tcp(&address)).collect();
    wait_for(PATIENCE, "16 connections are open", || {
        (connections(&d) == Some(16.0)).then_some(())
    });
    let refused = try_exchange(tcp(&address), &get("/metrics"));
    assert_eq!(refused, "", "a connection past the cap was answered");
    assert!(d.keel(&["health"]).status.success());
    // One ends: a scrape is served again.
    held.pop();
    wait_for(PATIENCE, "the ended connection is let go", || {
        (connections(&d) == Some(15.0)).then_some(())
    });
    let answer = exchange(tcp(&address), &get("/metrics"));
    assert!(body_of(&answer).contains("keel_build_info"));
    assert!(!closed(&mut silent) && !closed(&mut partial));
    drop(held);
    d.shutdown();

    // A short deadline: the silent connection is closed by the daemon.
    let mut s = Daemon::prepare("metrics-deadline");
    spawn_with_metrics(
        &mut s,
        "127.0.0.1:0",
        &[("KEEL_TEST_SCRAPE_DEADLINE_MS", "300")],
    );
    let mut silent = tcp(&served_address(&s));
    wait_until(PATIENCE, "the silent connection is closed", || {
        closed(&mut silent)
    });
    assert_eq!(connections(&s), Some(0.0));
}

#[test]
fn a_non_loopback_metrics_address_is_refused_before_the_daemon_starts() {
    let scratch = Scratch::new("metrics-refused");
    let state = scratch.dir.join("state");
    for (address, says) in [
        ("0.0.0.0:9464", "not a loopback address"),
        ("192.0.2.10:9464", "not a loopback address"),
        ("[::]:9464", "not a loopback address"),
        ("localhost:9464", "keel looks up no names"),
        ("unix:metrics.sock", "must be absolute"),
    ] {
        let out = Command::new(keel_bin())
            .args(["daemon", "--state", &path_str(&state), "--metrics", address])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{address}: {}", stderr_of(&out));
        let said = stderr_of(&out);
        assert!(
            said.contains(address) && said.contains(says),
            "{address}: {said}"
        );
        assert!(
            !state.exists(),
            "{address}: the daemon began before refusing"
        );
    }
}

/// The metric names of the text keel renders (its `# TYPE` lines: every family, sampled or not).
fn emitted_names() -> std::collections::BTreeSet<String> {
    let text = keel::metrics::render(&keel::metrics::Snapshot::default());
    (text.lines())
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect()
}

#[test]
fn the_grafana_dashboard_parses_and_asks_only_for_metrics_keel_emits() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/keel.json");
    let text = std::fs::read_to_string(path).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("valid JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let emitted = emitted_names();
    assert!(emitted.len() > 20, "{emitted:?}");
    let mut used = std::collections::BTreeSet::new();
    for panel in panels {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{}: no query", panel["title"]);
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            let names = metric_names(expr);
            assert!(!names.is_empty(), "{expr}: names no keel metric");
            used.extend(names);
        }
    }
    used.extend(metric_names(&dashboard["templating"].to_string()));
    let unknown: Vec<&String> = used.difference(&emitted).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard asks for {unknown:?}, which keel does not emit"
    );
    for wanted in [
        "keel_task_state",
        "keel_tasks",
        "keel_task_cpu_seconds_total",
        "keel_task_memory_bytes",
        "keel_task_restarts",
        "keel_daemon_loop_lag_seconds",
    ] {
        assert!(used.contains(wanted), "no panel shows {wanted}");
    }
}

/// The `keel_…` names in a query.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("keel_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}
