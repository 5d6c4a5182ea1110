//! A task's network namespace, as the daemon makes it for an attempt of a sandbox with a
//! network of its own (`sandbox.network: None` or `Allow`), and the relay it starts for
//! `Allow` ([`super::relay_protocol`]).
//!
//! The namespace is owned by the task's user namespace (made by a child that joins it:
//! `crate::sys::netns::create_in`), its `lo` up. For `Allow`, every address is routed `local`
//! on `lo` (IPv4 and IPv6): a connection to anywhere nobody listens on inside is reset by the
//! kernel at once — never a wait — and the relay's listeners take the rest. The sockets the
//! agent may use before the relay runs are made here, inside the namespace (a thread that
//! joins it): the resolver's (UDP and TCP on `198.18.0.2:53`), the proxy's and each
//! `host:PORT` entry's on `198.18.0.1`, each address entry's port on every address, and the
//! packet sniffer that sees what was refused. No start waits for the relay: what the agent
//! sends first waits in those sockets' queues.

use super::fake::{HOST_ADDRESS, RESOLVER_ADDRESS};
use super::relay_protocol::{RelayFds, RelaySpec, PROXY_PORT};
use super::{entry, Policy};
use crate::sys::{netlink, netns};
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// How long the relay gives an upstream's connect before the agent's connection is reset.
const CONNECT_TIMEOUT_MS: u64 = 10_000;

/// The sockets a relay inherits, made inside the task's namespace.
pub struct RelaySockets {
    pub dns_udp: OwnedFd,
    pub dns_tcp: OwnedFd,
    pub sniffer: Option<OwnedFd>,
    pub listeners: Vec<(SocketAddr, OwnedFd)>,
}

impl RelaySockets {
    /// Every descriptor, for the relay's spawn to keep open across its exec.
    pub fn raw_fds(&self, netns: BorrowedFd<'_>) -> Vec<RawFd> {
        let mut fds = vec![
            netns.as_raw_fd(),
            self.dns_udp.as_raw_fd(),
            self.dns_tcp.as_raw_fd(),
        ];
        fds.extend(self.sniffer.as_ref().map(|s| s.as_raw_fd()));
        fds.extend(self.listeners.iter().map(|(_, fd)| fd.as_raw_fd()));
        fds
    }

    /// Their numbers, as the relay's spec names them (the relay inherits them as they are).
    pub fn relay_fds(&self, netns: BorrowedFd<'_>) -> RelayFds {
        RelayFds {
            netns: netns.as_raw_fd(),
            dns_udp: self.dns_udp.as_raw_fd(),
            dns_tcp: self.dns_tcp.as_raw_fd(),
            sniffer: self.sniffer.as_ref().map(|s| s.as_raw_fd()),
            listeners: (self.listeners.iter())
                .map(|(at, fd)| (*at, fd.as_raw_fd()))
                .collect(),
        }
    }
}

/// The policy of an `Allow` network: its entries parsed (validated when the unit was
/// loaded), its lists expanded.
pub fn policy_of(
    entries: &[String],
    lists: &BTreeMap<String, Vec<String>>,
) -> Result<Policy, String> {
    let parse = |texts: &[String]| -> Result<Vec<entry::Entry>, String> {
        (texts.iter())
            .map(|t| entry::parse(t).map_err(|e| format!("{t:?}: {e}")))
            .collect()
    };
    let mut parsed = BTreeMap::new();
    for (name, members) in lists {
        parsed.insert(name.clone(), parse(members)?);
    }
    Policy::new(&parse(entries)?, &parsed).map_err(|e| e.to_string())
}

/// An `Allow` network's entries, and the named lists they may refer to.
pub type AllowList<'a> = (&'a [String], &'a BTreeMap<String, Vec<String>>);

/// The network namespace of an attempt, owned by `userns` (the task's; `None`: the daemon's
/// own), `lo` up; for `Allow` (its entries and the lists they may name) its routes and the
/// relay's sockets too. Errors name the step.
pub fn make(
    allow: Option<AllowList<'_>>,
    userns: Option<BorrowedFd<'_>>,
) -> Result<(OwnedFd, Option<RelaySockets>), String> {
    let allow = allow
        .map(|(entries, lists)| policy_of(entries, lists))
        .transpose()?;
    let ns = netns::create_in(userns).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::EPERM) => {
                "keel needs CAP_SYS_ADMIN for network namespaces (a container without it?)"
            }
            Some(libc::ENOSPC) => {
                "the host's limit on network namespaces is reached (sysctl \
                 user.max_net_namespaces: raise it, or end some)"
            }
            Some(libc::EINVAL) => "this kernel has no network namespaces (CONFIG_NET_NS)",
            _ => "the kernel refused it",
        };
        format!(
            "cannot make the task's network namespace ({e}): {why}; sandbox.network: Host is \
             the only network that needs none"
        )
    })?;
    let sockets = netns::run_in(ns.as_fd(), move || {
        netlink::loopback_up().map_err(|e| step("bring lo up", e))?;
        match allow {
            Some(policy) => configure_allow(&policy).map(Some),
            None => Ok(None),
        }
    })
    .map_err(|e| format!("cannot set up the task's network namespace: {e}"))?;
    Ok((ns, sockets))
}

