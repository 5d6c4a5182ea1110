//! A relayed connection's life: accepted (its destination read from the socket's own
//! address), judged by the policy, its upstream found (a name resolved on the host by the
//! resolver threads, each address checked against DNS rebinding), connected without
//! blocking and within a deadline, then spliced both ways until both are done. A refusal is
//! a reset (an HTTP `403` for the proxy); a hung upstream holds its own connection only.

use super::intercepting::{first_byte, FirstByte, Watch};
use super::report::now_ms;
use super::splicing::Flow;
use super::*;
use crate::network::policy::{Decision, Destination, Refusal, Upstream};
use mio::{Interest, Token};
use std::collections::VecDeque;
use std::io::{Read, Write};

enum Stage {
    /// A proxy client's request head, read so far.
    ReadingHead(Vec<u8>),
    /// The name is being resolved on the host.
    Resolving { name: String, port: u16 },
    /// Connecting to the first candidate.
    Connecting {
        upstream: mio::net::TcpStream,
        rest: VecDeque<SocketAddr>,
    },
    Relaying {
        upstream: mio::net::TcpStream,
        /// Agent to upstream, upstream to agent.
        flows: [Flow; 2],
    },
}

pub struct Conn {
    client: mio::net::TcpStream,
    stage: Stage,
    /// The destination as counted (`name:port`, `address:port`).
    pub(super) label: String,
    proxy: bool,
    /// Bytes for the upstream before the agent's (a proxy's forwarded head).
    to_upstream: Vec<u8>,
    /// Bytes for the agent once connected (a `CONNECT`'s `200`).
    to_client: Vec<u8>,
    /// The number of its latest deadline (an earlier one firing is stale).
    timer: u64,
    /// The name it was let through to (a name entry's, a proxy request's), lower case.
    pub(super) name: Option<String>,
    /// What the relay does with the agent's first bytes (a task with secrets).
    pub(super) watch: Watch,
}

fn label_of(destination: &Destination, port: u16) -> String {
    match destination {
        Destination::Name(name) => format!("{name}:{port}"),
        Destination::Host => format!("{}:{port}", crate::network::HOST_NAME),
        Destination::Address(addr) => SocketAddr::new(*addr, port).to_string(),
    }
}

/// A reset, not an orderly close: the agent's connect is refused as clearly as the kernel
/// would refuse it.
pub(super) fn reset(stream: &mio::net::TcpStream) {
    let _ = nix::sys::socket::setsockopt(
        stream,
        nix::sys::socket::sockopt::Linger,
        &libc::linger {
            l_onoff: 1,
            l_linger: 0,
        },
    );
}

impl Relay {
    pub(super) fn accept(&mut self, index: usize) {
        loop {
            let Some(listener) = self.listeners.get(index) else {
                return;
            };
            let proxy = listener.proxy;
            match listener.socket.accept() {
                Ok((stream, _)) => self.admit(stream, proxy),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {}
                Err(e) => {
                    // EMFILE and the like: the listener's queue waits for the next turn.
                    log::warn!(
                        "relay {}: accepting on {}: {e}",
                        self.spec.unit,
                        listener.bound
                    );
                    return;
                }
            }
        }
    }

    fn admit(&mut self, client: mio::net::TcpStream, proxy: bool) {
        let conn = Conn {
            client,
            stage: Stage::ReadingHead(Vec::new()),
            label: String::new(),
            proxy,
            to_upstream: Vec::new(),
            to_client: Vec::new(),
            timer: 0,
            name: None,
            watch: Watch::Off,
        };
        let (slot, _) = self.conns.insert(conn);
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        let token = Token(CONN_BASE + 2 * slot);
        if let Err(e) = self.poll.registry().register(
            &mut conn.client,
            token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            log::warn!("relay {}: registering a connection: {e}", self.spec.unit);
            self.conns.remove(slot);
            return;
        }
        if proxy {
            self.set_timer(slot, HEAD_TIMEOUT);
            self.read_head(slot);
            return;
        }
        let local = match conn.client.local_addr() {
            Ok(local) => local,
            Err(e) => {
                log::debug!(
                    "relay {}: an accepted connection's address: {e}",
                    self.spec.unit
                );
                self.close(slot);
                return;
            }
        };
        let decision = match self.destination_at(local.ip()) {
            Some(destination) => {
                if let Some(conn) = self.conns.get_mut(slot) {
                    conn.label = label_of(&destination, local.port());
                }
                self.policy.decide(&destination, local.port())
            }
            None => Decision::Refuse(Refusal::AddressNotListed(local)),
        };
        self.decided(slot, decision);
    }

