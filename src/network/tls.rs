//! The TLS side of secret interception (issue 20): keel's certificate authority
//! ([`Authority`], `STATE/network/ca/`) and the [`Interceptor`] the relay hands a connection to
//! one of a secret's hosts. It terminates the agent's TLS with a leaf for the host signed by
//! keel's CA (offering only `http/1.1` by ALPN), opens TLS to the real host (verified against
//! the host's trust store plus `keel.ron`'s `network.trust`), swaps the placeholders in the
//! request heads for the secrets' values ([`http`], pure) and carries the rest both ways.
//!
//! One thread per connection (the caller's): [`Interceptor::run`] drives both TLS state
//! machines over non-blocking sockets with `poll(2)` ([`session`]). A secret's value is
//! never logged nor put in an error's text; the buffers that held a rewritten head are
//! zeroed after use.

pub mod authority;
pub mod http;
mod session;

pub use authority::Authority;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// keel's CA, under the state root.
pub const CA_DIR: &str = "network/ca";
/// The CA's certificate (0644).
pub const CA_CERT_FILE: &str = "ca.pem";
/// The CA's private key (0600).
pub const CA_KEY_FILE: &str = "ca.key";
/// The distribution bundle paths, first existing wins (the sandboxes' bundle is shown at the
/// same path: `crate::secrets`).
pub use crate::secrets::HOST_BUNDLES;
/// A connection with no byte either way for this long is ended.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The stack size to spawn intercept threads with. Measured with tests/tls_intercept.rs
/// (`KEEL_TEST_TLS_STACK`, debug build: both handshakes, a leaf made and signed, 4 MiB
/// bodies, the refusals): 64 KiB suffices, 32 KiB overflows; four times the least that
/// passed, for the paths the tests do not reach.
pub const INTERCEPT_STACK_SIZE: usize = 256 * 1024;
/// The most hosts whose leaf is kept in memory (the cache is emptied beyond it).
const MAX_CACHED_LEAVES: usize = 1024;

/// What one intercepted connection is for.
#[derive(Debug, Clone)]
pub struct Session {
    /// The name the relay connected to (lower case).
    pub host: String,
    /// The secrets whose hosts include `host`.
    pub swaps: Vec<Swap>,
    /// (placeholder, secret name) of the task's other secrets.
    pub others: Vec<(String, String)>,
}

/// A secret to swap in on this connection.
#[derive(Clone)]
pub struct Swap {
    /// The secret's name, e.g. `ANTHROPIC_API_KEY` (may be logged).
    pub name: String,
    /// `keel-secret-<32 hex>` (logged only as the name).
    pub placeholder: String,
    /// The value, read by the caller for this connection; Err: why (no value in it).
    pub value: Result<Vec<u8>, String>,
    /// The request headers (lower case) whose values the placeholder is swapped in, e.g.
    /// `authorization` ([`crate::secrets::DEFAULT_HEADERS`] unless the unit names its own);
    /// empty: none. Never `host` nor a framing or hop-by-hop header, whatever it says.
    pub headers: Vec<String>,
}

impl std::fmt::Debug for Swap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Swap")
            .field("name", &self.name)
            .field("value", &self.value.as_ref().map(|_| "<secret>"))
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl Drop for Swap {
    fn drop(&mut self) {
        if let Ok(value) = &mut self.value {
            value.fill(0);
            std::hint::black_box(value);
        }
    }
}

/// What happened on one intercepted connection.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Plaintext bytes agent → upstream (as the agent sent them, before the swaps).
    pub bytes_out: u64,
    /// Plaintext bytes upstream → agent.
    pub bytes_in: u64,
    /// Request heads read.
    pub requests: u64,
    /// Placeholders replaced in header values.
    pub swapped: u64,
    /// Names (deduplicated) of `others` whose placeholder appeared in a request to this host
    /// (forwarded as it was).
    pub misdirected: Vec<String>,
    pub error: Option<String>,
}

/// Terminates agents' TLS and opens verified TLS to upstreams. `Send + Sync`: one shared by
/// all of a relay's intercept threads.
pub struct Interceptor {
    authority: Authority,
    idle_timeout: Duration,
    upstream: Arc<ClientConfig>,
    leaves: Mutex<HashMap<String, CachedLeaf>>,
}

struct CachedLeaf {
    config: Arc<ServerConfig>,
    not_after: SystemTime,
}

impl Interceptor {
    /// `trust`: extra PEM CA files added to the host's bundle (the first of [`HOST_BUNDLES`]
    /// that exists) for verifying upstreams. Err names the file that failed.
    pub fn new(authority: Authority, trust: &[PathBuf]) -> Result<Interceptor, String> {
        let mut roots = RootCertStore::empty();
        let bundle = HOST_BUNDLES.iter().map(Path::new).find(|p| p.exists());
        if let Some(bundle) = bundle {
            let (added, _ignored) = roots.add_parsable_certificates(read_pem_certs(bundle)?);
            if added == 0 {
                log::warn!("{}: no usable CA certificate in it", bundle.display());
            }
        }
        for file in trust {
            let certs = read_pem_certs(file)?;
            if certs.is_empty() {
                return Err(format!("{}: no certificate in it", file.display()));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: not a CA certificate: {e}", file.display()))?;
            }
        }
        if roots.is_empty() {
            return Err(format!(
                "no CA certificates to verify upstreams with: none of {} exists and \
                 network.trust names no file",
                HOST_BUNDLES.join(", ")
            ));
        }
        let mut upstream = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        upstream.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Interceptor {
            authority,
            idle_timeout: IDLE_TIMEOUT,
            upstream: Arc::new(upstream),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// Blocking: carry one connection of the agent's (`client`, its ClientHello not yet read)
    /// to `session.host` over `upstream` (connected TCP), swapping the placeholders; return
    /// when both directions are done, on an error, or after [`IDLE_TIMEOUT`] (or the time
    /// [`Interceptor::set_idle_timeout`] set) without a byte.
    pub fn run(
        &self,
        client: std::net::TcpStream,
        upstream: std::net::TcpStream,
        session: &Session,
    ) -> Outcome {
        session::run(self, client, upstream, session)
    }

    /// End a connection after `idle` without a byte either way, not [`IDLE_TIMEOUT`].
    pub fn set_idle_timeout(&mut self, idle: Duration) {
        self.idle_timeout = idle;
    }

    /// The CA this interceptor signs with.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The agent-side TLS configuration for `host`: its leaf, made on first use and again
    /// when near expiry.
    fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, String> {
        let now = SystemTime::now();
        let mut leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cached) = leaves.get(host) {
            if cached.not_after > now + authority::LEAF_RENEW {
                return Ok(cached.config.clone());
            }
        }
        let leaf = self.authority.leaf(host)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.key_der));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_no_client_auth()
            .with_single_cert(vec![CertificateDer::from(leaf.cert_der)], key)
            .map_err(|e| format!("TLS: the leaf for {host}: {e}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if leaves.len() >= MAX_CACHED_LEAVES {
            leaves.clear();
        }
        leaves.insert(
            host.to_string(),
            CachedLeaf {
                config: config.clone(),
                not_after: leaf.not_after,
            },
        );
        Ok(config)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate of a PEM file.
fn read_pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not PEM certificates: {e}", path.display()))
}

#[cfg(test)]
mod tests;
