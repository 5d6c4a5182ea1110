//! `sandbox.network` end to end, as root on the real kernel, through the real daemon: the
//! task's own network namespace (owned by its user namespace), the relay the daemon starts in
//! the task's cgroup, DNS with fake addresses, captured connections, the proxy variables, the
//! journal's `net-denied` events and `keel status UNIT`. Every destination is on this machine:
//! "outside" services listen on the host's 127.0.0.1, the test's DNS server (on loopback) maps
//! names only to loopback, and the agent's other attempts go to addresses that must be refused
//! before any packet leaves its namespace (its only interface is `lo`).

// The fixture's `pre_exec` (tests/network_relay_support) is unsafe by its nature; this file
// uses only its servers.
#![allow(unsafe_code)]

mod common;
mod network_relay_support;

use common::sandbox::*;
use common::*;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::time::Duration;

/// An HTTP server on the host's loopback that answers every request with `body`.
fn http_server(body: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                    match stream.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let answer = format!(
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes());
            });
        }
    });
    port
}

/// A server on the host's loopback that sends `chunks` chunks of 64 KiB (byte `i % 251` at
/// offset `i`), one every 100 ms: a download that takes a while.
fn slow_server(chunks: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut head = [0u8; 1024];
                let _ = stream.read(&mut head);
                let total = chunks * CHUNK;
                let _ = write!(stream, "HTTP/1.0 200 OK\r\nContent-Length: {total}\r\n\r\n");
                for c in 0..chunks {
                    let chunk: Vec<u8> = (c * CHUNK..(c + 1) * CHUNK)
                        .map(|i| (i % 251) as u8)
                        .collect();
                    if stream.write_all(&chunk).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
    });
    port
}

const CHUNK: usize = 64 << 10;

