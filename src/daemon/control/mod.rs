//! The control socket: `state_dir/keel.sock`, mode 0600. A client must be root or the
//! daemon's own uid (SO_PEERCRED), in the daemon's user and PID namespaces, and outside every
//! keel task cgroup (`peers.rs`); any other is answered one `refused: …` line and closed.
//! One JSON request line per connection, one JSON response line.
//! A client's mistake gets an error response; it never takes the daemon down.
//!
//! This file accepts clients, reads their request line within a deadline, dispatches it and
//! writes the answer; each request is handled in a file of its own beside it.

mod add;
mod checkouts;
mod daemon;
mod metrics;
mod pause;
mod peers;
mod rm;
mod start;
mod status;
mod stop;

use super::event_loop::{EventLoop, Source, LISTENER};

use super::timers::Timer;
use super::units_dir::UnitsDir;
use super::{Daemon, DaemonError};
use crate::protocol::{Request, Response};
use mio::net::{UnixListener, UnixStream};
use mio::{Interest, Token};
use std::collections::HashMap;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

/// Requests are small; anything longer is a confused or hostile client.
const MAX_REQUEST_BYTES: usize = 4 << 20;
/// A client has this long to send its request, and again to read its answer: an idle
/// connection must not hold a descriptor forever.
const CLIENT_DEADLINE: Duration = Duration::from_secs(10);
/// An accept refused for want of descriptors is tried again this much later.
const ACCEPT_RETRY: Duration = Duration::from_secs(1);
/// More simultaneous clients than this are answered with an error and closed.
const MAX_CLIENTS: usize = 256;

pub(crate) struct Client {
    stream: UnixStream,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Waiting for a task's attempt (unit, generation) to end before answering (stop, rm).
    waiting_for: Option<(String, u64)>,
    /// Waiting for a job to end before answering (`keel harvest`, `keel prune`).
    waiting_for_job: bool,
    done_reading: bool,
}

/// The control socket and its connected clients.
pub(crate) struct Control {
    listener: UnixListener,
    pub clients: HashMap<Token, Client>,
    /// The daemon's uid, namespaces and cgroup, to judge clients by.
    identity: peers::Identity,
    /// The cgroup2 mounts, to look at the keel trees a client's cgroup names.
    cgroup_mounts: peers::CgroupMounts,
    refusals: peers::RefusalLog,
    /// An accept failed for want of descriptors (EMFILE, ENFILE): retried from a timer
    /// (armed), said once in the log until it works again.
    accept_refused: bool,
    accept_retry_armed: bool,
}

impl Control {
    /// Bind the socket (mode 0600) and register it in the loop.
    pub fn bind(path: &Path, events: &EventLoop) -> Result<Self, DaemonError> {
        let listener = bind(path)?;
        events
            .register_fixed(listener.as_raw_fd(), LISTENER)
            .map_err(super::setup("register the control socket"))?;
        let identity = peers::Identity::own().map_err(super::setup(
            "read the daemon's own namespaces in /proc/self/ns",
        ))?;
        if !identity.proc_is_own {
            log::warn!(
                "control socket: /proc is not of this daemon's PID namespace: every client \
                 that has a pid here will be refused (mount a /proc of its own)"
            );
        }
        Ok(Control {
            listener,
            clients: HashMap::new(),
            identity,
            cgroup_mounts: peers::CgroupMounts::read(),
            refusals: peers::RefusalLog::default(),
            accept_refused: false,
            accept_retry_armed: false,
        })
    }
}

fn bind(path: &Path) -> Result<UnixListener, DaemonError> {
    // We hold the instance lock, so a socket file here is a leftover of a dead daemon.
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).map_err(|source| DaemonError::Setup {
        what: "bind the control socket",
        source,
    })?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|source| {
        DaemonError::Setup {
            what: "set the control socket's mode to 0600",
            source,
        }
    })?;
    Ok(listener)
}

