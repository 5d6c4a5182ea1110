//! The intercepting path of secret interception (`keel::network::tls::Interceptor::run`,
//! issue 20) against pass-through, interleaved in one run, in process, on loopback.
//!
//! One loopback HTTPS server (rustls, keep-alive, a leaf from a CA the bench makes with
//! rcgen, for `api.secret.test`) answers every request `200` with a 64-byte body. Two paths
//! reach it, each with one hop:
//! - intercepting: the client trusts keel's CA (an `Authority` in a temporary state root);
//!   each connection to a loopback listener is given, with a new TCP connection to the
//!   server, to `Interceptor::run` on its own thread (`INTERCEPT_STACK_SIZE`), as the relay
//!   does: keel terminates the client's TLS, swaps the placeholder in `Authorization`, and
//!   opens verified TLS to the server (its CA passed as `trust`);
//! - pass-through: the client trusts the server's CA and speaks TLS to it through a plain TCP
//!   forwarder (two threads copying, one per direction), as the relay carries a host that is
//!   not a secret's.
//!
//! 1. request latency on a kept-alive connection: ROUNDS small requests on one connection of
//!    each path, interleaved (the order alternating): median, p99 and the added ms (goal: < 2
//!    ms added per request);
//! 2. the handshake's cost: HANDSHAKES rounds of a new connection (TCP connect, the TLS
//!    handshake(s), one request) until its first response, both paths, interleaved. The
//!    client resumes no session (each is a full handshake, as a new agent process makes);
//!    keel's own client side to the upstream resumes as it does in use.
//!
//! `cargo run --release --example tls_bench -- [ROUNDS] [HANDSHAKES]` (no root needed).

use keel::network::tls::{Authority, Interceptor, Session, Swap, INTERCEPT_STACK_SIZE};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, StreamOwned};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const HOST: &str = "api.secret.test";
const KEY: &str = "keel-secret-0123456789abcdef0123456789abcdef";
const VALUE: &str = "sk-ant-bench-value-0123456789";
/// Requests the server got with the value in place of the placeholder.
static SWAPPED_SEEN: AtomicU64 = AtomicU64::new(0);

type Client = StreamOwned<ClientConnection, TcpStream>;

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(2000);
    let handshakes: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(200);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!("(load average at the start: {})", load.join(" "));

    let dir = std::env::temp_dir().join(format!("keel-tls-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let (server_ca_pem, server_ca) = test_ca();
    let server = https_server(&server_ca);
    let trust = dir.join("upstream-ca.pem");
    std::fs::write(&trust, &server_ca_pem).expect("the trust file");
    let authority = Authority::open(&dir).expect("keel's CA");
    let keel_ca_pem = authority.cert_pem().to_string();
    let interceptor = Arc::new(Interceptor::new(authority, &[trust]).expect("an interceptor"));
    let intercepting = intercept_listener(interceptor, server);
    let passing = forward_listener(server);
    let keel_client = client_config(&keel_ca_pem, true);
    let direct_client = client_config(&server_ca_pem, true);

    // 1. kept-alive requests.
    let mut through = connect(intercepting, &keel_client);
    let mut direct = connect(passing, &direct_client);
    for _ in 0..50 {
        request(&mut through);
        request(&mut direct);
    }
    let (mut t, mut d) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for i in 0..rounds {
        if i % 2 == 0 {
            d.push(request(&mut direct));
        }
        t.push(request(&mut through));
        if i % 2 == 1 {
            d.push(request(&mut direct));
        }
    }
    let (tm, tp) = median_p99(&mut t);
    let (dm, dp) = median_p99(&mut d);
    println!("a small request on a kept-alive connection, {rounds} rounds each, interleaved (median / p99):");
    println!(
        "  pass-through (TCP forwarder)   {dm:8.3} / {tp_d:8.3} ms",
        tp_d = dp
    );
    println!(
        "  intercepting (Interceptor)     {tm:8.3} / {tp:8.3} ms   added {:.3} / {:.3} ms (goal < 2 ms)",
        tm - dm,
        tp - dp
    );

    // 2. new connections.
    let keel_fresh = client_config(&keel_ca_pem, false);
    let direct_fresh = client_config(&server_ca_pem, false);
    for _ in 0..10 {
        first_response(intercepting, &keel_fresh);
        first_response(passing, &direct_fresh);
    }
    let (mut ht, mut hd) = (Vec::new(), Vec::new());
    for i in 0..handshakes {
        if i % 2 == 0 {
            hd.push(first_response(passing, &direct_fresh));
        }
        ht.push(first_response(intercepting, &keel_fresh));
        if i % 2 == 1 {
            hd.push(first_response(passing, &direct_fresh));
        }
    }
    let (htm, htp) = median_p99(&mut ht);
    let (hdm, hdp) = median_p99(&mut hd);
    println!("a new connection until its first response (full client handshakes), {handshakes} rounds each (median / p99):");
    println!("  pass-through                   {hdm:8.3} / {hdp:8.3} ms");
    println!(
        "  intercepting                   {htm:8.3} / {htp:8.3} ms   added {:.3} / {:.3} ms",
        htm - hdm,
        htp - hdp
    );
    close(through);
    close(direct);
    // Every request through the interceptor reached the server with the value.
    let through_requests = (50 + rounds + 10 + handshakes) as u64;
    let seen = SWAPPED_SEEN.load(Ordering::Relaxed);
    assert_eq!(
        seen, through_requests,
        "requests swapped as the server saw them"
    );
    println!(
        "(the server saw the value in all {seen} intercepted requests, in none of the others)"
    );
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "figures: {{\"keepalive_pass_median_ms\": {dm:.4}, \"keepalive_pass_p99_ms\": {dp:.4}, \
         \"keepalive_intercept_median_ms\": {tm:.4}, \"keepalive_intercept_p99_ms\": {tp:.4}, \
         \"handshake_pass_median_ms\": {hdm:.4}, \"handshake_pass_p99_ms\": {hdp:.4}, \
         \"handshake_intercept_median_ms\": {htm:.4}, \"handshake_intercept_p99_ms\": {htp:.4}}}"
    );
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn test_ca() -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "bench upstream CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let cert = params.self_signed(&key).expect("the CA");
    (cert.pem(), Issuer::new(params, key))
}

