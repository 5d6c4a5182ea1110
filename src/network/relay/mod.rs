//! `keel relay --spec FILE`: the policy side of a task's `sandbox.network: Allow([...])`,
//! a process of its own outside the task's network namespace, holding sockets inside it.
//!
//! The daemon makes the namespace, its routes (every address `local` on `lo`), the
//! resolver's sockets (`198.18.0.2:53`, UDP and TCP), the static listeners (the proxy on
//! `198.18.0.1:3128`, one per `host:PORT` entry, one per address entry's port), writes a
//! [`RelaySpec`] and starts the relay with those descriptors at the numbers it gives. The
//! relay then, on one mio event loop (no async runtime):
//! - answers DNS (`dns_side.rs`): a listed name gets a fake address, whose listeners (one per
//!   port the policy gives the name) it makes inside the namespace first and whose line it
//!   appends to `spec.names`; an unlisted name is `NXDOMAIN` at once;
//! - accepts on every listener (`connections.rs`): the accepted socket's own address names the
//!   destination; the policy refuses (a reset) or lets it through: a name resolved on the host
//!   by the resolver threads (`pool.rs`), every address it resolved to checked (DNS rebinding),
//!   a non-blocking connect with a deadline, then both directions spliced (`splicing.rs`);
//! - serves the HTTP proxy (`proxy.rs`) under the same policy;
//! - for a task with secrets, terminates TLS to the secrets' hosts on intercept threads and
//!   swaps each placeholder for its value, and looks through plain text for placeholders on
//!   their way elsewhere (`intercepting.rs`);
//! - keeps the counts in `spec.report` (`report.rs`).
//!
//! Started again (after a crash), it reads `spec.names` and the last report back: the
//! addresses the agent cached work again, and counting goes on.

mod attempts;
mod connections;
mod dns_side;
mod event_loop;
mod intercepting;
mod pool;
mod proxy;
mod report;
mod slab;
mod splicing;

use crate::network::entry::{self, Entry};
use crate::network::fake::FakeAddresses;
use crate::network::policy::Policy;
use crate::network::relay_protocol::RelaySpec;
use connections::Conn;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The kind of a connection attempt the packet sniffer saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
}

/// The packet sniffer's side of the relay (`spec.fds.sniffer`): each connection attempt the
/// namespace's `lo` saw (a TCP SYN, a UDP datagram), so that an attempt to a destination no
/// listener serves — which the kernel resets without the relay hearing of it — is counted as
/// a refusal too. The relay waits for `fd` to be readable, then calls `read_attempts`.
pub trait AttemptSource {
    /// The descriptor the relay's loop waits on.
    fn fd(&self) -> RawFd;
    /// The attempts seen since the last call (never blocks; reads until EAGAIN).
    fn read_attempts(&mut self, out: &mut Vec<(Protocol, SocketAddr)>);
}

/// The [`AttemptSource`] of the inherited sniffer descriptor: an `AF_PACKET` socket on the
/// namespace's `lo` that passes connection attempts only ([`crate::sys::packet`]).
pub fn sniffer_from_fd(fd: OwnedFd) -> Option<Box<dyn AttemptSource>> {
    Some(Box::new(PacketSniffer {
        fd,
        read: Vec::new(),
    }))
}

struct PacketSniffer {
    fd: OwnedFd,
    read: Vec<crate::sys::packet::Attempt>,
}

impl AttemptSource for PacketSniffer {
    fn fd(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }

    fn read_attempts(&mut self, out: &mut Vec<(Protocol, SocketAddr)>) {
        use std::os::fd::AsFd;
        self.read.clear();
        if let Err(e) = crate::sys::packet::read_attempts(self.fd.as_fd(), &mut self.read) {
            log::debug!("relay: the sniffer: {e}");
        }
        out.extend(self.read.iter().map(|a| {
            let protocol = match a.protocol {
                crate::sys::packet::Protocol::Tcp => Protocol::Tcp,
                crate::sys::packet::Protocol::Udp => Protocol::Udp,
            };
            (protocol, a.destination)
        }));
    }
}

