//! keel's TLS interception (`keel::network::tls`, issue 20) end to end on loopback, no root:
//! a client that trusts only keel's CA talks HTTPS through `Interceptor::run` to a loopback
//! HTTPS server whose certificate a test CA signed (trusted through `trust`, as `keel.ron`'s
//! `network.trust` would). The server records the request heads it gets.
//!
//! `run` runs on a thread of `INTERCEPT_STACK_SIZE`, as the relay spawns it;
//! `KEEL_TEST_TLS_STACK=BYTES` tries another size (how that constant was measured).

use keel::network::tls::{Authority, Interceptor, Outcome, Session, Swap, INTERCEPT_STACK_SIZE};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, StreamOwned};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

const HOST: &str = "api.secret.test";
const KEY: &str = "keel-secret-0123456789abcdef0123456789abcdef";
const OTHER: &str = "keel-secret-ffffffffffffffffffffffffffffffff";
const VALUE: &str = "sk-ant-real-value-42";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

struct TempDir(PathBuf);
impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("keel-tls-it-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A test CA: its PEM and an issuer.
fn test_ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

/// A loopback HTTPS server for `HOST`, its leaf signed by `issuer`: each request's head is
/// sent on the channel, and answered `200` with a body naming the request's path.
struct Server {
    addr: std::net::SocketAddr,
    heads: mpsc::Receiver<String>,
}

fn server(issuer: &Issuer<'static, KeyPair>) -> Server {
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec![HOST.to_string()]).unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, heads) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let (config, tx) = (config.clone(), tx.clone());
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = StreamOwned::new(conn, stream);
                while let Some((head, body)) = read_message(&mut tls) {
                    if head.contains("\r\nUpgrade: echo\r\n") {
                        // Switch to echoing raw bytes.
                        let _ = tx.send(head);
                        let switch = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\n\
                                      Connection: Upgrade\r\n\r\n";
                        let _ = tls.write_all(switch.as_bytes());
                        let mut buf = [0u8; 4096];
                        while let Ok(n @ 1..) = tls.read(&mut buf) {
                            if tls.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                        break;
                    }
                    let path = head.split(' ').nth(1).unwrap_or("").to_string();
                    let answer = format!("served {path} ({} body bytes)", body.len());
                    let _ = tx.send(head);
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{answer}",
                        answer.len()
                    );
                    if tls.write_all(response.as_bytes()).is_err() {
                        return;
                    }
                }
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    Server { addr, heads }
}

/// One HTTP message (head, Content-Length body) from `stream`; `None` at its end.
fn read_message(stream: &mut impl Read) -> Option<(String, Vec<u8>)> {
    let mut data = Vec::new();
    let mut byte = [0u8; 1];
    while !data.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => data.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8(data).unwrap();
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    stream.read_exact(&mut body).ok()?;
    Some((head, body))
}

/// An interceptor with keel's CA in `dir`, trusting `trust` for upstreams.
fn interceptor(dir: &TempDir, trust_pem: &str) -> (Arc<Interceptor>, String) {
    let authority = Authority::open(&dir.0).unwrap();
    let ca = authority.cert_pem().to_string();
    let trust = dir.0.join("upstream-ca.pem");
    std::fs::write(&trust, trust_pem).unwrap();
    (Arc::new(Interceptor::new(authority, &[trust]).unwrap()), ca)
}

fn session(swaps: Vec<Swap>) -> Session {
    Session {
        host: HOST.into(),
        swaps,
        others: vec![(OTHER.into(), "OTHER_KEY".into())],
    }
}

fn swap(value: Result<&str, &str>) -> Swap {
    Swap {
        name: "ANTHROPIC_API_KEY".into(),
        placeholder: KEY.into(),
        value: value.map(|v| v.as_bytes().to_vec()).map_err(str::to_string),
        headers: keel::secrets::DEFAULT_HEADERS
            .iter()
            .map(|h| h.to_string())
            .collect(),
    }
}

