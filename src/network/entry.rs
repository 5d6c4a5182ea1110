//! One entry of an allow-list, as a unit or `keel.ron` writes it, and its syntax:
//!
//! | entry | allows |
//! | --- | --- |
//! | `"api.anthropic.com"` | that name, ports 443 and 80 |
//! | `"github.com:22"` | that name, port 22 |
//! | `"*.npmjs.org"` (`":PORT"` too) | every subdomain of `npmjs.org` (not the name itself) |
//! | `"203.0.113.7:22"`, `"10.0.0.0/8:5432"` | that address or range, that port |
//! | `"[2001:db8::1]:443"`, `"[2001:db8::/32]:443"` | the same for IPv6 |
//! | `"host:11434"` | the host's own loopback port 11434, reached as `host.keel.internal:11434` |
//! | `"@npm"` | the entries of the list `npm` that `keel.ron` names |
//!
//! Names are compared in lower case without a trailing dot. A wildcard must leave at least
//! two labels and no public suffix (`"*"`, `"*.com"`, `"*.co.uk"` are refused); an address
//! entry needs its port (an address open on every port is rarely what is meant).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Ports of a name entry given without one: HTTPS and HTTP.
pub const WEB_PORTS: [u16; 2] = [443, 80];

/// Suffixes under which every name belongs to someone else: a wildcard over one of them
/// would allow strangers' names. Single labels (`com`, `io`) are refused by rule; these are
/// the common two-label ones (the Public Suffix List has thousands: this is not it).
const SHARED_SUFFIXES: &[&str] = &[
    "co.uk",
    "org.uk",
    "ac.uk",
    "gov.uk",
    "com.au",
    "net.au",
    "org.au",
    "co.jp",
    "ne.jp",
    "or.jp",
    "com.br",
    "com.cn",
    "net.cn",
    "co.in",
    "co.kr",
    "co.nz",
    "com.mx",
    "com.tr",
    "co.za",
    "github.io",
    "gitlab.io",
    "herokuapp.com",
    "appspot.com",
    "cloudfront.net",
    "amazonaws.com",
    "azurewebsites.net",
    "pages.dev",
    "workers.dev",
    "vercel.app",
    "netlify.app",
    "blogspot.com",
    "fly.dev",
    "web.app",
    "firebaseapp.com",
    "ngrok.io",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Name { name: String, ports: Ports },
    Subdomains { parent: String, ports: Ports },
    Network { net: IpNet, port: u16 },
    HostLoopback { port: u16 },
    List(String),
}

/// The ports of a name entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ports {
    /// None given: [`WEB_PORTS`].
    Web,
    One(u16),
}

impl Ports {
    pub fn contains(self, port: u16) -> bool {
        match self {
            Ports::Web => WEB_PORTS.contains(&port),
            Ports::One(one) => one == port,
        }
    }
}

impl fmt::Display for Ports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ports::Web => f.write_str("443 and 80"),
            Ports::One(port) => write!(f, "{port}"),
        }
    }
}

/// An address range: `addr/prefix`, the address's host bits cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// `None` when `prefix` is longer than the address.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<IpNet> {
        let bits = match addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        (prefix <= bits).then(|| IpNet {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// The single address `addr`.
    pub fn host(addr: IpAddr) -> IpNet {
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        IpNet { addr, prefix }
    }

    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self.addr, addr) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                mask(addr, self.prefix) == self.addr
            }
            _ => false,
        }
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = if self.addr.is_ipv4() { 32 } else { 128 };
        match (self.addr, self.prefix == full) {
            (IpAddr::V4(a), true) => write!(f, "{a}"),
            (IpAddr::V6(a), true) => write!(f, "[{a}]"),
            (IpAddr::V4(a), false) => write!(f, "{a}/{}", self.prefix),
            (IpAddr::V6(a), false) => write!(f, "[{a}/{}]", self.prefix),
        }
    }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let kept = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(bits & kept))
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let kept = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(bits & kept))
        }
    }
}

/// Why an entry is refused; the message says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryError {
    Empty,
    BadPort { entry: String, port: String },
    AddressWithoutPort(String),
    BadAddress { entry: String, why: &'static str },
    BadName { entry: String, why: String },
    TooBroad(String),
    Reserved(String),
    BadListName(String),
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryError::Empty => f.write_str("an empty allow-list entry: remove it, or name a host (\"api.example.com\")"),
            EntryError::BadPort { entry, port } => write!(
                f,
                "{entry:?}: {port:?} is not a port (1 to 65535)"
            ),
            EntryError::AddressWithoutPort(entry) => write!(
                f,
                "{entry:?}: an address entry needs its port (\"{entry}:443\"): an address open on every port is rarely what is meant"
            ),
            EntryError::BadAddress { entry, why } => write!(f, "{entry:?}: {why}"),
            EntryError::BadName { entry, why } => write!(f, "{entry:?}: {why}"),
            EntryError::TooBroad(entry) => write!(
                f,
                "{entry:?} is too broad: it would allow names that belong to anyone; list the names the agent needs, or a wildcard below a domain you trust (\"*.npmjs.org\"), or `network: Host` to give it the host's network"
            ),
            EntryError::Reserved(entry) => write!(
                f,
                "{entry:?}: {} is keel's name for the host's loopback; write \"host:PORT\" to allow one of its ports",
                super::HOST_NAME
            ),
            EntryError::BadListName(entry) => write!(
                f,
                "{entry:?}: a list is named by letters, digits, '-' and '_' after the '@' (\"@npm\")"
            ),
        }
    }
}

impl std::error::Error for EntryError {}

impl std::str::FromStr for Entry {
    type Err = EntryError;

    fn from_str(text: &str) -> Result<Entry, EntryError> {
        parse(text)
    }
}

