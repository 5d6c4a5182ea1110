use super::address::{parse, Address};
use super::http::{head_end, response, route, Route};
use super::*;

fn task(unit: &str, state: &str) -> TaskFigures {
    TaskFigures {
        unit: unit.to_string(),
        state: state.to_string(),
        ..Default::default()
    }
}

fn snapshot(tasks: Vec<TaskFigures>) -> Snapshot {
    Snapshot {
        daemon: DaemonFigures {
            version: "1.2.3".into(),
            cgroup_mode: "v2".into(),
            start_time_seconds: 1_700_000_000.5,
            loop_lag_seconds: 0.25,
            queue_length: 2,
            invalid_units: 1,
            scrape_connections: 0,
        },
        tasks,
    }
}

/// The sample lines of `name` (exactly that name, any labels).
fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with([' ', '{']))
        })
        .collect()
}

#[test]
fn label_values_escape_backslash_quote_and_newline() {
    assert_eq!(escape_label(r"a\b"), r"a\\b");
    assert_eq!(escape_label("say \"hi\""), r#"say \"hi\""#);
    assert_eq!(escape_label("two\nlines"), r"two\nlines");
    assert_eq!(escape_label("plain-unit_1.x"), "plain-unit_1.x");
    let mut family = Family::new("m", Kind::Gauge, "help");
    family.add(&[("unit", "a\"\\\nb")], 1.0);
    let mut out = String::new();
    family.write(&mut out);
    assert_eq!(out.lines().nth(2), Some(r#"m{unit="a\"\\\nb"} 1"#));
}

#[test]
fn help_text_escapes_backslash_and_newline_only() {
    assert_eq!(escape_help("a\\b\nc \"q\""), "a\\\\b\\nc \"q\"");
}

#[test]
fn values_are_spelled_as_the_format_wants() {
    assert_eq!(number(3.0), "3");
    assert_eq!(number(0.25), "0.25");
    assert_eq!(number(f64::NAN), "NaN");
    assert_eq!(number(f64::INFINITY), "+Inf");
    assert_eq!(number(f64::NEG_INFINITY), "-Inf");
    assert_eq!(number(1.5e9), "1500000000");
}

#[test]
fn every_family_has_help_and_type_once_and_before_its_samples() {
    let mut a = task("a", "running");
    a.cpu_usec = Some(1_500_000);
    a.last_exit = Some("exit:3".into());
    a.network = Some(NetworkFigures::default());
    let text = render(&snapshot(vec![a, task("b", "queued")]));
    let mut seen = std::collections::BTreeSet::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap().to_string();
            assert!(seen.insert(name.clone()), "{name}: HELP twice\n{text}");
            current = Some(name);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split(' ');
            assert_eq!(words.next(), current.as_deref(), "TYPE after its HELP");
            assert!(matches!(words.next(), Some("gauge" | "counter")), "{line}");
        } else {
            let name = line.split(['{', ' ']).next().unwrap();
            assert_eq!(Some(name), current.as_deref(), "{line}: outside its family");
        }
    }
    assert!(seen.len() >= 25, "only {} families", seen.len());
    // Counters end in _total, and only counters do.
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(
            words[2].ends_with("_total"),
            words[3] == "counter",
            "{line}"
        );
    }
}

#[test]
fn families_without_samples_still_say_what_they_are() {
    let text = render(&snapshot(Vec::new()));
    assert!(text.contains("# TYPE keel_task_cpu_seconds_total counter\n"));
    assert!(samples(&text, "keel_task_cpu_seconds_total").is_empty());
    assert!(samples(&text, "keel_task_state").is_empty());
}

#[test]
fn one_state_series_per_state_with_one_for_the_current() {
    let text = render(&snapshot(vec![task("a", "stalled"), task("b", "stalled")]));
    let a: Vec<&str> = samples(&text, "keel_task_state")
        .into_iter()
        .filter(|l| l.contains("unit=\"a\""))
        .collect();
    assert_eq!(a.len(), TASK_STATES.len());
    assert_eq!(
        a.iter().filter(|l| l.ends_with(" 1")).collect::<Vec<_>>(),
        [&"keel_task_state{unit=\"a\",state=\"stalled\"} 1"]
    );
    assert!(text.contains("keel_tasks{state=\"stalled\"} 2\n"));
    assert!(text.contains("keel_tasks{state=\"running\"} 0\n"));
}

