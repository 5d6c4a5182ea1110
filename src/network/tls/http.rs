//! The request direction of an intercepted connection, pure: HTTP/1.1 requests read from the
//! agent's plaintext, a piece at a time, and what goes to the upstream in their place.
//!
//! Each request head (up to [`MAX_HEAD`], else `431`) is parsed with `httparse`; in each
//! header value every occurrence of a swap's placeholder becomes the swap's value (the rest of
//! the head is kept byte for byte). A swap whose value could not be read, and whose placeholder
//! occurs, ends the connection with `502` saying which secret and why. The placeholders of the
//! task's other secrets are forwarded as they are and reported (`misdirected`), in the head
//! and in the body. The body is framed by `Content-Length` or chunked `Transfer-Encoding`
//! (neither: no body) and streamed through unchanged, so that the next request of a kept-alive
//! connection is found. After an `Upgrade:` or `CONNECT` head the bytes pass through raw; an
//! HTTP/2 preface gets `505`.

use super::{Session, Swap};

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
    /// The line end after a chunk's data.
    ChunkEnd,
    /// Trailer lines, up to the empty one.
    Trailers,
    /// After an Upgrade or CONNECT head: bytes pass as they are.
    Raw,
}

/// The agent → upstream direction of one connection.
pub struct Rewriter<'s> {
    session: &'s Session,
    state: State,
    /// The head read so far (placeholders only, never a value).
    head: Vec<u8>,
    /// The chunk-size or trailer line read so far.
    line: Vec<u8>,
    /// The body's last bytes, for placeholders split between pieces.
    tail: Vec<u8>,
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
    /// A refusal ends the connection: nothing more is to be fed.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), Refusal> {
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
                    let Some(line) = self.take_line(&mut input, out)? else {
                        return Ok(());
                    };
                    self.state = match self.state {
                        State::ChunkSize => match chunk_size(&line)? {
                            0 => State::Trailers,
                            size => State::ChunkData(size),
                        },
                        State::ChunkEnd if line.is_empty() => State::ChunkSize,
                        State::ChunkEnd => return Err(bad("chunk data longer than its size")),
                        _ if line.is_empty() => State::Head,
                        _ => State::Trailers,
                    };
                }
                State::Raw => {
                    self.body(input, out);
                    input = &[];
                }
            }
        }
        Ok(())
    }

    /// Body bytes: forwarded as they are, watched for misdirected placeholders.
    fn body(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(bytes);
        if self.session.others.is_empty() {
            return;
        }
        let mut joint = std::mem::take(&mut self.tail);
        joint.extend_from_slice(&bytes[..bytes.len().min(PLACEHOLDER_LEN - 1)]);
        let mut found = Vec::new();
        misdirected_in(&joint, self.session, &mut found);
        misdirected_in(bytes, self.session, &mut found);
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

    fn note(&mut self, found: Vec<String>) {
        for name in found {
            if !self.misdirected.contains(&name) {
                self.misdirected.push(name);
            }
        }
    }

    /// A line of chunked framing, forwarded as it is; `None` until its `\n` arrives.
    fn take_line(
        &mut self,
        input: &mut &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Vec<u8>>, Refusal> {
        let (piece, done) = match input.iter().position(|&b| b == b'\n') {
            Some(i) => (&input[..=i], true),
            None => (*input, false),
        };
        self.body(piece, out);
        self.line.extend_from_slice(piece);
        *input = &input[piece.len()..];
        if self.line.len() > MAX_LINE {
            return Err(bad("a chunk-size or trailer line longer than 8 KiB"));
        }
        if !done {
            return Ok(None);
        }
        let mut line = std::mem::take(&mut self.line);
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Ok(Some(line))
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
            Err(e) => return Err(bad(&format!("an HTTP/1.1 request head ({e})"))),
        };
        if end > MAX_HEAD {
            return Err(too_large());
        }
        let base = self.head.as_ptr() as usize;
        let mut state = State::Head;
        let mut length: Option<u64> = None;
        let mut splices: Vec<(usize, usize, Vec<u8>)> = Vec::new();
        let mut found = Vec::new();
        let mut swapped = 0;
        for header in request.headers.iter() {
            let name = header.name;
            if name.eq_ignore_ascii_case("transfer-encoding") {
                let last = header.value.rsplit(|&b| b == b',').next().unwrap_or(&[]);
                if !last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                    return Err(bad(
                        "a request Transfer-Encoding that does not end in chunked",
                    ));
                }
                state = State::ChunkSize;
            } else if name.eq_ignore_ascii_case("content-length") {
                let n = std::str::from_utf8(header.value.trim_ascii())
                    .ok()
                    .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| bad("a Content-Length that is not a number"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(bad("two different Content-Lengths"));
                }
                length = Some(n);
            } else if name.eq_ignore_ascii_case("upgrade") {
                state = State::Raw;
            }
            let start = header.value.as_ptr() as usize - base;
            if let Some(value) = swap_value(header.value, &self.session.swaps, &mut swapped)? {
                splices.push((start, start + header.value.len(), value));
            }
        }
        if request.method == Some("CONNECT") {
            state = State::Raw;
        }
        if state == State::Head {
            if let Some(n @ 1..) = length {
                state = State::Length(n);
            }
        }
        misdirected_in(&self.head[..end], self.session, &mut found);
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

/// `value` with every swap's placeholder replaced, when one occurs.
fn swap_value(value: &[u8], swaps: &[Swap], swapped: &mut u64) -> Result<Option<Vec<u8>>, Refusal> {
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

/// The names of `session.others` whose placeholder occurs in `hay`.
fn misdirected_in(hay: &[u8], session: &Session, found: &mut Vec<String>) {
    if session.others.is_empty() {
        return;
    }
    let mut at = 0;
    while let Some(i) = find(hay, PREFIX, at) {
        let candidate = &hay[i..(i + PLACEHOLDER_LEN).min(hay.len())];
        for (placeholder, name) in &session.others {
            if placeholder.as_bytes() == candidate && !found.contains(name) {
                found.push(name.clone());
            }
        }
        at = i + 1;
    }
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

/// The size of a chunk-size line (`1a;ext=v`).
fn chunk_size(line: &[u8]) -> Result<u64, Refusal> {
    let digits = line
        .split(|&b| b == b';' || b == b' ' || b == b'\t')
        .next()
        .unwrap_or(&[]);
    if digits.is_empty() || digits.len() > 15 {
        return Err(bad("a chunk size that is not a hexadecimal number"));
    }
    std::str::from_utf8(digits)
        .ok()
        .and_then(|d| u64::from_str_radix(d, 16).ok())
        .ok_or_else(|| bad("a chunk size that is not a hexadecimal number"))
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
