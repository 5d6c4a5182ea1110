//! The relay's side of a task's secrets (`crate::secrets`): what the agent's first byte on a
//! connection says, the hand-off of TLS to a secret's hosts to intercept threads, and the
//! placeholders seen on their way elsewhere.
//!
//! A connection of a task with secrets is judged when its first byte comes ([`Watch`]):
//! - TLS (a handshake record) to one of a secret's hosts: the relay's loop lets go of both
//!   sockets (connected already, under the same policy as every connection) and an intercept
//!   thread terminates the agent's TLS with the state directory's CA, reads each secret that
//!   host is given from its source (a changed file applies to the next connection), and
//!   swaps the placeholders in the request heads for the values ([`Interceptor::run`]). At
//!   most [`MAX_INTERCEPTS`] at once; past it, a reset.
//! - other TLS: spliced untouched, end to end (the upstream's own certificate chain).
//! - plain text: scanned for placeholders as it goes ([`super::splicing::Flow::scan`]).
//!
//! A placeholder seen going to a host that is not one of its secret's (plain text, or in a
//! request to another secret's host) is forwarded as it is — worthless there — and counted
//! for the journal's `secret-misdirected`.

use super::report::now_ms;
use super::*;
use crate::network::tls::{Interceptor, Outcome, Session, Swap, INTERCEPT_STACK_SIZE};
use crate::secrets::TaskSecret;
use std::sync::mpsc;

/// The most connections intercepted at once (a thread each).
pub const MAX_INTERCEPTS: usize = 256;

/// A task with secrets: what its connection's agent-to-upstream bytes are, once the first
/// has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Watch {
    /// The task has no secrets: spliced, never looked at.
    Off,
    /// Not seen yet. `intercept`: the destination is a secret's host, whose TLS the relay
    /// terminates.
    FirstByte { intercept: bool },
    /// Decided (spliced, or scanned as plain text).
    Decided,
}

/// What the agent's first byte on a connection says.
pub(super) enum FirstByte {
    NotYet,
    /// A TLS handshake record.
    Tls,
    /// Anything else: plain text, to be scanned.
    Plain,
    /// The agent closed its side without sending anything.
    End,
}

/// The first byte of a TLS record of a handshake (the ClientHello).
const TLS_HANDSHAKE: u8 = 0x16;

/// The first byte the agent sends on a connection: the relay's own `head` for the upstream
/// (a proxy's forwarded request), else peeked at on the socket (left there).
pub(super) fn first_byte(head: &[u8], client: &mio::net::TcpStream) -> FirstByte {
    let byte = match head.first() {
        Some(byte) => *byte,
        None => {
            use nix::sys::socket::{recv, MsgFlags};
            use std::os::fd::AsRawFd;
            let mut one = [0u8; 1];
            let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT;
            match recv(client.as_raw_fd(), &mut one, flags) {
                Ok(0) => return FirstByte::End,
                Ok(_) => one[0],
                Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => {
                    return FirstByte::NotYet
                }
                // The next pump finds the error.
                Err(_) => return FirstByte::End,
            }
        }
    };
    match byte {
        TLS_HANDSHAKE => FirstByte::Tls,
        _ => FirstByte::Plain,
    }
}

/// An intercept thread's end: what it carried, for the counts.
pub(super) struct Finished {
    label: String,
    outcome: Outcome,
}

/// The intercept threads of a relay.
pub(super) struct Intercepts {
    secrets: Arc<Vec<TaskSecret>>,
    /// `Err`: why no connection can be intercepted (the CA could not be read): each is reset,
    /// and the reason counted as its refusal.
    interceptor: Result<Arc<Interceptor>, String>,
    running: usize,
    sender: mpsc::Sender<Finished>,
    receiver: mpsc::Receiver<Finished>,
    waker: Arc<mio::Waker>,
}