    fn decided(&mut self, slot: usize, decision: Decision) {
        match decision {
            Decision::Refuse(refusal) => {
                self.refuse(slot, &refusal.destination(), &refusal.to_string())
            }
            Decision::Connect(Upstream::Address(addr)) => {
                self.connect(slot, VecDeque::from([addr]))
            }
            Decision::Connect(Upstream::HostLoopback { port }) => self.connect(
                slot,
                VecDeque::from([SocketAddr::from(([127, 0, 0, 1], port))]),
            ),
            Decision::Connect(Upstream::Name { name, port }) => {
                if let Some(conn) = self.conns.get_mut(slot) {
                    conn.name = Some(name.clone());
                }
                if let Some((at, addrs)) = self.cache.get(&name) {
                    if at.elapsed() < CACHE_FOR {
                        let addrs = addrs.clone();
                        self.checked(slot, &name, port, addrs);
                        return;
                    }
                }
                let Some(generation) = self.conns.generation(slot) else {
                    return;
                };
                if let Some(conn) = self.conns.get_mut(slot) {
                    conn.stage = Stage::Resolving {
                        name: name.clone(),
                        port,
                    };
                }
                self.pool.submit(pool::Job {
                    slot,
                    generation,
                    name,
                });
            }
        }
    }

    /// Refused: counted, and the agent told (a reset, or the proxy's `403`).
    fn refuse(&mut self, slot: usize, destination: &str, reason: &str) {
        if self.counts.refused(destination, reason, now_ms()) {
            log::info!("relay {}: refused: {reason}", self.spec.unit);
        }
        self.end_with(slot, "403 Forbidden", reason);
    }

    /// The connection ends before it was relayed: a reset, or the proxy's answer.
    fn end_with(&mut self, slot: usize, status: &str, reason: &str) {
        if let Some(conn) = self.conns.get_mut(slot) {
            if conn.proxy {
                let _ = conn.client.write(&proxy::response(status, reason));
            } else {
                reset(&conn.client);
            }
        }
        self.close(slot);
    }

    /// A connection that could not be made (a name that did not resolve, an upstream down).
    fn failed(&mut self, slot: usize, why: &str) {
        let label = self
            .conns
            .get_mut(slot)
            .map(|c| c.label.clone())
            .unwrap_or_default();
        log::debug!("relay {}: {label}: {why}", self.spec.unit);
        self.end_with(slot, "502 Bad Gateway", &format!("{label}: {why}"));
    }

    /// The resolver threads' answers.
    pub(super) fn resolved(&mut self) {
        while let Ok(done) = self.pool.done.try_recv() {
            if let Ok(addrs) = &done.result {
                self.cache
                    .insert(done.name.clone(), (Instant::now(), addrs.clone()));
            }
            let Some(conn) = self.conns.get_current(done.slot, done.generation) else {
                continue; // closed meanwhile
            };
            let Stage::Resolving { name, port } = &conn.stage else {
                continue;
            };
            let (name, port) = (name.clone(), *port);
            match done.result {
                Ok(addrs) => self.checked(done.slot, &name, port, addrs),
                Err(e) => {
                    let reason = format!("{name}: {e}");
                    let destination = format!("{name}:{port}");
                    if self.counts.refused(&destination, &reason, now_ms()) {
                        log::info!("relay {}: {reason}", self.spec.unit);
                    }
                    self.end_with(done.slot, "502 Bad Gateway", &reason);
                }
            }
        }
    }

    /// The host's addresses of `name`, each checked before any is connected to.
    fn checked(&mut self, slot: usize, name: &str, port: u16, addrs: Vec<IpAddr>) {
        let mut allowed = VecDeque::new();
        let mut first_refusal = None;
        for addr in addrs {
            match self.policy.check_resolved(name, addr, port) {
                Ok(()) => allowed.push_back(SocketAddr::new(addr, port)),
                Err(refusal) => {
                    first_refusal.get_or_insert(refusal);
                }
            }
        }
        match (allowed.is_empty(), first_refusal) {
            (true, Some(refusal)) => {
                self.refuse(slot, &refusal.destination(), &refusal.to_string())
            }
            (true, None) => self.failed(slot, "no address"),
            (false, _) => self.connect(slot, allowed),
        }
    }

    /// Connect to the first of `candidates` (the next one if it fails).
    fn connect(&mut self, slot: usize, mut candidates: VecDeque<SocketAddr>) {
        while let Some(addr) = candidates.pop_front() {
            let mut upstream = match mio::net::TcpStream::connect(addr) {
                Ok(upstream) => upstream,
                Err(e) => {
                    log::debug!("relay {}: connecting to {addr}: {e}", self.spec.unit);
                    continue;
                }
            };
            let token = Token(CONN_BASE + 2 * slot + 1);
            if self
                .poll
                .registry()
                .register(
                    &mut upstream,
                    token,
                    Interest::READABLE | Interest::WRITABLE,
                )
                .is_err()
            {
                continue;
            }
            if let Some(conn) = self.conns.get_mut(slot) {
                conn.stage = Stage::Connecting {
                    upstream,
                    rest: candidates,
                };
            }
            self.set_timer(slot, self.connect_timeout);
            return;
        }
        self.failed(
            slot,
            "the upstream refused the connection or could not be reached",
        );
    }

