//! One intercepted connection, driven by one thread: the agent's TLS (a rustls
//! `ServerConnection`) and the upstream's (a `ClientConnection`) over two non-blocking
//! sockets and `poll(2)`. Each direction reads plaintext from one state machine and writes it
//! to the other (the agent's through the [`Rewriter`]); a direction reads only when what it
//! read before has been taken (rustls' buffers are the only ones, bounded). A peer's end
//! (close_notify or EOF) is passed on after what precedes it: close_notify, then a TCP
//! half-close. A refusal (a request keel answers itself, or an upstream that failed its
//! verification) is written to the agent after its handshake; then its input is drained for
//! [`LINGER`] so that its last bytes do not reset the connection before it reads the answer.

use super::http::{Refusal, Rewriter};
use super::{Interceptor, Outcome, Session};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, ServerConnection};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// How long the agent's input is drained after a refusal.
const LINGER: Duration = Duration::from_secs(2);
/// Plaintext read at a time.
const CHUNK: usize = 16 * 1024;

pub fn run(
    interceptor: &Interceptor,
    client: TcpStream,
    upstream: TcpStream,
    session: &Session,
) -> Outcome {
    let mut outcome = Outcome::default();
    let mut rewriter = Rewriter::new(session);
    let result = Drive::new(interceptor, client, upstream, session)
        .and_then(|mut drive| drive.run(&mut rewriter, &mut outcome));
    outcome.requests = rewriter.requests;
    outcome.swapped = rewriter.swapped;
    outcome.misdirected = std::mem::take(&mut rewriter.misdirected);
    if let Err(e) = result {
        outcome.error = Some(e);
    }
    outcome
}

struct Drive<'a> {
    session: &'a Session,
    agent: TcpStream,
    agent_tls: ServerConnection,
    upstream: TcpStream,
    upstream_tls: ClientConnection,
    /// Plaintext read from the agent (rewritten) not yet taken by the upstream's writer.
    to_upstream: Vec<u8>,
    /// Plaintext read from the upstream not yet taken by the agent's writer.
    to_agent: Vec<u8>,
    /// TCP EOF read from each socket.
    agent_eof: bool,
    upstream_eof: bool,
    /// The agent's / upstream's plaintext ended (close_notify or EOF).
    agent_done: bool,
    upstream_done: bool,
    /// close_notify queued, and the TCP write side shut, towards each.
    upstream_closing: bool,
    agent_closing: bool,
    agent_notified: bool,
    upstream_shut: bool,
    agent_shut: bool,
    /// The upstream is gone (failed, or a refusal): nothing more to or from it.
    upstream_dropped: bool,
    /// A refusal to write once the agent's handshake is done; then the error it ends with.
    refusal: Option<Refusal>,
    ending: Option<(Instant, String)>,
    last_byte: Instant,
    idle_timeout: Duration,
    buf: Vec<u8>,
}

