//! `secrets: {"NAME": Secret(file: "/etc/keel/secrets/name", hosts: ["api.example.com"])}`:
//! credentials the agent uses but never holds. The agent's `NAME` is a placeholder; the
//! task's relay (`network: Allow`) swaps the value in on the way to the secret's hosts, in
//! the request headers credentials travel in (`headers: [...]` to name others).

use crate::secrets::SecretSource;
use serde::{Deserialize, Deserializer};

/// One secret: where its value is (exactly one of `file` and `env`) and the hosts it is sent
/// to (exact DNS names).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Secret {
    /// An absolute path: a file of keel's user that no one else may read.
    #[serde(default, deserialize_with = "present")]
    pub file: Option<String>,
    /// A variable of keel's own environment.
    #[serde(default, deserialize_with = "present")]
    pub env: Option<String>,
    #[serde(default)]
    pub hosts: Vec<String>,
    /// The request headers the value is swapped in (replacing
    /// [`crate::secrets::DEFAULT_HEADERS`]); absent: those.
    #[serde(default, deserialize_with = "present")]
    pub headers: Option<Vec<String>>,
}

/// `file: "..."`, written without `Some(...)`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

impl Secret {
    /// Where the value is; `None` for a secret validation refuses (neither or both).
    pub fn source(&self) -> Option<SecretSource> {
        match (&self.file, &self.env) {
            (Some(file), None) => Some(SecretSource::File(file.into())),
            (None, Some(name)) => Some(SecretSource::Env(name.clone())),
            _ => None,
        }
    }

    /// The headers the value is swapped in, as they are compared: the unit's, lower case,
    /// or [`crate::secrets::DEFAULT_HEADERS`].
    pub fn normalised_headers(&self) -> Vec<String> {
        match &self.headers {
            Some(headers) => headers.iter().map(|h| h.to_ascii_lowercase()).collect(),
            None => (crate::secrets::DEFAULT_HEADERS.iter())
                .map(|h| h.to_string())
                .collect(),
        }
    }

    /// The hosts as they are compared: lower case, no trailing dot.
    pub fn normalised_hosts(&self) -> Vec<String> {
        self.hosts
            .iter()
            .map(|host| {
                let host = host.trim();
                host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
            })
            .collect()
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`: a name every shell and runtime takes as a variable.
pub(super) fn is_env_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