/// The relay's sockets made again in the namespace `ns` (for a relay started again: the
/// sockets of the one before died with it).
pub fn remake_sockets(ns: BorrowedFd<'_>, policy: Policy) -> Result<RelaySockets, String> {
    netns::run_in(ns, move || configure_allow(&policy))
        .map_err(|e| format!("cannot make the relay's sockets again: {e}"))
}

fn step(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// In the task's namespace (a thread that joined it): every address local on `lo`, and the
/// sockets of [`RelaySockets`].
fn configure_allow(policy: &Policy) -> io::Result<RelaySockets> {
    for (addr, what) in [
        (IpAddr::V4(Ipv4Addr::UNSPECIFIED), "route 0.0.0.0/0 to lo"),
        (IpAddr::V6(Ipv6Addr::UNSPECIFIED), "route ::/0 to lo"),
    ] {
        match netlink::add_local_route(addr, 0) {
            // Made already: the sockets of a relay started again.
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            // IPv6 turned off on the host (ipv6.disable=1): there is no IPv6 to leave by.
            Err(e) if addr.is_ipv6() && e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {}
            Err(e) => return Err(step(what, e)),
        }
    }
    let resolver = SocketAddr::new(IpAddr::V4(RESOLVER_ADDRESS), 53);
    let dns_udp = UdpSocket::bind(resolver).map_err(|e| step("bind the resolver (UDP)", e))?;
    let dns_tcp = TcpListener::bind(resolver).map_err(|e| step("bind the resolver (TCP)", e))?;
    let (host_ports, network_ports) = policy.static_ports();
    let host = |port| SocketAddr::new(IpAddr::V4(HOST_ADDRESS), port);
    let mut wanted: Vec<SocketAddr> = vec![host(PROXY_PORT)];
    wanted.extend(
        host_ports
            .iter()
            .filter(|p| **p != PROXY_PORT)
            // A port an address entry has at every address: that listener takes
            // `host.keel.internal:PORT` as well (one socket per port and address).
            .filter(|p| !network_ports.contains(p))
            .map(|p| host(*p)),
    );
    let mut listeners = Vec::new();
    for at in wanted {
        let listener = TcpListener::bind(at).map_err(|e| step(&format!("listen on {at}"), e))?;
        listeners.push((at, OwnedFd::from(listener)));
    }
    // An address entry's port, at every address: `[::]` takes IPv4 too (as `::ffff:a.b.c.d`);
    // `0.0.0.0` where the host has no IPv6.
    for port in network_ports {
        if port == PROXY_PORT {
            log::warn!(
                "an address entry's port {port} is the sandbox proxy's: not captured (refused)"
            );
            continue;
        }
        let any6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port);
        let any4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
        let (at, listener) = match TcpListener::bind(any6) {
            Ok(listener) => (any6, listener),
            Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
                let listener =
                    TcpListener::bind(any4).map_err(|e| step(&format!("listen on {any4}"), e))?;
                (any4, listener)
            }
            Err(e) => return Err(step(&format!("listen on {any6}"), e)),
        };
        listeners.push((at, OwnedFd::from(listener)));
    }
    let sniffer = match crate::sys::packet::open_attempt_sniffer() {
        Ok(fd) => Some(fd),
        Err(e) => {
            log::warn!("no packet sniffer in the task's network namespace ({e}): refusals of addresses nobody listens on go unrecorded");
            None
        }
    };
    Ok(RelaySockets {
        dns_udp: OwnedFd::from(dns_udp),
        dns_tcp: OwnedFd::from(dns_tcp),
        sniffer,
        listeners,
    })
}

/// Where an attempt's network files live: `RUN/network/`.
pub fn network_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("network")
}

/// The relay's report (`RUN/network/report.json`).
pub fn report_path(run_dir: &Path) -> PathBuf {
    network_dir(run_dir).join("report.json")
}

/// The relay's spec for an attempt of `unit` (whose run directory is `run_dir`, whose relay
/// asks `resolver` on the host) allowed `entries`.
pub fn relay_spec(
    entries: &[String],
    lists: &BTreeMap<String, Vec<String>>,
    (unit, run_dir, resolver): (&str, &Path, Option<SocketAddr>),
    fds: RelayFds,
) -> RelaySpec {
    let dir = network_dir(run_dir);
    RelaySpec {
        unit: unit.to_string(),
        entries: entries.to_vec(),
        lists: lists.clone(),
        report: dir.join("report.json"),
        names: dir.join("names"),
        resolver,
        connect_timeout_ms: CONNECT_TIMEOUT_MS,
        secrets: Vec::new(),
        state_root: None,
        trust: Vec::new(),
        fds,
    }
}

#[cfg(test)]
mod tests;