/// The agent's side: a loopback pair whose far end goes to `run` (on a thread spawned as the
/// relay spawns it), its upstream a connection to `to`.
fn intercept(
    interceptor: &Arc<Interceptor>,
    session: Session,
    to: std::net::SocketAddr,
) -> (TcpStream, JoinHandle<Outcome>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let agent = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (client, _) = listener.accept().unwrap();
    let upstream = TcpStream::connect(to).unwrap();
    let interceptor = interceptor.clone();
    let handle = std::thread::Builder::new()
        .stack_size(
            std::env::var("KEEL_TEST_TLS_STACK")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(INTERCEPT_STACK_SIZE),
        )
        .spawn(move || interceptor.run(client, upstream, &session))
        .unwrap();
    agent
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    (agent, handle)
}

/// A TLS client over `stream` trusting only `ca_pem`, for `HOST`, offering `alpn`.
fn client(
    stream: TcpStream,
    ca_pem: &str,
    alpn: &[&[u8]],
) -> StreamOwned<ClientConnection, TcpStream> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let conn =
        ClientConnection::new(Arc::new(config), ServerName::try_from(HOST).unwrap()).unwrap();
    StreamOwned::new(conn, stream)
}

fn get(tls: &mut StreamOwned<ClientConnection, TcpStream>, request: &str) -> (String, String) {
    tls.write_all(request.as_bytes()).unwrap();
    let (head, body) = read_message(tls).expect("a response");
    (head, String::from_utf8(body).unwrap())
}

fn close(mut tls: StreamOwned<ClientConnection, TcpStream>) {
    tls.conn.send_close_notify();
    let _ = tls.flush();
    let _ = tls.sock.shutdown(std::net::Shutdown::Write);
    let mut rest = Vec::new();
    let _ = tls.read_to_end(&mut rest);
}

#[test]
fn the_upstream_gets_the_value_on_every_request_of_a_kept_alive_connection() {
    let dir = TempDir::new("swap");
    let (test_ca_pem, test_ca) = test_ca("test upstream CA");
    let server = server(&test_ca);
    let (interceptor, keel_ca) = interceptor(&dir, &test_ca_pem);
    let (agent, run) = intercept(&interceptor, session(vec![swap(Ok(VALUE))]), server.addr);
    let mut tls = client(agent, &keel_ca, &[b"h2", b"http/1.1"]);

    let first =
        format!("GET /v1/one HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {KEY}\r\n\r\n");
    assert!(
        first.contains(KEY) && !first.contains(VALUE),
        "the agent holds the placeholder"
    );
    let (head, body) = get(&mut tls, &first);
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert_eq!(body, "served /v1/one (0 body bytes)");
    let seen = server.heads.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        seen.contains(&format!("Authorization: Bearer {VALUE}\r\n")),
        "{seen}"
    );
    assert!(!seen.contains(KEY));

    // ALPN: offered h2 and http/1.1, the agent got http/1.1.
    assert_eq!(tls.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    // The leaf it saw is for the host, issued by keel's CA (the client trusts nothing else).
    let leaf = tls.conn.peer_certificates().unwrap()[0].to_vec();
    assert!(contains(&leaf, HOST.as_bytes()), "the leaf names {HOST}");
    assert!(
        contains(&leaf, b"keel sandbox CA"),
        "the leaf's issuer is keel's CA"
    );

    // The second request on the same connection, with a body: swapped too.
    let second = format!(
        "POST /v1/two HTTP/1.1\r\nHost: {HOST}\r\nx-api-key: {KEY}\r\ncontent-length: 11\r\n\r\nhello world"
    );
    let (_, body) = get(&mut tls, &second);
    assert_eq!(body, "served /v1/two (11 body bytes)");
    let seen = server.heads.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(seen.contains(&format!("x-api-key: {VALUE}\r\n")), "{seen}");

    close(tls);
    let outcome = run.join().unwrap();
    assert_eq!(outcome.error, None);
    assert_eq!((outcome.requests, outcome.swapped), (2, 2));
    assert!(outcome.misdirected.is_empty());
    assert_eq!(outcome.bytes_out, (first.len() + second.len()) as u64);
    assert!(outcome.bytes_in > 0);
    assert!(!format!("{outcome:?}").contains(VALUE));
}