impl<'a> Drive<'a> {
    fn new(
        interceptor: &Interceptor,
        agent: TcpStream,
        upstream: TcpStream,
        session: &'a Session,
    ) -> Result<Drive<'a>, String> {
        let config = interceptor.server_config(&session.host)?;
        let agent_tls =
            ServerConnection::new(config).map_err(|e| format!("TLS to the agent: {e}"))?;
        let name = ServerName::try_from(session.host.clone())
            .map_err(|e| format!("{}: not a name for TLS: {e}", session.host))?;
        let upstream_tls = ClientConnection::new(interceptor.upstream.clone(), name)
            .map_err(|e| format!("TLS to {}: {e}", session.host))?;
        for socket in [&agent, &upstream] {
            socket
                .set_nonblocking(true)
                .map_err(|e| format!("a socket: {e}"))?;
            let _ = socket.set_nodelay(true);
        }
        Ok(Drive {
            session,
            agent,
            agent_tls,
            upstream,
            upstream_tls,
            to_upstream: Vec::new(),
            to_agent: Vec::new(),
            agent_eof: false,
            upstream_eof: false,
            agent_done: false,
            upstream_done: false,
            upstream_closing: false,
            agent_closing: false,
            agent_notified: false,
            upstream_shut: false,
            agent_shut: false,
            upstream_dropped: false,
            refusal: None,
            ending: None,
            last_byte: Instant::now(),
            idle_timeout: interceptor.idle_timeout,
            buf: vec![0; CHUNK],
        })
    }

    fn run(&mut self, rewriter: &mut Rewriter, outcome: &mut Outcome) -> Result<(), String> {
        loop {
            self.progress(rewriter, outcome)?;
            if let Some((until, error)) = &self.ending {
                let flushed = !self.agent_tls.wants_write();
                if flushed && (self.agent_eof || Instant::now() >= *until) {
                    return Err(error.clone());
                }
            } else if self.agent_shut && (self.upstream_shut || self.upstream_dropped) {
                return Ok(());
            }
            self.wait()?;
        }
    }

    /// Everything that can be done without blocking.
    fn progress(&mut self, rewriter: &mut Rewriter, outcome: &mut Outcome) -> Result<(), String> {
        self.answer_refusal();
        // The agent's plaintext, through the rewriter, to the upstream.
        self.flush_to_upstream();
        while self.to_upstream.is_empty() && !self.agent_done {
            match self.agent_tls.reader().read(&mut self.buf) {
                Ok(0) => self.agent_done = true,
                Ok(n) => {
                    outcome.bytes_out += n as u64;
                    if self.ending.is_some() || self.refusal.is_some() {
                        continue; // drained after a refusal
                    }
                    if let Err(refusal) = rewriter.feed(&self.buf[..n], &mut self.to_upstream) {
                        zero(&mut self.to_upstream);
                        self.refuse(refusal);
                    }
                    self.flush_to_upstream();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => self.agent_done = true,
                Err(e) => return Err(format!("reading the agent's TLS: {e}")),
            }
        }
        self.answer_refusal();
        if self.agent_done && self.to_upstream.is_empty() && !self.upstream_closing {
            self.upstream_closing = true;
            if !self.upstream_dropped {
                self.upstream_tls.send_close_notify();
            }
        }
        // The upstream's plaintext, as it is, to the agent.
        if self.ending.is_none() {
            self.flush_to_agent();
            while self.to_agent.is_empty() && !self.upstream_done && !self.upstream_dropped {
                match self.upstream_tls.reader().read(&mut self.buf) {
                    Ok(0) => self.upstream_done = true,
                    Ok(n) => {
                        outcome.bytes_in += n as u64;
                        self.to_agent.extend_from_slice(&self.buf[..n]);
                        self.flush_to_agent();
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => self.upstream_done = true,
                    Err(e) => return Err(format!("reading {}'s TLS: {e}", self.session.host)),
                }
            }
        }
        let upstream_ended = self.upstream_done || self.upstream_dropped;
        if upstream_ended
            && self.to_agent.is_empty()
            && !self.agent_closing
            && self.refusal.is_none()
        {
            self.agent_closing = true;
        }
        if self.agent_closing
            && !self.agent_notified
            && self.to_agent.is_empty()
            && !self.agent_tls.is_handshaking()
        {
            self.agent_notified = true;
            self.agent_tls.send_close_notify();
        }
        self.write_tls()?;
        if self.agent_closing
            && !self.agent_shut
            && !self.agent_tls.wants_write()
            && (self.to_agent.is_empty() || self.ending.is_some())
        {
            let _ = self.agent.shutdown(Shutdown::Write);
            self.agent_shut = true;
        }
        if self.upstream_closing
            && !self.upstream_shut
            && (self.upstream_dropped || !self.upstream_tls.wants_write())
        {
            let _ = self.upstream.shutdown(Shutdown::Write);
            self.upstream_shut = true;
        }
        Ok(())
    }

    /// A refusal, written once the agent's handshake is done.
    fn answer_refusal(&mut self) {
        if self.agent_tls.is_handshaking() {
            return;
        }
        if let Some(refusal) = self.refusal.take() {
            let _ = self.agent_tls.writer().write_all(&refusal.response);
            self.to_agent.clear();
            self.agent_closing = true;
            self.ending = Some((Instant::now() + LINGER, refusal.error));
        }
    }

    /// A request keel answers itself: the upstream is dropped, the answer written once the
    /// agent's handshake is done.
    fn refuse(&mut self, refusal: Refusal) {
        log::debug!("{}: {}", self.session.host, refusal.error);
        self.refusal = Some(refusal);
        self.drop_upstream();
        zero(&mut self.to_upstream);
    }

    fn drop_upstream(&mut self) {
        if !self.upstream_dropped {
            self.upstream_dropped = true;
            let _ = self.upstream.shutdown(Shutdown::Both);
        }
    }

    fn flush_to_upstream(&mut self) {
        if self.upstream_dropped {
            zero(&mut self.to_upstream);
            return;
        }
        while !self.to_upstream.is_empty() {
            match self.upstream_tls.writer().write(&self.to_upstream) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.to_upstream[..n].fill(0);
                    self.to_upstream.drain(..n);
                }
            }
        }
    }

    fn flush_to_agent(&mut self) {
        while !self.to_agent.is_empty() {
            match self.agent_tls.writer().write(&self.to_agent) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.to_agent.drain(..n);
                }
            }
        }
    }

    /// Queued TLS records to each socket, until it would block.
    fn write_tls(&mut self) -> Result<(), String> {
        while self.agent_tls.wants_write() {
            match self.agent_tls.write_tls(&mut self.agent) {
                Ok(_) => self.last_byte = Instant::now(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    if self.ending.is_some() {
                        self.agent_eof = true;
                        break;
                    }
                    return Err(format!("writing to the agent: {e}"));
                }
            }
        }
        while !self.upstream_dropped && self.upstream_tls.wants_write() {
            match self.upstream_tls.write_tls(&mut self.upstream) {
                Ok(_) => self.last_byte = Instant::now(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(format!("writing to {}: {e}", self.session.host)),
            }
        }
        Ok(())
    }

    /// Poll the sockets for what each side waits for, then read the TLS records that came.
    fn wait(&mut self) -> Result<(), String> {
        let mut agent_events = PollFlags::empty();
        if !self.agent_eof && (self.to_upstream.is_empty() || self.ending.is_some()) {
            agent_events |= PollFlags::POLLIN;
        }
        if self.agent_tls.wants_write() {
            agent_events |= PollFlags::POLLOUT;
        }
        let mut upstream_events = PollFlags::empty();
        if !self.upstream_dropped {
            if !self.upstream_eof && self.to_agent.is_empty() {
                upstream_events |= PollFlags::POLLIN;
            }
            if self.upstream_tls.wants_write() {
                upstream_events |= PollFlags::POLLOUT;
            }
        }
        let deadline = match &self.ending {
            Some((until, _)) => *until,
            None => self.last_byte + self.idle_timeout,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout =
            PollTimeout::try_from(left + Duration::from_millis(1)).unwrap_or(PollTimeout::MAX);
        let (agent_ready, upstream_ready) = {
            let mut fds = Vec::with_capacity(2);
            if !agent_events.is_empty() {
                fds.push(PollFd::new(self.agent.as_fd(), agent_events));
            }
            if !upstream_events.is_empty() {
                fds.push(PollFd::new(self.upstream.as_fd(), upstream_events));
            }
            if fds.is_empty() {
                return Err("intercept: nothing to wait for (a bug)".into());
            }
            match nix::poll::poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => return Ok(()),
                Err(e) => return Err(format!("poll: {e}")),
            }
            let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
            let mut it = fds.iter();
            let a = !agent_events.is_empty() && it.next().is_some_and(ready);
            let u = !upstream_events.is_empty() && it.next().is_some_and(ready);
            (a, u)
        };
        if !agent_ready && !upstream_ready {
            if self.ending.is_some() {
                return Ok(()); // the linger is over
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{}: no byte either way for {:.1} s",
                    self.session.host,
                    self.idle_timeout.as_secs_f64()
                ));
            }
            return Ok(());
        }
        if agent_ready && agent_events.contains(PollFlags::POLLIN) {
            self.read_agent()?;
        }
        if upstream_ready && upstream_events.contains(PollFlags::POLLIN) {
            self.read_upstream();
        }
        Ok(())
    }

    fn read_agent(&mut self) -> Result<(), String> {
        match self.agent_tls.read_tls(&mut self.agent) {
            Ok(0) => self.agent_eof = true,
            Ok(_) => self.last_byte = Instant::now(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => {
                if self.ending.is_some() {
                    self.agent_eof = true;
                    return Ok(());
                }
                return Err(format!("reading from the agent: {e}"));
            }
        }
        if let Err(e) = self.agent_tls.process_new_packets() {
            let _ = self.agent_tls.write_tls(&mut self.agent);
            if self.ending.is_some() {
                self.agent_eof = true;
                return Ok(());
            }
            if e == rustls::Error::NoApplicationProtocol {
                return Err(
                    "TLS with the agent: it offered no protocol keel intercepts by ALPN \
                     (only http/1.1; HTTP/2 is not spoken)"
                        .into(),
                );
            }
            return Err(format!("TLS with the agent: {e}"));
        }
        if self.agent_eof && self.agent_tls.is_handshaking() {
            return Err("the agent closed the connection during the TLS handshake".into());
        }
        Ok(())
    }

    fn read_upstream(&mut self) {
        let failed = match self.upstream_tls.read_tls(&mut self.upstream) {
            Ok(0) => {
                self.upstream_eof = true;
                self.upstream_tls
                    .is_handshaking()
                    .then(|| "closed the connection during the TLS handshake".to_string())
            }
            Ok(_) => {
                self.last_byte = Instant::now();
                None
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            Err(e) => Some(format!("reading: {e}")),
        };
        let failed = failed.or_else(|| {
            self.upstream_tls.process_new_packets().err().map(|e| {
                let _ = self.upstream_tls.write_tls(&mut self.upstream);
                format!("TLS: {e}")
            })
        });
        if let Some(why) = failed {
            let host = &self.session.host;
            if self.upstream_tls.is_handshaking() {
                let message = format!("could not open a verified TLS connection to {host}: {why}");
                self.to_agent.clear();
                self.refuse(Refusal::new("502 Bad Gateway", message));
            } else {
                // Responses may be half sent: the agent's connection just ends.
                let message = format!("{host}: {why}");
                log::debug!("{message}");
                self.drop_upstream();
                self.agent_closing = true;
                self.ending = Some((Instant::now() + LINGER, message));
            }
        }
    }
}

fn zero(buf: &mut Vec<u8>) {
    buf.fill(0);
    std::hint::black_box(&buf);
    buf.clear();
}
