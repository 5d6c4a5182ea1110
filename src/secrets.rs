//! Secrets a unit declares (`secrets: {"NAME": Secret(file: ..., hosts: [...])}`): the agent
//! holds a placeholder (`keel-secret-` and 32 hex digits, fresh for each attempt), the task's
//! relay swaps the value in on the way to the secret's hosts. This module is what both sides
//! share: the sources and their rules, the value (never printed), the placeholders and a
//! scanner for them, and the CA bundle sandboxes of units with secrets trust.
//!
//! A leaf: it uses only `state` (never `network`, whose relay uses it).

mod bundle;

pub use bundle::{ca_bundle_path, ca_bundle_target, write_ca_bundle, CA_BUNDLE_FILE, HOST_BUNDLES};

use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub const PLACEHOLDER_PREFIX: &str = "keel-secret-";
/// What the name of a secret's variable of keel's environment (`Secret(env: ...)`) starts
/// with: such variables stay in keel's own processes (the daemon, its relays), never in a
/// shim's environment or any agent's, whichever unit it runs.
pub const ENV_SOURCE_PREFIX: &str = "KEEL_SECRET_";
/// The prefix and 32 lower-case hex digits.
pub const PLACEHOLDER_LEN: usize = 12 + 32;
/// The largest value a secret file may hold.
pub const MAX_SECRET_BYTES: u64 = 64 << 10;

/// Where a secret's value is read, on the host, when it is needed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SecretSource {
    /// A file owned by keel's user, readable by no one else.
    File(PathBuf),
    /// A variable of keel's own environment, by name.
    Env(String),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::File(path) => write!(f, "{}", path.display()),
            SecretSource::Env(name) => write!(f, "${name} of keel's environment"),
        }
    }
}

/// The request headers a secret's placeholder is swapped in when its unit names none (the
/// ones API keys and tokens travel in), lower case.
pub const DEFAULT_HEADERS: [&str; 7] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "private-token",
    "x-auth-token",
];

/// Headers no placeholder is swapped in (a unit may not name them): the request's authority,
/// its framing, and the hop-by-hop ones (RFC 9110 7.6.1).
pub const UNSWAPPABLE_HEADERS: [&str; 9] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// One secret of one attempt: the variable the agent sees, the placeholder it holds, where the
/// value is, the hosts it is sent to (lower-cased DNS names), and the request headers it is
/// swapped in (lower case; empty: [`DEFAULT_HEADERS`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSecret {
    pub name: String,
    pub placeholder: String,
    pub source: SecretSource,
    pub hosts: Vec<String>,
    #[serde(default)]
    pub headers: Vec<String>,
}

impl TaskSecret {
    /// The headers the placeholder is swapped in: `headers`, or [`DEFAULT_HEADERS`] when
    /// empty.
    pub fn header_names(&self) -> Vec<String> {
        if self.headers.is_empty() {
            DEFAULT_HEADERS.iter().map(|h| h.to_string()).collect()
        } else {
            self.headers.clone()
        }
    }
}

/// A secret's value: its bytes, never printed (`Debug` shows `<secret>`), zeroed on drop.
pub struct SecretValue(Vec<u8>);

impl SecretValue {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

impl Drop for SecretValue {
    fn drop(&mut self) {
        // The whole allocation, not only the value: the trimmed newline sat there too.
        let len = self.0.len();
        self.0.resize(self.0.capacity(), 0);
        for byte in self.0.iter_mut() {
            *byte = 0;
        }
        std::hint::black_box(&mut self.0);
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
        self.0.truncate(len);
    }
}

/// Why a secret cannot be read, and what to do about it. Never holds the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretError {
    Missing(PathBuf),
    Symlink(PathBuf),
    /// Group-writable, or anything at all for others (`mode & 0o027 != 0`).
    Loose {
        path: PathBuf,
        mode: u32,
    },
    WrongOwner {
        path: PathBuf,
        uid: u32,
    },
    NotRegular(PathBuf),
    TooLarge {
        path: PathBuf,
        size: u64,
    },
    /// Nothing once one trailing newline is trimmed (`source`: as [`SecretSource`] shows).
    Empty(String),
    /// A NUL byte or a line break inside the value: a header value cannot hold them.
    BadBytes {
        source: String,
        why: &'static str,
    },
    Unreadable {
        path: PathBuf,
        error: String,
    },
    EnvMissing(String),
}

impl SecretError {
    /// The file is not there (yet): `keel check` warns, a start waits for it.
    pub fn is_missing(&self) -> bool {
        matches!(self, SecretError::Missing(_) | SecretError::EnvMissing(_))
    }
}

