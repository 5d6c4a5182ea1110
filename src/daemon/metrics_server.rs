//! `keel daemon --metrics ADDR`: the metrics (`control/metrics.rs`) served over a minimal
//! HTTP/1.1 on a loopback TCP port or a Unix socket, inside the loop. Every socket is
//! non-blocking and in the loop's poll set; a request's head is read into a bounded buffer,
//! the answer written as the peer takes it; a connection has [`DEADLINE`] to be done, and at
//! most [`MAX_CONNECTIONS`] are open (more are closed at once). A slow or stuck scraper costs a
//! descriptor and a buffer until its deadline, never a wait.

use super::event_loop::{read_available, write_pending, EventLoop, Source, METRICS_LISTENER};
use super::timers::Timer;
use super::{Daemon, DaemonError};
use crate::metrics::address::Address;
use crate::metrics::http::{self, Route};
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Interest, Registry, Token};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Open scrape connections at most; one more is closed as soon as it is accepted.
pub(crate) const MAX_CONNECTIONS: usize = 16;
/// A request's head (request line and headers) longer than this is answered 400.
const MAX_REQUEST_BYTES: usize = 8192;
/// A connection has this long to send its request and read the answer.
pub(crate) const DEADLINE: Duration = Duration::from_secs(10);

/// [`DEADLINE`], or `KEEL_TEST_SCRAPE_DEADLINE_MS` (tests of the deadline and of the cap).
fn deadline() -> Duration {
    std::env::var("KEEL_TEST_SCRAPE_DEADLINE_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(DEADLINE, Duration::from_millis)
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl mio::event::Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
        }
    }
}

struct Connection {
    stream: Stream,
    input: Vec<u8>,
    output: Vec<u8>,
    /// The request was read (and its answer queued): what comes after is discarded.
    answered: bool,
}

/// The listening socket and its open connections.
pub(crate) struct MetricsServer {
    listener: Listener,
    connections: HashMap<Token, Connection>,
    /// An accept failed (descriptors, the cap): said once in the log until it works again.
    accept_trouble: bool,
    /// How long a connection may stay open ([`deadline`]).
    deadline: Duration,
}

