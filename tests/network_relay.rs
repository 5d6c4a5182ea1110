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

use common::*;
use keel::network::entry::{self, Entry};
use keel::network::relay_protocol::{RelayFds, RelayReport, RelaySpec, PROXY_PORT};
use keel::sys::{netlink, netns};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const RESOLVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const WAIT: Duration = Duration::from_secs(30);
/// Where the relay's descriptors go (far above what the test holds).
const FD_BASE: RawFd = 15000;

fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    assert!(
        hard > FD_BASE as u64 + 100,
        "the open-files hard limit {hard} is too low"
    );
}

fn listen_long(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(addr)?;
    nix::sys::socket::listen(&listener, nix::sys::socket::Backlog::new(4096).unwrap())?;
    Ok(listener)
}

/// An echo server on the host's loopback: each connection gets its bytes back, and its end of
/// file passed on.
fn echo_server() -> u16 {
    let listener = listen_long("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut buf = [0u8; 16384];
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if stream.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                    let _ = stream.shutdown(std::net::Shutdown::Write);
                });
        }
    });
    port
}

/// A DNS server on the host's loopback answering `A` from `map` (NXDOMAIN for the rest; no
/// `AAAA` records).
fn dns_server(map: &[(&str, Ipv4Addr)]) -> SocketAddr {
    let map: BTreeMap<String, Ipv4Addr> = map.iter().map(|(n, a)| (n.to_string(), *a)).collect();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            let Some((name, end)) = read_question(&buf[..n]) else {
                continue;
            };
            let qtype = u16::from_be_bytes([buf[end], buf[end + 1]]);
            let found = map.get(&name);
            let record = found.filter(|_| qtype == 1);
            let mut out = buf[..2].to_vec();
            out.extend_from_slice(&(0x8180u16 | if found.is_some() { 0 } else { 3 }).to_be_bytes());
            out.extend_from_slice(&[0, 1, 0, u8::from(record.is_some()), 0, 0, 0, 0]);
            out.extend_from_slice(&buf[12..end + 4]);
            if let Some(a) = record {
                out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
                out.extend_from_slice(&a.octets());
            }
            let _ = socket.send_to(&out, peer);
        }
    });
    addr
}

/// A query's name (lower case) and where its type begins.
fn read_question(message: &[u8]) -> Option<(String, usize)> {
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = *message.get(at)? as usize;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(message.get(at + 1..at + 1 + len)?).to_lowercase());
        at += 1 + len;
    }
    message.get(at + 1..at + 5)?;
    Some((labels.join("."), at + 1))
}

/// A network namespace set up as the daemon sets it up for `Allow(entries)`, and its relay.
struct Sandbox {
    ns: OwnedFd,
    /// The descriptors the relay inherits, with their numbers in the relay.
    handed: Vec<(OwnedFd, RawFd)>,
    spec: RelaySpec,
    spec_path: std::path::PathBuf,
    dir: std::path::PathBuf,
    relay: Option<Child>,
}

impl Sandbox {
    fn new(test: &str, entries: &[String], resolver: SocketAddr) -> Sandbox {
        raise_open_files_limit();
        let dir = std::env::temp_dir().join(format!("keel-relay-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ns = netns::create().unwrap();
        let mut statics = vec![SocketAddr::from((HOST, PROXY_PORT))];
        for text in entries {
            match entry::parse(text).unwrap() {
                Entry::HostLoopback { port } => statics.push(SocketAddr::from((HOST, port))),
                Entry::Network { port, .. } => {
                    statics.push(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)))
                }
                _ => {}
            }
        }
        statics.sort();
        statics.dedup();
        let made = statics.clone();
        let (udp, tcp, listeners) = netns::run_in(ns.as_fd(), move || {
            netlink::loopback_up()?;
            netlink::add_local_route(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)?;
            netlink::add_local_route(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)?;
            let udp = UdpSocket::bind((RESOLVER, 53))?;
            let tcp = listen_long(SocketAddr::from((RESOLVER, 53)))?;
            let listeners: std::io::Result<Vec<TcpListener>> =
                made.iter().map(|a| listen_long(*a)).collect();
            Ok((udp, tcp, listeners?))
        })
        .unwrap();
        let mut handed: Vec<(OwnedFd, RawFd)> = vec![
            (ns.try_clone().unwrap(), FD_BASE),
            (OwnedFd::from(udp), FD_BASE + 1),
            (OwnedFd::from(tcp), FD_BASE + 2),
        ];
        let mut fds_listeners = Vec::new();
        for (i, (addr, listener)) in statics.iter().zip(listeners).enumerate() {
            let number = FD_BASE + 3 + i as RawFd;
            handed.push((OwnedFd::from(listener), number));
            fds_listeners.push((*addr, number));
        }
        let spec = RelaySpec {
            unit: test.to_string(),
            entries: entries.to_vec(),
            lists: BTreeMap::new(),
            report: dir.join("report.json"),
            names: dir.join("names"),
            resolver: Some(resolver),
            connect_timeout_ms: 5000,
            fds: RelayFds {
                netns: FD_BASE,
                dns_udp: FD_BASE + 1,
                dns_tcp: FD_BASE + 2,
                sniffer: None,
                listeners: fds_listeners,
            },
        };
        let spec_path = dir.join("relay.json");
        std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
        let mut sandbox = Sandbox {
            ns,
            handed,
            spec,
            spec_path,
            dir,
            relay: None,
        };
        sandbox.start_relay();
        sandbox
    }

