//! `network: Network(...)` of `keel.ron`: the named allow-lists units reuse (`"@name"` in a
//! unit's `sandbox.network: Allow([...])`) and the DNS server the tasks' relays ask.
//!
//! ```ron
//! network: Network(
//!     lists: {
//!         "anthropic": ["api.anthropic.com", "claude.ai", "platform.claude.com"],
//!         "npm": ["registry.npmjs.org"],
//!         "model": ["@anthropic", "host:11434"],
//!     },
//!     resolver: Some("127.0.0.1:53"),
//!     trust: ["/etc/keel/ca/internal.pem"],
//! ),
//! ```
//!
//! `trust`: CA certificates (PEM files, absolute paths) the relay trusts, besides the host's
//! store, when it verifies the real host of a secret's connection (private endpoints, tests).
//!
//! Entries have a unit's syntax ([`crate::network::entry`]) and may name other lists; a list
//! that includes itself, or names one that is not there, is an error of the file.

use crate::network::{entry, Entry, Policy, PolicyError};
use crate::unit::FieldPath;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// `network: Network(...)` as written.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, rename = "Network")]
pub struct RawNetwork {
    #[serde(default)]
    pub lists: BTreeMap<String, Vec<String>>,
    /// `Some("127.0.0.1:5353")`, checked as an address and port.
    #[serde(default)]
    pub resolver: Option<String>,
    /// CA certificate files (PEM), absolute paths; each read when `keel.ron` is.
    #[serde(default)]
    pub trust: Vec<String>,
}

/// The network settings in force.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkConfig {
    /// The named lists, as written (checked: each entry parses, every list named exists,
    /// none includes itself).
    pub lists: BTreeMap<String, Vec<String>>,
    /// The DNS server the relays ask on the host; `None`: the first `nameserver` of
    /// `/etc/resolv.conf`.
    pub resolver: Option<SocketAddr>,
    /// CA files trusted besides the host's store for the real hosts of secrets' connections
    /// (checked: absolute, readable, PEM certificates).
    pub trust: Vec<std::path::PathBuf>,
}

pub fn resolve(raw: &RawNetwork) -> NetworkConfig {
    NetworkConfig {
        lists: raw.lists.clone(),
        // Checked by `check`: a configuration that parsed has a valid one.
        resolver: raw.resolver.as_deref().and_then(|r| r.parse().ok()),
        trust: raw.trust.iter().map(Into::into).collect(),
    }
}

/// Values that parse but cannot be meant.
pub(super) fn check(raw: &RawNetwork) -> Vec<(FieldPath, String)> {
    let at = FieldPath::default().field("network");
    let mut problems = Vec::new();
    if let Some(resolver) = &raw.resolver {
        if resolver.parse::<SocketAddr>().is_err() {
            problems.push((
                at.field("resolver"),
                format!(
                    "{resolver:?} is not an address and port: write e.g. Some(\"127.0.0.1:53\"), or None for /etc/resolv.conf's"
                ),
            ));
        }
    }
    for (index, path) in raw.trust.iter().enumerate() {
        if let Some(message) = trust_problem(path) {
            problems.push((at.field("trust").index(index), message));
        }
    }
    let lists_at = at.field("lists");
    let mut parsed: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
    for (name, entries) in &raw.lists {
        let list_at = lists_at.key(name);
        if !matches!(entry::parse(&format!("@{name}")), Ok(Entry::List(_))) {
            problems.push((
                list_at,
                format!(
                    "{name:?} cannot be a list's name: use letters, digits, '-' and '_' (units write it \"@{name}\")"
                ),
            ));
            continue;
        }
        let mut good = Vec::new();
        for (index, text) in entries.iter().enumerate() {
            match entry::parse(text) {
                Ok(entry) => good.push(entry),
                Err(error) => problems.push((list_at.index(index), error.to_string())),
            }
        }
        parsed.insert(name.clone(), good);
    }
    for (name, entries) in &raw.lists {
        for (index, text) in entries.iter().enumerate() {
            if let Ok(Entry::List(list)) = entry::parse(text) {
                if !raw.lists.contains_key(&list) {
                    let error = PolicyError::UnknownList {
                        list,
                        known: raw.lists.keys().cloned().collect(),
                    };
                    problems.push((lists_at.key(name).index(index), error.to_string()));
                }
            }
        }
    }
    if problems.is_empty() {
        for name in raw.lists.keys() {
            if let Err(error @ PolicyError::ListCycle(_)) =
                Policy::new(&[Entry::List(name.clone())], &parsed)
            {
                problems.push((lists_at.key(name), error.to_string()));
                break;
            }
        }
    }
    problems
}

/// The largest CA file `trust` may name.
const MAX_TRUST_FILE: u64 = 1 << 20;

/// Why `path`, an entry of `trust`, cannot be used: not absolute, missing, unreadable, not a
/// regular file, or holding no PEM certificate. Read as `keel.ron` is.
fn trust_problem(path: &str) -> Option<String> {
    use std::io::Read;
    let fix =
        "put the CA's certificate (PEM, -----BEGIN CERTIFICATE-----) there, or remove the entry";
    if !path.starts_with('/') {
        return Some(format!(
            "{path:?} is relative: write an absolute path such as \"/etc/keel/ca/internal.pem\""
        ));
    }
    // Checked before opening: opening a FIFO would block.
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(format!("{path:?} does not exist: {fix}"))
        }
        Err(e) => return Some(format!("cannot read {path:?}: {e}: {fix}")),
    };
    if !meta.is_file() {
        return Some(format!("{path:?} is not a regular file: {fix}"));
    }
    let mut text = Vec::new();
    let read = std::fs::File::open(path)
        .and_then(|file| file.take(MAX_TRUST_FILE + 1).read_to_end(&mut text));
    if let Err(e) = read {
        return Some(format!("cannot read {path:?}: {e}: {fix}"));
    }
    if text.len() as u64 > MAX_TRUST_FILE {
        return Some(format!(
            "{path:?} is larger than 1M: name a file of CA certificates"
        ));
    }
    let pem = String::from_utf8_lossy(&text);
    if !(pem.contains("-----BEGIN CERTIFICATE-----") && pem.contains("-----END CERTIFICATE-----")) {
        return Some(format!("{path:?} holds no PEM certificate: {fix}"));
    }
    None
}

/// The lists `entries` (a unit's, as written) reach, directly or through other lists: what
/// the task's relay is given. An entry that does not parse, or a list `lists` lacks, reaches
/// nothing (the unit's and `keel.ron`'s checks report those).
pub fn lists_reached(
    entries: &[String],
    lists: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, Vec<String>> {
    let mut reached = BTreeMap::new();
    let mut pending: Vec<&String> = entries.iter().collect();
    while let Some(text) = pending.pop() {
        let Ok(Entry::List(name)) = entry::parse(text) else {
            continue;
        };
        if reached.contains_key(&name) {
            continue;
        }
        if let Some(list) = lists.get(&name) {
            pending.extend(list);
            reached.insert(name, list.clone());
        }
    }
    reached
}

#[cfg(test)]
mod tests;