/// keel's user as `chown` takes it: `root`, or the number.
fn owner_name(uid: u32) -> String {
    match uid {
        0 => "root".to_string(),
        uid => uid.to_string(),
    }
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let me = owner_name(euid());
        match self {
            SecretError::Missing(path) => write!(
                f,
                "{p} does not exist: create it (mode 0600, owned by {me}): install -m 600 /dev/null {p} and write the value into it",
                p = path.display()
            ),
            SecretError::Symlink(path) => write!(
                f,
                "{} is a symbolic link: name the file itself (a link could be pointed elsewhere)",
                path.display()
            ),
            SecretError::Loose { path, mode } => {
                let who = match mode & 0o020 != 0 {
                    true if mode & 0o007 == 0 => "its group can write it",
                    true => "its group can write it and others can use it",
                    false => "others can use it",
                };
                write!(
                    f,
                    "{p} has mode {:04o} ({who}): chmod 600 {p}",
                    mode & 0o7777,
                    p = path.display()
                )
            }
            SecretError::WrongOwner { path, uid } => write!(
                f,
                "{p} is owned by uid {uid}, not by keel's user ({me}): chown {me} {p}",
                p = path.display()
            ),
            SecretError::NotRegular(path) => write!(
                f,
                "{} is not a regular file: name a file that holds the value",
                path.display()
            ),
            SecretError::TooLarge { path, size } => write!(
                f,
                "{} is {size} bytes: a secret is at most {MAX_SECRET_BYTES} bytes (64 KiB)",
                path.display()
            ),
            SecretError::Empty(source) => {
                write!(f, "{source} is empty: write the value into it")
            }
            SecretError::BadBytes { source, why } => write!(
                f,
                "{source} holds {why} inside the value, which a request header cannot carry: write the value alone, on one line"
            ),
            SecretError::Unreadable { path, error } => {
                write!(f, "cannot read {}: {error}", path.display())
            }
            SecretError::EnvMissing(name) => write!(
                f,
                "{name} is not set in keel's environment: set {name} in keel's environment (systemd: EnvironmentFile=, a container: -e {name}) and restart keel, which reads its environment once"
            ),
        }
    }
}

impl std::error::Error for SecretError {}

/// The value of `source`, read now (a file: see [`check_file`] for its rules).
pub fn read_value(source: &SecretSource) -> Result<SecretValue, SecretError> {
    match source {
        SecretSource::File(path) => read_file(path),
        SecretSource::Env(name) => {
            use std::os::unix::ffi::OsStringExt;
            let value = std::env::var_os(name)
                .ok_or_else(|| SecretError::EnvMissing(name.clone()))?
                .into_vec();
            value_of(SecretValue(value), &source.to_string())
        }
    }
}

/// Whether `path` is a secret file keel would read: opened without following a symbolic link
/// (and without blocking: a FIFO is refused after its fstat), a regular file owned by keel's
/// user (its euid) that no one else may read and its group may not write (`mode & 0o027 ==
/// 0`), at most 64 KiB, a value once one trailing `\n` or `\r\n` is trimmed, with no NUL and no
/// line break inside. The value is read and dropped (zeroed).
pub fn check_file(path: &Path) -> Result<(), SecretError> {
    read_file(path).map(drop)
}

fn read_file(path: &Path) -> Result<SecretValue, SecretError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SecretError::Missing(path.to_path_buf()),
            _ if e.raw_os_error() == Some(libc::ELOOP) => SecretError::Symlink(path.to_path_buf()),
            _ => SecretError::Unreadable {
                path: path.to_path_buf(),
                error: e.to_string(),
            },
        })?;
    let unreadable = |e: std::io::Error| SecretError::Unreadable {
        path: path.to_path_buf(),
        error: e.to_string(),
    };
    let meta = file.metadata().map_err(unreadable)?;
    file_problem(path, &meta, euid()).map_or(Ok(()), Err)?;
    let mut bytes = Vec::with_capacity(MAX_SECRET_BYTES as usize + 1);
    let read = file
        .take(MAX_SECRET_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable);
    let value = SecretValue(bytes);
    read?;
    if value.0.len() as u64 > MAX_SECRET_BYTES {
        return Err(SecretError::TooLarge {
            path: path.to_path_buf(),
            size: value.0.len() as u64,
        });
    }
    value_of(value, &path.display().to_string())
}

