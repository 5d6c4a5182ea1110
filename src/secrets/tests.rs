use super::bundle::bundle_text;
use super::*;
use std::os::unix::fs::PermissionsExt;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-secrets-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn secret_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[test]
fn a_private_file_is_read_with_one_trailing_newline_trimmed() {
    let dir = temp_dir("read");
    for (bytes, value) in [
        (&b"sk-abc\n"[..], &b"sk-abc"[..]),
        (b"sk-abc\r\n", b"sk-abc"),
        (b"sk-abc", b"sk-abc"),
        (b" spaced value ", b" spaced value "),
    ] {
        let path = secret_file(&dir, "s", bytes, 0o600);
        let read = read_value(&SecretSource::File(path.clone())).unwrap();
        assert_eq!(read.as_bytes(), value);
        assert_eq!(check_file(&path), Ok(()));
    }
    // 0400 and 0640 (the group may read) are fine too.
    for mode in [0o400, 0o640, 0o700] {
        let path = secret_file(&dir, "m", b"v", mode);
        assert_eq!(check_file(&path), Ok(()), "{mode:o}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn loose_modes_are_refused_with_chmod_600() {
    let dir = temp_dir("loose");
    for mode in [0o644, 0o604, 0o660, 0o601, 0o620] {
        let path = secret_file(&dir, "s", b"v", mode);
        let error = check_file(&path).unwrap_err();
        assert!(
            matches!(error, SecretError::Loose { .. }),
            "{mode:o}: {error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains(&format!("chmod 600 {}", path.display())),
            "{text}"
        );
        assert!(text.contains(&format!("{:04o}", mode)), "{text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_file_of_another_owner_is_refused_with_chown() {
    let dir = temp_dir("owner");
    let path = secret_file(&dir, "s", b"v", 0o600);
    let meta = std::fs::metadata(&path).unwrap();
    let me = euid();
    let error = file_problem(&path, &meta, me.wrapping_add(1)).unwrap();
    assert_eq!(
        error,
        SecretError::WrongOwner {
            path: path.clone(),
            uid: me
        }
    );
    let text = error.to_string();
    assert!(text.contains("chown "), "{text}");
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert_eq!(file_problem(&path, &meta, me), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_symlinked_and_non_regular_files_are_refused() {
    let dir = temp_dir("kinds");
    let missing = dir.join("absent");
    let error = check_file(&missing).unwrap_err();
    assert!(error.is_missing());
    let text = error.to_string();
    assert!(
        text.contains("does not exist: create it (mode 0600, owned by"),
        "{text}"
    );
    assert!(
        text.contains(&format!("install -m 600 /dev/null {}", missing.display())),
        "{text}"
    );

    let target = secret_file(&dir, "target", b"v", 0o600);
    let link = dir.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert_eq!(check_file(&link), Err(SecretError::Symlink(link.clone())));

    assert!(matches!(
        check_file(&dir),
        Err(SecretError::NotRegular(_) | SecretError::Loose { .. })
    ));
    // A FIFO does not hang the reader: refused after its fstat.
    let fifo = dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    assert_eq!(
        check_file(&fifo),
        Err(SecretError::NotRegular(fifo.clone()))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn empty_large_and_multi_line_values_are_refused_without_the_value() {
    let dir = temp_dir("content");
    for (bytes, expect) in [
        (&b""[..], "is empty"),
        (b"\n", "is empty"),
        (b"\r\n", "is empty"),
        (b"top\nsecret\n", "a line break"),
        (b"top\rsecret", "a line break"),
        (b"top\0secret", "a NUL byte"),
    ] {
        let path = secret_file(&dir, "s", bytes, 0o600);
        let text = check_file(&path).unwrap_err().to_string();
        assert!(text.contains(expect), "{text}");
        assert!(
            !text.contains("secret\n") && !text.contains("topsecret"),
            "{text}"
        );
        assert!(
            !text.contains("top"),
            "the value is not in the message: {text}"
        );
    }
    let big = vec![b'a'; MAX_SECRET_BYTES as usize + 1];
    let path = secret_file(&dir, "big", &big, 0o600);
    assert!(matches!(
        check_file(&path),
        Err(SecretError::TooLarge { .. })
    ));
    let exact = vec![b'a'; MAX_SECRET_BYTES as usize];
    let path = secret_file(&dir, "exact", &exact, 0o600);
    assert_eq!(check_file(&path), Ok(()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn env_secrets_are_read_from_keels_environment() {
    // Names of this test alone: no other test reads them.
    std::env::set_var("KEEL_TEST_SECRET_SET", "sk-from-env\n");
    let value = read_value(&SecretSource::Env("KEEL_TEST_SECRET_SET".into())).unwrap();
    assert_eq!(value.as_bytes(), b"sk-from-env");
    let error = read_value(&SecretSource::Env("KEEL_TEST_SECRET_UNSET".into())).unwrap_err();
    assert_eq!(
        error,
        SecretError::EnvMissing("KEEL_TEST_SECRET_UNSET".into())
    );
    assert!(error.is_missing());
    let text = error.to_string();
    assert!(text.contains("EnvironmentFile="), "{text}");
    assert!(text.contains("-e KEEL_TEST_SECRET_UNSET"), "{text}");
    std::env::set_var("KEEL_TEST_SECRET_EMPTY", "");
    let error = read_value(&SecretSource::Env("KEEL_TEST_SECRET_EMPTY".into())).unwrap_err();
    assert!(error
        .to_string()
        .contains("$KEEL_TEST_SECRET_EMPTY of keel's environment is empty"));
}

#[test]
fn a_value_never_prints() {
    let value = SecretValue(b"sk-very-secret".to_vec());
    assert_eq!(format!("{value:?}"), "<secret>");
    assert_eq!(format!("{:?}", Some(&value)), "Some(<secret>)");
}

#[test]
fn placeholders_are_the_prefix_and_32_hex_digits_and_unique() {
    let mut seen = std::collections::HashSet::new();
    for _ in 0..1000 {
        let p = placeholder();
        assert_eq!(p.len(), PLACEHOLDER_LEN);
        assert!(p.starts_with(PLACEHOLDER_PREFIX));
        assert!(p[PLACEHOLDER_PREFIX.len()..]
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
        assert!(is_placeholder(p.as_bytes()));
        assert!(seen.insert(p));
    }
    assert!(!is_placeholder(b"keel-secret-0123"));
    assert!(!is_placeholder(
        b"keel-secret-0123456789ABCDEF0123456789abcdef"
    ));
}

#[test]
fn the_scanner_finds_placeholders_across_every_split() {
    let a = placeholder();
    let b = placeholder();
    let stream = format!("GET / HTTP/1.1\r\nx-api-key: {a}\r\nkeel-secret-nothex\r\nAuthorization: Bearer {b}keel-secret-");
    let bytes = stream.as_bytes();
    for split in 0..=bytes.len() {
        let mut scanner = PlaceholderScanner::new();
        let mut found = Vec::new();
        scanner.feed(&bytes[..split], &mut found);
        scanner.feed(&bytes[split..], &mut found);
        assert_eq!(found, vec![a.clone(), b.clone()], "split at {split}");
    }
    // Byte by byte.
    let mut scanner = PlaceholderScanner::new();
    let mut found = Vec::new();
    for byte in bytes {
        scanner.feed(std::slice::from_ref(byte), &mut found);
    }
    assert_eq!(found, vec![a.clone(), b.clone()]);
    // The carry stays small whatever the stream.
    scanner.feed(&vec![b'x'; 10_000], &mut found);
    assert!(scanner.carry.len() < PLACEHOLDER_LEN);
    // Back to back, and a prefix that repeats before a real one.
    let mut scanner = PlaceholderScanner::new();
    let mut found = Vec::new();
    scanner.feed(format!("{a}{b}keel-secret-keel-{a}").as_bytes(), &mut found);
    assert_eq!(found, vec![a.clone(), b.clone(), a.clone()]);
}

#[test]
fn the_bundle_is_the_hosts_then_keels_ca() {
    let ca = "-----BEGIN CERTIFICATE-----\nKEEL\n-----END CERTIFICATE-----\n";
    let host = "-----BEGIN CERTIFICATE-----\nHOST\n-----END CERTIFICATE-----";
    let text = bundle_text(Some(host), ca);
    assert!(text.starts_with(host));
    assert!(text.ends_with(ca));
    assert!(text.contains("-----END CERTIFICATE-----\n#"), "{text}");
    assert!(bundle_text(None, ca).ends_with(ca));
}

#[test]
fn the_bundle_is_written_0644_and_only_when_it_changed() {
    let state = temp_dir("bundle");
    let ca = "-----BEGIN CERTIFICATE-----\nKEEL\n-----END CERTIFICATE-----\n";
    let path = write_ca_bundle(&state, ca).unwrap();
    assert_eq!(path, state.join("network/ca-bundle.pem"));
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);
    assert!(std::fs::read_to_string(&path).unwrap().ends_with(ca));
    let inode = meta.ino();
    write_ca_bundle(&state, ca).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().ino(),
        inode,
        "unchanged: not rewritten"
    );
    let other = "-----BEGIN CERTIFICATE-----\nNEW\n-----END CERTIFICATE-----\n";
    write_ca_bundle(&state, other).unwrap();
    assert!(std::fs::read_to_string(&path).unwrap().ends_with(other));
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(state.join("network")).unwrap().collect();
    assert_eq!(names.len(), 1);
    std::fs::remove_dir_all(&state).unwrap();
}

#[test]
fn the_bundle_target_is_canonical_when_the_host_has_one() {
    if let Some(target) = ca_bundle_target() {
        assert_eq!(std::fs::canonicalize(&target).unwrap(), target);
    }
}