fn not_persisted(unit: &str, state_dir: &Path) -> Response {
    Response::Error {
        message: format!(
            "{unit}: cannot record the request in {}: {}; nothing was done",
            state_dir.display(),
            super::unwritable::why_unwritable(state_dir)
        ),
    }
}

/// The client's pid (0: none in this PID namespace) and uid, from SO_PEERCRED.
fn peer_credentials(stream: &UnixStream) -> Result<(i32, u32), peers::Refusal> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let creds = getsockopt(stream, PeerCredentials)
        .map_err(|e| peers::Refusal(format!("cannot read the client's SO_PEERCRED: {e}")))?;
    Ok((creds.pid(), creds.uid()))
}

impl Control {
    /// Take every pending connection: a deadline for its request, or a refusal.
    pub fn accept(&mut self, events: &mut EventLoop) {
        loop {
            let accepted = match crate::state::refused_watch("accept") {
                Some(e) => Err(e),
                None => self.listener.accept(),
            };
            match accepted {
                Ok((mut stream, _)) => {
                    let (pid, refusal) = if self.clients.len() >= MAX_CLIENTS {
                        let why = format!(
                            "too many clients ({MAX_CLIENTS} connected): try again shortly"
                        );
                        (0, Err(peers::Refusal(why)))
                    } else {
                        self.judge(&stream)
                    };
                    if let Err(why) = refusal {
                        if self.refusals.should_log(&why.0, std::time::Instant::now()) {
                            log::warn!(
                                "control socket: refused a client (pid {pid}): {} (the same \
                                 refusal is not logged again for {}s)",
                                why.0,
                                peers::REFUSAL_QUIET.as_secs()
                            );
                        }
                        let message = why.to_string();
                        let line =
                            serde_json::to_string(&Response::Error { message }).unwrap_or_default();
                        let _ = stream.write_all(format!("{line}\n").as_bytes());
                        continue;
                    }
                    let token = match events.watch(&mut stream, Interest::READABLE, Source::Client)
                    {
                        Ok(token) => token,
                        Err(e) => {
                            // Told, not dropped in silence: the client can try again.
                            log::warn!("control socket: cannot watch a client: {e}");
                            let message = format!("the daemon cannot watch this connection: {e}");
                            let line = serde_json::to_string(&Response::Error { message })
                                .unwrap_or_default();
                            let _ = stream.write_all(format!("{line}\n").as_bytes());
                            continue;
                        }
                    };
                    events
                        .timers
                        .add_after(CLIENT_DEADLINE, Timer::ClientDeadline { token: token.0 });
                    self.clients.insert(
                        token,
                        Client {
                            stream,
                            input: Vec::new(),
                            output: Vec::new(),
                            waiting_for: None,
                            waiting_for_job: false,
                            done_reading: false,
                        },
                    );
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    // The connection waits in the backlog, and no new event comes for it:
                    // accepted again from a timer once descriptors are free.
                    if !self.accept_refused {
                        log::warn!(
                            "control socket accept: {e}: clients wait; accepting again every \
                             {}s",
                            ACCEPT_RETRY.as_secs()
                        );
                        self.accept_refused = true;
                    }
                    if !self.accept_retry_armed {
                        self.accept_retry_armed = true;
                        events.timers.add_after(ACCEPT_RETRY, Timer::AcceptRetry);
                    }
                    return;
                }
                Err(e) => {
                    log::warn!("control socket accept: {e}");
                    break;
                }
            }
        }
        if std::mem::take(&mut self.accept_refused) {
            log::info!("control socket: accepting clients again");
        }
    }

    /// The timer of an accept refused for want of descriptors: accept what waits.
    pub fn accept_again(&mut self, events: &mut EventLoop) {
        self.accept_retry_armed = false;
        self.accept(events);
    }