    /// Start `keel relay` with the descriptors at their numbers; wait until it has written
    /// its report (its loop is running).
    fn start_relay(&mut self) {
        let moves: Vec<(RawFd, RawFd)> = self
            .handed
            .iter()
            .map(|(fd, number)| (fd.as_raw_fd(), *number))
            .collect();
        let mut command = Command::new(keel_bin());
        command.arg("relay").arg("--spec").arg(&self.spec_path);
        // SAFETY: between fork and exec the closure calls only dup2(2), async-signal-safe,
        // on descriptors this process holds open; it allocates nothing.
        unsafe {
            command.pre_exec(move || {
                for (fd, number) in &moves {
                    if libc::dup2(*fd, *number) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        let pid = child.id();
        self.relay = Some(child);
        wait_until(WAIT, "the relay's first report", || {
            self.try_report().is_some_and(|r| r.pid == pid)
        });
    }

    /// SIGKILL the relay (by its pid) and reap it.
    fn kill_relay(&mut self) {
        if let Some(mut child) = self.relay.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn try_report(&self) -> Option<RelayReport> {
        serde_json::from_slice(&std::fs::read(&self.spec.report).ok()?).ok()
    }

    /// Wait until the report satisfies `check`; the report.
    fn report_until(&self, what: &str, check: impl Fn(&RelayReport) -> bool) -> RelayReport {
        wait_until(WAIT, what, || self.try_report().is_some_and(|r| check(&r)));
        self.try_report().unwrap()
    }

    /// Ask the sandbox's resolver, from inside: the response code and the `A` addresses.
    fn query(&self, name: &str, qtype: u16) -> (u16, Vec<Ipv4Addr>) {
        let name = name.to_string();
        netns::run_in(self.ns.as_fd(), move || {
            let socket = UdpSocket::bind("0.0.0.0:0")?;
            socket.set_read_timeout(Some(Duration::from_secs(2)))?;
            let id: u16 = 0x4242;
            let message = keel::network::dns::encode_query(id, &name, qtype).unwrap();
            let deadline = Instant::now() + WAIT;
            let mut buf = [0u8; 1500];
            loop {
                socket.send_to(&message, (RESOLVER, 53))?;
                match socket.recv(&mut buf) {
                    Ok(n) => {
                        let rcode = u16::from_be_bytes([buf[2], buf[3]]) & 0xf;
                        let addrs = match keel::network::dns::parse_answer(&buf[..n], id, qtype) {
                            Some(keel::network::dns::Answer::Addresses { addresses, .. }) => {
                                addresses
                                    .into_iter()
                                    .filter_map(|a| match a {
                                        IpAddr::V4(v4) => Some(v4),
                                        IpAddr::V6(_) => None,
                                    })
                                    .collect()
                            }
                            _ => Vec::new(),
                        };
                        return Ok((rcode, addrs));
                    }
                    Err(_) if Instant::now() < deadline => continue,
                    Err(e) => return Err(e),
                }
            }
        })
        .unwrap()
    }

    /// The fake address of a listed name.
    fn resolve(&self, name: &str) -> Ipv4Addr {
        let (rcode, addrs) = self.query(name, 1);
        assert_eq!(rcode, 0, "{name}: response code");
        assert_eq!(addrs.len(), 1, "{name}: {addrs:?}");
        assert!(
            keel::network::FakeAddresses::in_range(addrs[0]),
            "{addrs:?}"
        );
        addrs[0]
    }

    /// A connection from inside the namespace.
    fn dial(&self, to: SocketAddr) -> std::io::Result<TcpStream> {
        netns::run_in(self.ns.as_fd(), move || {
            let stream = TcpStream::connect_timeout(&to, WAIT)?;
            stream.set_read_timeout(Some(WAIT))?;
            Ok(stream)
        })
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.kill_relay();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `bytes` through `stream` and back from an echo server, then the end of file both ways.
fn echoes(mut stream: TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut back = Vec::new();
    stream.read_to_end(&mut back).unwrap();
    assert_eq!(back, bytes);
}

/// The connection is refused or reset, not served and not left hanging. (Nothing is written:
/// a write could take the reset's error, and the read then see only the end.)
fn refused(result: std::io::Result<TcpStream>, what: &str) {
    let mut stream = match result {
        Err(e) => {
            assert!(
                matches!(
                    e.kind(),
                    ErrorKind::ConnectionRefused | ErrorKind::ConnectionReset
                ),
                "{what}: {e}"
            );
            return;
        }
        Ok(stream) => stream,
    };
    let mut buf = [0u8; 16];
    match stream.read(&mut buf) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{what}: {e}"),
        Ok(n) => panic!("{what}: read {n} bytes instead of a reset"),
    }
}

fn refusal<'a>(
    report: &'a RelayReport,
    destination: &str,
) -> Option<&'a keel::network::relay_protocol::RefusedCount> {
    report.refused.iter().find(|r| r.destination == destination)
}

fn allowed<'a>(
    report: &'a RelayReport,
    destination: &str,
) -> Option<&'a keel::network::relay_protocol::AllowedCount> {
    report.allowed.iter().find(|a| a.destination == destination)
}

/// A proxy exchange from inside: the request sent, the whole answer read (the proxy closes
/// after a refusal; an echo upstream closes after our end of file).
fn proxy_exchange(sandbox: &Sandbox, request: &str, then: &[u8]) -> String {
    let mut stream = sandbox.dial(SocketAddr::from((HOST, PROXY_PORT))).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    stream.write_all(then).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

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
