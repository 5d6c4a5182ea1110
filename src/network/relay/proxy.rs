//! The HTTP proxy the relay serves on `host.keel.internal:3128` (`HTTPS_PROXY`,
//! `HTTP_PROXY`), for the tools that prefer a proxy to a plain connect: `CONNECT host:port`
//! (a tunnel) and absolute-form requests (`GET http://host/path`, forwarded in origin form).
//! Pure: the head read so far in, what to do out. The policy is the same as for a captured
//! connection to that name.

use crate::network::fake::FakeAddresses;
use crate::network::policy::Destination;
use std::net::IpAddr;

/// The most a request's head may take (request line and headers).
pub const MAX_HEAD: usize = 8192;

/// The answer to a `CONNECT` once the upstream is connected.
pub const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The host as the client named it (lower case, no trailing dot; an IPv6 address without
    /// its brackets).
    pub host: String,
    pub port: u16,
    /// `CONNECT`: answer [`ESTABLISHED`], then relay the bytes as they are.
    pub tunnel: bool,
    /// The bytes to send the upstream first: a forwarded request's head rewritten, and
    /// whatever the client sent after its head.
    pub forward: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// No blank line yet: read on.
    Incomplete,
    /// Not a request the proxy serves; the text says why (the answer is `400`).
    Bad(&'static str),
    Request(Request),
}

/// Read the head of a proxy request from `buffer` (all the client sent so far).
pub fn read_head(buffer: &[u8]) -> Head {
    let Some(end) = find(buffer, b"\r\n\r\n") else {
        return match buffer.len() >= MAX_HEAD {
            true => Head::Bad("the request's head is longer than 8 KiB"),
            false => Head::Incomplete,
        };
    };
    if end + 4 > MAX_HEAD {
        return Head::Bad("the request's head is longer than 8 KiB");
    }
    let Ok(head) = std::str::from_utf8(&buffer[..end]) else {
        return Head::Bad("the request's head is not text");
    };
    let rest = &buffer[end + 4..];
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut words = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Head::Bad("the request line is not METHOD TARGET HTTP/1.x");
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() {
        return Head::Bad("the request line is not METHOD TARGET HTTP/1.x");
    }
    if method == "CONNECT" {
        let Some((host, port)) = host_and_port(target, None) else {
            return Head::Bad("CONNECT takes host:port");
        };
        return Head::Request(Request {
            host,
            port,
            tunnel: true,
            forward: rest.to_vec(),
        });
    }
    let Some(after_scheme) = target.strip_prefix("http://") else {
        return Head::Bad(
            "a proxy request names its target as http://host/path (or CONNECT host:port for https)",
        );
    };
    let (authority, path) = match after_scheme.find('/') {
        Some(slash) => (&after_scheme[..slash], &after_scheme[slash..]),
        None => (after_scheme, "/"),
    };
    let Some((host, port)) = host_and_port(authority, Some(80)) else {
        return Head::Bad("the request's target has no host");
    };
    let mut forward = format!("{method} {path} {version}\r\n").into_bytes();
    let mut has_host = false;
    for line in lines {
        let name = line.split(':').next().unwrap_or_default().trim();
        let hop_by_hop = [
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h));
        if hop_by_hop {
            continue;
        }
        has_host |= name.eq_ignore_ascii_case("host");
        forward.extend_from_slice(line.as_bytes());
        forward.extend_from_slice(b"\r\n");
    }
    if !has_host {
        forward.extend_from_slice(format!("Host: {authority}\r\n").as_bytes());
    }
    // One request per connection: the next one may name another host, which this upstream
    // must not be asked for.
    forward.extend_from_slice(b"Connection: close\r\n\r\n");
    forward.extend_from_slice(rest);
    Head::Request(Request {
        host,
        port,
        tunnel: false,
        forward,
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `host:port`, `[v6]:port`, or (with a default port) `host`.
fn host_and_port(text: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return None,
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match port {
        Some(port) => port.parse::<u16>().ok().filter(|p| *p > 0)?,
        None => default_port?,
    };
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    Some((host, port))
}

/// What a proxy request for `host` is for, as if the agent had resolved it inside the sandbox
/// and connected: an address as such (a fake one as its name), `host.keel.internal`, or a name.
/// `None`: an address of the fake range that no name was given.
pub fn destination_of(host: &str, fake: &FakeAddresses) -> Option<Destination> {
    if host == crate::network::HOST_NAME {
        return Some(Destination::Host);
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) if FakeAddresses::in_range(v4) => fake.destination(v4),
        Ok(addr) => Some(Destination::Address(addr)),
        Err(_) => Some(Destination::Name(host.to_string())),
    }
}

/// A complete response of `status` with a one-line text body, the connection closed after.
pub fn response(status: &str, reason: &str) -> Vec<u8> {
    let body = format!("{}\n", reason.replace(['\r', '\n'], " "));
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
