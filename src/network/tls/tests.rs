use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o7777
}

#[test]
fn open_makes_the_ca_with_its_modes_and_open_again_loads_it() {
    let root = temp_dir("open");
    let ca = Authority::open(&root).unwrap();
    let dir = root.join(CA_DIR);
    assert_eq!(mode(&dir.join(CA_CERT_FILE)), 0o644);
    assert_eq!(mode(&dir.join(CA_KEY_FILE)), 0o600);
    assert_eq!(mode(&dir), 0o700);
    let pem = std::fs::read_to_string(dir.join(CA_CERT_FILE)).unwrap();
    assert_eq!(ca.cert_pem(), pem);
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
    let key = std::fs::read_to_string(dir.join(CA_KEY_FILE)).unwrap();
    assert!(key.contains("PRIVATE KEY"));
    assert!(
        !format!("{ca:?}").contains(key.lines().nth(1).unwrap()),
        "Debug leaves the key out"
    );
    // No temporary file left behind.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    let again = Authority::open(&root).unwrap();
    assert_eq!(again.cert_pem(), ca.cert_pem());
    assert_eq!(std::fs::read_to_string(dir.join(CA_KEY_FILE)).unwrap(), key);
    let loaded = Authority::load(&root).unwrap();
    assert_eq!(loaded.cert_pem(), ca.cert_pem());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn the_ca_certificate_names_keel_and_the_host() {
    let root = temp_dir("name");
    let ca = Authority::open(&root).unwrap();
    let host = nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let der = authority::pem_certificate(ca.cert_pem()).unwrap();
    let expected = format!("keel sandbox CA {host}");
    assert!(http::find(&der, expected.as_bytes(), 0).is_some());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_key_readable_by_others_is_refused_with_the_fix() {
    let root = temp_dir("loose");
    Authority::open(&root).unwrap();
    let key = root.join(CA_DIR).join(CA_KEY_FILE);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    for error in [
        Authority::open(&root).unwrap_err(),
        Authority::load(&root).unwrap_err(),
    ] {
        assert!(error.contains("mode 0644"), "{error}");
        assert!(
            error.contains(&format!("chmod 600 {}", key.display())),
            "{error}"
        );
    }
    // Group-readable too.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(Authority::open(&root).unwrap_err().contains("chmod 600"));
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(Authority::load(&root).is_ok());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_symlinked_key_is_refused() {
    let root = temp_dir("link");
    Authority::open(&root).unwrap();
    let key = root.join(CA_DIR).join(CA_KEY_FILE);
    std::fs::rename(&key, root.join("elsewhere.key")).unwrap();
    std::os::unix::fs::symlink(root.join("elsewhere.key"), &key).unwrap();
    assert!(Authority::load(&root).is_err());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn load_never_creates() {
    let root = temp_dir("load");
    let error = Authority::load(&root).unwrap_err();
    assert!(error.contains("missing"), "{error}");
    assert!(!root.join(CA_DIR).exists());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_crash_between_key_and_certificate_is_finished_by_the_next_open() {
    let root = temp_dir("crash");
    let first = Authority::open(&root).unwrap();
    let dir = root.join(CA_DIR);
    std::fs::remove_file(dir.join(CA_CERT_FILE)).unwrap();
    assert!(Authority::load(&root).is_err());
    let second = Authority::open(&root).unwrap();
    assert_ne!(
        first.cert_pem(),
        second.cert_pem(),
        "a new certificate of the same key"
    );
    assert_eq!(
        Authority::load(&root).unwrap().cert_pem(),
        second.cert_pem()
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_certificate_of_another_key_is_refused() {
    let (a, b) = (temp_dir("key-a"), temp_dir("key-b"));
    Authority::open(&a).unwrap();
    Authority::open(&b).unwrap();
    std::fs::copy(
        a.join(CA_DIR).join(CA_CERT_FILE),
        b.join(CA_DIR).join(CA_CERT_FILE),
    )
    .unwrap();
    let error = Authority::load(&b).unwrap_err();
    assert!(error.contains("not of the key"), "{error}");
    std::fs::remove_dir_all(&a).unwrap();
    std::fs::remove_dir_all(&b).unwrap();
}

#[test]
fn leaves_are_cached_per_host_and_verify_against_the_ca() {
    let root = temp_dir("leaf");
    let ca = Authority::open(&root).unwrap();
    // A reloaded CA signs leaves that chain to the certificate on disk.
    let reloaded = Authority::load(&root).unwrap();
    let leaf = reloaded.leaf("api.secret.test").unwrap();
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca.cert_der().to_vec()))
        .unwrap();
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .unwrap();
    let name = rustls::pki_types::ServerName::try_from("api.secret.test").unwrap();
    let now = rustls::pki_types::UnixTime::now();
    verifier
        .verify_server_cert(
            &CertificateDer::from(leaf.cert_der.clone()),
            &[],
            &name,
            &[],
            now,
        )
        .expect("the leaf chains to keel's CA for its name");
    let other = rustls::pki_types::ServerName::try_from("other.test").unwrap();
    assert!(verifier
        .verify_server_cert(&CertificateDer::from(leaf.cert_der), &[], &other, &[], now)
        .is_err());
    use rustls::client::danger::ServerCertVerifier;

    let interceptor = Interceptor::new(reloaded, &[]).unwrap();
    let one = interceptor.server_config("api.secret.test").unwrap();
    let two = interceptor.server_config("api.secret.test").unwrap();
    assert!(Arc::ptr_eq(&one, &two), "cached");
    let three = interceptor.server_config("other.secret.test").unwrap();
    assert!(!Arc::ptr_eq(&one, &three));
    assert_eq!(one.alpn_protocols, vec![b"http/1.1".to_vec()]);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn trust_files_that_fail_are_named() {
    let root = temp_dir("trust");
    let missing = root.join("missing.pem");
    let error = Interceptor::new(
        Authority::open(&root).unwrap(),
        std::slice::from_ref(&missing),
    )
    .err()
    .unwrap();
    assert!(error.contains(&missing.display().to_string()), "{error}");
    let empty = root.join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let error = Interceptor::new(
        Authority::open(&root).unwrap(),
        std::slice::from_ref(&empty),
    )
    .err()
    .unwrap();
    assert!(error.contains(&empty.display().to_string()), "{error}");
    let ca = root.join(CA_DIR).join(CA_CERT_FILE);
    assert!(Interceptor::new(Authority::open(&root).unwrap(), &[ca]).is_ok());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_swaps_debug_shows_no_value() {
    let swap = Swap {
        name: "K".into(),
        placeholder: "keel-secret-00000000000000000000000000000000".into(),
        value: Ok(b"sk-visible".to_vec()),
        headers: vec!["authorization".into()],
    };
    assert!(!format!("{swap:?}").contains("sk-visible"));
}
