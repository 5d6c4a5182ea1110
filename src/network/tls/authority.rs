//! keel's certificate authority: one per state directory, `STATE/network/ca/` (`ca.pem`
//! 0644, `ca.key` 0600), made on first use, and the leaf certificates it signs for the hosts
//! keel intercepts.

use super::{CA_CERT_FILE, CA_DIR, CA_KEY_FILE};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How long the CA's certificate is valid.
const CA_VALIDITY: Duration = Duration::from_secs(3650 * 86_400);
/// How long a leaf is valid; it is made again when less than [`LEAF_RENEW`] is left.
pub const LEAF_VALIDITY: Duration = Duration::from_secs(30 * 86_400);
pub const LEAF_RENEW: Duration = Duration::from_secs(3 * 86_400);
/// How far back a new certificate's validity starts (clocks differ).
const BACKDATE: Duration = Duration::from_secs(3600);

/// The CA's certificate and key. The key is never logged (`Debug` leaves it out).
pub struct Authority {
    cert_pem: String,
    cert_der: Vec<u8>,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// A leaf certificate and its key, DER.
pub struct Leaf {
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
    pub not_after: SystemTime,
}

impl Authority {
    /// The state root's CA: made when missing (crash-consistently: the key first, 0600 from
    /// its creation, then the certificate), else loaded. A key file wider than 0600 or not
    /// owned by this user is refused with the fix.
    pub fn open(state_root: &Path) -> Result<Authority, String> {
        let dir = state_root.join(CA_DIR);
        let (cert_path, key_path) = (dir.join(CA_CERT_FILE), dir.join(CA_KEY_FILE));
        crate::state::create_private_dir(&dir)
            .map_err(|e| format!("{}: cannot create it: {e}", dir.display()))?;
        let key = match read_key(&key_path)? {
            Some(pem) => {
                KeyPair::from_pem(&pem).map_err(|e| format!("{}: {e}", key_path.display()))?
            }
            None => {
                let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
                    .map_err(|e| format!("cannot make the CA's key: {e}"))?;
                write(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
                // A certificate of an earlier key is worthless now.
                let _ = fs::remove_file(&cert_path);
                log::info!("{}: made keel's CA key", key_path.display());
                key
            }
        };
        match fs::read_to_string(&cert_path) {
            Ok(pem) => {
                if fs::metadata(&cert_path).is_ok_and(|m| m.mode() & 0o777 != 0o644) {
                    let _ = fs::set_permissions(&cert_path, fs::Permissions::from_mode(0o644));
                }
                Authority::from_parts(pem, key, &cert_path)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let host = nix::unistd::gethostname()
                    .map(|h| h.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| "localhost".into());
                let params = ca_params(&format!("keel sandbox CA {host}"))?;
                let cert = params
                    .self_signed(&key)
                    .map_err(|e| format!("cannot sign the CA's certificate: {e}"))?;
                write(&cert_path, cert.pem().as_bytes(), 0o644)?;
                log::info!("{}: made keel's CA certificate", cert_path.display());
                Ok(Authority {
                    cert_pem: cert.pem(),
                    cert_der: cert.der().to_vec(),
                    issuer: Issuer::new(params, key),
                })
            }
            Err(e) => Err(format!("{}: {e}", cert_path.display())),
        }
    }

    /// The state root's CA, loaded; never made (the relay's way).
    pub fn load(state_root: &Path) -> Result<Authority, String> {
        let dir = state_root.join(CA_DIR);
        let (cert_path, key_path) = (dir.join(CA_CERT_FILE), dir.join(CA_KEY_FILE));
        let pem = read_key(&key_path)?.ok_or_else(|| {
            format!(
                "{}: missing (keel's CA is made by the daemon)",
                key_path.display()
            )
        })?;
        let key = KeyPair::from_pem(&pem).map_err(|e| format!("{}: {e}", key_path.display()))?;
        let cert =
            fs::read_to_string(&cert_path).map_err(|e| format!("{}: {e}", cert_path.display()))?;
        Authority::from_parts(cert, key, &cert_path)
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    fn from_parts(pem: String, key: KeyPair, path: &Path) -> Result<Authority, String> {
        let der =
            pem_certificate(&pem).ok_or_else(|| format!("{}: no certificate", path.display()))?;
        let name = common_name(&der)
            .ok_or_else(|| format!("{}: no common name in its subject", path.display()))?;
        if find(&der, key.public_key_raw()).is_none() {
            return Err(format!(
                "{}: the certificate is not of the key beside it (remove both to make a new CA)",
                path.display()
            ));
        }
        Ok(Authority {
            cert_pem: pem,
            cert_der: der,
            issuer: Issuer::new(ca_params(&name)?, key),
        })
    }

    /// A new leaf for `host` (a DNS name or an address), valid from an hour ago for
    /// [`LEAF_VALIDITY`]; key ECDSA P-256.
    pub fn leaf(&self, host: &str) -> Result<Leaf, String> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| format!("cannot make a key for {host}: {e}"))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        params.distinguished_name = dn;
        params.subject_alt_names = vec![match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                host.to_string()
                    .try_into()
                    .map_err(|e| format!("{host}: not a DNS name for a certificate: {e}"))?,
            ),
        }];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let now = SystemTime::now();
        let not_after = now + LEAF_VALIDITY;
        params.not_before = (now - BACKDATE).into();
        params.not_after = not_after.into();
        params.serial_number = Some(serial()?);
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| format!("cannot sign a certificate for {host}: {e}"))?;
        Ok(Leaf {
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
            not_after,
        })
    }
}