fn daemon_with_resolver(name: &str, resolver: std::net::SocketAddr) -> Daemon {
    let mut d = Daemon::prepare(name);
    std::fs::create_dir_all(d.state()).unwrap();
    std::fs::write(
        d.state().join("keel.ron"),
        format!(r#"Config(network: Network(resolver: Some("{resolver}")))"#),
    )
    .unwrap();
    d.spawn();
    d
}

/// `script` run by bash (its `/dev/tcp`), through [`run_agent`]'s `/bin/sh -c`.
fn bash(script: &str) -> String {
    format!("exec /bin/bash -c '{}'", script.replace('\'', "'\\''"))
}

fn has_line(out: &str, line: &str) -> bool {
    out.lines().any(|l| l.trim() == line)
}

#[test]
fn an_allow_list_lets_through_what_it_lists_and_refuses_the_rest_at_once_on_the_record() {
    if !require_root(
        "an_allow_list_lets_through_what_it_lists_and_refuses_the_rest_at_once_on_the_record",
    ) {
        return;
    }
    let p1 = http_server("hello-p1");
    let p2 = http_server("hello-p2");
    // A host entry and an address entry on one port: one listener takes both.
    let p3 = http_server("hello-p3");
    // Names the relay resolves on the host: only to loopback (refused unless an entry names
    // the address: DNS rebinding).
    let resolver = network_relay_support::dns_server(&[("loop.test.example", Ipv4Addr::LOCALHOST)]);
    let abstract_name = format!("keel-test-abstract-{}", std::process::id());
    let abstract_listener = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(&abstract_name).unwrap();
        std::os::unix::net::UnixListener::bind_addr(&addr).unwrap()
    };
    let d = daemon_with_resolver("net-allow", resolver);
    let script = format!(
        r#"
        echo "resolver $(grep ^nameserver /etc/resolv.conf | tr '\n' ' ')"
        exec 3<>/dev/tcp/host.keel.internal/{p1} && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && echo "direct $(tail -n 1 <&3)"
        if (exec 4<>/dev/tcp/host.keel.internal/{p2}) 2>/dev/null; then echo "p2 open"; else echo "p2 refused"; fi
        echo "p3 $(curl -s -m 10 --noproxy '*' http://host.keel.internal:{p3}/)"
        if (exec 4<>/dev/tcp/198.18.0.1/{p2}) 2>/dev/null; then echo "raw p2 open"; else echo "raw p2 refused"; fi
        if (exec 4<>/dev/tcp/127.0.0.1/{p1}) 2>/dev/null; then echo "own lo p1 open"; else echo "own lo p1 refused"; fi
        if getent hosts unlisted.test.example >/dev/null; then echo "unlisted resolves"; else echo "unlisted nxdomain"; fi
        echo "wild $(getent hosts a.wild.test.example | cut -d' ' -f1)"
        if getent hosts wild.test.example >/dev/null; then echo "parent resolves"; else echo "parent nxdomain"; fi
        echo "proxied $(curl -s -m 10 http://host.keel.internal:{p1}/)"
        echo "proxied p2 $(curl -s -m 10 -o /dev/null -w '%{{http_code}}' http://host.keel.internal:{p2}/)"
        echo "loop $(curl -s -m 10 --noproxy '*' http://loop.test.example:{p1}/ || echo refused)"
        if curl -s -m 5 --abstract-unix-socket {abstract_name} http://x/ >/dev/null 2>&1; then echo "abstract reached"; else echo "abstract unreachable"; fi
        echo "netdevs $(ls /sys/class/net | tr '\n' ' ')"
        echo "proxy env $HTTPS_PROXY"
        sleep 1
        "#
    );
    let entries = format!(
        r#"sandbox: Sandbox(network: Allow(["host:{p1}", "*.wild.test.example", "loop.test.example:{p1}", "host:{p3}", "10.255.0.0/16:{p3}"]))"#
    );
    let (task, out) = run_agent(&d, "agent", &bash(&script), &entries);
    assert_eq!(task["state"], "succeeded", "{out}\n{}", d.daemon_log());
    for expected in [
        "resolver nameserver 198.18.0.2",
        "direct hello-p1",
        "p2 refused",
        "p3 hello-p3",
        "raw p2 refused",
        "own lo p1 refused",
        "unlisted nxdomain",
        "parent nxdomain",
        "proxied hello-p1",
        "proxied p2 403",
        "loop refused",
        "abstract unreachable",
        "netdevs lo",
        "proxy env http://198.18.0.1:3128",
    ] {
        let relay_log = std::fs::read_to_string(d.task_dir("agent").join("run/network/relay.log"));
        assert!(
            has_line(&out, expected),
            "no {expected:?} in:\n{out}\nrelay: {relay_log:?}\ndaemon: {}",
            d.daemon_log()
        );
    }
    let wild = line(&out, "wild ");
    assert!(
        wild.starts_with("198.18."),
        "a fake address for a subdomain: {out}"
    );
    drop(abstract_listener);

    // On the record: each refusal journaled as net-denied (coalesced per destination), and
    // keel status UNIT shows what was reached and refused.
    let denied: Vec<String> = d
        .events(Some("agent"))
        .iter()
        .filter(|e| e["event"] == "net-denied")
        .map(|e| e["detail"].as_str().unwrap_or_default().to_string())
        .collect();
    let mentions = |what: &str| denied.iter().any(|d| d.contains(what));
    assert!(
        mentions(&format!(":{p2}")),
        "P2's refusal journaled: {denied:?}"
    );
    assert!(mentions("unlisted.test.example"), "{denied:?}");
    assert!(
        mentions("loop.test.example"),
        "the rebinding refusal: {denied:?}"
    );
    let shown = stdout_of(&d.keel(&["status", "agent"]));
    assert!(shown.contains("reached"), "{shown}");
    assert!(
        shown.contains(&format!("host.keel.internal:{p1}")),
        "{shown}"
    );
    assert!(shown.contains("refused"), "{shown}");
    let json: serde_json::Value =
        serde_json::from_slice(&d.keel(&["status", "agent", "--json"]).stdout).unwrap();
    let traffic = &json["tasks"][0]["detail"]["network_traffic"];
    let allowed = traffic["allowed"].as_array().expect("allowed counts");
    assert!(
        allowed
            .iter()
            .any(|a| a["connections"].as_u64() >= Some(2) && a["bytes_in"].as_u64() > Some(0)),
        "{traffic}"
    );
}

