//! The CA bundle a sandbox of a unit with secrets trusts: the host's bundle and keel's CA in
//! one file, `STATE/network/ca-bundle.pem`, bound over the distribution's bundle path.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The distributions' CA bundles, in the order they are looked for (Debian and its kind,
/// Fedora and its kind, Alpine and others). The same list as `crate::network::tls`'s.
pub const HOST_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Relative to the state root.
pub const CA_BUNDLE_FILE: &str = "network/ca-bundle.pem";

/// `STATE/network/ca-bundle.pem`.
pub fn ca_bundle_path(state_root: &Path) -> PathBuf {
    state_root.join(CA_BUNDLE_FILE)
}

/// The canonical path of the first of [`HOST_BUNDLES`] that exists: where the sandbox shows
/// keel's bundle, and what its CA variables name.
pub fn ca_bundle_target() -> Option<PathBuf> {
    HOST_BUNDLES
        .iter()
        .find_map(|path| std::fs::canonicalize(path).ok())
}

/// The bundle's text: the host's bundle (if any), then keel's CA.
pub(super) fn bundle_text(host: Option<&str>, ca_pem: &str) -> String {
    let mut text = String::new();
    if let Some(host) = host {
        text.push_str(host);
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
    }
    text.push_str("# keel's certificate authority (secrets: TLS to a secret's hosts)\n");
    text.push_str(ca_pem);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// Write `STATE/network/ca-bundle.pem` (0644) from the host's bundle and `ca_pem`, only when
/// its content or mode differ: a temporary file, fsync'd, renamed over it, the directory
/// fsync'd. Its path; `Err` says what failed.
pub fn write_ca_bundle(state_root: &Path, ca_pem: &str) -> Result<PathBuf, String> {
    let host = HOST_BUNDLES
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok());
    if host.is_none() {
        log::warn!(
            "the host has no CA bundle ({}): sandboxes with secrets trust only keel's CA",
            HOST_BUNDLES.join(", ")
        );
    }
    let text = bundle_text(host.as_deref(), ca_pem);
    let path = ca_bundle_path(state_root);
    let same_mode = std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o644);
    if same_mode && std::fs::read(&path).ok().as_deref() == Some(text.as_bytes()) {
        return Ok(path);
    }
    let dir = path.parent().unwrap_or(state_root);
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    durable_replace(&path, text.as_bytes(), 0o644)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// `bytes` in place of `path`, mode `mode` whatever the umask: crash-consistent (the old
/// file or the new one, never a part).
fn durable_replace(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
