use super::*;

const KEY: &str = "keel-secret-0123456789abcdef0123456789abcdef";
const OTHER: &str = "keel-secret-ffffffffffffffffffffffffffffffff";
const BROKEN: &str = "keel-secret-eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee";

/// The Host header of a request that names the session's host.
const H: &str = "Host: api.secret.test\r\n";

fn default_headers() -> Vec<String> {
    crate::secrets::DEFAULT_HEADERS.map(String::from).to_vec()
}

fn session() -> Session {
    Session {
        host: "api.secret.test".into(),
        swaps: vec![Swap {
            name: "API_KEY".into(),
            placeholder: KEY.into(),
            value: Ok(b"sk-real-value".to_vec()),
            headers: default_headers(),
        }],
        others: vec![(OTHER.into(), "OTHER_KEY".into())],
    }
}

/// Feed `input` in pieces of `piece` bytes; what went upstream, or the refusal.
fn feed<'s>(
    session: &'s Session,
    input: &[u8],
    piece: usize,
) -> (Result<Vec<u8>, Refusal>, Rewriter<'s>) {
    let mut rewriter = Rewriter::new(session);
    let mut out = Vec::new();
    for part in input.chunks(piece.max(1)) {
        if let Err(refusal) = rewriter.feed(part, &mut out) {
            return (Err(refusal), rewriter);
        }
    }
    (Ok(out), rewriter)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_placeholder_in_a_header_value_becomes_the_value() {
    let s = session();
    let input = format!("GET /v1 HTTP/1.1\r\nHost: api.secret.test\r\nAuthorization: Bearer {KEY}\r\nx-api-key: {KEY}\r\n\r\n");
    let (out, r) = feed(&s, input.as_bytes(), 4096);
    assert_eq!(
        text(&out.unwrap()),
        "GET /v1 HTTP/1.1\r\nHost: api.secret.test\r\nAuthorization: Bearer sk-real-value\r\nx-api-key: sk-real-value\r\n\r\n"
    );
    assert_eq!((r.requests, r.swapped), (1, 2));
    assert!(r.misdirected.is_empty());
    assert!(r.at_boundary());
}

#[test]
fn two_occurrences_in_one_value_and_several_swaps() {
    let mut s = session();
    s.swaps.push(Swap {
        name: "SECOND".into(),
        placeholder: "keel-secret-11111111111111111111111111111111".into(),
        value: Ok(b"two".to_vec()),
        headers: default_headers(),
    });
    let input = format!(
        "POST / HTTP/1.1\r\n{H}Authorization: {KEY},{KEY} keel-secret-11111111111111111111111111111111\r\n\r\n"
    );
    let (out, r) = feed(&s, input.as_bytes(), 7);
    assert_eq!(
        text(&out.unwrap()),
        format!("POST / HTTP/1.1\r\n{H}Authorization: sk-real-value,sk-real-value two\r\n\r\n")
    );
    assert_eq!(r.swapped, 3);
}

#[test]
fn the_request_line_and_names_are_not_rewritten() {
    let s = session();
    let input = format!("GET /?k={KEY} HTTP/1.1\r\n{H}X-{KEY}: {KEY}\r\n\r\n");
    let (out, r) = feed(&s, input.as_bytes(), 4096);
    assert_eq!(text(&out.unwrap()), input);
    assert_eq!(r.swapped, 0);
    assert!(r.misdirected.is_empty(), "the host's own: not misdirected");
}

#[test]
fn a_head_split_at_every_byte_boundary_gives_the_same_result() {
    let s = session();
    let input = format!(
        "POST /a HTTP/1.1\r\n{H}Authorization: Bearer {KEY}\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\n{H}x-api-key: {KEY}\r\n\r\n"
    );
    let (whole, _) = feed(&s, input.as_bytes(), input.len());
    let whole = whole.unwrap();
    assert!(text(&whole).contains("helloGET /b"));
    for piece in 1..input.len() {
        let (out, r) = feed(&s, input.as_bytes(), piece);
        assert_eq!(out.unwrap(), whole, "pieces of {piece}");
        assert_eq!((r.requests, r.swapped), (2, 2), "pieces of {piece}");
    }
    // And split at one point anywhere, in two pieces.
    for cut in 1..input.len() {
        let mut rewriter = Rewriter::new(&s);
        let mut out = Vec::new();
        rewriter.feed(&input.as_bytes()[..cut], &mut out).unwrap();
        rewriter.feed(&input.as_bytes()[cut..], &mut out).unwrap();
        assert_eq!(out, whole, "cut at {cut}");
    }
}

#[test]
fn a_content_length_body_passes_unchanged_and_the_next_request_is_found() {
    let s = session();
    // The body holds the placeholder and a head-like text: neither is touched.
    let body = format!("GET / HTTP/1.1\r\nx: {KEY}\r\n\r\n");
    let input = format!(
        "POST / HTTP/1.1\r\n{H}Content-Length: {}\r\n\r\n{body}GET /next HTTP/1.1\r\n{H}x-api-key: {KEY}\r\n\r\n",
        body.len()
    );
    let (out, r) = feed(&s, input.as_bytes(), 3);
    let out = text(&out.unwrap());
    assert!(out.contains(&body), "{out}");
    assert!(out.ends_with(&format!(
        "GET /next HTTP/1.1\r\n{H}x-api-key: sk-real-value\r\n\r\n"
    )));
    assert_eq!((r.requests, r.swapped), (2, 1));
}

#[test]
fn a_chunked_body_with_extensions_and_trailers() {
    let s = session();
    let body = "5;name=value\r\nhello\r\n1A; a=\"b\"\r\nabcdefghijklmnopqrstuvwxyz\r\n0;last\r\nX-Trailer: keel-secret-0123456789abcdef0123456789abcdef\r\nX-Two: 2\r\n\r\n";
    let input = format!(
        "POST / HTTP/1.1\r\n{H}Transfer-Encoding: gzip, chunked\r\n\r\n{body}GET /after HTTP/1.1\r\n{H}x-api-key: {KEY}\r\n\r\n"
    );
    for piece in [1, 2, 5, 13, 4096] {
        let (out, r) = feed(&s, input.as_bytes(), piece);
        let out = text(&out.unwrap());
        assert!(
            out.contains(body),
            "pieces of {piece}: trailers pass unchanged"
        );
        assert!(
            out.ends_with("x-api-key: sk-real-value\r\n\r\n"),
            "pieces of {piece}"
        );
        assert_eq!((r.requests, r.swapped), (2, 1), "pieces of {piece}");
        assert!(r.at_boundary());
    }
}

#[test]
fn a_request_without_length_or_chunked_has_no_body() {
    let s = session();
    let input = format!("GET / HTTP/1.1\r\n{H}\r\nGET /2 HTTP/1.1\r\n{H}x-api-key: {KEY}\r\n\r\n");
    let (out, r) = feed(&s, input.as_bytes(), 4096);
    assert!(text(&out.unwrap()).ends_with("sk-real-value\r\n\r\n"));
    assert_eq!(r.requests, 2);
}

#[test]
fn a_placeholder_split_across_reads_is_swapped() {
    let s = session();
    let input = format!("GET / HTTP/1.1\r\n{H}Authorization: Bearer {KEY}\r\n\r\n");
    let at = input.find(KEY).unwrap() + 20;
    let mut rewriter = Rewriter::new(&s);
    let mut out = Vec::new();
    rewriter.feed(&input.as_bytes()[..at], &mut out).unwrap();
    assert!(out.is_empty(), "nothing goes before the head is whole");
    rewriter.feed(&input.as_bytes()[at..], &mut out).unwrap();
    assert!(text(&out).contains("Bearer sk-real-value\r\n"));
}

#[test]
fn other_secrets_placeholders_are_forwarded_and_reported() {
    let s = session();
    // In a header, and in a body split across pieces.
    let body = format!("{{\"leak\": \"{OTHER}\"}}");
    let input = format!(
        "POST / HTTP/1.1\r\n{H}X-Other: {OTHER}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (out, r) = feed(&s, input.as_bytes(), 4096);
    assert_eq!(text(&out.unwrap()), input, "forwarded as it is");
    assert_eq!(
        r.misdirected,
        vec!["OTHER_KEY".to_string()],
        "reported once"
    );

    let input = format!(
        "POST / HTTP/1.1\r\n{H}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    for piece in 1..body.len() {
        let (_, r) = feed(&s, input.as_bytes(), piece);
        assert_eq!(
            r.misdirected,
            vec!["OTHER_KEY".to_string()],
            "pieces of {piece}"
        );
    }
    // A truncated placeholder is not one.
    let (_, r) = feed(&s, b"GET / HTTP/1.1\r\nX: keel-secret-ffff\r\n\r\n", 4096);
    assert!(r.misdirected.is_empty());
}

#[test]
fn a_value_that_could_not_be_read_is_a_502_naming_the_secret() {
    let mut s = session();
    s.swaps.push(Swap {
        name: "BROKEN_KEY".into(),
        placeholder: BROKEN.into(),
        value: Err("/etc/keel/secrets/broken: missing: create it".into()),
        headers: default_headers(),
    });
    // Unused, the broken secret does not matter.
    let (out, _) = feed(
        &s,
        format!("GET / HTTP/1.1\r\n{H}x-api-key: {KEY}\r\n\r\n").as_bytes(),
        9,
    );
    assert!(out.is_ok());
    let input = format!("GET / HTTP/1.1\r\n{H}x-api-key: {BROKEN}\r\n\r\n");
    let (out, _) = feed(&s, input.as_bytes(), 4096);
    let refusal = out.unwrap_err();
    let response = text(&refusal.response);
    assert!(
        response.starts_with("HTTP/1.1 502 Bad Gateway\r\n"),
        "{response}"
    );
    assert!(response
        .contains("BROKEN_KEY could not be read: /etc/keel/secrets/broken: missing: create it"));
    assert!(response.contains("connection: close"));
    let body = response.split("\r\n\r\n").nth(1).unwrap();
    assert!(response.contains(&format!("content-length: {}\r\n", body.len())));
    assert!(refusal.error.contains("BROKEN_KEY"));
}

#[test]
fn a_value_with_a_line_break_is_refused_not_injected() {
    let mut s = session();
    s.swaps[0].value = Ok(b"sk\r\nX-Injected: 1".to_vec());
    let (out, _) = feed(
        &s,
        format!("GET / HTTP/1.1\r\n{H}x-api-key: {KEY}\r\n\r\n").as_bytes(),
        99,
    );
    let refusal = out.unwrap_err();
    assert!(text(&refusal.response).contains("502"));
    assert!(!text(&refusal.response).contains("X-Injected"));
    assert!(!refusal.error.contains("sk"), "{}", refusal.error);
}

#[test]
fn upgrade_and_connect_pass_through_raw_after_the_head() {
    let s = session();
    let input = format!(
        "GET /ws HTTP/1.1\r\n{H}Upgrade: websocket\r\nConnection: Upgrade\r\nx-api-key: {KEY}\r\n\r\n\x01\x05hello GET / HTTP/1.1\r\n{H}x-api-key: {KEY}\r\n\r\n"
    );
    let (out, r) = feed(&s, input.as_bytes(), 6);
    let out = text(&out.unwrap());
    assert!(out.starts_with(&format!("GET /ws HTTP/1.1\r\n{H}Upgrade: websocket\r\nConnection: Upgrade\r\nx-api-key: sk-real-value\r\n\r\n")));
    assert!(
        out.ends_with(&format!("GET / HTTP/1.1\r\n{H}x-api-key: {KEY}\r\n\r\n")),
        "raw after the upgrade"
    );
    assert_eq!((r.requests, r.swapped), (1, 1));

    let input =
        "CONNECT inner.test:443 HTTP/1.1\r\nHost: inner.test:443\r\n\r\n\x16\x03\x01 raw bytes";
    let (out, r) = feed(&s, input.as_bytes(), 5);
    assert_eq!(text(&out.unwrap()), input);
    assert_eq!(r.requests, 1);
    assert!(!r.at_boundary());
}

#[test]
fn an_http2_preface_is_505() {
    let s = session();
    let (out, _) = feed(&s, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 4096);
    let refusal = out.unwrap_err();
    assert!(text(&refusal.response).starts_with("HTTP/1.1 505 "));
    // In pieces too.
    let (out, _) = feed(&s, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 1);
    assert!(text(&out.unwrap_err().response).starts_with("HTTP/1.1 505 "));
}

#[test]
fn a_head_larger_than_64_kib_is_431() {
    let s = session();
    let big = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n", "a".repeat(MAX_HEAD));
    let (out, _) = feed(&s, big.as_bytes(), 1000);
    assert!(text(&out.unwrap_err().response).starts_with("HTTP/1.1 431 "));
    // Complete in one piece, and too large.
    let big = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(MAX_HEAD));
    let (out, _) = feed(&s, big.as_bytes(), big.len());
    assert!(text(&out.unwrap_err().response).starts_with("HTTP/1.1 431 "));
    // Just under the limit passes.
    let ok = format!(
        "GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(MAX_HEAD - 64)
    );
    assert!(feed(&s, ok.as_bytes(), 999).0.is_ok());
    // Too many headers.
    let many = format!(
        "GET / HTTP/1.1\r\n{}\r\n",
        "X: y\r\n".repeat(MAX_HEADERS + 1)
    );
    assert!(text(&feed(&s, many.as_bytes(), 4096).0.unwrap_err().response).contains("431"));
}

#[test]
fn malformed_framing_is_400() {
    let s = session();
    for input in [
        "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
        "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
    ] {
        let (out, _) = feed(&s, input.as_bytes(), 4096);
        let response = text(&out.expect_err(input).response);
        assert!(
            response.starts_with("HTTP/1.1 400 "),
            "{input:?}: {response}"
        );
    }
}

#[test]
fn find_finds_needles_at_edges() {
    assert_eq!(find(b"abc", b"abc", 0), Some(0));
    assert_eq!(find(b"xabc", b"abc", 0), Some(1));
    assert_eq!(find(b"aabab", b"ab", 2), Some(3));
    assert_eq!(find(b"ab", b"abc", 0), None);
    assert_eq!(find(b"abc", b"", 0), None);
}

mod strict;
