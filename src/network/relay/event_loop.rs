//! The relay's loop: one mio poll over the resolver's sockets, the listeners, the relayed
//! connections, the resolver threads' waker, the sniffer and SIGTERM; the DNS side's
//! handling (a listed name's listeners made before its answer); deadlines; the report
//! written when it changed.

use super::attempts;
use super::dns_side::{self, MAX_TCP_BUFFER};
use super::report::{self, now_ms};
use super::*;
use crate::network::dns::Resolution;
use crate::network::policy::{Destination, Refusal};
use crate::network::relay_protocol::PROXY_PORT;
use mio::{Events, Interest, Token};
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsFd;

impl Relay {
    /// Register what the daemon handed over, and the signals that end the relay.
    pub(super) fn register_fixed(&mut self) -> Result<(), String> {
        let registry = self.poll.registry();
        let fail = |what: &str, e: std::io::Error| format!("registering {what}: {e}");
        registry
            .register(&mut self.dns_udp, DNS_UDP, Interest::READABLE)
            .map_err(|e| fail("the resolver's UDP socket", e))?;
        registry
            .register(&mut self.dns_tcp, DNS_TCP, Interest::READABLE)
            .map_err(|e| fail("the resolver's TCP socket", e))?;
        if let Some(sniffer) = &self.sniffer {
            registry
                .register(
                    &mut mio::unix::SourceFd(&sniffer.fd()),
                    SNIFFER,
                    Interest::READABLE,
                )
                .map_err(|e| fail("the sniffer", e))?;
        }
        for (bound, fd) in self.spec.fds.listeners.clone() {
            let fd = crate::sys::adopt_fd(fd)
                .map_err(|e| format!("the listener of {bound} (descriptor {fd}): {e}"))?;
            crate::sys::fds::set_nonblocking(fd.as_fd())
                .map_err(|e| format!("the listener of {bound}: {e}"))?;
            let proxy = bound.ip() == IpAddr::V4(crate::network::fake::HOST_ADDRESS)
                && bound.port() == PROXY_PORT;
            self.add_listener(std::net::TcpListener::from(fd), bound, proxy)?;
        }
        let mut signals = signal_hook_mio::v1_0::Signals::new([
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
        ])
        .map_err(|e| format!("signals: {e}"))?;
        self.poll
            .registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)
            .map_err(|e| fail("signals", e))?;
        self.signals = Some(signals);
        Ok(())
    }

    fn add_listener(
        &mut self,
        listener: std::net::TcpListener,
        bound: SocketAddr,
        proxy: bool,
    ) -> Result<(), String> {
        let mut socket = mio::net::TcpListener::from_std(listener);
        let token = Token(LISTENER_BASE + self.listeners.len());
        self.poll
            .registry()
            .register(&mut socket, token, Interest::READABLE)
            .map_err(|e| format!("registering the listener of {bound}: {e}"))?;
        if bound.ip().is_unspecified() {
            self.listened_ports.insert(bound.port());
        } else {
            self.listened.insert(bound);
        }
        self.listeners.push(Listener {
            socket,
            bound,
            proxy,
        });
        Ok(())
    }

    /// The names an earlier relay of this attempt gave addresses, given them again, their
    /// listeners made again.
    pub(super) fn restore_names(&mut self) {
        let mut text = String::new();
        if let Err(e) = (&self.names).read_to_string(&mut text) {
            log::warn!(
                "relay {}: reading {}: {e}",
                self.spec.unit,
                self.spec.names.display()
            );
        }
        let mut restored = 0;
        for (addr, name) in dns_side::read_names(&text) {
            if !self.policy.name_listed(&name) || !self.fake.restore(&name, addr) {
                continue;
            }
            self.make_listeners(&name, addr);
            restored += 1;
        }
        if restored > 0 {
            log::info!(
                "relay {}: {restored} names of an earlier relay served again",
                self.spec.unit
            );
        }
    }

    /// Listeners on `addr` for each port the policy gives `name`, made inside the namespace.
    fn make_listeners(&mut self, name: &str, addr: Ipv4Addr) {
        let addrs: Vec<SocketAddr> = self
            .policy
            .ports_for(name)
            .into_iter()
            .map(|port| SocketAddr::new(IpAddr::V4(addr), port))
            .filter(|a| !self.listened.contains(a) && !self.listened_ports.contains(&a.port()))
            .collect();
        let made = match dns_side::listen_in(self.netns.as_fd(), addrs) {
            Ok(made) => made,
            Err(e) => {
                log::error!(
                    "relay {}: listeners for {name} at {addr}: {e}",
                    self.spec.unit
                );
                return;
            }
        };
        for (bound, listener) in made {
            let added = listener
                .map_err(|e| e.to_string())
                .and_then(|l| self.add_listener(l, bound, false));
            if let Err(e) = added {
                log::error!(
                    "relay {}: listening on {bound} for {name}: {e}",
                    self.spec.unit
                );
            }
        }
    }

    /// The loop, until SIGTERM: the exit code.
    pub fn run(&mut self) -> i32 {
        log::info!(
            "relay {}: serving ({} listeners, {} names)",
            self.spec.unit,
            self.listeners.len(),
            self.fake.len()
        );
        let mut events = Events::with_capacity(1024);
        while !self.stop {
            let timeout = self.next_timeout();
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    log::error!("relay {}: epoll: {e}", self.spec.unit);
                    return 1;
                }
            }
            for event in events.iter() {
                self.dispatch(event.token());
            }
            for slot in std::mem::take(&mut self.again) {
                self.pump(slot);
            }
            self.expire(Instant::now());
            self.write_report_if_due(false);
        }
        self.write_report_if_due(true);
        log::info!("relay {}: stopped", self.spec.unit);
        0
    }

    fn next_timeout(&self) -> Option<Duration> {
        if !self.again.is_empty() {
            return Some(Duration::ZERO);
        }
        let now = Instant::now();
        let timer = self.timers.peek().map(|t| t.0 .0);
        let report = self.counts.due();
        [timer, report]
            .into_iter()
            .flatten()
            .min()
            .map(|at| at.saturating_duration_since(now))
    }

    fn dispatch(&mut self, token: Token) {
        match token {
            WAKER => {
                self.resolved();
                self.intercepts_finished();
            }
            DNS_UDP => self.dns_udp_ready(),
            DNS_TCP => self.dns_accept(),
            SNIFFER => self.sniffed(),
            SIGNALS => {
                log::info!("relay {}: asked to stop", self.spec.unit);
                self.stop = true;
            }
            Token(t) if t >= CONN_BASE => {
                self.conn_ready((t - CONN_BASE) / 2, (t - CONN_BASE) % 2 == 1)
            }
            Token(t) if t >= DNS_CONN_BASE => self.dns_conn_ready(t - DNS_CONN_BASE),
            Token(t) if t >= LISTENER_BASE => self.accept(t - LISTENER_BASE),
            Token(_) => {}
        }
    }

    fn write_report_if_due(&mut self, now_anyway: bool) {
        let due = self.counts.due();
        let now = Instant::now();
        match due {
            Some(at) if at <= now || now_anyway => {}
            _ => return,
        }
        let report = self.counts.report(std::process::id(), now_ms());
        match report::write_report(&self.spec.report, &report) {
            // Said once, not at every write: the counts go on in memory.
            Err(e) if !self.report_failing => {
                self.report_failing = true;
                log::warn!(
                    "relay {}: writing {}: {e}",
                    self.spec.unit,
                    self.spec.report.display()
                );
            }
            Err(_) => {}
            Ok(()) if self.report_failing => {
                self.report_failing = false;
                log::info!(
                    "relay {}: {} written again",
                    self.spec.unit,
                    self.spec.report.display()
                );
            }
            Ok(()) => {}
        }
        self.counts.mark_written(now);
    }

    /// The answer to one DNS message (after the listeners of a name given an address now).
    fn dns_answer(&mut self, message: &[u8]) -> Option<Vec<u8>> {
        let (reply, resolution, given) = dns_side::answer(&self.policy, &mut self.fake, message);
        if let Some((name, addr)) = given {
            self.make_listeners(&name, addr);
            let line = dns_side::names_line(addr, &name);
            if let Err(e) = self.names.write_all(line.as_bytes()) {
                log::warn!(
                    "relay {}: {}: {e}",
                    self.spec.unit,
                    self.spec.names.display()
                );
            }
            log::info!("relay {}: {name} is {addr}", self.spec.unit);
        }
        match resolution {
            Resolution::Unlisted(name) => {
                let refusal = Refusal::NameNotListed(name);
                let reason = refusal.to_string();
                if self
                    .counts
                    .refused(&refusal.destination(), &reason, now_ms())
                {
                    log::info!("relay {}: refused: {reason}", self.spec.unit);
                }
            }
            Resolution::Exhausted(name) => {
                log::warn!("relay {}: {name}: no fake address left", self.spec.unit);
            }
            Resolution::Listed { .. } | Resolution::Refused | Resolution::Dropped => {}
        }
        reply
    }

    fn dns_udp_ready(&mut self) {
        let mut buf = [0u8; 4096];
        let mut errors = 0;
        loop {
            let (read, peer) = match self.dns_udp.recv_from(&mut buf) {
                Ok(got) => got,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    // A datagram's error (EINTR, ENOMEM): the next one is read; a socket
                    // that keeps failing is left until its next readiness.
                    log::debug!("relay {}: resolver socket: {e}", self.spec.unit);
                    errors += 1;
                    if errors > 16 {
                        return;
                    }
                    continue;
                }
            };
            if let Some(reply) = self.dns_answer(&buf[..read]) {
                if let Err(e) = self.dns_udp.send_to(&reply, peer) {
                    log::debug!("relay {}: answering {peer}: {e}", self.spec.unit);
                }
            }
        }
    }

    fn dns_accept(&mut self) {
        loop {
            match self.dns_tcp.accept() {
                Ok((stream, _)) => {
                    if self.dns_conns.len() >= 64 {
                        continue; // dropped: a client has enough open already
                    }
                    let (slot, _) = self.dns_conns.insert(DnsConn {
                        stream,
                        buffer: Vec::new(),
                    });
                    if let Some(conn) = self.dns_conns.get_mut(slot) {
                        let registered = self.poll.registry().register(
                            &mut conn.stream,
                            Token(DNS_CONN_BASE + slot),
                            Interest::READABLE,
                        );
                        if registered.is_err() {
                            self.dns_conns.remove(slot);
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    log::debug!("relay {}: resolver's TCP socket: {e}", self.spec.unit);
                    return;
                }
            }
        }
    }

    fn dns_conn_ready(&mut self, slot: usize) {
        let mut messages = Vec::new();
        let mut close = false;
        if let Some(conn) = self.dns_conns.get_mut(slot) {
            let mut buf = [0u8; 4096];
            loop {
                match conn.stream.read(&mut buf) {
                    Ok(0) => {
                        close = true;
                        break;
                    }
                    Ok(n) => conn.buffer.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        close = true;
                        break;
                    }
                }
                if conn.buffer.len() > MAX_TCP_BUFFER {
                    close = true;
                    break;
                }
            }
            messages = dns_side::take_messages(&mut conn.buffer);
        }
        let mut replies = Vec::new();
        for message in messages {
            if let Some(reply) = self.dns_answer(&message) {
                replies.extend(dns_side::frame(&reply));
            }
        }
        if let Some(conn) = self.dns_conns.get_mut(slot) {
            // Answers are small: one that does not fit the socket's buffer ends the client.
            if !replies.is_empty() && conn.stream.write_all(&replies).is_err() {
                close = true;
            }
        }
        if close {
            if let Some(mut conn) = self.dns_conns.remove(slot) {
                let _ = self.poll.registry().deregister(&mut conn.stream);
            }
        }
    }

    /// What a captured connection to `addr` is for: `None` for an address of the fake range
    /// that no name was given.
    pub(super) fn destination_at(&self, addr: IpAddr) -> Option<Destination> {
        match addr {
            IpAddr::V4(v4) if FakeAddresses::in_range(v4) => self.fake.destination(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => self.destination_at(IpAddr::V4(v4)),
                None => Some(Destination::Address(addr)),
            },
            _ => Some(Destination::Address(addr)),
        }
    }

    /// The attempts the sniffer saw: each to a destination nobody listens on is a refusal.
    fn sniffed(&mut self) {
        let mut attempts = Vec::new();
        if let Some(sniffer) = self.sniffer.as_mut() {
            sniffer.read_attempts(&mut attempts);
        }
        for (protocol, dst) in attempts {
            self.attempt_seen(protocol, dst);
        }
    }

    /// One connection attempt the sniffer saw (the hook's entry point): counted as a
    /// refusal when nothing serves its destination.
    pub fn attempt_seen(&mut self, protocol: Protocol, dst: SocketAddr) {
        let refusal = attempts::refusal_of(
            &attempts::Served {
                policy: &self.policy,
                listened: &self.listened,
                listened_ports: &self.listened_ports,
                destination: self.destination_at(dst.ip()),
            },
            protocol,
            dst,
        );
        if let Some(refusal) = refusal {
            let reason = refusal.to_string();
            if self
                .counts
                .refused(&refusal.destination(), &reason, now_ms())
            {
                log::info!("relay {}: refused: {reason}", self.spec.unit);
            }
        }
    }
}
