//! `keel relay` on a real kernel, as root: each test makes a network namespace as the daemon
//! would (only `lo`, every address `local` on it, the resolver's sockets and the static
//! listeners inside), writes a relay spec and starts the real binary with those descriptors.
//! Every "outside" service is on the host's 127.0.0.1 (echo servers, a DNS server answering
//! from a map); names map only to this machine's loopback or to addresses the relay must
//! refuse before any packet leaves (10.x, 169.254.x), and the agent's side dials only inside
//! the namespace.

// A test crate: its `pre_exec` (placing the inherited descriptors at the spec's numbers, as
// the daemon does) is unsafe by its nature; the block's comment says why it is sound.
#![allow(unsafe_code)]

mod common;
mod network_relay_support;

use common::*;
use keel::sys::netns;
use network_relay_support::*;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

#[test]
fn a_listed_host_port_is_reached_and_every_other_destination_refused() {
    if !require_root("a_listed_host_port_is_reached_and_every_other_destination_refused") {
        return;
    }
    let (p1, p2) = (echo_server(), echo_server());
    let resolver = dns_server(&[]);
    let sandbox = Sandbox::new("host-port", &[format!("host:{p1}")], resolver);

    let (rcode, addrs) = sandbox.query("host.keel.internal", 1);
    assert_eq!((rcode, addrs), (0, vec![HOST]));
    echoes(
        sandbox.dial(SocketAddr::from((HOST, p1))).unwrap(),
        b"ping through the relay",
    );

    // The host's other port is served on the host, yet refused inside, at once.
    let start = Instant::now();
    refused(sandbox.dial(SocketAddr::from((HOST, p2))), "host port P2");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    // The agent's own loopback is its own: nothing listens there.
    refused(
        sandbox.dial(SocketAddr::from(([127, 0, 0, 1], p1))),
        "the sandbox's own 127.0.0.1",
    );

    assert_eq!(
        sandbox.query_tcp("host.keel.internal"),
        (0, vec![HOST]),
        "over TCP"
    );
    assert_eq!(sandbox.query_tcp("unlisted.example").0, 3, "over TCP");
    let (rcode, addrs) = sandbox.query("unlisted.example", 1);
    assert_eq!((rcode, addrs.len()), (3, 0), "NXDOMAIN");

    let answer = proxy_exchange(
        &sandbox,
        &format!("CONNECT host.keel.internal:{p2} HTTP/1.1\r\n\r\n"),
        b"",
    );
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(
        answer.contains(&format!("host:{p2}")),
        "the reason names the entry to add: {answer}"
    );

    let report = sandbox.report_until("the counts", |r| {
        allowed(r, &format!("host.keel.internal:{p1}")).is_some_and(|a| a.bytes_in >= 22)
            && refusal(r, &format!("host.keel.internal:{p2}")).is_some()
            && refusal(r, "unlisted.example").is_some()
    });
    let counted = allowed(&report, &format!("host.keel.internal:{p1}")).unwrap();
    assert_eq!(
        (counted.connections, counted.bytes_out, counted.bytes_in),
        (1, 22, 22)
    );
    assert!(refusal(&report, "unlisted.example")
        .unwrap()
        .reason
        .contains("not on the task's allow-list"));
    assert_eq!(report.open_connections, 0, "{report:?}");
}

