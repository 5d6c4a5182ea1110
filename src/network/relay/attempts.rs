//! What the packet sniffer's attempts mean: a connection attempt to a destination no
//! listener serves is reset by the kernel without the relay hearing of it, so the sniffer's
//! sighting is its only record; one the relay accepts is counted where it is accepted. Pure.

use super::Protocol;
use crate::network::fake::RESOLVER_ADDRESS;
use crate::network::policy::{Decision, Destination, Policy, Refusal};
use std::collections::HashSet;
use std::net::SocketAddr;

/// What serves the sandbox's destinations now.
pub struct Served<'a> {
    pub policy: &'a Policy,
    /// Addresses listened on exactly.
    pub listened: &'a HashSet<SocketAddr>,
    /// Ports listened on at every address (`0.0.0.0:PORT`).
    pub listened_ports: &'a HashSet<u16>,
    /// What the attempt's address names (`None`: an address of the fake range no name has).
    pub destination: Option<Destination>,
}

/// The refusal an attempt to `dst` was, if it was one.
pub fn refusal_of(served: &Served<'_>, protocol: Protocol, dst: SocketAddr) -> Option<Refusal> {
    match protocol {
        Protocol::Udp if dst == SocketAddr::from((RESOLVER_ADDRESS, 53)) => None,
        Protocol::Udp => Some(Refusal::Udp(dst)),
        Protocol::Tcp => {
            if served.listened.contains(&dst) || served.listened_ports.contains(&dst.port()) {
                return None; // accepted, and judged there
            }
            match &served.destination {
                None => Some(Refusal::AddressNotListed(dst)),
                Some(destination) => match served.policy.decide(destination, dst.port()) {
                    Decision::Refuse(refusal) => Some(refusal),
                    // Allowed, yet nobody listens (a listener that could not be made): the
                    // kernel's reset is the relay's failure, logged where it failed.
                    Decision::Connect(_) => None,
                },
            }
        }
    }
}
