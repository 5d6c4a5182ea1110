//! The policy an allow-list makes, and its verdicts: whether a name resolves inside the
//! sandbox, whether a captured connection may go out (and to what), and whether an address a
//! listed name resolved to on the host may be connected to (DNS rebinding: a public name that
//! answers with a loopback, link-local or private address is refused unless an entry names that
//! address or range). Pure: the relay asks, and journals the refusals it is given.

use super::entry::{Entry, EntryError, IpNet, Ports};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// An allow-list, its named lists expanded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    names: BTreeMap<String, Vec<Ports>>,
    subdomains: Vec<(String, Ports)>,
    networks: Vec<(IpNet, u16)>,
    host_ports: BTreeSet<u16>,
}

/// Where a captured connection was going, as the sandbox's side saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A fake address the sandbox's resolver gave for this (listed) name.
    Name(String),
    /// An address the agent connected to directly.
    Address(IpAddr),
    /// `host.keel.internal`.
    Host,
}

/// What the policy side connects to for an allowed connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// Resolve the name on the host, check each address ([`Policy::check_resolved`]).
    Name {
        name: String,
        port: u16,
    },
    Address(SocketAddr),
    /// The host's `127.0.0.1:port`.
    HostLoopback {
        port: u16,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Connect(Upstream),
    Refuse(Refusal),
}

/// Why a name or connection was refused: the text of the journal's `net-denied` events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NameNotListed(String),
    PortNotListed {
        destination: String,
        port: u16,
        listed: String,
    },
    AddressNotListed(SocketAddr),
    HostPortNotListed(u16),
    /// A listed name resolved to an address of a kind that is refused unless named.
    SpecialAddress {
        name: String,
        addr: IpAddr,
        kind: &'static str,
    },
    /// A UDP datagram to anything but the sandbox's resolver.
    Udp(SocketAddr),
}

impl Refusal {
    /// The destination it concerns, as `keel status` groups refusals (`name:port`).
    pub fn destination(&self) -> String {
        match self {
            Refusal::NameNotListed(name) => name.clone(),
            Refusal::PortNotListed {
                destination, port, ..
            } => format!("{destination}:{port}"),
            Refusal::AddressNotListed(addr) => addr.to_string(),
            Refusal::HostPortNotListed(port) => format!("{}:{port}", super::HOST_NAME),
            Refusal::SpecialAddress { name, .. } => name.clone(),
            Refusal::Udp(addr) => format!("udp {addr}"),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NameNotListed(name) => write!(
                f,
                "{name}: not on the task's allow-list (add \"{name}\" to sandbox.network: Allow([...]))"
            ),
            Refusal::PortNotListed {
                destination,
                port,
                listed,
            } => write!(
                f,
                "{destination}:{port}: the allow-list has {destination} on port {listed} only (add \"{destination}:{port}\")"
            ),
            Refusal::AddressNotListed(addr) => write!(
                f,
                "{addr}: no entry of the allow-list names this address and port (add \"{addr}\")"
            ),
            Refusal::HostPortNotListed(port) => write!(
                f,
                "{}:{port}: the host's port {port} is not allowed (add \"host:{port}\")",
                super::HOST_NAME
            ),
            Refusal::SpecialAddress { name, addr, kind } => write!(
                f,
                "{name} resolved to {addr}, a {kind} address: refused unless an entry names it (add \"{}\" if this is meant)",
                SocketAddrText(*addr)
            ),
            Refusal::Udp(addr) => write!(
                f,
                "udp {addr}: only DNS to the sandbox's resolver goes out over UDP (QUIC clients fall back to TCP)"
            ),
        }
    }
}

/// An address as an entry would name it (the port left to the reader).
struct SocketAddrText(IpAddr);

impl fmt::Display for SocketAddrText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(a) => write!(f, "{a}:PORT"),
            IpAddr::V6(a) => write!(f, "[{a}]:PORT"),
        }
    }
}

/// An allow-list that cannot make a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyError {
    UnknownList {
        list: String,
        known: Vec<String>,
    },
    /// A list that names itself, directly or through others.
    ListCycle(String),
    /// An entry of a named list of `keel.ron` is malformed.
    InList {
        list: String,
        error: EntryError,
    },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::UnknownList { list, known } if known.is_empty() => write!(
                f,
                "@{list}: keel.ron names no lists (network: Network(lists: {{\"{list}\": [...]}}))"
            ),
            PolicyError::UnknownList { list, known } => write!(
                f,
                "@{list}: keel.ron's network lists have no list {list:?} (it has {})",
                known
                    .iter()
                    .map(|k| format!("@{k}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            PolicyError::ListCycle(list) => {
                write!(f, "@{list}: the list includes itself (through its entries)")
            }
            PolicyError::InList { list, error } => write!(f, "in the list @{list}: {error}"),
        }
    }
}