#[test]
fn a_large_body_streams_both_ways() {
    let dir = TempDir::new("large");
    let (test_ca_pem, test_ca) = test_ca("test upstream CA");
    let server = server(&test_ca);
    let (interceptor, keel_ca) = interceptor(&dir, &test_ca_pem);
    let (agent, run) = intercept(&interceptor, session(vec![swap(Ok(VALUE))]), server.addr);
    let mut tls = client(agent, &keel_ca, &[b"http/1.1"]);
    let body = "x".repeat(4 << 20);
    let request = format!(
        "PUT /big HTTP/1.1\r\nHost: {HOST}\r\nx-api-key: {KEY}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let (_, answer) = get(&mut tls, &request);
    assert_eq!(answer, format!("served /big ({} body bytes)", body.len()));
    close(tls);
    let outcome = run.join().unwrap();
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.swapped, 1);
}

#[test]
fn an_upstream_whose_certificate_does_not_verify_is_a_502() {
    let dir = TempDir::new("untrusted");
    let (_, untrusted) = test_ca("a CA nobody trusts");
    let server = server(&untrusted);
    let (trusted_pem, _) = test_ca("the CA keel.ron names");
    let (interceptor, keel_ca) = interceptor(&dir, &trusted_pem);
    let (agent, run) = intercept(&interceptor, session(vec![swap(Ok(VALUE))]), server.addr);
    let mut tls = client(agent, &keel_ca, &[b"http/1.1"]);
    let (head, body) = get(
        &mut tls,
        &format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {KEY}\r\n\r\n"),
    );
    assert!(head.starts_with("HTTP/1.1 502 Bad Gateway"), "{head}");
    assert!(
        body.contains(&format!(
            "could not open a verified TLS connection to {HOST}"
        )),
        "{body}"
    );
    assert!(
        body.contains("UnknownIssuer") || body.contains("invalid peer certificate"),
        "{body}"
    );
    close(tls);
    let outcome = run.join().unwrap();
    let error = outcome.error.expect("the outcome says why");
    assert!(error.contains("502") && error.contains(HOST), "{error}");
    assert!(
        server.heads.try_recv().is_err(),
        "nothing reached the unverified upstream"
    );
}

#[test]
fn another_secrets_placeholder_is_forwarded_and_reported() {
    let dir = TempDir::new("misdirected");
    let (test_ca_pem, test_ca) = test_ca("test upstream CA");
    let server = server(&test_ca);
    let (interceptor, keel_ca) = interceptor(&dir, &test_ca_pem);
    let (agent, run) = intercept(&interceptor, session(vec![]), server.addr);
    let mut tls = client(agent, &keel_ca, &[b"http/1.1"]);
    let (head, _) = get(
        &mut tls,
        &format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {OTHER}\r\n\r\n"),
    );
    assert!(head.starts_with("HTTP/1.1 200"));
    let seen = server.heads.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        seen.contains(&format!("Bearer {OTHER}\r\n")),
        "forwarded as it is: {seen}"
    );
    close(tls);
    let outcome = run.join().unwrap();
    assert_eq!(outcome.misdirected, vec!["OTHER_KEY".to_string()]);
    assert_eq!(outcome.swapped, 0);
}