    /// Whether the client on `stream` may talk to the daemon (and its pid, for the log).
    fn judge(&self, stream: &UnixStream) -> (i32, Result<(), peers::Refusal>) {
        let (pid, uid) = match peer_credentials(stream) {
            Ok(creds) => creds,
            Err(why) => return (0, Err(why)),
        };
        use std::os::fd::AsFd;
        let pidfd = crate::sys::fds::peer_pidfd(stream.as_fd());
        let facts = peers::PeerFacts::read(pid, uid, pidfd);
        let probe = |tree: &str| self.cgroup_mounts.is_keel_tree(tree);
        (pid, peers::judge(&self.identity, &facts, &probe))
    }

    /// A client that has not sent its request (or read its answer) in time is dropped. One
    /// waiting for a stop to complete is not: a stop may take its `stop.timeout`.
    pub fn on_deadline(&mut self, token: Token, events: &mut EventLoop) {
        let Some(client) = self.clients.get(&token) else {
            return;
        };
        if client.waiting_for.is_some() || client.waiting_for_job {
            return;
        }
        log::debug!("control: dropping a client that missed its deadline");
        self.close(token, events);
    }

    /// Read what the client sent: its request once the line is complete (or why it is not
    /// one), `None` while it is not.
    fn read(&mut self, token: Token, events: &mut EventLoop) -> Option<Result<Request, String>> {
        let client = self.clients.get_mut(&token)?;
        // After the request line, input is read and discarded (never buffered).
        let into = (!client.done_reading).then_some(&mut client.input);
        let closed = super::event_loop::read_available(&mut client.stream, into, MAX_REQUEST_BYTES);
        if client.done_reading {
            if closed {
                self.close(token, events);
            }
            return None;
        }
        let line_end = client.input.iter().position(|&b| b == b'\n');
        let too_long = client.input.len() > MAX_REQUEST_BYTES;
        let request = match (line_end, too_long) {
            (Some(end), _) => {
                let line = client.input[..end].to_vec();
                client.done_reading = true;
                serde_json::from_slice::<Request>(&line)
                    .map_err(|e| format!("malformed request: {e}"))
            }
            (None, true) => {
                client.done_reading = true;
                Err("request too long".to_string())
            }
            (None, false) if closed => {
                self.close(token, events);
                return None;
            }
            (None, false) => return None,
        };
        Some(request)
    }

    /// Queue a response and close once it is written.
    pub fn respond(&mut self, token: Token, response: &Response, events: &mut EventLoop) {
        let Some(client) = self.clients.get_mut(&token) else {
            return;
        };
        let mut line = serde_json::to_vec(response).unwrap_or_default();
        line.push(b'\n');
        client.output.extend_from_slice(&line);
        let was_waiting = std::mem::take(&mut client.waiting_for_job);
        if client.waiting_for.take().is_some() || was_waiting {
            // A fresh deadline to read the answer.
            events
                .timers
                .add_after(CLIENT_DEADLINE, Timer::ClientDeadline { token: token.0 });
        }
        self.flush(token, events);
    }

    fn flush(&mut self, token: Token, events: &mut EventLoop) {
        let Some(client) = self.clients.get_mut(&token) else {
            return;
        };
        if !super::event_loop::write_pending(&mut client.stream, &mut client.output) {
            let interest = Interest::READABLE | Interest::WRITABLE;
            let _ = events.rewatch(&mut client.stream, token, interest);
            return;
        }
        if client.waiting_for.is_none() && !client.waiting_for_job && client.done_reading {
            self.close(token, events);
        }
    }

    fn close(&mut self, token: Token, events: &mut EventLoop) {
        match self.clients.remove(&token) {
            Some(mut client) => events.unwatch(&mut client.stream, token),
            None => events.forget(token),
        }
    }
}

impl Daemon {
    pub(super) fn on_client_event(&mut self, token: Token, event: &mio::event::Event) {
        if event.is_readable() {
            let request = self.control.read(token, &mut self.events);
            let response = match request {
                Some(Ok(request)) => self.handle(token, request),
                Some(Err(message)) => Some(Response::Error { message }),
                None => None,
            };
            if let Some(response) = response {
                self.respond(token, &response);
            }
        }
        if event.is_writable() {
            self.control.flush(token, &mut self.events);
        }
    }

