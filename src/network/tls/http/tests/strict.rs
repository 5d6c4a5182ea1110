//! The review's rules: a request that names another host is not swapped, only a secret's
//! headers are, and framing another parser could read differently is refused.

use super::*;

/// A request with `lines` (each ending in CRLF) and an Authorization with the placeholder.
fn with(lines: &str) -> String {
    format!("GET /v1 HTTP/1.1\r\n{lines}Authorization: Bearer {KEY}\r\n\r\n")
}

fn swapped(s: &Session, input: &str) -> bool {
    let (out, r) = feed(s, input.as_bytes(), 4096);
    let out = text(&out.unwrap_or_else(|e| panic!("{input:?}: {}", e.error)));
    let done = out.contains("Bearer sk-real-value");
    assert_eq!(done, r.swapped == 1, "{input:?}");
    if done {
        assert!(r.misdirected.is_empty(), "{input:?}: {:?}", r.misdirected);
    } else {
        assert_eq!(out, input, "forwarded as it is");
        assert_eq!(
            r.misdirected,
            ["API_KEY"],
            "{input:?}: reported misdirected"
        );
    }
    done
}

fn refused(s: &Session, input: &str, needle: &str) {
    let (out, _) = feed(s, input.as_bytes(), 4096);
    let refusal = out.expect_err(input);
    let response = text(&refusal.response);
    assert!(
        response.starts_with("HTTP/1.1 400 "),
        "{input:?}: {response}"
    );
    assert!(response.contains(needle), "{input:?}: {response}");
    // In pieces too: the same answer.
    let (out, _) = feed(s, input.as_bytes(), 1);
    assert!(text(&out.expect_err(input).response).starts_with("HTTP/1.1 400 "));
}

#[test]
fn only_a_request_that_names_the_host_is_swapped() {
    let s = session();
    for (lines, named) in [
        ("Host: api.secret.test\r\n", true),
        ("host: API.Secret.TEST\r\n", true),
        ("Host: api.secret.test:8443\r\n", true),
        ("Host:   api.secret.test  \r\n", true),
        ("Host: other.example\r\n", false),
        ("Host: api.secret.test.other.example\r\n", false),
        ("Host: secret.test\r\n", false),
        ("Host: api.secret.test:\r\n", false),
        ("Host: api.secret.test:https\r\n", false),
        ("Host: api.secret.test:443:443\r\n", false),
        ("Host: user@api.secret.test\r\n", false),
        ("", false),
    ] {
        assert_eq!(swapped(&s, &with(lines)), named, "{lines:?}");
    }
}

#[test]
fn an_absolute_target_must_name_the_host_too() {
    let s = session();
    for (target, named) in [
        ("https://api.secret.test/v1", true),
        ("HTTPS://API.secret.test:443/v1?q=1", true),
        ("http://api.secret.test", true),
        ("https://api.secret.test?x", true),
        ("https://other.example/v1", false),
        ("https://other.example/api.secret.test", false),
        ("https://user@api.secret.test/v1", false),
        ("https://api.secret.test.other.example/", false),
        ("ftp://api.secret.test/v1", false),
        ("api.secret.test/v1", false),
    ] {
        let input = format!("GET {target} HTTP/1.1\r\n{H}Authorization: Bearer {KEY}\r\n\r\n");
        assert_eq!(swapped(&s, &input), named, "{target}");
    }
    // OPTIONS * leaves the authority to Host.
    let input = format!("OPTIONS * HTTP/1.1\r\n{H}Authorization: Bearer {KEY}\r\n\r\n");
    assert!(swapped(&s, &input));
}

#[test]
fn two_host_headers_or_an_empty_one_are_400() {
    let s = session();
    refused(
        &s,
        &with("Host: api.secret.test\r\nHost: api.secret.test\r\n"),
        "several Host",
    );
    refused(
        &s,
        &with("Host: other.example\r\nHost: api.secret.test\r\n"),
        "several Host",
    );
    refused(&s, &with("Host:\r\n"), "an empty Host");
    refused(&s, &with("Host:  \r\n"), "an empty Host");
}

#[test]
fn a_placeholder_in_host_is_never_swapped() {
    let mut s = session();
    // Even with a swap that (wrongly) names it.
    s.swaps[0].headers.push("host".into());
    let input = format!("GET / HTTP/1.1\r\nHost: {KEY}\r\n\r\n");
    let (out, r) = feed(&s, input.as_bytes(), 4096);
    assert_eq!(text(&out.unwrap()), input);
    assert_eq!(
        (r.swapped, r.misdirected.clone()),
        (0, vec!["API_KEY".to_string()])
    );
    let input = format!("GET / HTTP/1.1\r\nHost: {KEY}.api.secret.test\r\n\r\n");
    let (out, _) = feed(&s, input.as_bytes(), 4096);
    assert_eq!(text(&out.unwrap()), input);
}