impl Intercepts {
    /// The intercept side of `spec` (nothing to do without secrets).
    pub(super) fn new(spec: &RelaySpec, waker: Arc<mio::Waker>) -> Intercepts {
        let interceptor = match (&spec.state_root, spec.secrets.is_empty()) {
            (_, true) => Err("the task has no secrets".to_string()),
            (None, false) => Err("no state directory for the CA in the relay's spec".to_string()),
            (Some(root), false) => crate::network::tls::Authority::load(root)
                .and_then(|authority| Interceptor::new(authority, &spec.trust))
                .map(Arc::new),
        };
        if let (Err(e), false) = (&interceptor, spec.secrets.is_empty()) {
            log::error!(
                "relay {}: TLS to the secrets' hosts cannot be intercepted (each such connection is reset): {e}",
                spec.unit
            );
        }
        let (sender, receiver) = mpsc::channel();
        Intercepts {
            secrets: Arc::new(spec.secrets.clone()),
            interceptor,
            running: 0,
            sender,
            receiver,
            waker,
        }
    }

    /// Whether `name` is one of a secret's hosts.
    pub(super) fn is_secret_host(&self, name: &str) -> bool {
        self.secrets
            .iter()
            .any(|s| s.hosts.iter().any(|h| h == name))
    }

    /// The secret whose placeholder is `placeholder`.
    fn secret_of(&self, placeholder: &str) -> Option<&TaskSecret> {
        self.secrets.iter().find(|s| s.placeholder == placeholder)
    }
}

/// What an intercepted connection to `host` is given: the secrets of `host`, each read from
/// its source now (a changed file applies from this connection on) with the headers it is
/// swapped in, and the placeholders of the others (misdirected if seen).
fn session_for(host: &str, secrets: &[TaskSecret]) -> Session {
    let mut session = Session {
        host: host.to_string(),
        swaps: Vec::new(),
        others: Vec::new(),
    };
    for secret in secrets {
        if secret.hosts.iter().any(|h| h == host) {
            let value = crate::secrets::read_value(&secret.source)
                .map(|v| v.as_bytes().to_vec())
                .map_err(|e| e.to_string());
            session.swaps.push(Swap {
                name: secret.name.clone(),
                placeholder: secret.placeholder.clone(),
                value,
                headers: secret.header_names(),
            });
        } else {
            session
                .others
                .push((secret.placeholder.clone(), secret.name.clone()));
        }
    }
    session
}