#[test]
fn task_figures_become_samples_in_their_units() {
    let mut a = task("a", "running");
    a.attempts = 4;
    a.restarts = 3;
    a.cpu_usec = Some(2_500_000);
    a.memory_bytes = Some(1 << 20);
    a.pids = Some(7);
    a.last_exit = Some("signal:SIGKILL".into());
    a.activity_ages = vec![("heartbeat".into(), 1.5)];
    a.network = Some(NetworkFigures {
        sent_bytes: 10,
        received_bytes: 20,
        connections: 2,
        refused: 1,
        open_connections: 0,
    });
    let text = render(&snapshot(vec![a]));
    for line in [
        "keel_task_attempts_total{unit=\"a\"} 4",
        "keel_task_restarts{unit=\"a\"} 3",
        "keel_task_cpu_seconds_total{unit=\"a\"} 2.5",
        "keel_task_memory_bytes{unit=\"a\"} 1048576",
        "keel_task_pids{unit=\"a\"} 7",
        "keel_task_last_exit_info{unit=\"a\",kind=\"signal\",exit=\"signal:SIGKILL\"} 1",
        "keel_task_activity_age_seconds{unit=\"a\",signal=\"heartbeat\"} 1.5",
        "keel_task_network_received_bytes_total{unit=\"a\"} 20",
        "keel_task_network_refused_total{unit=\"a\"} 1",
        "keel_daemon_loop_lag_seconds 0.25",
        "keel_queue_length 2",
        "keel_build_info{version=\"1.2.3\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    // Not known: no sample (not a zero).
    assert!(samples(&text, "keel_task_memory_peak_bytes").is_empty());
    assert!(samples(&text, "keel_task_checkout_bytes").is_empty());
}

#[test]
fn exit_kinds_are_the_part_before_the_colon() {
    assert_eq!(exit_kind("exit:3"), "exit");
    assert_eq!(exit_kind("signal:SIGTERM"), "signal");
    assert_eq!(exit_kind("oom"), "oom");
}

#[test]
fn only_loopback_and_unix_sockets_are_accepted() {
    assert_eq!(
        parse("127.0.0.1:9464"),
        Ok(Address::Tcp("127.0.0.1:9464".parse().unwrap()))
    );
    assert!(matches!(parse("127.3.4.5:0"), Ok(Address::Tcp(_))));
    assert!(matches!(parse("[::1]:9464"), Ok(Address::Tcp(_))));
    assert_eq!(
        parse("unix:/run/keel/metrics.sock"),
        Ok(Address::Unix("/run/keel/metrics.sock".into()))
    );
    for refused in ["0.0.0.0:9464", "[::]:9464", "192.0.2.1:80", "10.0.0.1:9464"] {
        let e = parse(refused).unwrap_err();
        assert!(e.contains("not a loopback address"), "{refused}: {e}");
    }
    assert!(parse("localhost:9464").unwrap_err().contains("no names"));
    assert!(parse("9464").is_err());
    assert!(parse("unix:metrics.sock").unwrap_err().contains("absolute"));
    assert!(parse("unix:/").is_err());
}

#[test]
fn get_metrics_is_served_and_anything_else_is_not_found() {
    assert_eq!(
        route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
        Route::Metrics
    );
    assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Route::Metrics);
    assert_eq!(route(b"HEAD /metrics HTTP/1.1\r\n\r\n"), Route::MetricsHead);
    assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Route::NotFound);
    assert_eq!(route(b"POST /metrics HTTP/1.1\r\n\r\n"), Route::NotFound);
    assert_eq!(route(b"GET /metrics/x HTTP/1.1\r\n\r\n"), Route::NotFound);
    assert_eq!(route(b"hello\r\n\r\n"), Route::BadRequest);
    assert_eq!(route(b"GET /metrics SPDY/3\r\n\r\n"), Route::BadRequest);
    assert_eq!(route(b"\xff\xfe\r\n\r\n"), Route::BadRequest);
}

#[test]
fn a_head_is_complete_at_its_blank_line() {
    assert_eq!(head_end(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"), None);
    assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
    assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
}

#[test]
fn answers_say_their_length_and_close() {
    let ok = String::from_utf8(response(Route::Metrics, "m 1\n")).unwrap();
    assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
    assert!(ok.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
    assert!(ok.contains("Content-Length: 4\r\n") && ok.contains("Connection: close\r\n"));
    assert!(ok.ends_with("\r\n\r\nm 1\n"));
    let head = String::from_utf8(response(Route::MetricsHead, "m 1\n")).unwrap();
    assert!(head.contains("Content-Length: 4\r\n") && head.ends_with("\r\n\r\n"));
    let missing = String::from_utf8(response(Route::NotFound, "m 1\n")).unwrap();
    assert!(missing.starts_with("HTTP/1.1 404 Not Found\r\n") && !missing.contains("m 1"));
}
