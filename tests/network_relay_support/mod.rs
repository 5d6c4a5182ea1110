//! The fixture of `tests/network_relay.rs`: a network namespace made as the daemon makes it
//! for `Allow([...])`, its relay (the real `keel relay`), and the "outside" services on the
//! host's loopback (echo servers, a DNS server answering from a map).

//! Its `pre_exec` is the one unsafe block (allowed at the top of `tests/network_relay.rs`).

#![allow(dead_code)]

use super::common::*;
use keel::network::entry::{self, Entry};
use keel::network::relay_protocol::{
    AllowedCount, RefusedCount, RelayFds, RelayReport, RelaySpec, PROXY_PORT,
};
use keel::sys::{netlink, netns};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub const HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const RESOLVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
pub const WAIT: Duration = Duration::from_secs(30);
/// Where the relay's descriptors go (far above what the test holds).
pub const FD_BASE: RawFd = 15000;

pub fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    assert!(
        hard > FD_BASE as u64 + 100,
        "the open-files hard limit {hard} is too low"
    );
}

pub fn listen_long(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(addr)?;
    nix::sys::socket::listen(&listener, nix::sys::socket::Backlog::new(4096).unwrap())?;
    Ok(listener)
}

/// An echo server on the host's loopback: each connection gets its bytes back, and its end of
/// file passed on.
pub fn echo_server() -> u16 {
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
pub fn dns_server(map: &[(&str, Ipv4Addr)]) -> SocketAddr {
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
pub fn read_question(message: &[u8]) -> Option<(String, usize)> {
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
pub struct Sandbox {
    pub ns: OwnedFd,
    /// The descriptors the relay inherits, with their numbers in the relay.
    handed: Vec<(OwnedFd, RawFd)>,
    pub spec: RelaySpec,
    spec_path: std::path::PathBuf,
    dir: std::path::PathBuf,
    pub relay: Option<Child>,
}

impl Sandbox {
    pub fn new(test: &str, entries: &[String], resolver: SocketAddr) -> Sandbox {
        Sandbox::with_connect_timeout(test, entries, resolver, 5000)
    }

    /// The same, the relay's connects to upstreams given `connect_timeout_ms`.
    pub fn with_connect_timeout(
        test: &str,
        entries: &[String],
        resolver: SocketAddr,
        connect_timeout_ms: u64,
    ) -> Sandbox {
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
            connect_timeout_ms,
            secrets: Vec::new(),
            state_root: None,
            trust: Vec::new(),
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
    pub fn start_relay(&mut self) {
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
    pub fn kill_relay(&mut self) {
        if let Some(mut child) = self.relay.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn try_report(&self) -> Option<RelayReport> {
        serde_json::from_slice(&std::fs::read(&self.spec.report).ok()?).ok()
    }

    /// Wait until the report satisfies `check`; the report.
    pub fn report_until(&self, what: &str, check: impl Fn(&RelayReport) -> bool) -> RelayReport {
        wait_until(WAIT, what, || self.try_report().is_some_and(|r| check(&r)));
        self.try_report().unwrap()
    }

    /// Ask the sandbox's resolver, from inside: the response code and the `A` addresses.
    pub fn query(&self, name: &str, qtype: u16) -> (u16, Vec<Ipv4Addr>) {
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

    /// The same over TCP: the response code and the `A` addresses.
    pub fn query_tcp(&self, name: &str) -> (u16, Vec<Ipv4Addr>) {
        let message = keel::network::dns::encode_query(0x4343, name, 1).unwrap();
        let mut stream = self.dial(SocketAddr::from((RESOLVER, 53))).unwrap();
        let mut framed = (message.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&message);
        stream.write_all(&framed).unwrap();
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).unwrap();
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut answer).unwrap();
        let rcode = u16::from_be_bytes([answer[2], answer[3]]) & 0xf;
        let addrs = match keel::network::dns::parse_answer(&answer, 0x4343, 1) {
            Some(keel::network::dns::Answer::Addresses { addresses, .. }) => addresses
                .into_iter()
                .filter_map(|a| match a {
                    IpAddr::V4(v4) => Some(v4),
                    IpAddr::V6(_) => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        (rcode, addrs)
    }

    /// The fake address of a listed name.
    pub fn resolve(&self, name: &str) -> Ipv4Addr {
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
    pub fn dial(&self, to: SocketAddr) -> std::io::Result<TcpStream> {
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
pub fn echoes(mut stream: TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut back = Vec::new();
    stream.read_to_end(&mut back).unwrap();
    assert_eq!(back, bytes);
}

/// The connection is refused or reset, not served and not left hanging. (Nothing is written:
/// a write could take the reset's error, and the read then see only the end.)
pub fn refused(result: std::io::Result<TcpStream>, what: &str) {
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

pub fn refusal<'a>(report: &'a RelayReport, destination: &str) -> Option<&'a RefusedCount> {
    report.refused.iter().find(|r| r.destination == destination)
}

pub fn allowed<'a>(report: &'a RelayReport, destination: &str) -> Option<&'a AllowedCount> {
    report.allowed.iter().find(|a| a.destination == destination)
}

/// A proxy exchange from inside: the request sent, the whole answer read (the proxy closes
/// after a refusal; an echo upstream closes after our end of file).
pub fn proxy_exchange(sandbox: &Sandbox, request: &str, then: &[u8]) -> String {
    let mut stream = sandbox.dial(SocketAddr::from((HOST, PROXY_PORT))).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    stream.write_all(then).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}
