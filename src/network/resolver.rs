//! keel's own DNS client, for the relay's names (a listed name is resolved on the host, never
//! inside the sandbox): it asks one server over UDP for `A` and `AAAA` records, with a
//! deadline. Not libc's getaddrinfo: NSS modules can hang past any deadline, and cannot be
//! pointed at a test's resolver. Blocking: it runs on the relay's resolver threads, never on
//! its event loop.

use super::dns::{self, Answer, TYPE_A, TYPE_AAAA};
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Why a name has no address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// The server says the name does not exist.
    NoSuchName,
    /// It exists but has neither an `A` nor an `AAAA` record.
    NoAddress,
    /// The server answered with an error code.
    Failed(u16),
    /// No answer before the deadline.
    Timeout,
    /// The name cannot be asked for (not a DNS name).
    BadName,
    Io(String),
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::NoSuchName => f.write_str("the host's DNS server says it does not exist"),
            ResolveError::NoAddress => f.write_str("the host's DNS server has no address for it"),
            ResolveError::Failed(rcode) => {
                write!(f, "the host's DNS server failed (response code {rcode})")
            }
            ResolveError::Timeout => f.write_str("the host's DNS server did not answer in time"),
            ResolveError::BadName => f.write_str("not a name DNS can carry"),
            ResolveError::Io(why) => write!(f, "asking the host's DNS server: {why}"),
        }
    }
}

impl std::error::Error for ResolveError {}

/// The first `nameserver` line of a resolv.conf's text, on port 53.
pub fn nameserver_of(resolv_conf: &str) -> Option<SocketAddr> {
    resolv_conf.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next() != Some("nameserver") {
            return None;
        }
        // An IPv6 link-local address may carry its zone (`fe80::1%eth0`): not readable here.
        let addr: IpAddr = words.next()?.parse().ok()?;
        Some(SocketAddr::new(addr, 53))
    })
}

/// The host's DNS server: the first `nameserver` of `/etc/resolv.conf`.
pub fn system_nameserver() -> io::Result<SocketAddr> {
    let text = std::fs::read_to_string("/etc/resolv.conf")?;
    nameserver_of(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "/etc/resolv.conf names no nameserver",
        )
    })
}

/// A query id nobody can guess (an answer from anyone else is ignored).
fn random_id() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.finish() as u16
}

/// The addresses of `name`, IPv4 first, as `server` gives them within `timeout` (the
/// queries are sent again once, half-way, in case a datagram was lost).
pub fn resolve(
    server: SocketAddr,
    name: &str,
    timeout: Duration,
) -> Result<Vec<IpAddr>, ResolveError> {
    let io = |e: io::Error| ResolveError::Io(e.to_string());
    let ids = [random_id(), random_id()];
    let types = [TYPE_A, TYPE_AAAA];
    let mut queries = Vec::with_capacity(2);
    for (id, qtype) in ids.iter().zip(types) {
        queries.push(dns::encode_query(*id, name, qtype).ok_or(ResolveError::BadName)?);
    }
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).map_err(io)?;
    socket.connect(server).map_err(io)?;
    let start = Instant::now();
    let deadline = start + timeout;
    let resend_at = start + timeout / 2;
    let mut resent = false;
    for query in &queries {
        socket.send(query).map_err(io)?;
    }
    let mut answers: [Option<Answer>; 2] = [None, None];
    let mut buf = [0u8; 4096];
    while answers.iter().any(Option::is_none) {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        if !resent && now >= resend_at {
            resent = true;
            for (query, answer) in queries.iter().zip(&answers) {
                if answer.is_none() {
                    socket.send(query).map_err(io)?;
                }
            }
        }
        let wait = if resent { deadline } else { resend_at };
        let left = wait
            .saturating_duration_since(now)
            .max(Duration::from_millis(1));
        socket.set_read_timeout(Some(left)).map_err(io)?;
        let read = match socket.recv(&mut buf) {
            Ok(read) => read,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(io(e)),
        };
        for (i, (id, qtype)) in ids.iter().zip(types).enumerate() {
            if answers[i].is_none() {
                if let Some(answer) = dns::parse_answer(&buf[..read], *id, qtype) {
                    answers[i] = Some(answer);
                }
            }
        }
        // An A answer with addresses is enough once the deadline half-way is near: do not
        // wait long for an AAAA a server drops.
        if matches!(&answers[0], Some(Answer::Addresses { addresses, .. }) if !addresses.is_empty())
            && answers[1].is_none()
            && Instant::now() >= resend_at
        {
            break;
        }
    }
    combine(&answers)
}

/// The addresses of both answers, or why there are none.
fn combine(answers: &[Option<Answer>; 2]) -> Result<Vec<IpAddr>, ResolveError> {
    let mut addresses = Vec::new();
    for answer in answers.iter().flatten() {
        if let Answer::Addresses { addresses: a, .. } = answer {
            addresses.extend(a.iter().copied());
        }
    }
    if !addresses.is_empty() {
        return Ok(addresses);
    }
    match answers {
        [Some(Answer::NoSuchName), _] | [_, Some(Answer::NoSuchName)] => {
            Err(ResolveError::NoSuchName)
        }
        [Some(Answer::Failed(rcode)), _] | [_, Some(Answer::Failed(rcode))] => {
            Err(ResolveError::Failed(*rcode))
        }
        [None, None] => Err(ResolveError::Timeout),
        _ => Err(ResolveError::NoAddress),
    }
}

#[cfg(test)]
mod tests;
