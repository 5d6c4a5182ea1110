//! Unit tests of the relay's secrets side: what a connection's first byte says, and what an
//! intercepted connection is given.

use super::*;
use crate::secrets::SecretSource;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;

fn secret(name: &str, source: SecretSource, hosts: &[&str]) -> TaskSecret {
    TaskSecret {
        name: name.to_string(),
        placeholder: crate::secrets::placeholder(),
        source,
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        headers: Vec::new(),
    }
}

fn private_file(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-intercepting-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_session_gets_its_hosts_secrets_read_now_and_the_others_placeholders() {
    let dir = scratch("session");
    let anthropic = private_file(&dir, "anthropic", "sk-one\n");
    let missing = dir.join("missing");
    let secrets = vec![
        secret(
            "A",
            SecretSource::File(anthropic.clone()),
            &["api.anthropic.com"],
        ),
        secret(
            "B",
            SecretSource::File(missing),
            &["api.anthropic.com", "b.example"],
        ),
        secret(
            "C",
            SecretSource::File(anthropic.clone()),
            &["api.openai.com"],
        ),
    ];
    let session = session_for("api.anthropic.com", &secrets);
    assert_eq!(session.host, "api.anthropic.com");
    let names: Vec<&str> = session.swaps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["A", "B"]);
    assert_eq!(session.swaps[0].placeholder, secrets[0].placeholder);
    assert_eq!(session.swaps[0].value.as_deref(), Ok(&b"sk-one"[..]));
    // A source that cannot be read: the reason, never a value.
    let why = session.swaps[1].value.as_ref().unwrap_err();
    assert!(why.contains("missing"), "{why}");
    assert_eq!(
        session.others,
        [(secrets[2].placeholder.clone(), "C".to_string())]
    );
    // A rotated file: the next session reads the new value.
    std::fs::write(&anthropic, "sk-two\n").unwrap();
    let session = session_for("api.anthropic.com", &secrets);
    assert_eq!(session.swaps[0].value.as_deref(), Ok(&b"sk-two"[..]));
    // A host of no secret: nothing to swap, every placeholder another's.
    let session = session_for("example.com", &secrets);
    assert!(session.swaps.is_empty());
    assert_eq!(session.others.len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A connected pair on loopback: (the relay's accepted side, the agent's side).
fn pair() -> (mio::net::TcpStream, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let agent = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (accepted, _) = listener.accept().unwrap();
    accepted.set_nonblocking(true).unwrap();
    (mio::net::TcpStream::from_std(accepted), agent)
}

fn said(byte: FirstByte) -> &'static str {
    match byte {
        FirstByte::NotYet => "not yet",
        FirstByte::Tls => "tls",
        FirstByte::Plain => "plain",
        FirstByte::End => "end",
    }
}

#[test]
fn the_first_byte_tells_tls_from_plain_text_and_is_left_for_the_connection() {
    let (relay_side, mut agent) = pair();
    assert_eq!(said(first_byte(&[], &relay_side)), "not yet");
    agent.write_all(&[0x16, 0x03, 0x01]).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while said(first_byte(&[], &relay_side)) == "not yet" && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(said(first_byte(&[], &relay_side)), "tls");
    // Peeked, not read: the handshake is still there for whoever carries it.
    let mut buf = [0u8; 3];
    let mut std_side = std::net::TcpStream::from(relay_side);
    std_side.set_nonblocking(false).unwrap();
    std::io::Read::read_exact(&mut std_side, &mut buf).unwrap();
    assert_eq!(buf, [0x16, 0x03, 0x01]);

    // The relay's own head goes first (a proxy's forwarded request): plain text.
    let (relay_side, agent) = pair();
    assert_eq!(
        said(first_byte(b"GET / HTTP/1.1\r\n", &relay_side)),
        "plain"
    );
    // An agent that closes without a word.
    drop(agent);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while said(first_byte(&[], &relay_side)) == "not yet" && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(said(first_byte(&[], &relay_side)), "end");
}