/// The HTTPS server: a thread per connection, keep-alive, `200` with 64 bytes to each request.
fn https_server(issuer: &Issuer<'static, KeyPair>) -> SocketAddr {
    let key = KeyPair::generate().expect("a key");
    let params = CertificateParams::new(vec![HOST.to_string()]).expect("params");
    let cert = params.signed_by(&key, issuer).expect("the leaf");
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .expect("the server's certificate");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").expect("a listener");
    let addr = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let conn = rustls::ServerConnection::new(config).expect("a connection");
                let mut tls = StreamOwned::new(conn, stream);
                let body = "x".repeat(64);
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let mut buf = Vec::new();
                while let Some(head) = read_message(&mut tls, &mut buf) {
                    if head.contains(&format!("Bearer {VALUE}")) {
                        SWAPPED_SEEN.fetch_add(1, Ordering::Relaxed);
                    }
                    if tls.write_all(response.as_bytes()).is_err() {
                        return;
                    }
                }
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    addr
}

/// The intercepting path's listener: each connection to `Interceptor::run` on its own thread.
fn intercept_listener(interceptor: Arc<Interceptor>, server: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a listener");
    let addr = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let upstream = TcpStream::connect(server).expect("the server");
            let interceptor = interceptor.clone();
            let session = Session {
                host: HOST.into(),
                swaps: vec![Swap {
                    name: "ANTHROPIC_API_KEY".into(),
                    placeholder: KEY.into(),
                    value: Ok(VALUE.as_bytes().to_vec()),
                    headers: keel::secrets::DEFAULT_HEADERS.map(String::from).to_vec(),
                }],
                others: vec![],
            };
            std::thread::Builder::new()
                .stack_size(INTERCEPT_STACK_SIZE)
                .spawn(move || {
                    let outcome = interceptor.run(client, upstream, &session);
                    if let Some(error) = outcome.error {
                        eprintln!("intercept: {error}");
                    }
                })
                .expect("a thread");
        }
    });
    addr
}

/// The pass-through path's listener: a plain TCP forwarder, two copying threads per connection.
fn forward_listener(server: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a listener");
    let addr = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let upstream = TcpStream::connect(server).expect("the server");
            for (mut from, mut to) in [
                (
                    client.try_clone().expect("a clone"),
                    upstream.try_clone().expect("a clone"),
                ),
                (upstream, client),
            ] {
                let _ = from.set_nodelay(true);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(Shutdown::Write);
                });
            }
        }
    });
    addr
}

fn client_config(ca_pem: &str, resume: bool) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("a PEM"))
        .expect("a root");
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if !resume {
        config.resumption = rustls::client::Resumption::disabled();
    }
    Arc::new(config)
}

fn connect(to: SocketAddr, config: &Arc<ClientConfig>) -> Client {
    let stream = TcpStream::connect(to).expect("a connection");
    let _ = stream.set_nodelay(true);
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a timeout");
    let name = ServerName::try_from(HOST).expect("a name");
    let conn = ClientConnection::new(config.clone(), name).expect("a client");
    StreamOwned::new(conn, stream)
}

/// One request and its whole response: how long it took, ms.
fn request(client: &mut Client) -> f64 {
    let t = Instant::now();
    let request =
        format!("GET /v1/messages HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {KEY}\r\n\r\n");
    client.write_all(request.as_bytes()).expect("the request");
    let mut buf = Vec::new();
    read_message(client, &mut buf).expect("a response");
    t.elapsed().as_secs_f64() * 1000.0
}

/// A new connection and its first response, ms; the connection is then closed.
fn first_response(to: SocketAddr, config: &Arc<ClientConfig>) -> f64 {
    let t = Instant::now();
    let mut client = connect(to, config);
    request(&mut client);
    let took = t.elapsed().as_secs_f64() * 1000.0;
    close(client);
    took
}

fn close(mut client: Client) {
    client.conn.send_close_notify();
    let _ = client.flush();
    let _ = client.sock.shutdown(Shutdown::Write);
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest);
}

/// One HTTP message (head and Content-Length body) read through `buf`, its head; `None` at
/// the stream's end.
fn read_message(stream: &mut impl Read, buf: &mut Vec<u8>) -> Option<String> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let length: usize = (head.to_ascii_lowercase())
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap_or(0));
            if buf.len() >= end + 4 + length {
                buf.drain(..end + 4 + length);
                return Some(head);
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn median_p99(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}