impl MetricsServer {
    /// Listen on `address` and register the socket in the loop. A Unix socket's leftover
    /// file (no one listening) is replaced; a file that is not a socket, or a socket someone
    /// listens on, is refused.
    pub fn bind(address: &Address, events: &EventLoop) -> Result<Self, DaemonError> {
        let failed = |e: std::io::Error| DaemonError::Config(format!("--metrics {address}: {e}"));
        let listener = match address {
            Address::Tcp(addr) => Listener::Tcp(TcpListener::bind(*addr).map_err(|e| {
                DaemonError::Config(format!(
                    "--metrics {addr}: cannot listen: {e} (another program on that port? \
                     choose another)"
                ))
            })?),
            Address::Unix(path) => {
                clear_leftover(path).map_err(DaemonError::Config)?;
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(failed)?;
                }
                let listener = UnixListener::bind(path).map_err(failed)?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
                    .map_err(failed)?;
                Listener::Unix(listener, path.clone())
            }
        };
        let fd = match &listener {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l, _) => l.as_raw_fd(),
        };
        events
            .register_fixed(fd, METRICS_LISTENER)
            .map_err(super::setup("register the metrics socket"))?;
        let serving = match &listener {
            Listener::Tcp(l) => match l.local_addr() {
                Ok(addr) => format!("http://{addr}/metrics"),
                Err(_) => address.to_string(),
            },
            Listener::Unix(_, path) => format!("unix:{} (GET /metrics)", path.display()),
        };
        log::info!("metrics: serving {serving}");
        Ok(MetricsServer {
            listener,
            connections: HashMap::new(),
            accept_trouble: false,
            deadline: deadline(),
        })
    }

    /// Scrape connections open now.
    pub fn connections(&self) -> usize {
        self.connections.len()
    }

    /// Take every pending connection (past the cap, closed at once).
    pub fn accept(&mut self, events: &mut EventLoop) {
        loop {
            let accepted = match &self.listener {
                Listener::Tcp(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
                Listener::Unix(l, _) => l.accept().map(|(s, _)| Stream::Unix(s)),
            };
            let mut stream = match accepted {
                Ok(stream) => stream,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // Descriptors short: the connection waits in the backlog; accepted again
                    // when a connection of ours closes (or the next one arrives).
                    self.trouble(&format!("cannot accept a scrape connection: {e}"));
                    return;
                }
            };
            if self.connections.len() >= MAX_CONNECTIONS {
                self.trouble(&format!(
                    "{MAX_CONNECTIONS} scrape connections open: closing new ones until one ends"
                ));
                continue;
            }
            let token = match events.watch(&mut stream, Interest::READABLE, Source::Scraper) {
                Ok(token) => token,
                Err(e) => {
                    self.trouble(&format!("cannot watch a scrape connection: {e}"));
                    continue;
                }
            };
            events
                .timers
                .add_after(self.deadline, Timer::ScrapeDeadline { token: token.0 });
            self.connections.insert(
                token,
                Connection {
                    stream,
                    input: Vec::new(),
                    output: Vec::new(),
                    answered: false,
                },
            );
            if std::mem::take(&mut self.accept_trouble) {
                log::info!("metrics: accepting scrape connections again");
            }
        }
    }

    fn trouble(&mut self, what: &str) {
        if !self.accept_trouble {
            log::warn!("metrics: {what}");
            self.accept_trouble = true;
        }
    }

    /// Read what the peer sent: the route of its request once the head is complete (or too
    /// long), `None` while it is not (or once answered).
    fn read(&mut self, token: Token, events: &mut EventLoop) -> Option<Route> {
        let connection = self.connections.get_mut(&token)?;
        // Once answered, what comes is read and discarded.
        let into = (!connection.answered).then_some(&mut connection.input);
        let closed = read_available(&mut connection.stream, into, MAX_REQUEST_BYTES);
        let route = match http::head_end(&connection.input) {
            _ if connection.answered => None,
            Some(end) => Some(http::route(&connection.input[..end])),
            None if connection.input.len() > MAX_REQUEST_BYTES => Some(Route::BadRequest),
            None => None,
        };
        match route {
            Some(route) => {
                connection.answered = true;
                connection.input = Vec::new();
                Some(route)
            }
            None => {
                // Gone before asking (or before reading the answer): nothing more to do.
                if closed && (!connection.answered || connection.output.is_empty()) {
                    self.close(token, events);
                }
                None
            }
        }
    }

    /// Queue the answer and write what the peer takes now.
    fn respond(&mut self, token: Token, answer: Vec<u8>, events: &mut EventLoop) {
        if let Some(connection) = self.connections.get_mut(&token) {
            connection.output = answer;
        }
        self.flush(token, events);
    }

    /// Write what the peer takes; closed once all is written (or it will not take it).
    fn flush(&mut self, token: Token, events: &mut EventLoop) {
        let Some(connection) = self.connections.get_mut(&token) else {
            return;
        };
        if !connection.answered {
            return;
        }
        if !write_pending(&mut connection.stream, &mut connection.output) {
            let interest = Interest::READABLE | Interest::WRITABLE;
            let _ = events.rewatch(&mut connection.stream, token, interest);
            return;
        }
        self.close(token, events);
    }

    /// The deadline of connection `token`: closed if it is still open.
    pub fn on_deadline(&mut self, token: Token, events: &mut EventLoop) {
        if self.connections.contains_key(&token) {
            log::debug!("metrics: closing a scrape connection that missed its deadline");
            self.close(token, events);
        }
    }

    fn close(&mut self, token: Token, events: &mut EventLoop) {
        if let Some(mut connection) = self.connections.remove(&token) {
            events.unwatch(&mut connection.stream, token);
        }
        if self.accept_trouble {
            self.accept(events);
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = &self.listener {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A file at a Unix socket's path: a socket no one listens on (a daemon's leftover) is
/// removed; anything else is refused, in words that say what to do.
fn clear_leftover(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    let shown = path.display();
    if !meta.file_type().is_socket() {
        return Err(format!(
            "--metrics unix:{shown}: the path exists and is not a socket: remove it or choose \
             another path"
        ));
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(format!(
            "--metrics unix:{shown}: a program listens on that socket already (another keel \
             daemon?): choose another path"
        ));
    }
    std::fs::remove_file(path).map_err(|e| format!("--metrics unix:{shown}: {e}"))
}

impl Daemon {
    /// The metrics socket is readable: take its connections.
    pub(super) fn on_metrics_listener(&mut self) {
        if let Some(server) = self.metrics_server.as_mut() {
            server.accept(&mut self.events);
        }
    }

    /// A scrape connection is readable or writable: read its request, answer it.
    pub(super) fn on_scraper_event(&mut self, token: Token, event: &mio::event::Event) {
        let Some(server) = self.metrics_server.as_mut() else {
            return;
        };
        let route = match event.is_readable() || event.is_read_closed() {
            true => server.read(token, &mut self.events),
            false => None,
        };
        if let Some(route) = route {
            let text = match route {
                Route::Metrics | Route::MetricsHead => self.metrics_text(),
                Route::NotFound | Route::BadRequest => String::new(),
            };
            let answer = http::response(route, &text);
            if let Some(server) = self.metrics_server.as_mut() {
                server.respond(token, answer, &mut self.events);
            }
        } else if event.is_writable() {
            if let Some(server) = self.metrics_server.as_mut() {
                server.flush(token, &mut self.events);
            }
        }
    }

    pub(super) fn on_scrape_deadline(&mut self, token: usize) {
        if let Some(server) = self.metrics_server.as_mut() {
            server.on_deadline(Token(token), &mut self.events);
        }
    }
}