/// The CA's parameters (its subject is only the common name, so that the issuer of each
/// leaf, made from these after a load, is byte for byte the certificate's subject).
fn ca_params(common_name: &str) -> Result<CertificateParams, String> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = SystemTime::now();
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + CA_VALIDITY).into();
    params.serial_number = Some(serial()?);
    Ok(params)
}

/// 16 random bytes, the top bit clear (a positive INTEGER).
fn serial() -> Result<SerialNumber, String> {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("/dev/urandom: {e}"))?;
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    Ok(SerialNumber::from_slice(&bytes))
}

/// The key file's PEM, `None` when missing; refused when not a regular file of this user's,
/// mode 0600 or narrower.
fn read_key(path: &Path) -> Result<Option<String>, String> {
    let mut file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let euid = nix::unistd::geteuid().as_raw();
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    if meta.uid() != euid {
        return Err(format!(
            "{}: owned by uid {}, not keel's (uid {euid}): chown {euid} {}",
            path.display(),
            meta.uid(),
            path.display()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{}: mode {:04o}, readable by others than its owner (keel's CA key): chmod 600 {}",
            path.display(),
            meta.mode() & 0o7777,
            path.display()
        ));
    }
    let mut pem = String::new();
    file.read_to_string(&mut pem)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(pem))
}

/// `bytes` at `path` with `mode` from its creation: temp file, fsync, rename, directory fsync.
fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp: PathBuf = dir.join(format!(
        ".{}.tmp.{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        use std::io::Write;
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        // The umask may have narrowed a 0644.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(|e| format!("{}: {e}", path.display()))
}

/// The first certificate of a PEM text, DER.
pub fn pem_certificate(pem: &str) -> Option<Vec<u8>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()?
        .ok()
        .map(|c| c.to_vec())
}

/// The subject's common name of a DER certificate (UTF8String or PrintableString).
fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert, _) = tlv(der)?;
    let (_, mut tbs, _) = tlv(cert)?;
    let (tag, _, rest) = tlv(tbs)?;
    if tag == 0xa0 {
        tbs = rest; // the explicit version
    }
    // serial, signature algorithm, issuer, validity: then the subject.
    for _ in 0..4 {
        tbs = tlv(tbs)?.2;
    }
    let (_, mut subject, _) = tlv(tbs)?;
    while !subject.is_empty() {
        let (_, set, rest) = tlv(subject)?;
        subject = rest;
        let (_, attribute, _) = tlv(set)?;
        let (tag, oid, value) = tlv(attribute)?;
        if tag == 0x06 && oid == [0x55, 0x04, 0x03] {
            let (tag, text, _) = tlv(value)?;
            if tag == 0x0c || tag == 0x13 {
                return String::from_utf8(text.to_vec()).ok();
            }
        }
    }
    None
}

/// One DER tag-length-value: (tag, contents, what follows).
fn tlv(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *bytes.first()?;
    let first = *bytes.get(1)?;
    let (len, head) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let len = bytes
            .get(2..2 + n)?
            .iter()
            .fold(0usize, |l, &b| l << 8 | usize::from(b));
        (len, 2 + n)
    };
    let contents = bytes.get(head..head.checked_add(len)?)?;
    Some((tag, contents, &bytes[head + len..]))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    super::http::find(hay, needle, 0)
}