impl std::error::Error for PolicyError {}

impl Policy {
    /// The policy of `entries`, each `@list` replaced by that list of `lists` (which may name
    /// other lists, never in a circle).
    pub fn new(
        entries: &[Entry],
        lists: &BTreeMap<String, Vec<Entry>>,
    ) -> Result<Policy, PolicyError> {
        let mut policy = Policy::default();
        let mut path = Vec::new();
        let mut expanded = BTreeSet::new();
        policy.add(entries, lists, &mut path, &mut expanded)?;
        Ok(policy)
    }

    fn add(
        &mut self,
        entries: &[Entry],
        lists: &BTreeMap<String, Vec<Entry>>,
        path: &mut Vec<String>,
        // Lists whose entries are in already: a list reached again (lists that share a
        // list) adds nothing, and is not expanded again (no 2^depth of diamonds).
        expanded: &mut BTreeSet<String>,
    ) -> Result<(), PolicyError> {
        for entry in entries {
            match entry {
                Entry::Name { name, ports } => {
                    let listed = self.names.entry(name.clone()).or_default();
                    if !listed.contains(ports) {
                        listed.push(*ports);
                    }
                }
                Entry::Subdomains { parent, ports } => {
                    let wanted = (parent.clone(), *ports);
                    if !self.subdomains.contains(&wanted) {
                        self.subdomains.push(wanted);
                    }
                }
                Entry::Network { net, port } => {
                    if !self.networks.contains(&(*net, *port)) {
                        self.networks.push((*net, *port));
                    }
                }
                Entry::HostLoopback { port } => {
                    self.host_ports.insert(*port);
                }
                Entry::List(list) => {
                    if path.contains(list) {
                        return Err(PolicyError::ListCycle(list.clone()));
                    }
                    if expanded.contains(list) {
                        continue;
                    }
                    let Some(members) = lists.get(list) else {
                        return Err(PolicyError::UnknownList {
                            list: list.clone(),
                            known: lists.keys().cloned().collect(),
                        });
                    };
                    path.push(list.clone());
                    self.add(members, lists, path, expanded)?;
                    path.pop();
                    expanded.insert(list.clone());
                }
            }
        }
        Ok(())
    }

    /// `Allow([])`: nothing goes out.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
            && self.subdomains.is_empty()
            && self.networks.is_empty()
            && self.host_ports.is_empty()
    }

    /// The ports the allow-list gives `name` (an exact entry or a wildcard over it).
    fn ports_of(&self, name: &str) -> Vec<Ports> {
        let mut ports: Vec<Ports> = self.names.get(name).cloned().unwrap_or_default();
        for (parent, p) in &self.subdomains {
            let below = name.len() > parent.len() + 1
                && name.ends_with(parent.as_str())
                && name.as_bytes()[name.len() - parent.len() - 1] == b'.';
            if below && !ports.contains(p) {
                ports.push(*p);
            }
        }
        ports
    }

    /// The ports listeners are made for before the relay runs: each `host:PORT` entry's (on
    /// `host.keel.internal`) and each address entry's (on every address), sorted.
    pub fn static_ports(&self) -> (Vec<u16>, Vec<u16>) {
        let host: Vec<u16> = self.host_ports.iter().copied().collect();
        let mut networks: Vec<u16> = self.networks.iter().map(|(_, p)| *p).collect();
        networks.sort_unstable();
        networks.dedup();
        (host, networks)
    }

    /// The ports `name` may be reached on, in increasing order (none: it is not listed): the
    /// relay listens on each at the name's fake address.
    pub fn ports_for(&self, name: &str) -> Vec<u16> {
        let mut all = Vec::new();
        for p in self.ports_of(name) {
            match p {
                Ports::Web => all.extend(super::entry::WEB_PORTS),
                Ports::One(one) => all.push(one),
            }
        }
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Whether `name` (lower case, no trailing dot) resolves inside the sandbox.
    pub fn name_listed(&self, name: &str) -> bool {
        !self.ports_of(name).is_empty()
    }

    /// Whether the host's loopback is reachable at all (then `host.keel.internal` resolves).
    pub fn host_listed(&self) -> bool {
        !self.host_ports.is_empty()
    }

    /// The verdict on a captured connection to `destination`:`port`.
    pub fn decide(&self, destination: &Destination, port: u16) -> Decision {
        match destination {
            Destination::Name(name) => {
                let ports = self.ports_of(name);
                if ports.is_empty() {
                    Decision::Refuse(Refusal::NameNotListed(name.clone()))
                } else if ports.iter().any(|p| p.contains(port)) {
                    Decision::Connect(Upstream::Name {
                        name: name.clone(),
                        port,
                    })
                } else {
                    Decision::Refuse(Refusal::PortNotListed {
                        destination: name.clone(),
                        port,
                        listed: listed_ports(&ports),
                    })
                }
            }
            Destination::Host => match self.host_ports.contains(&port) {
                true => Decision::Connect(Upstream::HostLoopback { port }),
                false => Decision::Refuse(Refusal::HostPortNotListed(port)),
            },
            Destination::Address(addr) => match self.network_allows(*addr, port) {
                true => Decision::Connect(Upstream::Address(SocketAddr::new(*addr, port))),
                false => Decision::Refuse(Refusal::AddressNotListed(SocketAddr::new(*addr, port))),
            },
        }
    }

    fn network_allows(&self, addr: IpAddr, port: u16) -> bool {
        let addr = unmapped(addr);
        self.networks
            .iter()
            .any(|(net, p)| *p == port && net.contains(addr))
    }

    /// Whether `addr`, which the host's resolver gave for the listed `name`, may be connected
    /// to on `port`: an address of a special kind ([`special_kind`]) only when an entry names
    /// it.
    pub fn check_resolved(&self, name: &str, addr: IpAddr, port: u16) -> Result<(), Refusal> {
        match special_kind(addr) {
            Some(kind) if !self.network_allows(addr, port) => Err(Refusal::SpecialAddress {
                name: name.to_string(),
                addr,
                kind,
            }),
            _ => Ok(()),
        }
    }
}

