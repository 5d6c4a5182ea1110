//! The strict rules of RFC 9112 the rewriter holds a request to, pure: line ends, chunk-size
//! and trailer lines, `Transfer-Encoding`, and whether a request names the session's host.
//! What another parser might read differently (a bare LF, an obs-fold, `+5` as a chunk size,
//! both `Content-Length` and `Transfer-Encoding`) is refused, never guessed at: bytes the
//! upstream reads as body are never taken for a head.

use super::{bad, Refusal};

/// The request head `head` (request line to the empty line) ends each line in CRLF, holds no
/// other CR or LF, and folds no header line (obs-fold: a line starting with SP or HTAB).
pub(super) fn strict_head(head: &[u8]) -> Result<(), Refusal> {
    for (i, &b) in head.iter().enumerate() {
        match b {
            b'\n' if i == 0 || head[i - 1] != b'\r' => {
                return Err(bad("a line of the head ends in a bare LF (CRLF only)"))
            }
            b'\r' if head.get(i + 1) != Some(&b'\n') => return Err(bad("a bare CR in the head")),
            b'\n' if matches!(head.get(i + 1), Some(b' ' | b'\t')) => {
                return Err(bad(
                    "a header line folded onto the next (obs-fold): write each on one line",
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// A complete line of chunked framing (up to and including its LF), without its CRLF; a bare
/// LF or a CR elsewhere refused.
pub(super) fn line_body(line: &[u8]) -> Result<&[u8], Refusal> {
    let body = line
        .strip_suffix(b"\r\n")
        .ok_or_else(|| bad("a chunk-size or trailer line ends in a bare LF (CRLF only)"))?;
    if body.contains(&b'\r') {
        return Err(bad("a bare CR in a chunk-size or trailer line"));
    }
    Ok(body)
}

/// The size of a chunk-size line (its CRLF removed): `1*HEXDIG [ ";" chunk-ext ]`, the
/// digits right against the `;` (no whitespace, no sign, no `0x`), no control character in
/// the extensions but SP and HTAB.
pub(super) fn chunk_size(line: &[u8]) -> Result<u64, Refusal> {
    let end = line.iter().position(|&b| b == b';').unwrap_or(line.len());
    let (digits, ext) = line.split_at(end);
    let not_hex = || bad("a chunk size that is not a hexadecimal number alone (1*HEXDIG)");
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(not_hex());
    }
    if ext.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(bad("a control character in a chunk extension"));
    }
    // Leading zeros are digits too; a value past u64 is no chunk anyone sends.
    let digits = &digits[digits
        .iter()
        .position(|&b| b != b'0')
        .unwrap_or(digits.len())..];
    if digits.len() > 15 {
        return Err(bad("a chunk larger than 2^60 bytes"));
    }
    let digits = std::str::from_utf8(digits).map_err(|_| not_hex())?;
    if digits.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(digits, 16).map_err(|_| not_hex())
}

/// A trailer line (its CRLF removed, not the empty one): `field-name ":" field-value`, not
/// folded.
pub(super) fn trailer_line(line: &[u8]) -> Result<(), Refusal> {
    if matches!(line.first(), Some(b' ' | b'\t')) {
        return Err(bad("a trailer line folded onto the one before (obs-fold)"));
    }
    let colon = line.iter().position(|&b| b == b':').unwrap_or(0);
    let value = &line[colon + 1..];
    if colon == 0
        || !line[..colon].iter().all(|&b| is_tchar(b))
        || value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
    {
        return Err(bad("a trailer line that is not `name: value`"));
    }
    Ok(())
}

/// RFC 9110's `tchar`: what a token (a field name, a method) is made of.
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether a request's `Transfer-Encoding` values (each header's, in order) end in `chunked`
/// and name it once: the only framing the rewriter follows.
pub(super) fn chunked_last(values: &[&[u8]]) -> Result<(), Refusal> {
    let codings: Vec<&[u8]> = values
        .iter()
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|c| !c.is_empty())
        .collect();
    let chunked = |c: &[u8]| c.eq_ignore_ascii_case(b"chunked");
    let once = codings.iter().filter(|c| chunked(c)).count() == 1;
    match codings.last() {
        Some(last) if chunked(last) && once => Ok(()),
        _ => Err(bad(
            "a request Transfer-Encoding that does not end in chunked (once)",
        )),
    }
}

/// Whether `authority` (`host` or `host:port`, any port) names `host` (lower case).
pub(super) fn names_host(authority: &[u8], host: &str) -> bool {
    let (name, port) = match authority.iter().rposition(|&b| b == b':') {
        Some(i) => (&authority[..i], Some(&authority[i + 1..])),
        None => (authority, None),
    };
    let port_ok = match port {
        None => true,
        Some(port) => (1..=5).contains(&port.len()) && port.iter().all(u8::is_ascii_digit),
    };
    port_ok && !name.is_empty() && name.eq_ignore_ascii_case(host.as_bytes())
}

/// Whether a request target names `host` or leaves it to `Host`: origin-form (`/path`),
/// asterisk-form (`OPTIONS *`), absolute-form with `host`'s authority (`https://host/...`),
/// or `CONNECT host:port`. Anything else (another authority, userinfo, another scheme) does
/// not.
pub(super) fn target_names_host(method: &str, target: &str, host: &str) -> bool {
    if method == "CONNECT" {
        return names_host(target.as_bytes(), host);
    }
    if target.starts_with('/') {
        return true;
    }
    if target == "*" {
        return method == "OPTIONS";
    }
    let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
    let rest = if lower.starts_with("http://") {
        &target[7..]
    } else if lower.starts_with("https://") {
        &target[8..]
    } else {
        return false;
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    names_host(&rest.as_bytes()[..end], host)
}
