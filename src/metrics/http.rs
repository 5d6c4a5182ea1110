//! The little HTTP/1.1 a scrape needs: `GET /metrics` is answered with the text, anything
//! else with 404 (400 for what is not an HTTP request). One request per connection, then
//! the server closes it (`Connection: close`).

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Metrics,
    /// HEAD /metrics: the headers of the answer, no body.
    MetricsHead,
    NotFound,
    BadRequest,
}

/// The length of the request's head (through the blank line), once it is complete.
pub fn head_end(input: &[u8]) -> Option<usize> {
    let crlf = input
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    let lf = input.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The route of a complete request head.
pub fn route(head: &[u8]) -> Route {
    let Ok(head) = std::str::from_utf8(head) else {
        return Route::BadRequest;
    };
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") {
        return Route::BadRequest;
    }
    let path = target.split('?').next().unwrap_or_default();
    match (method, path) {
        ("GET", "/metrics") => Route::Metrics,
        ("HEAD", "/metrics") => Route::MetricsHead,
        _ => Route::NotFound,
    }
}

/// A complete answer: status line, headers, body (none for HEAD).
pub fn response(route: Route, metrics: &str) -> Vec<u8> {
    let (status, content_type, body) = match route {
        Route::Metrics | Route::MetricsHead => ("200 OK", super::CONTENT_TYPE, metrics),
        Route::NotFound => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "keel serves its metrics at /metrics\n",
        ),
        Route::BadRequest => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "not an HTTP/1 request\n",
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if route != Route::MetricsHead {
        out.extend_from_slice(body.as_bytes());
    }
    out
}