#[test]
fn a_misdirected_requests_body_is_watched_and_the_next_request_judged_anew() {
    let s = session();
    let body = format!("{{\"key\": \"{KEY}\"}}");
    let input = format!(
        "POST / HTTP/1.1\r\nHost: other.example\r\nContent-Length: {}\r\n\r\n{body}\
         POST / HTTP/1.1\r\n{H}Authorization: Bearer {KEY}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len(),
        body.len()
    );
    for piece in [1, 3, 17, 4096] {
        let (out, r) = feed(&s, input.as_bytes(), piece);
        let out = text(&out.unwrap());
        assert_eq!(out.matches("sk-real-value").count(), 1, "pieces of {piece}");
        assert_eq!((r.requests, r.swapped), (2, 1), "pieces of {piece}");
        assert_eq!(r.misdirected, ["API_KEY"], "pieces of {piece}");
    }
    // The body of a request to the host, alone: its own placeholder, not misdirected.
    let input = format!(
        "POST / HTTP/1.1\r\n{H}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (_, r) = feed(&s, input.as_bytes(), 5);
    assert!(r.misdirected.is_empty());
}

#[test]
fn only_the_secrets_headers_are_swapped() {
    let s = session();
    // Every default header, in any case; another header and the target untouched.
    let input = format!(
        "GET /?key={KEY} HTTP/1.1\r\n{H}Authorization: Bearer {KEY}\r\nProxy-Authorization: Basic {KEY}\r\n\
         X-API-Key: {KEY}\r\napi-key: {KEY}\r\nx-goog-api-key: {KEY}\r\nPRIVATE-TOKEN: {KEY}\r\n\
         X-Auth-Token: {KEY}\r\nX-Custom-Key: {KEY}\r\nCookie: k={KEY}\r\n\r\n"
    );
    let (out, r) = feed(&s, input.as_bytes(), 4096);
    let out = text(&out.unwrap());
    assert_eq!(r.swapped, 7, "{out}");
    assert_eq!(out.matches("sk-real-value").count(), 7, "{out}");
    assert!(out.starts_with(&format!("GET /?key={KEY} HTTP/1.1\r\n")));
    assert!(out.contains(&format!("X-Custom-Key: {KEY}\r\n")));
    assert!(out.contains(&format!("Cookie: k={KEY}\r\n")));
    assert!(r.misdirected.is_empty(), "the host's own: counted nowhere");
}

#[test]
fn a_units_headers_replace_the_default() {
    let mut s = session();
    s.swaps[0].headers = vec!["x-custom-key".into()];
    s.swaps.push(Swap {
        name: "SECOND".into(),
        placeholder: "keel-secret-11111111111111111111111111111111".into(),
        value: Ok(b"two".to_vec()),
        headers: default_headers(),
    });
    let second = "keel-secret-11111111111111111111111111111111";
    let input = format!(
        "GET / HTTP/1.1\r\n{H}Authorization: {KEY} {second}\r\nX-CUSTOM-KEY: {KEY} {second}\r\n\r\n"
    );
    let (out, r) = feed(&s, input.as_bytes(), 4096);
    assert_eq!(
        text(&out.unwrap()),
        format!("GET / HTTP/1.1\r\n{H}Authorization: {KEY} two\r\nX-CUSTOM-KEY: sk-real-value {second}\r\n\r\n")
    );
    assert_eq!(r.swapped, 2);
    // No header at all: swapped nowhere.
    s.swaps[0].headers.clear();
    assert!(!text(&feed(&s, input.as_bytes(), 4096).0.unwrap()).contains("sk-real-value"));
}

#[test]
fn a_bare_lf_cr_or_obs_fold_in_the_head_is_400() {
    let s = session();
    refused(&s, &format!("GET / HTTP/1.1\n{H}\r\n"), "bare LF");
    refused(
        &s,
        "GET / HTTP/1.1\r\nHost: api.secret.test\n\r\n",
        "bare LF",
    );
    refused(&s, &format!("GET / HTTP/1.1\r\n{H}\n"), "bare LF");
    refused(
        &s,
        &format!("GET / HTTP/1.1\r\n{H}X: a\nAuthorization: {KEY}\r\n\r\n"),
        "bare LF",
    );
    refused(
        &s,
        &format!("GET / HTTP/1.1\r\n{H}X: a\r\n b\r\n\r\n"),
        "obs-fold",
    );
    refused(
        &s,
        &format!("GET / HTTP/1.1\r\n{H}X: a\r\n\tb\r\n\r\n"),
        "obs-fold",
    );
    // A CR alone: refused (by httparse or by the rule), never forwarded.
    let (out, _) = feed(
        &s,
        format!("GET / HTTP/1.1\r\n{H}X: a\rb\r\n\r\n").as_bytes(),
        99,
    );
    assert!(text(&out.unwrap_err().response).starts_with("HTTP/1.1 400 "));
}

#[test]
fn ambiguous_lengths_are_400() {
    let s = session();
    let post = |lines: &str| format!("POST / HTTP/1.1\r\n{H}{lines}\r\n");
    refused(
        &s,
        &post("Content-Length: 2\r\nContent-Length: 2\r\n"),
        "several Content-Length",
    );
    refused(
        &s,
        &post("Content-Length: 2\r\nTransfer-Encoding: chunked\r\n"),
        "both",
    );
    refused(
        &s,
        &post("Transfer-Encoding: chunked\r\nContent-Length: 0\r\n"),
        "both",
    );
    refused(&s, &post("Content-Length: +2\r\n"), "not a number");
    refused(&s, &post("Content-Length: 2, 2\r\n"), "not a number");
    refused(
        &s,
        &post("Transfer-Encoding: chunked, chunked\r\n"),
        "chunked (once)",
    );
    refused(
        &s,
        &post("Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n"),
        "end in chunked",
    );
    refused(&s, &post("Transfer-Encoding: \r\n"), "end in chunked");
    let input = format!("POST / HTTP/1.0\r\n{H}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    refused(&s, &input, "HTTP/1.0");
    // Spread over two headers, chunked last: fine.
    let ok = post("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n") + "0\r\n\r\n";
    assert!(feed(&s, ok.as_bytes(), 4096).0.is_ok());
}

#[test]
fn chunk_lines_are_strict() {
    let s = session();
    let chunked =
        |body: &str| format!("POST / HTTP/1.1\r\n{H}Transfer-Encoding: chunked\r\n\r\n{body}");
    for (body, needle) in [
        ("+5\r\nhello\r\n0\r\n\r\n", "1*HEXDIG"),
        ("0x5\r\nhello\r\n0\r\n\r\n", "1*HEXDIG"),
        (" 5\r\nhello\r\n0\r\n\r\n", "1*HEXDIG"),
        ("5 \r\nhello\r\n0\r\n\r\n", "1*HEXDIG"),
        ("5 ;a=b\r\nhello\r\n0\r\n\r\n", "1*HEXDIG"),
        ("\r\nhello\r\n0\r\n\r\n", "1*HEXDIG"),
        ("5\nhello\r\n0\r\n\r\n", "bare LF"),
        ("5\r\r\nhello\r\n0\r\n\r\n", "bare CR"),
        ("5;a\x01\r\nhello\r\n0\r\n\r\n", "control character"),
        ("5\r\nhello\n0\r\n\r\n", "bare LF"),
        ("5\r\nhello0\r\n\r\n", "not followed by CRLF"),
        ("5\r\nhello\r\n0\n\r\n", "bare LF"),
        ("5\r\nhello\r\n0\r\nX-T: 1\n\r\n", "bare LF"),
        ("5\r\nhello\r\n0\r\nX-T: 1\r\n folded\r\n\r\n", "obs-fold"),
        ("5\r\nhello\r\n0\r\nnot a field\r\n\r\n", "name: value"),
        ("5\r\nhello\r\n0\r\n\n", "bare LF"),
    ] {
        refused(&s, &chunked(body), needle);
    }
    // What the RFC allows: extensions (BWS after ';', quoted strings), leading zeros.
    let ok = chunked("005;a=b\r\nhello\r\n1; n=\"v w\"\r\nx\r\n0\r\nX-T: 1\r\n\r\n");
    assert!(feed(&s, ok.as_bytes(), 3).0.is_ok());
}

#[test]
fn nothing_is_parsed_nor_forwarded_after_a_refusal() {
    let s = session();
    // The head an upstream reading the bare LF leniently would take for a body.
    let smuggled = format!(
        "POST / HTTP/1.1\r\nHost: other.example\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n\
         GET /x HTTP/1.1\r\n{H}Authorization: Bearer {KEY}\r\n\r\n"
    );
    let mut rewriter = Rewriter::new(&s);
    let mut out = Vec::new();
    assert!(rewriter.feed(smuggled.as_bytes(), &mut out).is_err());
    assert!(!text(&out).contains("sk-real-value"), "{}", text(&out));
    let mut after = Vec::new();
    let next = format!("GET / HTTP/1.1\r\n{H}Authorization: Bearer {KEY}\r\n\r\n");
    assert!(rewriter.feed(next.as_bytes(), &mut after).is_ok());
    assert!(after.is_empty(), "dropped: {}", text(&after));
    assert_eq!((rewriter.requests, rewriter.swapped), (1, 0));
}
