//! Where `keel daemon --metrics ADDR` serves: a loopback TCP address (`127.0.0.1:9464`,
//! `[::1]:9464`) or a Unix socket (`unix:/run/keel/metrics.sock`). Anything else is refused
//! before the daemon starts: the figures name units and are for this host, and keel looks
//! up no names.

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp(addr) => write!(f, "http://{addr}/metrics"),
            Address::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

const FORMS: &str = "127.0.0.1:PORT, [::1]:PORT or unix:/ABSOLUTE/PATH";

/// The address of `--metrics`, or why it is refused (in words that say what to write).
pub fn parse(text: &str) -> Result<Address, String> {
    if let Some(path) = text.strip_prefix("unix:") {
        let path = PathBuf::from(path);
        if !path.is_absolute() {
            return Err(format!(
                "{text}: a Unix socket's path must be absolute (unix:/run/keel/metrics.sock)"
            ));
        }
        if path.file_name().is_none() {
            return Err(format!("{text}: the path names no socket file"));
        }
        return Ok(Address::Unix(path));
    }
    let addr: SocketAddr = text.parse().map_err(|_| {
        format!("{text}: not an IP address and port (write {FORMS}; keel looks up no names)")
    })?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "{text}: not a loopback address: keel serves metrics only on this host ({FORMS}); \
             to scrape from elsewhere, put a proxy with access control in front"
        ));
    }
    Ok(Address::Tcp(addr))
}
