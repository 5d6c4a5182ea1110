//! The request direction of an intercepted connection, pure: HTTP/1.1 requests read from the
//! agent's plaintext, a piece at a time, and what goes to the upstream in their place.
//!
//! Each request head (up to [`MAX_HEAD`], else `431`) is parsed with `httparse` and held to
//! RFC 9112's strict rules ([`framing`]: CRLF only, no obs-fold, one `Content-Length` or a
//! `Transfer-Encoding` ending in `chunked`, never both, none on HTTP/1.0; else `400`). A
//! swap's placeholder becomes its value only in a request that names the session's host (one
//! `Host` header, `host` or `host:port`, and an absolute-form target of that authority too;
//! two `Host` headers or an empty one: `400`), and only in the values of the swap's headers
//! ([`Swap::headers`]: `Authorization`, `X-Api-Key` and the like; never `Host` nor a framing
//! or hop-by-hop one); the rest of the head is kept byte for byte. A placeholder of a swap in
//! another header or in the request line is forwarded as it is; one in a request naming
//! another host is forwarded as it is and reported (`misdirected`), as are the placeholders
//! of the task's other secrets anywhere, in the head and in the body. A swap whose value
//! could not be read, and whose placeholder is to be swapped, ends the connection with `502`
//! saying which secret and why. The body is framed by `Content-Length` or chunked
//! `Transfer-Encoding` (neither: no body; chunk-size, chunk-end and trailer lines strict too)
//! and streamed through unchanged, so that the next request of a kept-alive connection is
//! found. After an `Upgrade:` or `CONNECT` head the rest of the connection passes through
//! raw, never swapped again, whether or not the server agrees to the upgrade. An HTTP/2
//! preface gets `505`. After a refusal nothing more is read nor forwarded.

mod framing;

use super::{Session, Swap};
use framing::{chunk_size, chunked_last, line_body, names_host, strict_head, target_names_host};

/// The largest request head read (request line, headers, the empty line).
pub const MAX_HEAD: usize = 64 * 1024;
/// The most headers in one request head.
const MAX_HEADERS: usize = 256;
/// The longest chunk-size line (with its extensions) or trailer line.
const MAX_LINE: usize = 8 * 1024;
/// `keel-secret-` + 32 hex digits (crate::secrets' format).
const PREFIX: &[u8] = b"keel-secret-";
const PLACEHOLDER_LEN: usize = 12 + 32;

/// A request keel answers itself, and the connection ends.
#[derive(Debug)]
pub struct Refusal {
    /// The whole HTTP response to send the agent.
    pub response: Vec<u8>,
    /// What happened, for the outcome (no secret value in it).
    pub error: String,
}