    fn set_timer(&mut self, slot: usize, after: Duration) {
        let Some(generation) = self.conns.generation(slot) else {
            return;
        };
        if let Some(conn) = self.conns.get_mut(slot) {
            conn.timer += 1;
            let at = Instant::now() + after;
            self.timers
                .push(std::cmp::Reverse((at, slot, generation, conn.timer)));
        }
    }

    /// The deadlines passed by `now`: a proxy head not read, a connect not made.
    pub(super) fn expire(&mut self, now: Instant) {
        while let Some(std::cmp::Reverse((at, slot, generation, timer))) =
            self.timers.peek().copied()
        {
            if at > now {
                return;
            }
            self.timers.pop();
            let Some(conn) = self.conns.get_current(slot, generation) else {
                continue;
            };
            if conn.timer != timer {
                continue;
            }
            match &mut conn.stage {
                Stage::ReadingHead(_) => self.end_with(
                    slot,
                    "408 Request Timeout",
                    "the request's head took too long",
                ),
                Stage::Connecting { upstream, rest } => {
                    let rest = std::mem::take(rest);
                    let _ = self.poll.registry().deregister(upstream);
                    if rest.is_empty() {
                        self.failed(slot, "the upstream did not answer the connect in time");
                    } else {
                        self.connect(slot, rest);
                    }
                }
                Stage::Resolving { .. } | Stage::Relaying { .. } => {}
            }
        }
    }