/// The most a name's resolution on the host may take.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// The threads that resolve names on the host.
pub const RESOLVER_THREADS: usize = 4;
/// How long a proxy client may take to send its request's head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The most names given a fake address in one attempt: each holds a listener per port, and a
/// wildcard entry lets an agent ask for any number of names (past this, `REFUSED`).
pub const MAX_NAMES: usize = 2048;
/// How long a name's host addresses are reused for new connections.
pub const CACHE_FOR: Duration = Duration::from_secs(10);

const WAKER: mio::Token = mio::Token(0);
const DNS_UDP: mio::Token = mio::Token(1);
const DNS_TCP: mio::Token = mio::Token(2);
const SNIFFER: mio::Token = mio::Token(3);
const SIGNALS: mio::Token = mio::Token(4);
/// Tokens of listeners: this plus the listener's index.
const LISTENER_BASE: usize = 1 << 16;
/// Tokens of DNS-over-TCP connections: this plus the slot.
const DNS_CONN_BASE: usize = 1 << 28;
/// Tokens of relayed connections: this plus twice the slot, plus 1 for the upstream side.
const CONN_BASE: usize = 1 << 32;

/// A listening socket the relay accepts on.
struct Listener {
    socket: mio::net::TcpListener,
    /// The address it is bound to (`0.0.0.0:PORT` for an address entry's port).
    bound: SocketAddr,
    /// The HTTP proxy's (`198.18.0.1:3128`).
    proxy: bool,
}

/// A DNS-over-TCP client.
struct DnsConn {
    stream: mio::net::TcpStream,
    buffer: Vec<u8>,
}

/// The relay's whole state, owned by its event loop.
pub struct Relay {
    spec: RelaySpec,
    policy: Policy,
    fake: FakeAddresses,
    netns: OwnedFd,
    poll: mio::Poll,
    dns_udp: mio::net::UdpSocket,
    dns_tcp: mio::net::TcpListener,
    dns_conns: slab::Slab<DnsConn>,
    listeners: Vec<Listener>,
    /// Exact addresses listened on, and the ports listened on at every address.
    listened: HashSet<SocketAddr>,
    listened_ports: HashSet<u16>,
    conns: slab::Slab<Conn>,
    /// Deadlines: (when, connection slot, its generation, the connection's timer number).
    timers: BinaryHeap<std::cmp::Reverse<(Instant, usize, u64, u64)>>,
    /// Connections whose turn ended before the kernel said EAGAIN.
    again: Vec<usize>,
    pool: pool::Pool,
    intercepts: intercepting::Intercepts,
    cache: HashMap<String, (Instant, Vec<IpAddr>)>,
    counts: report::Counts,
    names: std::fs::File,
    sniffer: Option<Box<dyn AttemptSource>>,
    connect_timeout: Duration,
    /// SIGTERM and SIGINT, registered (kept: dropping them unregisters the handlers).
    signals: Option<signal_hook_mio::v1_0::Signals>,
    /// The last write of the report failed (said once in the log).
    report_failing: bool,
    stop: bool,
}

/// `keel relay --spec FILE`: the exit code (0 after SIGTERM, 1 when it could not start).
pub fn run(spec_path: &Path) -> i32 {
    // It holds the CA's key and, for moments, the secrets' values: no core dump of it, no
    // ptrace by a process of its uid without CAP_SYS_PTRACE.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        log::warn!("relay: PR_SET_DUMPABLE: {e}");
    }
    let spec = match read_spec(spec_path) {
        Ok(spec) => spec,
        Err(e) => {
            log::error!("relay: {e}");
            return 1;
        }
    };
    let sniffer = match spec.fds.sniffer.map(crate::sys::adopt_fd) {
        Some(Ok(fd)) => sniffer_from_fd(fd),
        Some(Err(e)) => {
            log::warn!("relay: the sniffer's descriptor: {e}");
            None
        }
        None => None,
    };
    match Relay::new(spec, sniffer) {
        Ok(mut relay) => relay.run(),
        Err(e) => {
            log::error!("relay: {e}");
            1
        }
    }
}