#[test]
fn names_wildcards_and_rebinding_are_judged_by_the_policy() {
    if !require_root("names_wildcards_and_rebinding_are_judged_by_the_policy") {
        return;
    }
    let (e1, e2) = (echo_server(), echo_server());
    let loopback = Ipv4Addr::LOCALHOST;
    let resolver = dns_server(&[
        ("a.wild.test", loopback),
        ("wild.test", loopback),
        ("named.test", loopback),
        ("loop.test", loopback),
        ("private.test", Ipv4Addr::new(10, 1, 2, 3)),
        ("linklocal.test", Ipv4Addr::new(169, 254, 169, 254)),
    ]);
    let entries = [
        format!("*.wild.test:{e2}"),
        format!("named.test:{e2}"),
        format!("127.0.0.1:{e2}"),
        format!("loop.test:{e1}"),
        format!("private.test:{e2}"),
        "linklocal.test:80".to_string(),
    ];
    let sandbox = Sandbox::new("names", &entries, resolver);

    // A wildcard matches a subdomain, not its parent; AAAA of a listed name is empty.
    let wild = sandbox.resolve("a.wild.test");
    assert_eq!(sandbox.query("wild.test", 1).0, 3, "the parent is NXDOMAIN");
    assert_eq!(
        sandbox.query("a.wild.test", 28),
        (0, vec![]),
        "AAAA: NOERROR, no answer"
    );
    assert_eq!(sandbox.resolve("a.wild.test"), wild, "an address is kept");
    echoes(
        sandbox.dial(SocketAddr::from((wild, e2))).unwrap(),
        b"wildcard",
    );
    // A name resolved to loopback, and an entry names that address: reached.
    let named = sandbox.resolve("named.test");
    assert_ne!(named, wild);
    echoes(
        sandbox.dial(SocketAddr::from((named, e2))).unwrap(),
        b"named",
    );
    // The address entry itself, dialled directly.
    echoes(
        sandbox.dial(SocketAddr::from((loopback, e2))).unwrap(),
        b"address entry",
    );
    // A listed name's unlisted port: nobody listens.
    refused(
        sandbox.dial(SocketAddr::from((named, e1))),
        "named.test's unlisted port",
    );

    // Rebinding: listed names the host resolves to loopback, private and link-local
    // addresses that no entry names are refused before any connect.
    for (name, port) in [
        ("loop.test", e1),
        ("private.test", e2),
        ("linklocal.test", 80),
    ] {
        let fake = sandbox.resolve(name);
        refused(sandbox.dial(SocketAddr::from((fake, port))), name);
    }
    // Another address on an address entry's port.
    refused(
        sandbox.dial(SocketAddr::from(([10, 20, 30, 40], e2))),
        "an unlisted address",
    );

    let report = sandbox.report_until("the refusals", |r| {
        ["loop.test", "private.test", "linklocal.test"]
            .iter()
            .all(|n| refusal(r, n).is_some())
            && refusal(r, &format!("10.20.30.40:{e2}")).is_some()
            && allowed(r, &format!("named.test:{e2}")).is_some_and(|a| a.bytes_in == 5)
    });
    for (name, kind) in [
        ("loop.test", "loopback"),
        ("private.test", "private"),
        ("linklocal.test", "link-local"),
    ] {
        let reason = &refusal(&report, name).unwrap().reason;
        assert!(
            reason.contains(&format!("a {kind} address")),
            "{name}: {reason}"
        );
    }
    assert_eq!(
        allowed(&report, &format!("a.wild.test:{e2}"))
            .unwrap()
            .connections,
        1
    );
    assert_eq!(
        allowed(&report, &format!("127.0.0.1:{e2}"))
            .unwrap()
            .bytes_out,
        13
    );
    assert!(
        allowed(&report, "loop.test").is_none()
            && allowed(&report, &format!("loop.test:{e1}")).is_none()
    );
}

#[test]
fn the_proxy_tunnels_and_forwards_under_the_same_policy() {
    if !require_root("the_proxy_tunnels_and_forwards_under_the_same_policy") {
        return;
    }
    let (e1, e2) = (echo_server(), echo_server());
    let resolver = dns_server(&[("named.test", Ipv4Addr::LOCALHOST)]);
    let entries = [
        format!("host:{e1}"),
        format!("named.test:{e2}"),
        format!("127.0.0.1:{e2}"),
    ];
    let sandbox = Sandbox::new("proxy", &entries, resolver);

    let answer = proxy_exchange(
        &sandbox,
        &format!("CONNECT named.test:{e2} HTTP/1.1\r\nHost: named.test\r\n\r\n"),
        b"tunnelled",
    );
    assert_eq!(
        answer,
        "HTTP/1.1 200 Connection established\r\n\r\ntunnelled"
    );
    let answer = proxy_exchange(
        &sandbox,
        &format!("CONNECT host.keel.internal:{e1} HTTP/1.1\r\n\r\n"),
        b"to the host",
    );
    assert!(answer.ends_with("\r\n\r\nto the host"), "{answer}");

    // Absolute form: forwarded in origin form, one request per connection.
    let request = format!("GET http://host.keel.internal:{e1}/path?q=1 HTTP/1.1\r\nHost: host.keel.internal:{e1}\r\nProxy-Connection: keep-alive\r\n\r\n");
    let echoed = proxy_exchange(&sandbox, &request, b"");
    assert!(echoed.starts_with("GET /path?q=1 HTTP/1.1\r\n"), "{echoed}");
    assert!(
        echoed.contains("Connection: close\r\n") && !echoed.contains("Proxy-Connection"),
        "{echoed}"
    );

    for (target, why) in [
        ("unlisted.test:443", "not on the task's allow-list"),
        (&*format!("named.test:{e1}"), "on port"),
    ] {
        let answer = proxy_exchange(&sandbox, &format!("CONNECT {target} HTTP/1.1\r\n\r\n"), b"");
        assert!(
            answer.starts_with("HTTP/1.1 403 Forbidden\r\n") && answer.contains(why),
            "{target}: {answer}"
        );
    }
    let answer = proxy_exchange(&sandbox, "NONSENSE\r\n\r\n", b"");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");

    let report = sandbox.report_until("the proxy's counts", |r| {
        allowed(r, &format!("named.test:{e2}")).is_some_and(|a| a.bytes_in == 9)
            && refusal(r, "unlisted.test").is_some()
            && refusal(r, &format!("named.test:{e1}")).is_some()
    });
    assert_eq!(
        allowed(&report, &format!("host.keel.internal:{e1}"))
            .unwrap()
            .connections,
        2
    );
}