#[test]
fn the_default_reaches_nothing_outside_and_host_reaches_everything() {
    if !require_root("the_default_reaches_nothing_outside_and_host_reaches_everything") {
        return;
    }
    let p2 = http_server("hello-p2");
    let resolver = network_relay_support::dns_server(&[]);
    let d = daemon_with_resolver("net-default", resolver);
    let script = format!(
        r#"
        for to in host.keel.internal/{p2} 198.18.0.1/{p2} 127.0.0.1/{p2}; do
            if (exec 3<>/dev/tcp/$to) 2>/dev/null; then echo "$to open"; else echo "$to refused"; fi
        done
        echo "proxied $(curl -s -m 10 -o /dev/null -w '%{{http_code}}' http://host.keel.internal:{p2}/)"
        "#
    );
    let (task, out) = run_agent(&d, "default", &bash(&script), "");
    assert_eq!(task["state"], "succeeded", "{out}");
    // host.keel.internal does not resolve at all with nothing listed.
    assert!(
        has_line(&out, &format!("host.keel.internal/{p2} refused")),
        "{out}"
    );
    assert!(has_line(&out, &format!("198.18.0.1/{p2} refused")), "{out}");
    assert!(has_line(&out, &format!("127.0.0.1/{p2} refused")), "{out}");
    // The proxy answers without any host entry (its address is in the variables), and
    // refuses what is not listed.
    assert!(has_line(&out, "proxied 403"), "{out}");
    // Host: the host's loopback, as it is.
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/{p2} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && echo \"host $(tail -n 1 <&3)\"");
    let (task, out) = run_agent(
        &d,
        "host",
        &bash(&script),
        "sandbox: Sandbox(network: Host)",
    );
    assert_eq!(task["state"], "succeeded", "{out}");
    assert!(has_line(&out, "host hello-p2"), "{out}");
}

/// A task that asks `host.keel.internal:PORT` every 200 ms and logs each answer (until
/// `/work/stop` exists), its answers counted, and its relay's pid as its report says.
struct Steady {
    log: std::path::PathBuf,
    report: std::path::PathBuf,
}