    /// A readiness event on a connection's agent side or its upstream's.
    pub(super) fn conn_ready(&mut self, slot: usize, upstream_side: bool) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        match &mut conn.stage {
            Stage::ReadingHead(_) if !upstream_side => self.read_head(slot),
            Stage::Connecting { upstream, rest } if upstream_side => {
                match upstream.take_error() {
                    Ok(None) => {}
                    Ok(Some(e)) | Err(e) => {
                        log::debug!("relay {}: connect: {e}", self.spec.unit);
                        let rest = std::mem::take(rest);
                        let _ = self.poll.registry().deregister(upstream);
                        self.connect(slot, rest);
                        return;
                    }
                }
                match upstream.peer_addr() {
                    Ok(_) => self.established(slot),
                    Err(e) if e.kind() == std::io::ErrorKind::NotConnected => {}
                    Err(_) => {
                        let rest = std::mem::take(rest);
                        let _ = self.poll.registry().deregister(upstream);
                        self.connect(slot, rest);
                    }
                }
            }
            Stage::Relaying { .. } => self.pump(slot),
            _ => {}
        }
    }

    fn read_head(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        let Stage::ReadingHead(buffer) = &mut conn.stage else {
            return;
        };
        let mut chunk = [0u8; 2048];
        let mut closed = false;
        while buffer.len() < proxy::MAX_HEAD {
            match conn.client.read(&mut chunk) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        match proxy::read_head(buffer) {
            proxy::Head::Incomplete if closed => self.close(slot),
            proxy::Head::Incomplete => {}
            proxy::Head::Bad(why) => {
                log::info!("relay {}: a proxy request: {why}", self.spec.unit);
                self.end_with(slot, "400 Bad Request", why);
            }
            proxy::Head::Request(request) => {
                let destination = proxy::destination_of(&request.host, &self.fake);
                conn.to_upstream = request.forward;
                if request.tunnel {
                    conn.to_client = proxy::ESTABLISHED.to_vec();
                }
                let decision = match destination {
                    Some(destination) => {
                        conn.label = label_of(&destination, request.port);
                        self.policy.decide(&destination, request.port)
                    }
                    None => Decision::Refuse(Refusal::NameNotListed(request.host)),
                };
                // The head's deadline is over; a connect sets its own.
                conn.timer += 1;
                self.decided(slot, decision);
            }
        }
    }

    /// Connected: the two directions start.
    fn established(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        let stage = std::mem::replace(&mut conn.stage, Stage::ReadingHead(Vec::new()));
        let Stage::Connecting { upstream, .. } = stage else {
            conn.stage = stage;
            return;
        };
        let flows = Flow::new(std::mem::take(&mut conn.to_upstream))
            .and_then(|out| Ok([out, Flow::new(std::mem::take(&mut conn.to_client))?]));
        match flows {
            Ok(flows) => {
                conn.stage = Stage::Relaying { upstream, flows };
                conn.timer += 1;
                if !self.spec.secrets.is_empty() {
                    let intercept = conn
                        .name
                        .as_deref()
                        .is_some_and(|name| self.intercepts.is_secret_host(name));
                    conn.watch = Watch::FirstByte { intercept };
                }
                let label = conn.label.clone();
                log::debug!("relay {}: {label}: connected", self.spec.unit);
                self.counts.opened(&label, now_ms());
                self.pump(slot);
            }
            Err(e) => {
                conn.stage = Stage::Connecting {
                    upstream,
                    rest: VecDeque::new(),
                };
                self.failed(slot, &format!("a pipe: {e}"));
            }
        }
    }

    /// Both directions moved as far as they go now.
    pub(super) fn pump(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        let Stage::Relaying { upstream, flows } = &mut conn.stage else {
            return;
        };
        let [out, back] = flows;
        if let Watch::FirstByte { intercept } = conn.watch {
            match first_byte(out.head(), &conn.client) {
                // Nothing yet (a server that speaks first is served meanwhile).
                FirstByte::NotYet => {
                    let outcome = back.pump(upstream, &conn.client);
                    match outcome {
                        Ok(received) => {
                            let label = conn.label.clone();
                            self.counts.bytes(&label, 0, received.moved, now_ms());
                            if received.more {
                                self.again.push(slot);
                            }
                        }
                        Err(e) => {
                            log::debug!("relay {}: {}: {e}", self.spec.unit, conn.label);
                            reset(&conn.client);
                            reset(upstream);
                            self.close(slot);
                        }
                    }
                    return;
                }
                FirstByte::Tls if intercept => {
                    conn.watch = Watch::Decided;
                    match out.head().is_empty() && out.untouched() {
                        true => self.hand_off(slot),
                        false => {
                            // A reset, not the proxy's 403: the tunnel was answered already.
                            reset(&conn.client);
                            let label = conn.label.clone();
                            let reason = format!("{label}: TLS sent before the proxy's answer cannot be intercepted for the task's secrets: wait for the CONNECT's 200");
                            if self.counts.refused(&label, &reason, now_ms()) {
                                log::info!("relay {}: refused: {reason}", self.spec.unit);
                            }
                            self.close(slot);
                        }
                    }
                    return;
                }
                FirstByte::Tls | FirstByte::End => conn.watch = Watch::Decided,
                FirstByte::Plain => {
                    out.scan();
                    conn.watch = Watch::Decided;
                }
            }
        }
        let outcome = out.pump(&conn.client, upstream).and_then(|sent| {
            let received = back.pump(upstream, &conn.client)?;
            Ok((sent, received))
        });
        let found = out.take_found();
        // Seen before anything else: a connection that breaks right after (a reset) is still
        // on the record.
        if !found.is_empty() {
            let (name, label) = (conn.name.clone(), conn.label.clone());
            self.placeholders_seen(&found, name.as_deref(), &label);
        }
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        let Stage::Relaying { upstream, flows } = &mut conn.stage else {
            return;
        };
        let [out, back] = flows;
        match outcome {
            Ok((sent, received)) => {
                let done = out.finished() && back.finished();
                let label = conn.label.clone();
                self.counts
                    .bytes(&label, sent.moved, received.moved, now_ms());
                if done {
                    self.close(slot);
                } else if sent.more || received.more {
                    self.again.push(slot);
                }
            }
            Err(e) => {
                log::debug!("relay {}: {}: {e}", self.spec.unit, conn.label);
                // The other side learns of the break as a reset too.
                reset(&conn.client);
                reset(upstream);
                self.close(slot);
            }
        }
    }

    /// Take the connection out of the loop, its sockets deregistered (the caller owns them
    /// now; the connection is still counted open).
    pub(super) fn take_out(
        &mut self,
        slot: usize,
    ) -> Option<(mio::net::TcpStream, mio::net::TcpStream, String, String)> {
        let mut conn = self.conns.remove(slot)?;
        let registry = self.poll.registry();
        let _ = registry.deregister(&mut conn.client);
        match conn.stage {
            Stage::Relaying { mut upstream, .. } => {
                let _ = registry.deregister(&mut upstream);
                Some((conn.client, upstream, conn.label, conn.name?))
            }
            _ => None,
        }
    }

    /// The connection's sockets closed, its slot freed.
    pub(super) fn close(&mut self, slot: usize) {
        let Some(mut conn) = self.conns.remove(slot) else {
            return;
        };
        let registry = self.poll.registry();
        let _ = registry.deregister(&mut conn.client);
        match &mut conn.stage {
            Stage::Connecting { upstream, .. } => {
                let _ = registry.deregister(upstream);
            }
            Stage::Relaying { upstream, .. } => {
                let _ = registry.deregister(upstream);
                self.counts.closed();
            }
            Stage::ReadingHead(_) | Stage::Resolving { .. } => {}
        }
    }
}
