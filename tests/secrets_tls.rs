//! Secrets end to end, as root on the real kernel, through the real daemon and its relay: a
//! unit's `secrets` reach the agent as placeholders only; TLS to a secret's host is
//! terminated by the relay with the state directory's CA (trusted inside the sandbox through
//! the bundle bound over the distribution's) and the placeholder in the request's headers is
//! swapped for the value, read from its file for each new connection (rotation); the
//! upstream's own certificate is verified against a CA `keel.ron`'s `network.trust` names. A
//! placeholder sent to another allowed host goes as it is and is journaled as
//! `secret-misdirected`; TLS to another host passes through untouched (its chain is the
//! upstream's own). Nothing the agent can read holds the value.
//!
//! Every server listens on the host's 127.0.0.1; the test's DNS server maps the test's
//! names to it.

// The fixture's `pre_exec` (tests/network_relay_support) is unsafe by its nature; this file
// uses only its DNS server.
#![allow(unsafe_code)]

mod common;
mod network_relay_support;

use common::sandbox::HostDir;
use common::*;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The test's own CA, which signs its upstreams' certificates (`keel.ron` trusts it).
struct TestCa {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

fn test_ca() -> TestCa {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    (params.distinguished_name).push(rcgen::DnType::CommonName, "keel test upstream CA");
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).unwrap();
    TestCa {
        pem: cert.pem(),
        issuer: rcgen::Issuer::new(params, key),
    }
}

/// A TLS server config for `name`, its certificate signed by `ca`.
fn server_config(ca: &TestCa, name: &str) -> Arc<rustls::ServerConfig> {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    Arc::new(config)
}

/// The request heads a server received, in order.
type Heads = Arc<Mutex<Vec<String>>>;

/// Serve HTTP/1.1 on `stream` (kept alive): each request's head recorded, answered `ok`.
fn serve(mut stream: impl Read + Write, heads: &Heads) {
    loop {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match stream.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        heads
            .lock()
            .unwrap()
            .push(String::from_utf8_lossy(&head).into_owned());
        let answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok";
        if stream.write_all(answer.as_bytes()).is_err() || stream.flush().is_err() {
            return;
        }
    }
}

/// An HTTPS server on the host's loopback (`config`'s certificate): its port and the heads
/// it received.
fn https_server(config: Arc<rustls::ServerConfig>) -> (u16, Heads) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = Heads::default();
    let seen = Arc::clone(&heads);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (config, seen) = (Arc::clone(&config), Arc::clone(&seen));
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                let conn = rustls::ServerConnection::new(config).unwrap();
                serve(rustls::StreamOwned::new(conn, stream), &seen);
            });
        }
    });
    (port, heads)
}

/// A plain HTTP server on the host's loopback: its port and the heads it received.
fn http_server() -> (u16, Heads) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = Heads::default();
    let seen = Arc::clone(&heads);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                serve(stream, &seen)
            });
        }
    });
    (port, heads)
}

/// `sk-test-` and 32 random hex digits: a value whose shape the agent can search for
/// without holding it.
fn test_value() -> String {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("sk-test-{hex}")
}