#[test]
fn a_secret_that_could_not_be_read_is_a_502_naming_it() {
    let dir = TempDir::new("unreadable");
    let (test_ca_pem, test_ca) = test_ca("test upstream CA");
    let server = server(&test_ca);
    let (interceptor, keel_ca) = interceptor(&dir, &test_ca_pem);
    let why = "/etc/keel/secrets/anthropic: mode 0644: chmod 600 /etc/keel/secrets/anthropic";
    let (agent, run) = intercept(&interceptor, session(vec![swap(Err(why))]), server.addr);
    let mut tls = client(agent, &keel_ca, &[b"http/1.1"]);
    let (head, body) = get(
        &mut tls,
        &format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nx-api-key: {KEY}\r\n\r\n"),
    );
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    assert!(
        body.contains("ANTHROPIC_API_KEY could not be read") && body.contains(why),
        "{body}"
    );
    close(tls);
    let outcome = run.join().unwrap();
    assert!(outcome.error.unwrap().contains("ANTHROPIC_API_KEY"));
    assert!(server.heads.try_recv().is_err());
}

#[test]
fn a_client_offering_only_h2_fails_its_handshake_clearly() {
    let dir = TempDir::new("h2");
    let (test_ca_pem, test_ca) = test_ca("test upstream CA");
    let server = server(&test_ca);
    let (interceptor, keel_ca) = interceptor(&dir, &test_ca_pem);
    let (agent, run) = intercept(&interceptor, session(vec![swap(Ok(VALUE))]), server.addr);
    let mut tls = client(agent, &keel_ca, &[b"h2"]);
    let error = tls.write_all(b"x").and_then(|_| tls.flush()).and_then(|_| {
        let mut buf = [0u8; 16];
        tls.read(&mut buf).map(|_| ())
    });
    let error = error.expect_err("no common protocol");
    assert!(
        error.to_string().contains("NoApplicationProtocol"),
        "the client hears why: {error}"
    );
    let outcome = run.join().unwrap();
    let error = outcome.error.unwrap();
    assert!(error.contains("TLS with the agent"), "{error}");
    assert!(error.contains("only http/1.1"), "{error}");
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A real client (curl, OpenSSL, offering h2 and http/1.1 by ALPN) through the interceptor:
/// it trusts keel's CA only (`--cacert`), reaches `HOST` by `--resolve`, and two requests on
/// one connection both reach the server with the value.
#[test]
fn curl_through_the_interceptor() {
    let dir = TempDir::new("curl");
    let (test_ca_pem, test_ca) = test_ca("test upstream CA");
    let server = server(&test_ca);
    let (interceptor, keel_ca) = interceptor(&dir, &test_ca_pem);
    let ca_file = dir.0.join("keel-ca.pem");
    std::fs::write(&ca_file, &keel_ca).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (done_tx, done) = mpsc::channel();
    std::thread::spawn(move || {
        let (client, _) = listener.accept().unwrap();
        let upstream = TcpStream::connect(server.addr).unwrap();
        let outcome = std::thread::Builder::new()
            .stack_size(INTERCEPT_STACK_SIZE)
            .spawn(move || interceptor.run(client, upstream, &session(vec![swap(Ok(VALUE))])))
            .unwrap()
            .join()
            .unwrap();
        let _ = done_tx.send((outcome, server.heads));
    });
    let url = format!("https://{HOST}:{port}/v1/curl");
    let out = std::process::Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "20", "--cacert"])
        .arg(&ca_file)
        .args(["--resolve", &format!("{HOST}:{port}:127.0.0.1")])
        .args(["-H", &format!("Authorization: Bearer {KEY}")])
        .args(["--write-out", " %{http_version}\\n", &url, &url])
        .output()
        .expect("curl (Debian's package curl) runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.matches("served /v1/curl (0 body bytes) 1.1").count(),
        2,
        "two answers over HTTP/1.1: {stdout}"
    );
    let (outcome, heads) = done.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(outcome.error, None);
    assert_eq!(
        (outcome.requests, outcome.swapped),
        (2, 2),
        "one connection, both swapped"
    );
    for _ in 0..2 {
        let seen = heads.recv_timeout(Duration::from_secs(1)).unwrap();
        assert!(
            seen.contains(&format!("Authorization: Bearer {VALUE}\r\n")),
            "{seen}"
        );
    }
}