impl Relay {
    /// The connection at `slot` (TLS to a secret's host, connected, nothing carried yet)
    /// goes to an intercept thread.
    pub(super) fn hand_off(&mut self, slot: usize) {
        let interceptor = match &self.intercepts.interceptor {
            Ok(interceptor) => Arc::clone(interceptor),
            Err(why) => {
                let why = format!("cannot intercept TLS for the task's secrets: {why}");
                return self.reset_counted(slot, &why);
            }
        };
        if self.intercepts.running >= MAX_INTERCEPTS {
            let why =
                format!("{MAX_INTERCEPTS} connections to the secrets' hosts are open already");
            return self.reset_counted(slot, &why);
        }
        let Some((client, upstream, label, host)) = self.take_out(slot) else {
            return;
        };
        let secrets = Arc::clone(&self.intercepts.secrets);
        let sender = self.intercepts.sender.clone();
        let waker = Arc::clone(&self.intercepts.waker);
        let thread_label = label.clone();
        let spawned = std::thread::Builder::new()
            .name("keel-intercept".into())
            .stack_size(INTERCEPT_STACK_SIZE)
            .spawn(move || {
                // A panic is this connection's end, counted like any other (never a slot of
                // MAX_INTERCEPTS lost for good).
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    intercept(client, upstream, &host, &secrets, &interceptor)
                }))
                .unwrap_or_else(|_| Outcome {
                    error: Some("the intercept thread panicked".to_string()),
                    ..Outcome::default()
                });
                let _ = sender.send(Finished {
                    label: thread_label,
                    outcome,
                });
                let _ = waker.wake();
            });
        match spawned {
            Ok(_) => self.intercepts.running += 1,
            Err(e) => {
                // The sockets went with the closure: closed. Counted as ended.
                log::warn!("relay {}: an intercept thread: {e}", self.spec.unit);
                self.counts.closed();
                let why = format!("{label}: no thread to intercept it: {e}");
                self.counts.refused(&label, &why, now_ms());
            }
        }
    }

    /// A connection counted open ended with a reset, and the reason counted as a refusal.
    fn reset_counted(&mut self, slot: usize, why: &str) {
        let Some(label) = self.conns.get_mut(slot).map(|c| c.label.clone()) else {
            return;
        };
        if let Some((client, upstream, ..)) = self.take_out(slot) {
            connections::reset(&client);
            connections::reset(&upstream);
        }
        self.counts.closed();
        if self.counts.refused(&label, why, now_ms()) {
            log::warn!("relay {}: {label}: {why}", self.spec.unit);
        }
    }

    /// The intercept threads that ended: their bytes, their misdirected placeholders.
    pub(super) fn intercepts_finished(&mut self) {
        while let Ok(done) = self.intercepts.receiver.try_recv() {
            self.intercepts.running = self.intercepts.running.saturating_sub(1);
            let outcome = done.outcome;
            let now = now_ms();
            (self.counts).bytes(&done.label, outcome.bytes_out, outcome.bytes_in, now);
            self.counts.closed();
            for secret in &outcome.misdirected {
                self.misdirected(secret, &done.label);
            }
            match &outcome.error {
                Some(e) => log::info!("relay {}: {}: intercepted: {e}", self.spec.unit, done.label),
                None => log::debug!(
                    "relay {}: {}: intercepted: {} requests, {} placeholders swapped",
                    self.spec.unit,
                    done.label,
                    outcome.requests,
                    outcome.swapped
                ),
            }
        }
    }

    /// Placeholders a scanned direction saw, on a connection to `name` (if a name) counted as
    /// `label`: each going to a host that is not its secret's is misdirected.
    pub(super) fn placeholders_seen(&mut self, found: &[String], name: Option<&str>, label: &str) {
        for placeholder in found {
            let Some(secret) = self.intercepts.secret_of(placeholder) else {
                continue; // another task's, or made up: not this task's secret
            };
            let own_host = name.is_some_and(|n| secret.hosts.iter().any(|h| h == n));
            if own_host {
                // Plain text to its own host: never swapped (the value would travel in clear).
                log::debug!(
                    "relay {}: {label}: {}'s placeholder in plain text (not swapped: TLS only)",
                    self.spec.unit,
                    secret.name
                );
                continue;
            }
            let secret = secret.name.clone();
            self.misdirected(&secret, label);
        }
    }

    fn misdirected(&mut self, secret: &str, label: &str) {
        if self.counts.misdirected(secret, label, now_ms()) {
            log::warn!(
                "relay {}: {secret}'s placeholder sent to {label}, not one of its hosts (forwarded as it is)",
                self.spec.unit
            );
        }
    }
}

/// An intercept thread's work: both sockets blocking again, the host's secrets read, the
/// interceptor run.
fn intercept(
    client: mio::net::TcpStream,
    upstream: mio::net::TcpStream,
    host: &str,
    secrets: &[TaskSecret],
    interceptor: &Interceptor,
) -> Outcome {
    let client = std::net::TcpStream::from(client);
    let upstream = std::net::TcpStream::from(upstream);
    for socket in [&client, &upstream] {
        if let Err(e) = socket.set_nonblocking(false) {
            return Outcome {
                error: Some(format!("a socket: {e}")),
                ..Outcome::default()
            };
        }
    }
    let session = session_for(host, secrets);
    interceptor.run(client, upstream, &session)
}

#[cfg(test)]
mod tests;