fn listed_ports(ports: &[Ports]) -> String {
    let mut all: Vec<u16> = Vec::new();
    for p in ports {
        match p {
            Ports::Web => all.extend(super::entry::WEB_PORTS),
            Ports::One(one) => all.push(*one),
        }
    }
    all.sort_unstable();
    all.dedup();
    let text: Vec<String> = all.iter().map(u16::to_string).collect();
    text.join(", ")
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it is.
fn unmapped(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => addr,
        },
        v4 => v4,
    }
}

/// The kind of an address that a name on the internet should not resolve to, or `None` for
/// an ordinary public one. IPv6 forms that carry an IPv4 address (mapped, NAT64, 6to4) are
/// judged by that address.
pub fn special_kind(addr: IpAddr) -> Option<&'static str> {
    match addr {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(a: Ipv4Addr) -> Option<&'static str> {
    let in_net = |net: [u8; 4], prefix: u8| {
        IpNet::new(IpAddr::V4(Ipv4Addr::from(net)), prefix)
            .is_some_and(|n| n.contains(IpAddr::V4(a)))
    };
    let kinds: [([u8; 4], u8, &'static str); 12] = [
        ([0, 0, 0, 0], 8, "this-network"),
        ([10, 0, 0, 0], 8, "private"),
        ([100, 64, 0, 0], 10, "shared (carrier-grade NAT)"),
        ([127, 0, 0, 0], 8, "loopback"),
        ([169, 254, 0, 0], 16, "link-local"),
        ([172, 16, 0, 0], 12, "private"),
        ([192, 0, 0, 0], 24, "IETF protocol"),
        ([192, 168, 0, 0], 16, "private"),
        (
            [198, 18, 0, 0],
            15,
            "benchmarking (keel's fake-address range)",
        ),
        ([224, 0, 0, 0], 4, "multicast"),
        ([240, 0, 0, 0], 4, "reserved"),
        ([255, 255, 255, 255], 32, "broadcast"),
    ];
    kinds
        .iter()
        .find(|(net, prefix, _)| in_net(*net, *prefix))
        .map(|(_, _, kind)| *kind)
}

fn special_v6(a: Ipv6Addr) -> Option<&'static str> {
    let bits = u128::from(a);
    let segments = a.segments();
    if let Some(v4) = a.to_ipv4_mapped() {
        return special_v4(v4);
    }
    // NAT64's well-known prefix 64:ff9b::/96 and 6to4 (2002::/16) embed an IPv4 address.
    if bits >> 32 == 0x0064_ff9b_0000_0000_0000_0000 {
        return special_v4(Ipv4Addr::from(bits as u32));
    }
    if segments[0] == 0x2002 {
        return special_v4(Ipv4Addr::from((bits >> 80) as u32));
    }
    match segments[0] {
        _ if a.is_unspecified() => Some("unspecified"),
        _ if a.is_loopback() => Some("loopback"),
        s if s & 0xfe00 == 0xfc00 => Some("private (unique local)"),
        s if s & 0xffc0 == 0xfe80 => Some("link-local"),
        s if s & 0xffc0 == 0xfec0 => Some("site-local"),
        s if s & 0xff00 == 0xff00 => Some("multicast"),
        0x0100 if segments[1..4] == [0, 0, 0] => Some("discard"),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