impl Refusal {
    pub fn new(status: &str, message: String) -> Refusal {
        let body = format!("keel: {message}\n");
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        Refusal {
            response: response.into_bytes(),
            error: format!("{status}: {message}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    /// Body bytes left of a Content-Length body.
    Length(u64),
    /// Reading a chunk-size line.
    ChunkSize,
    /// Data bytes left of the current chunk.
    ChunkData(u64),
    /// The CRLF after a chunk's data.
    ChunkEnd,
    /// Trailer lines, up to the empty one.
    Trailers,
    /// After an Upgrade or CONNECT head: bytes pass as they are.
    Raw,
    /// After a refusal: nothing more is read nor forwarded.
    Refused,
}

/// The agent → upstream direction of one connection.
pub struct Rewriter<'s> {
    session: &'s Session,
    state: State,
    /// The head read so far (placeholders only, never a value).
    head: Vec<u8>,
    /// The chunk-size or trailer line read so far (forwarded once whole and valid).
    line: Vec<u8>,
    /// The body's last bytes, for placeholders split between pieces.
    tail: Vec<u8>,
    /// (placeholder, name) of the swaps: misdirected in a request that names another host.
    own: Vec<(String, String)>,
    /// The request being carried does not name the session's host.
    foreign: bool,
    pub requests: u64,
    pub swapped: u64,
    pub misdirected: Vec<String>,
}

impl<'s> Rewriter<'s> {
    pub fn new(session: &'s Session) -> Rewriter<'s> {
        Rewriter {
            session,
            state: State::Head,
            head: Vec::new(),
            line: Vec::new(),
            tail: Vec::new(),
            own: (session.swaps.iter())
                .map(|s| (s.placeholder.clone(), s.name.clone()))
                .collect(),
            foreign: false,
            requests: 0,
            swapped: 0,
            misdirected: Vec::new(),
        }
    }

    /// True between requests (no head or body half read).
    pub fn at_boundary(&self) -> bool {
        self.state == State::Head && self.head.is_empty()
    }

    /// Consume `input` (the agent's next plaintext), appending what goes upstream to `out`.
    /// A refusal ends the connection: what is fed after it is dropped.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), Refusal> {
        let result = self.feed_inner(input, out);
        if result.is_err() {
            self.state = State::Refused;
            self.head.fill(0);
            self.head.clear();
            self.line.clear();
        }
        result
    }

    fn feed_inner(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), Refusal> {
        while !input.is_empty() {
            match self.state {
                State::Head => {
                    let before = self.head.len();
                    self.head.extend_from_slice(input);
                    match self.parse_head(out)? {
                        None => {
                            if self.head.len() > MAX_HEAD {
                                return Err(too_large());
                            }
                            return Ok(());
                        }
                        Some(end) => {
                            input = &input[end - before..];
                            self.head.clear();
                        }
                    }
                }
                State::Length(left) => {
                    let n = input.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    self.body(&input[..n], out);
                    input = &input[n..];
                    self.state = match left - n as u64 {
                        0 => State::Head,
                        left => State::Length(left),
                    };
                }
                State::ChunkData(left) => {
                    let n = input.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    self.body(&input[..n], out);
                    input = &input[n..];
                    self.state = match left - n as u64 {
                        0 => State::ChunkEnd,
                        left => State::ChunkData(left),
                    };
                }
                State::ChunkSize | State::ChunkEnd | State::Trailers => {
                    let Some(line) = self.take_line(&mut input)? else {
                        return Ok(());
                    };
                    let text = line_body(&line)?;
                    let next = match self.state {
                        State::ChunkSize => match chunk_size(text)? {
                            0 => State::Trailers,
                            size => State::ChunkData(size),
                        },
                        State::ChunkEnd if text.is_empty() => State::ChunkSize,
                        State::ChunkEnd => {
                            return Err(bad(
                                "chunk data not followed by CRLF (longer than its size)",
                            ))
                        }
                        _ if text.is_empty() => State::Head,
                        _ => {
                            framing::trailer_line(text)?;
                            State::Trailers
                        }
                    };
                    self.body(&line, out);
                    self.state = next;
                }
                State::Raw => {
                    self.body(input, out);
                    input = &[];
                }
                State::Refused => return Ok(()),
            }
        }
        Ok(())
    }

    /// Body bytes: forwarded as they are, watched for misdirected placeholders.
    fn body(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(bytes);
        if self.session.others.is_empty() && (!self.foreign || self.own.is_empty()) {
            return;
        }
        let mut joint = std::mem::take(&mut self.tail);
        joint.extend_from_slice(&bytes[..bytes.len().min(PLACEHOLDER_LEN - 1)]);
        let mut found = Vec::new();
        self.misdirected_in(&joint, &mut found);
        self.misdirected_in(bytes, &mut found);
        self.note(found);
        self.tail = if bytes.len() >= PLACEHOLDER_LEN - 1 {
            bytes[bytes.len() - (PLACEHOLDER_LEN - 1)..].to_vec()
        } else {
            let old_tail = joint.len() - bytes.len();
            let mut t = joint[..old_tail].to_vec();
            t.extend_from_slice(bytes);
            t[t.len().saturating_sub(PLACEHOLDER_LEN - 1)..].to_vec()
        };
    }

    /// The names of the placeholders in `hay` that are misdirected: the task's other
    /// secrets', and the swaps' own in a request that names another host.
    fn misdirected_in(&self, hay: &[u8], found: &mut Vec<String>) {
        let own: &[(String, String)] = if self.foreign { &self.own } else { &[] };
        if self.session.others.is_empty() && own.is_empty() {
            return;
        }
        let mut at = 0;
        while let Some(i) = find(hay, PREFIX, at) {
            let candidate = &hay[i..(i + PLACEHOLDER_LEN).min(hay.len())];
            for (placeholder, name) in self.session.others.iter().chain(own) {
                if placeholder.as_bytes() == candidate && !found.contains(name) {
                    found.push(name.clone());
                }
            }
            at = i + 1;
        }
    }

    fn note(&mut self, found: Vec<String>) {
        for name in found {
            if !self.misdirected.contains(&name) {
                self.misdirected.push(name);
            }
        }
    }

    /// A whole line of chunked framing (with its LF, not yet forwarded); `None` until its LF
    /// arrives.
    fn take_line(&mut self, input: &mut &[u8]) -> Result<Option<Vec<u8>>, Refusal> {
        let (piece, done) = match input.iter().position(|&b| b == b'\n') {
            Some(i) => (&input[..=i], true),
            None => (*input, false),
        };
        self.line.extend_from_slice(piece);
        *input = &input[piece.len()..];
        if self.line.len() > MAX_LINE {
            return Err(bad("a chunk-size or trailer line longer than 8 KiB"));
        }
        Ok(done.then(|| std::mem::take(&mut self.line)))
    }

    /// The head if complete: its rewrite appended to `out`, the next state set; the head's
    /// length returned.
    fn parse_head(&mut self, out: &mut Vec<u8>) -> Result<Option<usize>, Refusal> {
        if self.head.starts_with(b"PRI * HTTP/2") {
            return Err(Refusal::new(
                "505 HTTP Version Not Supported",
                "HTTP/2 is not intercepted: speak HTTP/1.1 (ALPN offers only http/1.1)".into(),
            ));
        }
        let mut headers = vec![httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        let end = match request.parse(&self.head) {
            Ok(httparse::Status::Partial) => return Ok(None),
            Ok(httparse::Status::Complete(end)) => end,
            Err(httparse::Error::TooManyHeaders) => return Err(too_large()),
            Err(e) => {
                // The rule broken, if one is (httparse says only where it stopped).
                let lines = self
                    .head
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                strict_head(&self.head[..lines])?;
                return Err(bad(&format!("an HTTP/1.1 request head ({e})")));
            }
        };
        if end > MAX_HEAD {
            return Err(too_large());
        }
        strict_head(&self.head[..end])?;
        let host = self.session.host.as_str();
        let method = request.method.unwrap_or("");
        let mut hosts: Vec<&[u8]> = Vec::new();
        let mut codings: Vec<&[u8]> = Vec::new();
        let mut lengths: Vec<&[u8]> = Vec::new();
        let mut upgrade = false;
        for header in request.headers.iter() {
            let name = header.name;
            if name.eq_ignore_ascii_case("host") {
                hosts.push(header.value);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                codings.push(header.value);
            } else if name.eq_ignore_ascii_case("content-length") {
                lengths.push(header.value);
            } else if name.eq_ignore_ascii_case("upgrade") {
                upgrade = true;
            }
        }
        let mut state = State::Head;
        if !codings.is_empty() {
            if !lengths.is_empty() {
                return Err(bad("both Content-Length and Transfer-Encoding"));
            }
            if request.version == Some(0) {
                return Err(bad("Transfer-Encoding on an HTTP/1.0 request"));
            }
            chunked_last(&codings)?;
            state = State::ChunkSize;
        }
        match lengths[..] {
            [] => {}
            [value] => {
                let n = std::str::from_utf8(value.trim_ascii())
                    .ok()
                    .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| bad("a Content-Length that is not a number"))?;
                if n > 0 {
                    state = State::Length(n);
                }
            }
            _ => return Err(bad("several Content-Length headers")),
        }
        let named = match hosts[..] {
            [] => false,
            [value] if value.trim_ascii().is_empty() => return Err(bad("an empty Host")),
            [value] => {
                names_host(value.trim_ascii(), host)
                    && target_names_host(method, request.path.unwrap_or(""), host)
            }
            _ => return Err(bad("several Host headers")),
        };
        if upgrade || method == "CONNECT" {
            state = State::Raw;
        }
        let base = self.head.as_ptr() as usize;
        let mut splices: Vec<(usize, usize, Vec<u8>)> = Vec::new();
        let mut swapped = 0;
        if named {
            for header in request.headers.iter() {
                let start = header.value.as_ptr() as usize - base;
                let swaps = self.session.swaps.iter().filter(|swap| {
                    let meant = swap_in(swap, header.name);
                    if !meant && find(header.value, swap.placeholder.as_bytes(), 0).is_some() {
                        log::debug!(
                            "{host}: {}'s placeholder in the {} header, not one of its headers: forwarded as it is",
                            swap.name,
                            header.name
                        );
                    }
                    meant
                });
                if let Some(value) = swap_value(header.value, swaps, &mut swapped)? {
                    splices.push((start, start + header.value.len(), value));
                }
            }
        }
        self.foreign = !named;
        self.tail.clear();
        let mut found = Vec::new();
        self.misdirected_in(&self.head[..end], &mut found);
        self.note(found);
        let mut at = 0;
        for (start, stop, value) in &splices {
            out.extend_from_slice(&self.head[at..*start]);
            out.extend_from_slice(value);
            at = *stop;
        }
        out.extend_from_slice(&self.head[at..end]);
        for (_, _, mut value) in splices {
            value.fill(0);
        }
        self.requests += 1;
        self.swapped += swapped;
        self.state = state;
        Ok(Some(end))
    }
}

/// Whether `swap`'s placeholder is swapped in the header `name`: one of its headers, and
/// never one of [`crate::secrets::UNSWAPPABLE_HEADERS`] (the authority, the framing, the
/// hop-by-hop headers), whatever the swap says.
fn swap_in(swap: &Swap, name: &str) -> bool {
    swap.headers.iter().any(|h| h.eq_ignore_ascii_case(name))
        && !(crate::secrets::UNSWAPPABLE_HEADERS.iter()).any(|h| h.eq_ignore_ascii_case(name))
}

/// `value` with every placeholder of `swaps` replaced, when one occurs.
fn swap_value<'a>(
    value: &[u8],
    swaps: impl Iterator<Item = &'a Swap>,
    swapped: &mut u64,
) -> Result<Option<Vec<u8>>, Refusal> {
    let mut current: Option<Vec<u8>> = None;
    for swap in swaps {
        let needle = swap.placeholder.as_bytes();
        let hay = current.as_deref().unwrap_or(value);
        if needle.is_empty() || find(hay, needle, 0).is_none() {
            continue;
        }
        let secret = match &swap.value {
            Ok(secret) => secret,
            Err(why) => {
                return Err(Refusal::new(
                    "502 Bad Gateway",
                    format!("the secret {} could not be read: {why}", swap.name),
                ))
            }
        };
        if secret.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(Refusal::new(
                "502 Bad Gateway",
                format!(
                    "the secret {} holds a line break or NUL: it cannot go in a header",
                    swap.name
                ),
            ));
        }
        let mut next = Vec::with_capacity(hay.len() + secret.len());
        let mut at = 0;
        while let Some(i) = find(hay, needle, at) {
            next.extend_from_slice(&hay[at..i]);
            next.extend_from_slice(secret);
            at = i + needle.len();
            *swapped += 1;
        }
        next.extend_from_slice(&hay[at..]);
        if let Some(mut old) = current.replace(next) {
            old.fill(0);
        }
    }
    Ok(current)
}

/// The first occurrence of `needle` in `hay` at or after `from`.
pub fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let first = *needle.first()?;
    let mut at = from;
    while at + needle.len() <= hay.len() {
        let i = at
            + hay[at..=hay.len() - needle.len()]
                .iter()
                .position(|&b| b == first)?;
        if &hay[i..i + needle.len()] == needle {
            return Some(i);
        }
        at = i + 1;
    }
    None
}

fn bad(what: &str) -> Refusal {
    Refusal::new("400 Bad Request", format!("malformed request: {what}"))
}

fn too_large() -> Refusal {
    Refusal::new(
        "431 Request Header Fields Too Large",
        format!("a request head larger than {} KiB", MAX_HEAD / 1024),
    )
}

#[cfg(test)]
mod tests;
