//! Network egress per task (issue 19): what a sandbox with `network: Allow([...])` may reach.
//!
//! This module holds the decisions, pure and kernel-free (DESIGN, "Code layout"): the
//! allow-list's entries and their syntax ([`entry`]), the policy they make and its verdict on
//! a name, a connection and an address a name resolved to ([`policy`]), the private range of
//! fake addresses the sandbox's resolver hands out for listed names ([`fake`]), and the DNS
//! messages that resolver reads and answers ([`dns`]). The parts that touch the kernel build on
//! these: the relay (`keel relay`, [`relay`]), which serves the sandbox's resolver and its
//! captured connections, and keel's own DNS client for names resolved on the host
//! ([`resolver`]).

pub mod dns;
pub mod entry;
pub mod fake;
pub mod policy;
pub mod relay;
pub mod relay_protocol;
pub mod resolver;
pub mod task_namespace;
pub mod tls;

pub use entry::{Entry, EntryError, IpNet, Ports};
pub use fake::FakeAddresses;
pub use policy::{Decision, Destination, Policy, PolicyError, Refusal, Upstream};

/// The name a sandbox reaches the host's own loopback services by (`"host:PORT"` entries).
pub const HOST_NAME: &str = "host.keel.internal";