    /// Queue a response and close once it is written.
    pub(super) fn respond(&mut self, token: Token, response: &Response) {
        self.control.respond(token, response, &mut self.events);
    }

    /// Answer the clients waiting for a stop or removal that has completed.
    pub(super) fn answer_waiters(&mut self) {
        let done: Vec<(Token, String)> = self
            .control
            .clients
            .iter()
            .filter_map(|(token, c)| {
                let (unit, generation) = c.waiting_for.as_ref()?;
                // The attempt that was live when the request came has ended (a new one may
                // already be running: `start` during a stop).
                let busy = self.tasks.get(unit).is_some_and(|t| {
                    t.record.state.has_attempt() && t.record.generation == *generation
                }) || self.tasks.removals_pending.contains(unit);
                (!busy).then(|| (*token, unit.clone()))
            })
            .collect();
        for (token, unit) in done {
            let message = match self.tasks.get(&unit) {
                Some(task) => format!("{unit}: {}", task.record.state),
                None => match self.tasks.removal_notes.remove(&unit) {
                    Some(note) => format!("{unit}: removed; {note}"),
                    None => format!("{unit}: removed"),
                },
            };
            self.respond(token, &Response::Ok { message });
        }
    }

    pub(super) fn known(&self, unit: &str) -> Result<(), Box<Response>> {
        if self.tasks.contains(unit) {
            Ok(())
        } else {
            Err(Box::new(unknown_unit(unit, &self.units)))
        }
    }

    /// Handle one request (a file per request beside this one). `None` means the answer
    /// comes later (the client waits).
    fn handle(&mut self, token: Token, request: Request) -> Option<Response> {
        log::debug!("control: {request:?}");
        match request {
            Request::Health => Some(self.health()),
            Request::Metrics => Some(self.metrics_request()),
            Request::Status { unit } => Some(self.status(unit.as_deref())),
            Request::Reload => Some(self.reload()),
            Request::MarkReviewed {
                unit,
                fingerprint,
                head,
            } => Some(self.mark_reviewed(&unit, fingerprint, head)),
            Request::Add { name, text } => Some(self.add_unit(&name, &text)),
            Request::Harvest { unit } => self.harvest_request(token, &unit),
            Request::Prune => self.prune(token),
            Request::Start { unit } => Some(self.start_request(&unit)),
            Request::Restart { unit } => Some(self.restart_request(&unit)),
            Request::Stop { unit } => self.stop_request(token, &unit),
            Request::Kill { unit, signal } => Some(self.kill_request(&unit, signal)),
            Request::Pause { unit } => Some(self.pause_request(unit.as_deref())),
            Request::Resume { unit } => Some(self.resume_request(unit.as_deref())),
            Request::Remove { unit, force } => self.remove_request(token, &unit, force),
            Request::Shutdown { keep_tasks } => Some(self.shutdown_request(keep_tasks)),
        }
    }
}

/// A request names a unit the daemon does not know.
fn unknown_unit(unit: &str, units: &UnitsDir) -> Response {
    Response::Error {
        message: format!(
            "unknown unit {unit:?} (keel status lists the units; unit files live in {})",
            units.dir.display()
        ),
    }
}

/// The client's answer comes once a job has ended (the job answers it through its token).
fn answer_when_job_ends(control: &mut Control, token: Token) -> Option<Response> {
    if let Some(client) = control.clients.get_mut(&token) {
        client.waiting_for_job = true;
    }
    None
}

/// The client's answer comes once the attempt `generation` of `unit` has ended (or the task
/// is gone), from [`Daemon::answer_waiters`].
fn answer_when_ended(
    control: &mut Control,
    token: Token,
    unit: &str,
    generation: u64,
) -> Option<Response> {
    if let Some(client) = control.clients.get_mut(&token) {
        client.waiting_for = Some((unit.to_string(), generation));
    }
    None
}
