//! The sandbox's resolver, as the relay serves it, and what a name's answer needs first:
//! the answer to one message (through [`crate::network::dns`]), the name given an address
//! now (its listeners are made before the answer goes out), the `ADDRESS NAME` lines of
//! `spec.names`, DNS over TCP's framing, and listeners made inside the task's network
//! namespace.

use crate::network::dns::{self, Resolution};
use crate::network::fake::FakeAddresses;
use crate::network::policy::Policy;
use crate::sys::netns;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::BorrowedFd;

/// The answer to `message`, what became of it, and the name given an address by it (whose
/// listeners must exist before the answer is sent).
pub fn answer(
    policy: &Policy,
    fake: &mut FakeAddresses,
    message: &[u8],
) -> (Option<Vec<u8>>, Resolution, Option<(String, Ipv4Addr)>) {
    let before = fake.len();
    let (reply, resolution) = dns::respond(policy, fake, message);
    let given = match &resolution {
        Resolution::Listed { name, .. } if fake.len() > before => {
            // `respond` gave the address; asking again only reads it.
            fake.assign(name).map(|addr| (name.clone(), addr))
        }
        _ => None,
    };
    (reply, resolution, given)
}

/// The line of `spec.names` for `name`'s address.
pub fn names_line(addr: Ipv4Addr, name: &str) -> String {
    format!("{addr} {name}\n")
}

/// The lines of `spec.names` that read (a torn last line is skipped).
pub fn read_names(text: &str) -> Vec<(Ipv4Addr, String)> {
    text.lines()
        .filter_map(|line| {
            let (addr, name) = line.split_once(' ')?;
            let name = name.trim();
            (!name.is_empty()).then_some(())?;
            Some((addr.parse().ok()?, name.to_string()))
        })
        .collect()
}

/// The most one DNS-over-TCP connection may have buffered (a message and its length).
pub const MAX_TCP_BUFFER: usize = 2 + 65535;

/// The whole messages at the start of `buffer` (each behind its two-byte length), taken out.
pub fn take_messages(buffer: &mut Vec<u8>) -> Vec<Vec<u8>> {
    let mut messages = Vec::new();
    let mut at = 0;
    while let Some(len) = buffer.get(at..at + 2) {
        let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
        let Some(message) = buffer.get(at + 2..at + 2 + len) else {
            break;
        };
        messages.push(message.to_vec());
        at += 2 + len;
    }
    buffer.drain(..at);
    messages
}

/// A DNS-over-TCP frame of `message`.
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 2);
    out.extend_from_slice(&(message.len().min(65535) as u16).to_be_bytes());
    out.extend_from_slice(&message[..message.len().min(65535)]);
    out
}

/// How many connections a listener may hold waiting to be accepted (a task opening 1,000 at
/// once is not turned away; the kernel caps it at `net.core.somaxconn`).
pub const BACKLOG: i32 = 4096;

/// A non-blocking TCP listener on `addr`, in the calling thread's network namespace.
pub fn listen_here(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use nix::sys::socket::{listen, Backlog};
    // std's bind sets SO_REUSEADDR (a relay started again binds what the last one did, its
    // old connections in TIME_WAIT) and listens with a short queue; a second listen(2)
    // lengthens the queue.
    let listener = std::net::TcpListener::bind(addr)?;
    listen(&listener, Backlog::new(BACKLOG).unwrap_or(Backlog::MAXCONN))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Listeners on `addrs`, made inside the network namespace `ns` by a thread that joins it;
/// each address with its listener or why it has none.
pub fn listen_in(
    ns: BorrowedFd<'_>,
    addrs: Vec<SocketAddr>,
) -> io::Result<Vec<(SocketAddr, io::Result<std::net::TcpListener>)>> {
    netns::run_in(ns, move || {
        Ok(addrs
            .into_iter()
            .map(|addr| (addr, listen_here(addr)))
            .collect())
    })
}
