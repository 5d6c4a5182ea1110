//! The sandbox's resolver's messages (RFC 1035): a query read, an answer made.
//!
//! The resolver answers from the allow-list alone and never asks anyone: a listed name gets
//! its fake address ([`super::fake`]) for `A`, and an empty answer (`NOERROR`, no records)
//! for every other type, so that clients use IPv4 and the fake range; an unlisted name is
//! `NXDOMAIN` at once, whatever its type; what is not a plain query is refused, and a message
//! too broken to answer is dropped. Nothing here may panic on any input: every read is
//! checked.

use super::fake::{FakeAddresses, HOST_ADDRESS};
use super::policy::Policy;
use std::net::Ipv4Addr;

/// A record type: `A`.
pub const TYPE_A: u16 = 1;
/// A record type: `AAAA`.
pub const TYPE_AAAA: u16 = 28;
/// A class: `IN`.
pub const CLASS_IN: u16 = 1;
/// How long a client may keep an answer: the fake addresses hold for the whole attempt.
pub const ANSWER_TTL: u32 = 60;
const HEADER: usize = 12;
const MAX_NAME: usize = 255;

const RCODE_FORMERR: u16 = 1;
const RCODE_NXDOMAIN: u16 = 3;
const RCODE_NOTIMP: u16 = 4;
const RCODE_REFUSED: u16 = 5;

/// A query's question, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    /// The flags' recursion-desired bit, echoed.
    recursion_desired: bool,
    /// Lower case, no trailing dot; `None` when a label is not a DNS label (no entry can name
    /// it: `NXDOMAIN`).
    pub name: Option<String>,
    /// The name's labels as sent (echoed in the answer's question).
    labels: Vec<Vec<u8>>,
    pub qtype: u16,
    pub qclass: u16,
}

/// What became of a message, for the journal and `keel status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// A listed name (or `host.keel.internal`), answered with `address` for `A`.
    Listed {
        name: String,
        address: Option<Ipv4Addr>,
    },
    /// Not on the allow-list: `NXDOMAIN`.
    Unlisted(String),
    /// Listed, but the fake range is used up: `REFUSED`.
    Exhausted(String),
    /// Not a query keel answers (another opcode or class, several questions): refused.
    Refused,
    /// Too broken to answer: dropped.
    Dropped,
}

/// Read the question of a standard query. `Err(reply)`: the message is not one, and `reply`
/// (if any) is the answer to send instead.
pub fn parse_query(message: &[u8]) -> Result<Query, Option<Vec<u8>>> {
    if message.len() < HEADER {
        return Err(None);
    }
    let id = u16::from_be_bytes([message[0], message[1]]);
    let flags = u16::from_be_bytes([message[2], message[3]]);
    let is_response = flags & 0x8000 != 0;
    if is_response {
        // Never answer an answer (a loop between two resolvers).
        return Err(None);
    }
    let opcode = (flags >> 11) & 0xf;
    if opcode != 0 {
        return Err(Some(header_only(id, flags, RCODE_NOTIMP)));
    }
    let qdcount = u16::from_be_bytes([message[4], message[5]]);
    if qdcount != 1 {
        return Err(Some(header_only(id, flags, RCODE_FORMERR)));
    }
    let Some((labels, end)) = read_name(message, HEADER) else {
        return Err(Some(header_only(id, flags, RCODE_FORMERR)));
    };
    let Some(fixed) = message.get(end..end + 4) else {
        return Err(Some(header_only(id, flags, RCODE_FORMERR)));
    };
    Ok(Query {
        id,
        recursion_desired: flags & 0x0100 != 0,
        name: text_of(&labels),
        labels,
        qtype: u16::from_be_bytes([fixed[0], fixed[1]]),
        qclass: u16::from_be_bytes([fixed[2], fixed[3]]),
    })
}

/// A name at `start`: its labels and where the message goes on after it. Compression pointers
/// are followed (a query rarely has one), each only backwards, so no message loops.
fn read_name(message: &[u8], start: usize) -> Option<(Vec<Vec<u8>>, usize)> {
    let mut labels = Vec::new();
    let mut at = start;
    let mut end = None;
    let mut length = 0usize;
    loop {
        let len = *message.get(at)? as usize;
        match len & 0xc0 {
            0x00 if len == 0 => {
                return Some((labels, end.unwrap_or(at + 1)));
            }
            0x00 => {
                let label = message.get(at + 1..at + 1 + len)?;
                length += len + 1;
                if length > MAX_NAME {
                    return None;
                }
                labels.push(label.to_vec());
                at += 1 + len;
            }
            0xc0 => {
                let low = *message.get(at + 1)? as usize;
                let target = ((len & 0x3f) << 8) | low;
                if target >= at {
                    return None;
                }
                end.get_or_insert(at + 2);
                at = target;
            }
            _ => return None,
        }
    }
}

/// The name in the form entries are compared in, if every label is a DNS label.
fn text_of(labels: &[Vec<u8>]) -> Option<String> {
    if labels.is_empty() {
        return None;
    }
    let mut parts = Vec::with_capacity(labels.len());
    for label in labels {
        let valid = !label.is_empty()
            && label
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_');
        if !valid {
            return None;
        }
        parts.push(String::from_utf8_lossy(label).to_ascii_lowercase());
    }
    Some(parts.join("."))
}