#[test]
fn after_an_upgrade_bytes_pass_through_raw() {
    let dir = TempDir::new("upgrade");
    let (test_ca_pem, test_ca) = test_ca("test upstream CA");
    let server = server(&test_ca);
    let (interceptor, keel_ca) = interceptor(&dir, &test_ca_pem);
    let (agent, run) = intercept(&interceptor, session(vec![swap(Ok(VALUE))]), server.addr);
    let mut tls = client(agent, &keel_ca, &[b"http/1.1"]);
    let upgrade = format!(
        "GET /ws HTTP/1.1\r\nHost: {HOST}\r\nUpgrade: echo\r\nConnection: Upgrade\r\nAuthorization: Bearer {KEY}\r\n\r\n"
    );
    tls.write_all(upgrade.as_bytes()).unwrap();
    let (head, _) = read_message(&mut tls).unwrap();
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let seen = server.heads.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        seen.contains(&format!("Bearer {VALUE}\r\n")),
        "the upgrade's head is swapped"
    );
    // Raw bytes after it, a head-like text with the placeholder among them: echoed unchanged.
    let raw = format!("\x01\x02GET / HTTP/1.1\r\nx-api-key: {KEY}\r\n\r\n");
    tls.write_all(raw.as_bytes()).unwrap();
    let mut echoed = vec![0u8; raw.len()];
    tls.read_exact(&mut echoed).unwrap();
    assert_eq!(String::from_utf8(echoed).unwrap(), raw);
    close(tls);
    let outcome = run.join().unwrap();
    assert_eq!(outcome.error, None);
    assert_eq!((outcome.requests, outcome.swapped), (1, 1));
}

#[test]
fn the_answer_still_comes_after_the_agent_closes_its_side() {
    let dir = TempDir::new("half-close");
    let (test_ca_pem, test_ca) = test_ca("test upstream CA");
    let server = server(&test_ca);
    let (interceptor, keel_ca) = interceptor(&dir, &test_ca_pem);
    let (agent, run) = intercept(&interceptor, session(vec![swap(Ok(VALUE))]), server.addr);
    let mut tls = client(agent, &keel_ca, &[b"http/1.1"]);
    tls.write_all(
        format!("GET /last HTTP/1.1\r\nHost: {HOST}\r\nx-api-key: {KEY}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    // close_notify and a TCP half-close right after the request.
    tls.conn.send_close_notify();
    tls.flush().unwrap();
    tls.sock.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let _ = tls.read_to_end(&mut rest);
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        rest.starts_with("HTTP/1.1 200 OK") && rest.ends_with("served /last (0 body bytes)"),
        "{rest}"
    );
    let outcome = run.join().unwrap();
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.swapped, 1);
}

#[test]
fn a_connection_without_a_byte_ends_after_the_idle_timeout() {
    let dir = TempDir::new("idle");
    let (test_ca_pem, test_ca) = test_ca("test upstream CA");
    let server = server(&test_ca);
    let trust = dir.0.join("upstream-ca.pem");
    std::fs::write(&trust, &test_ca_pem).unwrap();
    let mut interceptor = Interceptor::new(Authority::open(&dir.0).unwrap(), &[trust]).unwrap();
    interceptor.set_idle_timeout(Duration::from_millis(300));
    let interceptor = Arc::new(interceptor);
    // An agent that connects and never says hello.
    let t = std::time::Instant::now();
    let (_agent, run) = intercept(&interceptor, session(vec![]), server.addr);
    let outcome = run.join().unwrap();
    let took = t.elapsed();
    let error = outcome.error.expect("ended by the timeout");
    assert!(error.contains("no byte either way for 0.3 s"), "{error}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
}
