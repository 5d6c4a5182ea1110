//! The rules of `secrets` (see `unit::secrets`), each problem at its field.

use super::{check_absolute_path, FieldPath, Problem};
use crate::network::entry::{self, Entry};
use crate::unit::secrets::is_env_name;
use crate::unit::{Network, Unit};
use std::collections::BTreeMap;

fn host_problem(host: &str) -> Option<String> {
    let shown = format!("{host:?}");
    if host.contains("://") {
        return Some(format!(
            "{shown} has a scheme: write the host name alone, e.g. \"api.anthropic.com\""
        ));
    }
    if host.contains('*') {
        return Some(format!(
            "{shown}: a secret's hosts are exact names (no wildcards): list each host the value is sent to"
        ));
    }
    if host.contains(':') {
        return Some(format!(
            "{shown} has a port: write the host name alone (the relay swaps the value in on any allowed port)"
        ));
    }
    if host.contains('/') || host.contains('@') {
        return Some(format!(
            "{shown} is not a host name: write it alone, e.g. \"api.anthropic.com\""
        ));
    }
    if host.parse::<std::net::IpAddr>().is_ok() {
        return Some(format!(
            "{shown} is an address: a secret's hosts are DNS names, whose certificates keel verifies"
        ));
    }
    entry::normalise_name(host, host.trim())
        .err()
        .map(|e| e.to_string())
}

/// What is wrong with `header` as a header a secret is swapped in.
fn header_problem(header: &str) -> Option<String> {
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if header.contains(':') {
        return Some(format!(
            "{header:?}: write the header's name alone, e.g. \"x-api-key\" (the placeholder goes in its value)"
        ));
    }
    if header.is_empty() || !header.chars().all(tchar) {
        return Some(format!(
            "{header:?} is not a header name: letters, digits and !#$%&'*+-.^_`|~ (an RFC 9110 token), e.g. \"x-api-key\""
        ));
    }
    let lower = header.to_ascii_lowercase();
    if crate::secrets::UNSWAPPABLE_HEADERS.contains(&lower.as_str()) {
        return Some(format!(
            "{header:?} is never swapped in: host names the request's authority, content-length and transfer-encoding frame it, the hop-by-hop ones do not reach the server; name the header the API reads the key from"
        ));
    }
    None
}