/// Parse one entry (see the module's table).
pub fn parse(text: &str) -> Result<Entry, EntryError> {
    let entry = text.trim();
    if entry.is_empty() {
        return Err(EntryError::Empty);
    }
    if let Some(list) = entry.strip_prefix('@') {
        let valid = !list.is_empty()
            && list
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        return match valid {
            true => Ok(Entry::List(list.to_string())),
            false => Err(EntryError::BadListName(entry.to_string())),
        };
    }
    if let Some(port) = entry.strip_prefix("host:") {
        return Ok(Entry::HostLoopback {
            port: parse_port(entry, port)?,
        });
    }
    if let Some(rest) = entry.strip_prefix('[') {
        return parse_v6(entry, rest);
    }
    let (host, port) = match entry.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (entry, None),
    };
    if looks_like_v4(host) {
        let port = port.ok_or_else(|| EntryError::AddressWithoutPort(entry.to_string()))?;
        let net = parse_net(entry, host)?;
        return Ok(Entry::Network {
            net,
            port: parse_port(entry, port)?,
        });
    }
    if host.contains(':') {
        return Err(EntryError::BadAddress {
            entry: entry.to_string(),
            why: "an IPv6 address is written in brackets, with its port: \"[2001:db8::1]:443\"",
        });
    }
    let ports = match port {
        Some(port) => Ports::One(parse_port(entry, port)?),
        None => Ports::Web,
    };
    match host.strip_prefix("*.") {
        Some(parent) => {
            let parent = normalise_name(entry, parent)?;
            if !parent.contains('.') || SHARED_SUFFIXES.contains(&parent.as_str()) {
                return Err(EntryError::TooBroad(entry.to_string()));
            }
            Ok(Entry::Subdomains { parent, ports })
        }
        None if host == "*" || host.contains('*') => {
            if host == "*" {
                return Err(EntryError::TooBroad(entry.to_string()));
            }
            Err(EntryError::BadName {
                entry: entry.to_string(),
                why: "a wildcard is a leading \"*.\" only (\"*.npmjs.org\")".to_string(),
            })
        }
        None => {
            let name = normalise_name(entry, host)?;
            if name == super::HOST_NAME || name.ends_with(&format!(".{}", super::HOST_NAME)) {
                return Err(EntryError::Reserved(entry.to_string()));
            }
            Ok(Entry::Name { name, ports })
        }
    }
}

fn parse_v6(entry: &str, rest: &str) -> Result<Entry, EntryError> {
    let bad = |why| EntryError::BadAddress {
        entry: entry.to_string(),
        why,
    };
    let (inside, after) = rest
        .split_once(']')
        .ok_or(bad("an IPv6 address in brackets needs its ']'"))?;
    let port = match after.strip_prefix(':') {
        Some(port) => port,
        None if after.is_empty() => return Err(EntryError::AddressWithoutPort(entry.to_string())),
        None => return Err(bad("after the ']' comes ':' and the port")),
    };
    let net = parse_net(entry, inside)?;
    if net.addr.is_ipv4() {
        return Err(bad(
            "brackets are for IPv6; write an IPv4 address without them",
        ));
    }
    Ok(Entry::Network {
        net,
        port: parse_port(entry, port)?,
    })
}

fn looks_like_v4(host: &str) -> bool {
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '/')
}

fn parse_net(entry: &str, text: &str) -> Result<IpNet, EntryError> {
    let bad = |why| EntryError::BadAddress {
        entry: entry.to_string(),
        why,
    };
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (text, None),
    };
    let addr: IpAddr = addr.parse().map_err(|_| bad("not an IP address"))?;
    match prefix {
        None => Ok(IpNet::host(addr)),
        Some(prefix) => {
            let prefix: u8 = prefix
                .parse()
                .map_err(|_| bad("the prefix length after '/' is a number"))?;
            let net = IpNet::new(addr, prefix)
                .ok_or(bad("the prefix length is longer than the address"))?;
            if prefix == 0 {
                return Err(EntryError::TooBroad(entry.to_string()));
            }
            Ok(net)
        }
    }
}

fn parse_port(entry: &str, port: &str) -> Result<u16, EntryError> {
    let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    match port.parse::<u16>() {
        Ok(port) if digits && port > 0 => Ok(port),
        _ => Err(EntryError::BadPort {
            entry: entry.to_string(),
            port: port.to_string(),
        }),
    }
}

/// A DNS name in the form entries are compared in: lower case, no trailing dot, each label
/// 1 to 63 letters, digits or '-' (not at its ends), 253 characters at most.
pub fn normalise_name(entry: &str, name: &str) -> Result<String, EntryError> {
    let bad = |why: String| EntryError::BadName {
        entry: entry.to_string(),
        why,
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() {
        return Err(bad("no name".to_string()));
    }
    if !name.is_ascii() {
        return Err(bad(
            "a name is written in ASCII: give an internationalised name in its xn-- form"
                .to_string(),
        ));
    }
    if name.len() > 253 {
        return Err(bad("a name is at most 253 characters".to_string()));
    }
    for label in name.split('.') {
        let valid_chars = label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if label.is_empty() || label.len() > 63 {
            return Err(bad(format!(
                "each part between dots is 1 to 63 characters ({label:?})"
            )));
        }
        if !valid_chars || label.starts_with('-') || label.ends_with('-') {
            return Err(bad(format!(
                "{label:?} is not a DNS label (letters, digits and '-', not at its ends)"
            )));
        }
    }
    if name
        .split('.')
        .next_back()
        .is_some_and(|tld| tld.chars().all(|c| c.is_ascii_digit()))
    {
        return Err(bad(
            "a name's last part is not all digits (an IPv4 address?)".to_string(),
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests;