/// The answer to `message` under `policy`, with the fake addresses of this attempt: the bytes
/// to send back (none: drop it) and what became of it.
pub fn respond(
    policy: &Policy,
    fake: &mut FakeAddresses,
    message: &[u8],
) -> (Option<Vec<u8>>, Resolution) {
    let query = match parse_query(message) {
        Ok(query) => query,
        Err(Some(reply)) => return (Some(reply), Resolution::Refused),
        Err(None) => return (None, Resolution::Dropped),
    };
    if query.qclass != CLASS_IN {
        return (
            Some(reply(&query, RCODE_REFUSED, None)),
            Resolution::Refused,
        );
    }
    let Some(name) = query.name.clone() else {
        let unlisted = String::from_utf8_lossy(&query.labels.join(&b"."[..])).into_owned();
        return (
            Some(reply(&query, RCODE_NXDOMAIN, None)),
            Resolution::Unlisted(unlisted),
        );
    };
    let address = if name == super::HOST_NAME && policy.host_listed() {
        Some(HOST_ADDRESS)
    } else if policy.name_listed(&name) {
        match fake.assign(&name) {
            Some(address) => Some(address),
            None => {
                return (
                    Some(reply(&query, RCODE_REFUSED, None)),
                    Resolution::Exhausted(name),
                )
            }
        }
    } else {
        return (
            Some(reply(&query, RCODE_NXDOMAIN, None)),
            Resolution::Unlisted(name),
        );
    };
    let record = (query.qtype == TYPE_A).then_some(address).flatten();
    (
        Some(reply(&query, 0, record)),
        Resolution::Listed {
            name,
            address: record,
        },
    )
}

/// An answer to `query`: its question again, and an `A` record of `address` if given.
fn reply(query: &Query, rcode: u16, address: Option<Ipv4Addr>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&query.id.to_be_bytes());
    // QR, authoritative, recursion available; RD echoed.
    let rd = if query.recursion_desired { 0x0100 } else { 0 };
    let flags: u16 = 0x8000 | 0x0400 | rd | 0x0080 | rcode;
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&u16::from(address.is_some()).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    for label in &query.labels {
        out.push(label.len() as u8);
        out.extend_from_slice(label);
    }
    out.push(0);
    out.extend_from_slice(&query.qtype.to_be_bytes());
    out.extend_from_slice(&query.qclass.to_be_bytes());
    if let Some(address) = address {
        // The name: a pointer to the question's, at the end of the header.
        out.extend_from_slice(&[0xc0, HEADER as u8]);
        out.extend_from_slice(&TYPE_A.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&ANSWER_TTL.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&address.octets());
    }
    out
}

/// A reply of a header alone (no question echoed): for what cannot be read further.
fn header_only(id: u16, flags: u16, rcode: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER);
    out.extend_from_slice(&id.to_be_bytes());
    let kept = flags & 0x7900; // opcode and RD
    out.extend_from_slice(&(0x8000 | kept | 0x0080 | rcode).to_be_bytes());
    out.extend_from_slice(&[0; 8]);
    out
}

/// A query keel's own resolver ([`super::resolver`]) sends to the host's DNS server: one
/// question, recursion desired. `None` when `name` cannot be put in a message (an empty label,
/// one over 63 bytes, a name over 255).
pub fn encode_query(id: u16, name: &str, qtype: u16) -> Option<Vec<u8>> {
    let name = name.strip_suffix('.').unwrap_or(name);
    let mut out = Vec::with_capacity(HEADER + name.len() + 6);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&0x0100u16.to_be_bytes());
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return None;
        }
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    if out.len() - HEADER > MAX_NAME {
        return None;
    }
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    Some(out)
}

/// What an answer from the host's DNS server said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The addresses of the asked type (none: the name has no record of it). `truncated`:
    /// the server cut the message (the records read are kept).
    Addresses {
        addresses: Vec<std::net::IpAddr>,
        truncated: bool,
    },
    /// `NXDOMAIN`.
    NoSuchName,
    /// Another error code (`SERVFAIL`, `REFUSED`, ...).
    Failed(u16),
}

/// Read the answer `message` to the query `id` of `qtype`. `None`: not an answer to it
/// (another id, not a response, too broken to read); the caller waits on for the real one.
pub fn parse_answer(message: &[u8], id: u16, qtype: u16) -> Option<Answer> {
    let header = message.get(..HEADER)?;
    let flags = u16::from_be_bytes([header[2], header[3]]);
    if u16::from_be_bytes([header[0], header[1]]) != id || flags & 0x8000 == 0 {
        return None;
    }
    match flags & 0xf {
        0 => {}
        RCODE_NXDOMAIN => return Some(Answer::NoSuchName),
        rcode => return Some(Answer::Failed(rcode)),
    }
    let truncated = flags & 0x0200 != 0;
    let questions = u16::from_be_bytes([header[4], header[5]]);
    let records = u16::from_be_bytes([header[6], header[7]]);
    let mut at = HEADER;
    for _ in 0..questions {
        let (_, end) = read_name(message, at)?;
        at = end + 4;
    }
    let mut addresses = Vec::new();
    for _ in 0..records {
        let Some((_, end)) = read_name(message, at) else {
            break;
        };
        let Some(fixed) = message.get(end..end + 10) else {
            break;
        };
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let class = u16::from_be_bytes([fixed[2], fixed[3]]);
        let length = u16::from_be_bytes([fixed[8], fixed[9]]) as usize;
        let Some(data) = message.get(end + 10..end + 10 + length) else {
            break;
        };
        at = end + 10 + length;
        if rtype != qtype || class != CLASS_IN {
            continue; // a CNAME on the way, or another section's record
        }
        match (rtype, data.len()) {
            (TYPE_A, 4) => addresses.push(std::net::IpAddr::V4(Ipv4Addr::new(
                data[0], data[1], data[2], data[3],
            ))),
            (TYPE_AAAA, 16) => {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(data);
                addresses.push(std::net::IpAddr::V6(std::net::Ipv6Addr::from(octets)));
            }
            _ => {}
        }
    }
    Some(Answer::Addresses {
        addresses,
        truncated,
    })
}

#[cfg(test)]
mod tests;