/// `path` holds `value`, 0600 (written aside, then renamed over: a rotation as an operator
/// does it).
fn write_secret(path: &Path, value: &str) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, format!("{value}\n")).unwrap();
    std::fs::set_permissions(&aside, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

fn placeholder_in(text: &str) -> Option<String> {
    let at = text.find("keel-secret-")?;
    let candidate = text.get(at..at + 44)?;
    let hex = &candidate[12..];
    (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| candidate.to_string())
}

/// Every file under `dir` (recursively) whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            found.extend(files_holding(&path, needle));
        } else if kind.is_file() {
            let bytes = std::fs::read(&path).unwrap_or_default();
            if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[test]
fn the_agent_holds_a_placeholder_and_only_its_secrets_host_gets_the_value() {
    if !require_root("the_agent_holds_a_placeholder_and_only_its_secrets_host_gets_the_value") {
        return;
    }
    let ca = test_ca();
    let (api_port, api_heads) = https_server(server_config(&ca, "api.secret.test"));
    let (pass_port, pass_heads) = https_server(server_config(&ca, "pass.secret.test"));
    let (other_port, other_heads) = http_server();
    let resolver = network_relay_support::dns_server(&[
        ("api.secret.test", Ipv4Addr::LOCALHOST),
        ("pass.secret.test", Ipv4Addr::LOCALHOST),
        ("other.secret.test", Ipv4Addr::LOCALHOST),
    ]);
    // The agent sees the host's /var/tmp (read-only): the secret file is there, root's and
    // 0600, which the agent (root of its own user namespace only) cannot read; the test CA
    // for its pass-through check; the marker it waits for.
    let host = HostDir::new("secrets-tls");
    let secret_file = host.0.join("api-key");
    let (value, rotated, from_env) = (test_value(), test_value(), test_value());
    write_secret(&secret_file, &value);
    let test_ca_file = host.0.join("test-ca.pem");
    std::fs::write(&test_ca_file, &ca.pem).unwrap();
    let marker = host.0.join("rotated");
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 1;

    let mut d = Daemon::prepare("secrets-tls");
    std::fs::create_dir_all(d.state()).unwrap();
    std::fs::write(
        d.state().join("keel.ron"),
        format!(
            r#"Config(network: Network(resolver: Some("{resolver}"), trust: ["{}"]))"#,
            test_ca_file.display()
        ),
    )
    .unwrap();
    // A second secret, from keel's own environment (KEEL_SECRET_*: never in a shim's or an
    // agent's environment); the agent's OTHER_KEY is a placeholder.
    d.env
        .push(("KEEL_SECRET_SOURCE_VAR".into(), from_env.clone()));
    d.spawn();

    // Search everything the agent can read that changed since the test began (the value is
    // new: no older file can hold it), and keel's own files inside in full, for anything of
    // the value's shape; and every process's environment and command line it can read.
    let shape = "sk-test-[0-9a-f]{32}";
    let script = format!(
        r#"
        echo "env $API_KEY"
        echo "cafile $SSL_CERT_FILE $NODE_EXTRA_CA_CERTS $REQUESTS_CA_BUNDLE $CURL_CA_BUNDLE $GIT_SSL_CAINFO"
        echo "source [$KEEL_SECRET_SOURCE_VAR]"
        echo "api $(curl -s -m 10 --noproxy '*' -H "Authorization: Bearer $API_KEY" -H "x-other: $OTHER_KEY" https://api.secret.test:{api_port}/one || echo failed)"
        echo "proxied $(curl -s -m 10 -H "x-api-key: $API_KEY" https://api.secret.test:{api_port}/proxied || echo failed)"
        echo "other $(curl -s -m 10 --noproxy '*' -H "x-api-key: $API_KEY" http://other.secret.test:{other_port}/ || echo failed)"
        echo "pass $(curl -s -m 10 --noproxy '*' --cacert {ca} https://pass.secret.test:{pass_port}/ || echo failed)"
        if curl -s -m 10 --noproxy '*' -o /dev/null https://pass.secret.test:{pass_port}/; then echo "pass-with-keel-ca trusted"; else echo "pass-with-keel-ca untrusted"; fi
        if cat {secret} >/dev/null 2>&1; then echo "secret file readable"; else echo "secret file unreadable"; fi
        n=0; while [ ! -e {marker} ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done
        echo "api2 $(curl -s -m 10 --noproxy '*' -H "Authorization: Bearer $API_KEY" https://api.secret.test:{api_port}/two || echo failed)"
        mkdir -p $HOME/cache && env > $HOME/cache/env && cp "$SSL_CERT_FILE" /tmp/bundle
        prune='( -path /proc -o -path /sys -o -path /dev -o -path /usr -o -path /root/.rustup -o -path /root/.cargo )'
        searched=$(find / $prune -prune -o -type f -newermt @{since} -readable -print 2>/dev/null | wc -l)
        found=$(find / $prune -prune -o -type f -newermt @{since} -readable -print0 2>/dev/null | xargs -0 -r grep -l -s -E '{shape}')
        inside=$(grep -r -l -s -E '{shape}' /tmp $HOME /run /etc "$PWD")
        procs=$(grep -l -s -E '{shape}' /proc/[0-9]*/environ /proc/[0-9]*/cmdline)
        echo "searched $searched"
        echo "found [$found$inside$procs]"
        "#,
        ca = test_ca_file.display(),
        secret = secret_file.display(),
        marker = marker.display(),
    );
    let unit = format!(
        r#"Unit(command: ["/bin/bash", "-c", {script:?}], restart: Never,
            secrets: {{"API_KEY": Secret(file: "{secret}", hosts: ["api.secret.test"]),
                "OTHER_KEY": Secret(env: "KEEL_SECRET_SOURCE_VAR", hosts: ["api.secret.test"], headers: ["x-other"])}},
            sandbox: Sandbox(network: Allow(["api.secret.test:{api_port}", "pass.secret.test:{pass_port}",
                "other.secret.test:{other_port}", "127.0.0.1:{api_port}", "127.0.0.1:{pass_port}",
                "127.0.0.1:{other_port}"])))"#,
        secret = secret_file.display(),
    );
    d.write_unit("agent", &unit);

    // The first two requests carried the value: rotate the file; the next connection carries
    // the new one.
    let deadline = Instant::now() + Duration::from_secs(60);
    while api_heads.lock().unwrap().len() < 2 {
        let state = d.task("agent").map(|t| t["state"].clone());
        assert!(
            Instant::now() < deadline
                && !matches!(
                    state.as_ref().and_then(|s| s.as_str()),
                    Some("failed" | "succeeded")
                ),
            "no request reached the secret's host: {state:?}\n{}",
            d.daemon_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    write_secret(&secret_file, &rotated);
    std::fs::write(&marker, "").unwrap();
    let task = d.wait_state("agent", "succeeded", Duration::from_secs(120));
    let out = std::fs::read_to_string(d.task_dir("agent").join("run/output.log")).unwrap();
    let relay_log = std::fs::read_to_string(d.task_dir("agent").join("run/network/relay.log"))
        .unwrap_or_default();
    let context = format!(
        "{task}\n{out}\nrelay: {relay_log}\ndaemon: {}",
        d.daemon_log()
    );

    // The agent's environment: the placeholder, and the CA variables naming the bundle.
    let placeholder = placeholder_in(common::sandbox::line(&out, "env ")).expect(&context);
    let cafile = common::sandbox::line(&out, "cafile ");
    let bundle = cafile.split(' ').next().unwrap();
    assert!(bundle.starts_with("/etc/"), "{context}");
    assert_eq!(cafile, [bundle; 5].join(" "), "{context}");
    for expected in [
        "api ok",
        "proxied ok",
        "other ok",
        "pass ok",
        "pass-with-keel-ca untrusted",
        "secret file unreadable",
        "source []",
        "api2 ok",
        "found []",
    ] {
        assert!(
            out.lines().any(|l| l.trim() == expected),
            "no {expected:?}: {context}"
        );
    }
    let searched: u64 = common::sandbox::line(&out, "searched ").parse().unwrap();
    assert!(
        searched > 3,
        "the search saw the agent's own files: {context}"
    );

    // The secret's host got the value (the rotated one on the connection after the rotation),
    // never the placeholder.
    let api = api_heads.lock().unwrap().clone();
    assert_eq!(api.len(), 3, "{api:?}");
    let header = |head: &str, name: &str| {
        head.lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    assert_eq!(header(&api[0], "authorization"), format!("Bearer {value}"));
    assert_eq!(header(&api[0], "x-other"), from_env);
    assert_eq!(header(&api[1], "x-api-key"), value);
    assert_eq!(
        header(&api[2], "authorization"),
        format!("Bearer {rotated}")
    );
    // Another allowed host: the placeholder only, and on the record.
    let other = other_heads.lock().unwrap().clone();
    assert_eq!(other.len(), 1, "{other:?}");
    assert_eq!(header(&other[0], "x-api-key"), placeholder);
    let misdirected: Vec<String> = d
        .events(Some("agent"))
        .iter()
        .filter(|e| e["event"] == "secret-misdirected")
        .map(|e| e["detail"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        misdirected.iter().any(
            |m| m.contains("API_KEY") && m.contains(&format!("other.secret.test:{other_port}"))
        ),
        "{misdirected:?}\n{context}"
    );
    assert_eq!(pass_heads.lock().unwrap().len(), 1);
    // Everything it did was allowed: no refusal (the resolver's own replies are none).
    let denied: Vec<String> = d
        .events(Some("agent"))
        .iter()
        .filter(|e| e["event"] == "net-denied")
        .map(|e| e["detail"].to_string())
        .collect();
    assert_eq!(denied, Vec::<String>::new(), "{context}");

    // Nowhere on keel's side either: status, the journal, the logs, the state directory.
    let status = stdout_of(&d.keel(&["status", "agent", "--json"]));
    for secret in [&value, &rotated, &from_env] {
        assert!(!status.contains(secret.as_str()));
        assert!(!out.contains(secret.as_str()));
        assert_eq!(files_holding(&d.scratch.dir, secret), Vec::<String>::new());
    }
    drop(host);
}