/// The problems of `unit.secrets`, each at its field.
pub(super) fn secret_problems(unit: &Unit) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut add = |path: FieldPath, also: Vec<FieldPath>, message: String| {
        problems.push(Problem {
            path,
            message,
            also,
        })
    };
    let root = FieldPath::default();
    for (name, secret) in &unit.secrets {
        let at = root.field("secrets").key(name);
        if name.starts_with("KEEL_") {
            add(
                at.clone(),
                vec![],
                "the KEEL_ prefix is reserved: keel sets the KEEL_* variables itself; choose another name".to_string(),
            );
        } else if !is_env_name(name) {
            add(
                at.clone(),
                vec![],
                format!("{name:?} is not an environment variable name: use letters, digits and '_', not starting with a digit (the agent sees the placeholder under this name)"),
            );
        }
        if unit.env.contains_key(name) {
            add(
                root.field("env").key(name),
                vec![at.clone()],
                format!("{name} is also a secret: the agent's {name} is the secret's placeholder; remove it from env"),
            );
        }
        match (&secret.file, &secret.env) {
            (Some(_), Some(_)) => add(
                at.field("env"),
                vec![at.clone()],
                "a secret has one source: give file or env, not both".to_string(),
            ),
            (None, None) => add(
                at.clone(),
                vec![],
                format!("says neither file nor env: write Secret(file: \"/etc/keel/secrets/{}\", hosts: [...]) or Secret(env: \"KEEL_SECRET_{name}\", hosts: [...])", name.to_ascii_lowercase()),
            ),
            _ => {}
        }
        if let Some(file) = &secret.file {
            if let Err(message) = check_absolute_path(file, "/etc/keel/secrets/anthropic") {
                add(at.field("file"), vec![], message);
            }
        }
        if let Some(var) = &secret.env {
            if !is_env_name(var) {
                add(
                    at.field("env"),
                    vec![],
                    format!("{var:?} is not an environment variable name: name the variable of keel's environment that holds the value"),
                );
            } else if !var.starts_with(crate::secrets::ENV_SOURCE_PREFIX) {
                add(
                    at.field("env"),
                    vec![],
                    format!(
                        "{var:?} does not start with {prefix}: keel's environment reaches every agent (of every unit) but for its KEEL_* variables, and {prefix}* ones stay in keel's own processes (the daemon, the relays); name it e.g. {prefix}{suggested} in keel's environment (EnvironmentFile=, podman run -e) and here",
                        prefix = crate::secrets::ENV_SOURCE_PREFIX,
                        suggested = var.trim_start_matches("KEEL_"),
                    ),
                );
            }
        }
        if secret.hosts.is_empty() {
            add(
                at.field("hosts"),
                vec![at.clone()],
                "is empty: name the hosts the value is sent to, e.g. [\"api.anthropic.com\"]"
                    .to_string(),
            );
        }
        for (index, host) in secret.hosts.iter().enumerate() {
            if let Some(message) = host_problem(host) {
                add(at.field("hosts").index(index), vec![], message);
            }
        }
        if let Some(headers) = &secret.headers {
            if headers.is_empty() {
                add(
                    at.field("headers"),
                    vec![at.clone()],
                    format!("is empty: name the request headers the value is swapped in, e.g. [\"x-api-key\"], or leave headers out for the usual ones ({})", crate::secrets::DEFAULT_HEADERS.join(", ")),
                );
            }
            for (index, header) in headers.iter().enumerate() {
                if let Some(message) = header_problem(header) {
                    add(at.field("headers").index(index), vec![], message);
                }
            }
        }
    }
    if !unit.secrets.is_empty() && !matches!(unit.sandbox.network, Network::Allow(_)) {
        add(
            root.field("sandbox").field("network"),
            vec![root.field("secrets")],
            format!(
                "{}: a unit with secrets needs its own network: secrets are swapped in by the Allow network's relay: use network: Allow([...]) with the secrets' hosts",
                unit.sandbox.network.mode()
            ),
        );
    }
    problems.extend(unreached_hosts(unit, None));
    problems
}

/// The secrets' hosts that `sandbox.network: Allow([...])` does not reach (a name entry of the
/// host, or a `*.` entry above it), each at its place. `lists`: `keel.ron`'s named lists;
/// `None` (they are not known here): nothing is said of a unit whose allow-list names one.
pub(super) fn unreached_hosts(
    unit: &Unit,
    lists: Option<&BTreeMap<String, Vec<String>>>,
) -> Vec<Problem> {
    let Network::Allow(entries) = &unit.sandbox.network else {
        return Vec::new();
    };
    let mut reached: Vec<Entry> = Vec::new();
    let mut pending: Vec<&String> = entries.iter().collect();
    let mut seen_lists = Vec::new();
    while let Some(text) = pending.pop() {
        match entry::parse(text) {
            Ok(Entry::List(list)) => {
                let Some(lists) = lists else {
                    return Vec::new();
                };
                if seen_lists.contains(&list) {
                    continue;
                }
                match lists.get(&list) {
                    Some(more) => pending.extend(more),
                    // Reported as an unknown list: nothing more here.
                    None => return Vec::new(),
                }
                seen_lists.push(list);
            }
            Ok(entry) => reached.push(entry),
            Err(_) => {}
        }
    }
    let covers = |host: &str| {
        reached.iter().any(|entry| match entry {
            Entry::Name { name, .. } => name == host,
            Entry::Subdomains { parent, .. } => host
                .strip_suffix(parent.as_str())
                .is_some_and(|rest| rest.ends_with('.')),
            _ => false,
        })
    };
    let mut problems = Vec::new();
    for (name, secret) in &unit.secrets {
        for (index, host) in secret.normalised_hosts().iter().enumerate() {
            if host_problem(host).is_none() && !covers(host) {
                problems.push(Problem {
                    path: FieldPath::default()
                        .field("secrets")
                        .key(name)
                        .field("hosts")
                        .index(index),
                    message: format!(
                        "{host:?} is not in sandbox.network's allow-list, so the agent could not reach it: add \"{host}\" to Allow([...])"
                    ),
                    also: vec![],
                });
            }
        }
    }
    problems
}