impl Steady {
    fn start(d: &Daemon, port: u16, download: Option<u16>) -> Steady {
        // A download that outlasts the daemon's crash, in the background.
        let (fetch, extra) = match download {
            Some(p) => (
                format!("(curl -s --noproxy '*' -o /work/download http://host.keel.internal:{p}/ && touch /work/download.done) &"),
                format!(r#", "host:{p}""#),
            ),
            None => (String::new(), String::new()),
        };
        let script = format!(
            r#"
            {fetch}
            n=0
            while [ ! -e /work/stop ]; do
                n=$((n+1))
                if got=$(curl -s -m 5 --noproxy '*' http://host.keel.internal:{port}/); then echo "$n $got" >> /work/log; fi
                sleep 0.2
            done
            "#
        );
        d.write_unit(
            "steady",
            &format!(
                r#"Unit(command: ["/bin/sh", "-c", {script:?}], restart: Never, sandbox: Sandbox(network: Allow(["host:{port}"{extra}])))"#
            ),
        );
        Steady {
            log: d.task_dir("steady").join("work/log"),
            report: d.task_dir("steady").join("run/network/report.json"),
        }
    }

    fn answered(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.ends_with("hello-p1"))
            .count()
    }

    fn relay_pid(&self) -> Option<u64> {
        let report = std::fs::read(&self.report).ok()?;
        let report: serde_json::Value = serde_json::from_slice(&report).ok()?;
        report["pid"].as_u64()
    }

    fn more_answers(&self, what: &str) {
        let before = self.answered();
        wait_until(Duration::from_secs(30), what, || {
            self.answered() >= before + 3
        });
    }
}

#[test]
fn a_daemon_killed_and_started_again_leaves_the_tasks_connections_working() {
    if !require_root("a_daemon_killed_and_started_again_leaves_the_tasks_connections_working") {
        return;
    }
    let p1 = http_server("hello-p1");
    let resolver = network_relay_support::dns_server(&[]);
    let mut d = daemon_with_resolver("net-crash", resolver);
    const CHUNKS: usize = 80;
    let slow = slow_server(CHUNKS);
    let steady = Steady::start(&d, p1, Some(slow));
    steady.more_answers("first answers");
    let relay = steady.relay_pid().expect("a relay report");
    let download = d.task_dir("steady").join("work/download");
    wait_until(Duration::from_secs(30), "a download under way", || {
        std::fs::metadata(&download).is_ok_and(|m| m.len() > 0)
    });
    d.crash();
    // The relay and the agent outlive the daemon: connections go on meanwhile.
    steady.more_answers("answers without a daemon");
    d.spawn();
    d.wait_state("steady", "running", Duration::from_secs(30));
    steady.more_answers("answers after the restart");
    assert_eq!(
        steady.relay_pid(),
        Some(relay),
        "the same relay serves the re-adopted task"
    );
    // The download begun before the daemon's crash ends after it, whole: an open connection
    // outlives the daemon (its relay is not the daemon's).
    let done = d.task_dir("steady").join("work/download.done");
    wait_until(Duration::from_secs(60), "the download's end", || {
        done.exists()
    });
    let got = std::fs::read(&download).unwrap();
    assert_eq!(got.len(), CHUNKS * CHUNK, "the whole download");
    assert!(
        got.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8),
        "its bytes in order"
    );
    // The new daemon looks after the re-adopted relay: one killed now is started again.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(relay as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until(Duration::from_secs(30), "a new relay", || {
        steady.relay_pid().is_some_and(|pid| pid != relay)
    });
    let relay = steady.relay_pid().unwrap();
    steady.more_answers("answers through the new relay");
    std::fs::write(d.task_dir("steady").join("work/stop"), "").unwrap();
    d.wait_state("steady", "succeeded", Duration::from_secs(30));
    // Its relay died with the attempt's cgroup.
    wait_until(Duration::from_secs(10), "the relay gone", || {
        !std::path::Path::new(&format!("/proc/{relay}")).exists()
    });
}

#[test]
fn a_relay_that_dies_is_started_again_and_the_task_goes_on() {
    if !require_root("a_relay_that_dies_is_started_again_and_the_task_goes_on") {
        return;
    }
    let p1 = http_server("hello-p1");
    let resolver = network_relay_support::dns_server(&[]);
    let d = daemon_with_resolver("net-relay-dies", resolver);
    let steady = Steady::start(&d, p1, None);
    steady.more_answers("first answers");
    let relay = steady.relay_pid().expect("a relay report");
    // SIGKILL the relay (by the pid it wrote: the test's own task's).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(relay as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until(Duration::from_secs(30), "a new relay", || {
        steady.relay_pid().is_some_and(|pid| pid != relay)
    });
    steady.more_answers("answers through the new relay");
    assert_eq!(d.task("steady").unwrap()["state"], "running");
    assert_eq!(d.record("steady").attempt, 1, "the task was not restarted");
    assert!(
        d.daemon_log().contains("network relay"),
        "{}",
        d.daemon_log()
    );
    std::fs::write(d.task_dir("steady").join("work/stop"), "").unwrap();
    d.wait_state("steady", "succeeded", Duration::from_secs(30));
}