#[test]
fn a_relay_started_again_serves_the_cached_addresses_and_goes_on_counting() {
    if !require_root("a_relay_started_again_serves_the_cached_addresses_and_goes_on_counting") {
        return;
    }
    let e2 = echo_server();
    let resolver = dns_server(&[("named.test", Ipv4Addr::LOCALHOST)]);
    // other.test has a listener of its own (no address entry's port covers it); the host's
    // DNS server does not know it.
    let p3 = if e2 == 65535 { 1025 } else { e2 + 1 };
    let entries = [
        format!("named.test:{e2}"),
        format!("127.0.0.1:{e2}"),
        format!("other.test:{p3}"),
    ];
    let mut sandbox = Sandbox::new("restart", &entries, resolver);
    let named = sandbox.resolve("named.test");
    let other = sandbox.resolve("other.test");
    echoes(
        sandbox.dial(SocketAddr::from((named, e2))).unwrap(),
        b"before",
    );
    let destination = format!("named.test:{e2}");
    sandbox.report_until("the first connection", |r| {
        allowed(r, &destination).is_some_and(|a| a.bytes_in == 6)
    });

    sandbox.kill_relay();
    sandbox.start_relay();
    // The agent's cached address, without asking again: the name is known again.
    echoes(
        sandbox.dial(SocketAddr::from((named, e2))).unwrap(),
        b"after",
    );
    // other.test's own listener was made again: its connection reaches the relay, which
    // asks the host for the name and refuses it (unknown there), on the record.
    refused(
        sandbox.dial(SocketAddr::from((other, p3))),
        "other.test, unknown on the host",
    );
    let report = sandbox.report_until("the counts carried on", |r| {
        allowed(r, &destination).is_some_and(|a| a.connections == 2 && a.bytes_in == 11)
            && refusal(r, &format!("other.test:{p3}")).is_some()
    });
    assert_eq!(report.pid, sandbox.relay.as_ref().unwrap().id());
    let reason = &refusal(&report, &format!("other.test:{p3}"))
        .unwrap()
        .reason;
    assert!(reason.contains("does not exist"), "{reason}");
    // The same addresses again.
    assert_eq!(sandbox.resolve("named.test"), named);
    assert_eq!(sandbox.resolve("other.test"), other);

    // SIGTERM: the relay ends cleanly, its last counts written.
    let mut relay = sandbox.relay.take().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(relay.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = relay.wait().unwrap();
    assert!(status.success(), "{status}");
    let last = sandbox.try_report().unwrap();
    assert_eq!(last.open_connections, 0);
    assert!(allowed(&last, &destination).is_some_and(|a| a.connections == 2));
}

#[test]
fn a_thousand_concurrent_connections_go_through() {
    if !require_root("a_thousand_concurrent_connections_go_through") {
        return;
    }
    const CONNECTIONS: usize = 1000;
    let e1 = echo_server();
    let sandbox = Sandbox::new("thousand", &[format!("host:{e1}")], dns_server(&[]));
    let to = SocketAddr::from((HOST, e1));
    let echoed = netns::run_in(sandbox.ns.as_fd(), move || {
        let mut streams = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            let stream = TcpStream::connect_timeout(&to, WAIT)?;
            stream.set_read_timeout(Some(WAIT))?;
            streams.push(stream);
        }
        // All open at once; each one's bytes come back on it.
        for (i, stream) in streams.iter_mut().enumerate() {
            stream.write_all(format!("conn{i:05}").as_bytes())?;
        }
        let mut echoed = 0;
        for (i, stream) in streams.iter_mut().enumerate() {
            let mut back = [0u8; 9];
            stream.read_exact(&mut back)?;
            echoed += usize::from(back == *format!("conn{i:05}").as_bytes());
        }
        Ok(echoed)
    })
    .unwrap();
    assert_eq!(echoed, CONNECTIONS);
    let destination = format!("host.keel.internal:{e1}");
    sandbox.report_until("a thousand connections counted and closed", |r| {
        allowed(r, &destination).is_some_and(|a| {
            a.connections == CONNECTIONS as u64 && a.bytes_in == 9 * CONNECTIONS as u64
        }) && r.open_connections == 0
    });
}