fn read_spec(path: &Path) -> Result<RelaySpec, String> {
    let text =
        std::fs::read(path).map_err(|e| format!("reading the spec {}: {e}", path.display()))?;
    serde_json::from_slice(&text).map_err(|e| format!("the spec {}: {e}", path.display()))
}

/// The policy of the spec's entries and lists.
pub fn policy_of(spec: &RelaySpec) -> Result<Policy, String> {
    let parse = |entries: &[String]| -> Result<Vec<Entry>, String> {
        entries
            .iter()
            .map(|e| entry::parse(e).map_err(|err| err.to_string()))
            .collect()
    };
    let mut lists = std::collections::BTreeMap::new();
    for (name, entries) in &spec.lists {
        lists.insert(
            name.clone(),
            parse(entries).map_err(|e| format!("in the list @{name}: {e}"))?,
        );
    }
    Policy::new(&parse(&spec.entries)?, &lists).map_err(|e| e.to_string())
}

impl Relay {
    /// Take the spec's descriptors, read back what an earlier relay of this attempt left.
    pub fn new(spec: RelaySpec, sniffer: Option<Box<dyn AttemptSource>>) -> Result<Relay, String> {
        let policy = policy_of(&spec)?;
        raise_open_files_limit();
        let adopt = |fd: RawFd, what: &str| {
            crate::sys::adopt_fd(fd).map_err(|e| format!("{what} (descriptor {fd}): {e}"))
        };
        let netns = adopt(spec.fds.netns, "the network namespace")?;
        let nonblocking = |fd: &OwnedFd, what: &str| {
            crate::sys::fds::set_nonblocking(std::os::fd::AsFd::as_fd(fd))
                .map_err(|e| format!("{what}: {e}"))
        };
        let udp = adopt(spec.fds.dns_udp, "the resolver's UDP socket")?;
        nonblocking(&udp, "the resolver's UDP socket")?;
        let tcp = adopt(spec.fds.dns_tcp, "the resolver's TCP socket")?;
        nonblocking(&tcp, "the resolver's TCP socket")?;
        let poll = mio::Poll::new().map_err(|e| format!("epoll: {e}"))?;
        let waker =
            Arc::new(mio::Waker::new(poll.registry(), WAKER).map_err(|e| format!("eventfd: {e}"))?);
        let server = match spec.resolver {
            Some(server) => Some(server),
            None => match crate::network::resolver::system_nameserver() {
                Ok(server) => Some(server),
                Err(e) => {
                    log::error!(
                        "relay {}: no DNS server to resolve names with: {e}",
                        spec.unit
                    );
                    None
                }
            },
        };
        let intercepts = intercepting::Intercepts::new(&spec, Arc::clone(&waker));
        let pool = pool::Pool::start(RESOLVER_THREADS, server, RESOLVE_TIMEOUT, waker)
            .map_err(|e| format!("the resolver threads: {e}"))?;
        let counts =
            report::Counts::from_report(report::read_report(&spec.report).unwrap_or_default());
        let names = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&spec.names)
            .map_err(|e| format!("{}: {e}", spec.names.display()))?;
        let mut relay = Relay {
            policy,
            fake: FakeAddresses::with_capacity(MAX_NAMES),
            netns,
            dns_udp: mio::net::UdpSocket::from_std(std::net::UdpSocket::from(udp)),
            dns_tcp: mio::net::TcpListener::from_std(std::net::TcpListener::from(tcp)),
            dns_conns: slab::Slab::default(),
            listeners: Vec::new(),
            listened: HashSet::new(),
            listened_ports: HashSet::new(),
            conns: slab::Slab::default(),
            timers: BinaryHeap::new(),
            again: Vec::new(),
            pool,
            intercepts,
            cache: HashMap::new(),
            counts,
            names,
            sniffer,
            connect_timeout: Duration::from_millis(spec.connect_timeout_ms.max(1)),
            signals: None,
            report_failing: false,
            stop: false,
            poll,
            spec,
        };
        relay.register_fixed()?;
        relay.restore_names();
        Ok(relay)
    }
}

/// As many open files as the hard limit allows: each relayed connection holds six (two
/// sockets, two pipes).
fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                log::warn!("relay: raising the open-files limit to {hard}: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests;
