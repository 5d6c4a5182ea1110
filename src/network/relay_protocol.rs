//! What the daemon and a task's relay (`keel relay`, the policy side of `network: Allow`) say to
//! each other: the relay's spec, which the daemon writes before it starts the relay, the
//! descriptors it inherits, and the report the relay keeps up to date for `keel status` and
//! the journal's `net-denied` events. The one channel between the two (as the shim's
//! `crate::sandbox::protocol` is for the shim).
//!
//! The daemon makes the task's network namespace (owned by the task's user namespace), its
//! routes (every address `local` on `lo`: a connection to anywhere the relay does not listen
//! is reset at once) and the sockets the agent may need before the relay is up — the
//! resolver's, the static listeners, the packet sniffer — so that no start waits for the
//! relay: what the agent sends meanwhile waits in those sockets' queues. The relay makes the
//! listeners of each name's fake address itself (a thread that joins the namespace), before
//! it answers the query that hands the address out.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::path::PathBuf;

/// `RUN/network/relay.json`: everything a relay needs but its descriptors' contents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySpec {
    /// The unit's name (for the relay's log lines).
    pub unit: String,
    /// The unit's `sandbox.network: Allow([...])` entries, as written (validated already).
    pub entries: Vec<String>,
    /// The named lists of `keel.ron` the entries may refer to (`"@name"`).
    pub lists: BTreeMap<String, Vec<String>>,
    /// Where the relay keeps its [`RelayReport`] (temp file, fsync, rename).
    pub report: PathBuf,
    /// The fake addresses handed out so far, one `ADDRESS NAME` line each, appended as they
    /// are given: a relay started again (after a crash) serves the addresses the agent has
    /// cached.
    pub names: PathBuf,
    /// The DNS server the relay asks on the host; `None`: the first `nameserver` of the
    /// host's `/etc/resolv.conf`. (Tests give one on loopback.)
    pub resolver: Option<SocketAddr>,
    /// What a connect to an upstream may take before the agent's connection is reset.
    pub connect_timeout_ms: u64,
    /// The unit's `secrets`, each with this attempt's placeholder: TLS to a secret's hosts is
    /// terminated by the relay (`crate::network::tls`) and the placeholder in a request's
    /// headers swapped for the value, read from its source for each new connection. Values
    /// never travel in the spec. `serde(default)`: a spec of an older keel reads.
    #[serde(default)]
    pub secrets: Vec<crate::secrets::TaskSecret>,
    /// The state root whose CA (`crate::network::tls::CA_DIR`) signs the intercepted hosts'
    /// certificates; `None` when the task has no secrets.
    #[serde(default)]
    pub state_root: Option<PathBuf>,
    /// CA files (`keel.ron` `network.trust`) trusted for the upstreams of intercepted hosts,
    /// beside the host's bundle.
    #[serde(default)]
    pub trust: Vec<PathBuf>,
    /// The inherited descriptors.
    pub fds: RelayFds,
}

/// The descriptors a relay inherits (their numbers in the relay's process).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayFds {
    /// The task's network namespace (`/proc/PID/ns/net`).
    pub netns: RawFd,
    /// The sandbox's resolver: a UDP socket bound to `198.18.0.2:53` inside the namespace.
    pub dns_udp: RawFd,
    /// The same, over TCP (listening).
    pub dns_tcp: RawFd,
    /// An `AF_PACKET` socket on the namespace's `lo` that sees each connection attempt
    /// (`crate::sys::packet`), for the journal of what was refused; `None` when the kernel
    /// refused one (refusals to addresses nobody listens on then go unrecorded).
    pub sniffer: Option<RawFd>,
    /// Listening TCP sockets inside the namespace made before the relay: the HTTP proxy
    /// (`198.18.0.1:3128`), each `host:PORT` entry's (`198.18.0.1:PORT`), and each address
    /// entry's port (`0.0.0.0:PORT`). The address each is bound to.
    pub listeners: Vec<(SocketAddr, RawFd)>,
}

/// The port of the HTTP proxy the relay serves on `host.keel.internal` (`HTTPS_PROXY`,
/// `HTTP_PROXY`): `CONNECT name:port` and absolute-form requests, under the same policy.
pub const PROXY_PORT: u16 = 3128;

/// `RUN/network/report.json`: what the relay let through and refused, since it started (a
/// relay started again reads the last one and goes on counting).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayReport {
    /// The relay's pid (the daemon's check that it is the one it started).
    pub pid: u32,
    /// When it was written (milliseconds since the epoch).
    pub updated_ms: u64,
    /// Allowed traffic per destination (`name:port`, or `address:port`).
    pub allowed: Vec<AllowedCount>,
    /// Refusals per destination, coalesced.
    pub refused: Vec<RefusedCount>,
    /// Connections open now.
    pub open_connections: u64,
    /// Placeholders seen on their way to a host that is not their secret's (a sign of
    /// prompt injection: the journal's `secret-misdirected`), per secret and destination.
    /// `serde(default)`: a report of an older keel reads.
    #[serde(default)]
    pub misdirected: Vec<MisdirectedCount>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MisdirectedCount {
    /// The secret's name (the agent's variable); never its value or placeholder.
    pub secret: String,
    /// Where the placeholder was going (`name:port`, `address:port`).
    pub destination: String,
    pub count: u64,
    pub first_ms: u64,
    pub last_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowedCount {
    pub destination: String,
    pub connections: u64,
    /// Bytes from the agent to the destination.
    pub bytes_out: u64,
    /// Bytes from the destination to the agent.
    pub bytes_in: u64,
    pub last_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefusedCount {
    /// `example.com:443`, `example.com` (a name that did not resolve), `10.1.2.3:80`,
    /// `udp 10.1.2.3:123`.
    pub destination: String,
    /// Why, as [`crate::network::Refusal`]'s text says it.
    pub reason: String,
    pub count: u64,
    pub first_ms: u64,
    pub last_ms: u64,
}
