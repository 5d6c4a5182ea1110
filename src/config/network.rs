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
//! ),
//! ```
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
}

pub fn resolve(raw: &RawNetwork) -> NetworkConfig {
    NetworkConfig {
        lists: raw.lists.clone(),
        // Checked by `check`: a configuration that parsed has a valid one.
        resolver: raw.resolver.as_deref().and_then(|r| r.parse().ok()),
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