/// What is wrong with a secret file as fstat shows it, if anything (a pure function of its
/// metadata and keel's euid).
fn file_problem(path: &Path, meta: &std::fs::Metadata, euid: u32) -> Option<SecretError> {
    let path = path.to_path_buf();
    if !meta.file_type().is_file() {
        Some(SecretError::NotRegular(path))
    } else if meta.uid() != euid {
        Some(SecretError::WrongOwner {
            path,
            uid: meta.uid(),
        })
    } else if meta.mode() & 0o027 != 0 {
        Some(SecretError::Loose {
            path,
            mode: meta.mode(),
        })
    } else if meta.len() > MAX_SECRET_BYTES {
        Some(SecretError::TooLarge {
            path,
            size: meta.len(),
        })
    } else {
        None
    }
}

/// `value` with one trailing newline trimmed, if it is one a header can carry.
fn value_of(mut value: SecretValue, source: &str) -> Result<SecretValue, SecretError> {
    let len = trimmed_len(&value.0);
    value.0.truncate(len);
    let bad = |why| SecretError::BadBytes {
        source: source.to_string(),
        why,
    };
    if value.0.is_empty() {
        Err(SecretError::Empty(source.to_string()))
    } else if value.0.contains(&0) {
        Err(bad("a NUL byte"))
    } else if value.0.iter().any(|b| *b == b'\n' || *b == b'\r') {
        Err(bad("a line break"))
    } else {
        Ok(value)
    }
}

/// The length of `bytes` without one trailing `\n` or `\r\n`.
fn trimmed_len(bytes: &[u8]) -> usize {
    if bytes.ends_with(b"\r\n") {
        bytes.len() - 2
    } else if bytes.ends_with(b"\n") {
        bytes.len() - 1
    } else {
        bytes.len()
    }
}

/// A fresh placeholder: [`PLACEHOLDER_PREFIX`] and 32 lower-case hex digits of 16 bytes of the
/// kernel's random source (`/dev/urandom`; should that fail, std's randomly keyed hasher over
/// the time, the pid and a counter: unique all the same, and a placeholder is worth nothing).
pub fn placeholder() -> String {
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        use std::hash::{BuildHasher, Hasher};
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for half in bytes.chunks_mut(8) {
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u64(n);
            hasher.write_u32(std::process::id());
            hasher.write_u128(crate::state::now_ms().into());
            half.copy_from_slice(&hasher.finish().to_le_bytes());
        }
    }
    let mut text = String::with_capacity(PLACEHOLDER_LEN);
    text.push_str(PLACEHOLDER_PREFIX);
    for byte in bytes {
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

/// Whether `text` is a placeholder, as [`placeholder`] makes them.
pub fn is_placeholder(text: &[u8]) -> bool {
    text.len() == PLACEHOLDER_LEN
        && text.starts_with(PLACEHOLDER_PREFIX.as_bytes())
        && text[PLACEHOLDER_PREFIX.len()..]
            .iter()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Finds placeholders in a byte stream read in pieces (the last `PLACEHOLDER_LEN - 1` bytes
/// carried over between calls), for the relay's plain-text scan. Each occurrence is reported
/// once, when its last byte arrives.
#[derive(Debug, Default)]
pub struct PlaceholderScanner {
    carry: Vec<u8>,
}

impl PlaceholderScanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Scan `chunk`, the next bytes of the stream; push each placeholder completed in it.
    pub fn feed(&mut self, chunk: &[u8], found: &mut Vec<String>) {
        let mut window = std::mem::take(&mut self.carry);
        window.extend_from_slice(chunk);
        let prefix = PLACEHOLDER_PREFIX.as_bytes();
        let mut at = 0;
        while at + PLACEHOLDER_LEN <= window.len() {
            match window[at..].windows(prefix.len()).position(|w| w == prefix) {
                Some(offset) if at + offset + PLACEHOLDER_LEN <= window.len() => {
                    let start = at + offset;
                    let candidate = &window[start..start + PLACEHOLDER_LEN];
                    if is_placeholder(candidate) {
                        found.push(String::from_utf8_lossy(candidate).into_owned());
                        at = start + PLACEHOLDER_LEN;
                    } else {
                        at = start + 1;
                    }
                }
                Some(offset) => {
                    at += offset;
                    break;
                }
                // A prefix cut short may end the window: the carry keeps it.
                None => break,
            }
        }
        // What could still begin a placeholder: at most its length less one, from `at` on.
        let keep_from = at.max(window.len().saturating_sub(PLACEHOLDER_LEN - 1));
        self.carry = window.split_off(keep_from.min(window.len()));
    }
}

#[cfg(test)]
mod tests;