#[test]
fn a_hung_upstream_holds_only_its_own_connection() {
    if !require_root("a_hung_upstream_holds_only_its_own_connection") {
        return;
    }
    let e1 = echo_server();
    // A host service whose accept queue is full: a connect to it hangs (its SYNs dropped).
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    nix::sys::socket::listen(&hung, nix::sys::socket::Backlog::new(0).unwrap()).unwrap();
    let h = hung.local_addr().unwrap().port();
    let _filler = TcpStream::connect(("127.0.0.1", h)).unwrap();
    let entries = [format!("host:{e1}"), format!("host:{h}")];
    let sandbox = Sandbox::with_connect_timeout("hung", &entries, dns_server(&[]), 10_000);

    let ns = sandbox.ns.try_clone().unwrap();
    let waiting = std::thread::spawn(move || {
        let stream = netns::run_in(ns.as_fd(), move || {
            let stream = TcpStream::connect(SocketAddr::from((HOST, h)))?;
            stream.set_read_timeout(Some(WAIT))?;
            Ok(stream)
        });
        let mut buf = [0u8; 1];
        stream.and_then(|mut s| s.read(&mut buf))
    });
    // Meanwhile another connection goes through, before the hung one's connect gives up.
    wait_until(WAIT, "the relay connecting to the hung service", || {
        sandbox.try_report().is_some()
            && std::fs::read_to_string("/proc/net/tcp")
                .unwrap_or_default()
                .lines()
                .any(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    // The remote address, then the state: SYN_SENT.
                    fields
                        .get(2)
                        .is_some_and(|r| r.ends_with(&format!(":{h:04X}")))
                        && fields.get(3) == Some(&"02")
                })
    });
    echoes(
        sandbox.dial(SocketAddr::from((HOST, e1))).unwrap(),
        b"not held up",
    );
    assert!(
        !waiting.is_finished(),
        "the hung connect gave up before the other went through"
    );
    // Then the hung one is reset (the connect's deadline), not left waiting for ever.
    let outcome = waiting.join().unwrap();
    assert_eq!(
        outcome.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionReset)
    );
}

#[test]
fn bulk_bytes_arrive_intact_both_ways_and_are_counted() {
    if !require_root("bulk_bytes_arrive_intact_both_ways_and_are_counted") {
        return;
    }
    const BYTES: usize = 32 << 20;
    let e1 = echo_server();
    let sandbox = Sandbox::new("bulk", &[format!("host:{e1}")], dns_server(&[]));
    let data: Vec<u8> = (0..BYTES)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0])
        .collect();
    let stream = sandbox.dial(SocketAddr::from((HOST, e1))).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sent = data.clone();
    let writing = std::thread::spawn(move || {
        writer.write_all(&sent).unwrap();
        writer.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut back = Vec::with_capacity(BYTES);
    let mut reader = stream;
    reader.read_to_end(&mut back).unwrap();
    writing.join().unwrap();
    assert!(
        back == data,
        "{} bytes came back, not the ones sent",
        back.len()
    );
    let destination = format!("host.keel.internal:{e1}");
    sandbox.report_until("the bulk counted", |r| {
        allowed(r, &destination)
            .is_some_and(|a| a.bytes_out == BYTES as u64 && a.bytes_in == BYTES as u64)
    });
}
