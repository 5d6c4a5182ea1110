//! The fake addresses of a sandbox's listed names.
//!
//! The sandbox's resolver answers a listed name with an address of a private range that means
//! nothing outside (198.18.0.0/15, reserved for benchmarking by RFC 2544, as fake-address DNS
//! servers use it); inside the task's network namespace that range is routed to `lo`, where
//! keel captures the connection, and the address it went to names the destination. Each name
//! keeps its address for the whole attempt (a client that cached it still reaches that name),
//! and no address is given to two names. `host.keel.internal` has the range's first address.

use super::policy::Destination;
use std::collections::HashMap;
use std::net::Ipv4Addr;

/// The first address of the range: the network's own, never handed out.
pub const RANGE_START: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
/// The range's prefix length (198.18.0.0/15: 131,072 addresses).
pub const RANGE_PREFIX: u8 = 15;
/// `host.keel.internal`.
pub const HOST_ADDRESS: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// The sandbox's resolver (its `/etc/resolv.conf` names it).
pub const RESOLVER_ADDRESS: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// Names get addresses from here on.
const FIRST_NAME_ADDRESS: u32 = 3;

/// The names given an address in this attempt, both ways.
#[derive(Debug, Default)]
pub struct FakeAddresses {
    by_name: HashMap<String, Ipv4Addr>,
    by_address: HashMap<Ipv4Addr, String>,
    /// At most this many names (the range's size, or less for a test).
    capacity: Option<usize>,
}

impl FakeAddresses {
    pub fn new() -> FakeAddresses {
        FakeAddresses::default()
    }

    /// A table that holds at most `capacity` names.
    pub fn with_capacity(capacity: usize) -> FakeAddresses {
        FakeAddresses {
            capacity: Some(capacity),
            ..FakeAddresses::default()
        }
    }

    fn range_size() -> u32 {
        1u32 << (32 - u32::from(RANGE_PREFIX))
    }

    /// The address of `name` (lower case), given now if it has none. `None` when the range is
    /// used up (the resolver then answers as for a name it cannot serve).
    pub fn assign(&mut self, name: &str) -> Option<Ipv4Addr> {
        if let Some(addr) = self.by_name.get(name) {
            return Some(*addr);
        }
        // The last address of the range is its broadcast: never handed out.
        let usable = (Self::range_size() - FIRST_NAME_ADDRESS - 1) as usize;
        let limit = self.capacity.map_or(usable, |c| c.min(usable));
        if self.by_name.len() >= limit {
            return None;
        }
        // The next address in order; one taken by [`FakeAddresses::restore`] is skipped.
        let mut offset = FIRST_NAME_ADDRESS + self.by_name.len() as u32;
        let mut addr = Ipv4Addr::from(u32::from(RANGE_START) + offset);
        while self.by_address.contains_key(&addr) {
            offset = FIRST_NAME_ADDRESS + (offset - FIRST_NAME_ADDRESS + 1) % usable as u32;
            addr = Ipv4Addr::from(u32::from(RANGE_START) + offset);
        }
        self.by_name.insert(name.to_string(), addr);
        self.by_address.insert(addr, name.to_string());
        Some(addr)
    }

    /// Give `name` the address `addr` again, as an earlier relay of this attempt gave it (the
    /// agent may have cached it). `false`, and nothing changed, when `addr` is not one the
    /// range hands out, or either is taken already.
    pub fn restore(&mut self, name: &str, addr: Ipv4Addr) -> bool {
        let offset = u32::from(addr).wrapping_sub(u32::from(RANGE_START));
        let handed_out =
            Self::in_range(addr) && offset >= FIRST_NAME_ADDRESS && offset < Self::range_size() - 1;
        let full = self.capacity.is_some_and(|c| self.by_name.len() >= c);
        if !handed_out
            || full
            || self.by_name.contains_key(name)
            || self.by_address.contains_key(&addr)
        {
            return false;
        }
        self.by_name.insert(name.to_string(), addr);
        self.by_address.insert(addr, name.to_string());
        true
    }

    /// What a captured connection to `addr` was meant for: `None` for an address of the
    /// range no name was given (a guess, or an address of an earlier attempt).
    pub fn destination(&self, addr: Ipv4Addr) -> Option<Destination> {
        if addr == HOST_ADDRESS {
            return Some(Destination::Host);
        }
        self.by_address
            .get(&addr)
            .map(|name| Destination::Name(name.clone()))
    }

    /// Whether `addr` is of the fake range (so a connection to it is never sent out as is).
    pub fn in_range(addr: Ipv4Addr) -> bool {
        u32::from(addr) >> (32 - u32::from(RANGE_PREFIX))
            == u32::from(RANGE_START) >> (32 - u32::from(RANGE_PREFIX))
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

#[cfg(test)]
mod tests;
