//! The control socket: `state_dir/keel.sock`, mode 0600, peers checked with SO_PEERCRED (root
//! or the daemon's own uid). One JSON request line per connection, one JSON response line.
//! A client's mistake gets an error response; it never takes the daemon down.

use super::record::{Intent, TaskState};
use super::timers::Timer;
use super::{Daemon, DaemonError, Shutdown, Source};
use crate::protocol::{Request, Response};
use mio::net::{UnixListener, UnixStream};
use mio::{Interest, Token};
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// Requests are small; anything longer is a confused or hostile client.
const MAX_REQUEST_BYTES: usize = 4 << 20;
/// A client has this long to send its request, and again to read its answer: an idle
/// connection must not hold a descriptor forever.
const CLIENT_DEADLINE: Duration = Duration::from_secs(10);
/// More simultaneous clients than this are answered with an error and closed.
const MAX_CLIENTS: usize = 256;

pub(crate) struct Client {
    stream: UnixStream,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Waiting for a task's attempt (unit, generation) to end before answering (stop, rm).
    waiting_for: Option<(String, u64)>,
    done_reading: bool,
}

pub(super) fn bind(path: &Path) -> Result<UnixListener, DaemonError> {
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

fn peer_allowed(stream: &UnixStream) -> Result<(), String> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let creds = getsockopt(stream, PeerCredentials).map_err(|e| format!("SO_PEERCRED: {e}"))?;
    let own = nix::unistd::geteuid().as_raw();
    if creds.uid() == 0 || creds.uid() == own {
        Ok(())
    } else {
        Err(format!(
            "uid {} may not control this daemon (only root and uid {own})",
            creds.uid()
        ))
    }
}

impl Daemon {
    pub(super) fn accept_clients(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    let refusal = if self.clients.len() >= MAX_CLIENTS {
                        Err(format!(
                            "too many clients ({MAX_CLIENTS} connected): try again shortly"
                        ))
                    } else {
                        peer_allowed(&stream)
                    };
                    if let Err(why) = refusal {
                        log::warn!("control socket: refused a client: {why}");
                        let line = serde_json::to_string(&Response::Error { message: why })
                            .unwrap_or_default();
                        let _ = stream.write_all(format!("{line}\n").as_bytes());
                        continue;
                    }
                    let token = self.new_token();
                    if self
                        .poll
                        .registry()
                        .register(&mut stream, token, Interest::READABLE)
                        .is_err()
                    {
                        continue;
                    }
                    self.sources.insert(token, Source::Client);
                    self.timers
                        .add_after(CLIENT_DEADLINE, Timer::ClientDeadline { token: token.0 });
                    self.clients.insert(
                        token,
                        Client {
                            stream,
                            input: Vec::new(),
                            output: Vec::new(),
                            waiting_for: None,
                            done_reading: false,
                        },
                    );
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    log::warn!("control socket accept: {e}");
                    break;
                }
            }
        }
    }

    /// A client that has not sent its request (or read its answer) in time is dropped. One
    /// waiting for a stop to complete is not: a stop may take its `stop.timeout`.
    pub(super) fn on_client_deadline(&mut self, token: Token) {
        let Some(client) = self.clients.get(&token) else {
            return;
        };
        if client.waiting_for.is_some() {
            return;
        }
        log::debug!("control: dropping a client that missed its deadline");
        self.close_client(token);
    }

    pub(super) fn on_client_event(&mut self, token: Token, event: &mio::event::Event) {
        if event.is_readable() {
            self.read_client(token);
        }
        if event.is_writable() {
            self.flush_client(token);
        }
    }

    fn read_client(&mut self, token: Token) {
        let Some(client) = self.clients.get_mut(&token) else {
            return;
        };
        let mut buf = [0u8; 8192];
        let mut closed = false;
        loop {
            match client.stream.read(&mut buf) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                // After the request line, input is read and discarded (never buffered).
                Ok(_) if client.done_reading => {}
                Ok(n) => client.input.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        if client.done_reading {
            if closed {
                self.close_client(token);
            }
            return;
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
                self.close_client(token);
                return;
            }
            (None, false) => return,
        };
        let response = match request {
            Ok(request) => self.handle(token, request),
            Err(message) => Some(Response::Error { message }),
        };
        if let Some(response) = response {
            self.respond(token, &response);
        }
    }

    /// Queue a response and close once it is written.
    pub(super) fn respond(&mut self, token: Token, response: &Response) {
        let Some(client) = self.clients.get_mut(&token) else {
            return;
        };
        let mut line = serde_json::to_vec(response).unwrap_or_default();
        line.push(b'\n');
        client.output.extend_from_slice(&line);
        if client.waiting_for.take().is_some() {
            // A fresh deadline to read the answer.
            self.timers
                .add_after(CLIENT_DEADLINE, Timer::ClientDeadline { token: token.0 });
        }
        self.flush_client(token);
    }

    fn flush_client(&mut self, token: Token) {
        let Some(client) = self.clients.get_mut(&token) else {
            return;
        };
        while !client.output.is_empty() {
            match client.stream.write(&client.output) {
                Ok(n) => {
                    client.output.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let _ = self.poll.registry().reregister(
                        &mut client.stream,
                        token,
                        Interest::READABLE | Interest::WRITABLE,
                    );
                    return;
                }
                Err(_) => {
                    client.output.clear();
                    break;
                }
            }
        }
        if client.waiting_for.is_none() && client.done_reading {
            self.close_client(token);
        }
    }

    fn close_client(&mut self, token: Token) {
        if let Some(mut client) = self.clients.remove(&token) {
            let _ = self.poll.registry().deregister(&mut client.stream);
        }
        self.sources.remove(&token);
    }

    /// Answer the clients waiting for a stop or removal that has completed.
    pub(super) fn answer_waiters(&mut self) {
        let done: Vec<(Token, String)> = self
            .clients
            .iter()
            .filter_map(|(token, c)| {
                let (unit, generation) = c.waiting_for.as_ref()?;
                // The attempt that was live when the request came has ended (a new one may
                // already be running: `start` during a stop).
                let busy = self.tasks.get(unit).is_some_and(|t| {
                    t.record.state.has_attempt() && t.record.generation == *generation
                });
                (!busy).then(|| (*token, unit.clone()))
            })
            .collect();
        for (token, unit) in done {
            let message = match self.tasks.get(&unit) {
                Some(task) => format!("{unit}: {}", task.record.state),
                None => match self.removal_notes.remove(&unit) {
                    Some(note) => format!("{unit}: removed; {note}"),
                    None => format!("{unit}: removed"),
                },
            };
            self.respond(token, &Response::Ok { message });
        }
    }

    pub(super) fn known(&self, unit: &str) -> Result<(), Box<Response>> {
        if self.tasks.contains_key(unit) {
            Ok(())
        } else {
            Err(Box::new(Response::Error {
                message: format!(
                    "unknown unit {unit:?} (keel status lists the units; unit files live in {})",
                    self.units_dir.display()
                ),
            }))
        }
    }

    /// Handle one request. `None` means the answer comes later (the client waits).
    fn handle(&mut self, token: Token, request: Request) -> Option<Response> {
        log::debug!("control: {request:?}");
        let wait_for = |daemon: &mut Daemon, unit: &str| {
            let generation = daemon.tasks.get(unit).map_or(0, |t| t.record.generation);
            if let Some(client) = daemon.clients.get_mut(&token) {
                client.waiting_for = Some((unit.to_string(), generation));
            }
            None
        };
        match request {
            // Read and answered by the loop: the answer is the proof that the loop runs
            // (systemd.rs). `loop_age_ms` is how long this round had run before answering.
            Request::Health => Some(Response::Health {
                pid: std::process::id() as i32,
                loop_age_ms: self.last_tick.elapsed().as_millis() as u64,
                tasks: self.tasks.len(),
            }),
            Request::Status { unit } => Some(self.status(unit.as_deref())),
            Request::Reload => {
                let config = self.reload_config();
                self.scan_units();
                Some(match config {
                    Ok(()) => Response::Ok {
                        message: format!("reloaded {} units", self.tasks.len()),
                    },
                    Err(message) => Response::Error { message },
                })
            }
            Request::Add { name, text } => Some(self.add_unit(&name, &text)),
            Request::Harvest { unit } => Some(self.harvest_request(&unit)),
            Request::Prune => Some(self.prune()),
            Request::Start { unit } => {
                if let Err(e) = self.known(&unit) {
                    return Some(*e);
                }
                Some(self.user_start(&unit))
            }
            Request::Stop { unit } => {
                if let Err(e) = self.known(&unit) {
                    return Some(*e);
                }
                if !self.stop_task(&unit, Intent::Stop) {
                    return Some(not_persisted(&unit, &self.dirs.root));
                }
                wait_for(self, &unit)
            }
            Request::Restart { unit } => {
                if let Err(e) = self.known(&unit) {
                    return Some(*e);
                }
                if !self.stop_task(&unit, Intent::Restart) {
                    return Some(not_persisted(&unit, &self.dirs.root));
                }
                Some(Response::Ok {
                    message: format!("{unit}: restarting"),
                })
            }
            Request::Remove { unit, force } => {
                if let Err(e) = self.known(&unit) {
                    // A task forgotten when its unit file went away leaves its directory
                    // (checkpoint, work, logs) behind: `keel rm` removes that too.
                    return Some(match self.remove_leftovers(&unit, force) {
                        Some(message) => Response::Ok { message },
                        None => *e,
                    });
                }
                let path = self.units_dir.join(format!("{unit}.ron"));
                if let Err(e) = std::fs::remove_file(&path) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        return Some(Response::Error {
                            message: format!("cannot remove {}: {e}", path.display()),
                        });
                    }
                }
                if let Some(task) = self.tasks.get_mut(&unit) {
                    task.unit = None;
                    task.unit_text = None;
                    task.force_remove = force;
                }
                if !self.stop_task(&unit, Intent::Remove) {
                    return Some(not_persisted(&unit, &self.dirs.root));
                }
                wait_for(self, &unit)
            }
            Request::Kill { unit, signal } => {
                if let Err(e) = self.known(&unit) {
                    return Some(*e);
                }
                let Some(to_shim) = crate::sandbox::spec::signal_for_shim(signal) else {
                    return Some(Response::Error {
                        message: format!(
                            "{} cannot be sent to a task: use SIGKILL, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH or SIGCONT",
                            crate::fmt::signal_name(signal)
                        ),
                    });
                };
                let sent = self.signal_shim(&unit, to_shim);
                Some(if sent {
                    Response::Ok {
                        message: format!("{unit}: sent {}", crate::fmt::signal_name(signal)),
                    }
                } else {
                    Response::Error {
                        message: format!("{unit}: not running"),
                    }
                })
            }
            Request::Shutdown { keep_tasks } => {
                if keep_tasks && self.under_init.is_some() {
                    return Some(Response::Error {
                        message: "under keel init, --keep-tasks would end PID 1 and with it every task; to restart the daemon alone, kill it: keel init respawns it and the tasks are re-adopted".into(),
                    });
                }
                let kind = if keep_tasks {
                    Shutdown::KeepTasks
                } else {
                    Shutdown::StopTasks { exit_code: 0 }
                };
                self.begin_shutdown(kind);
                Some(Response::Ok {
                    message: if keep_tasks {
                        "shutting down; tasks keep running".into()
                    } else {
                        "shutting down; stopping tasks".into()
                    },
                })
            }
        }
    }

    fn user_start(&mut self, unit: &str) -> Response {
        let Some(task) = self.tasks.get_mut(unit) else {
            return Response::Error {
                message: format!("unknown unit {unit:?}"),
            };
        };
        if task.unit.is_none() {
            return Response::Error {
                message: format!("{unit}: its unit file is gone or invalid (see keel status)"),
            };
        }
        match task.record.state {
            TaskState::Succeeded | TaskState::Failed | TaskState::Stopped | TaskState::Backoff => {
                task.record.restarts.clear();
                task.record.consecutive_failures = 0;
                task.record.backoff_until_ms = None;
                task.record.reason = None;
                self.transition(unit, TaskState::Queued, "started by request");
                self.schedule_pending = true;
                Response::Ok {
                    message: format!("{unit}: queued"),
                }
            }
            TaskState::Stopping => {
                // A start during a stop: start again once it has stopped (unless removed).
                if !self.stop_task(unit, Intent::Restart) {
                    return not_persisted(unit, &self.dirs.root);
                }
                Response::Ok {
                    message: format!("{unit}: starts again once stopped"),
                }
            }
            state => Response::Ok {
                message: format!("{unit}: already {state}"),
            },
        }
    }

    /// `keel add`: validate, then install atomically into the units directory.
    fn add_unit(&mut self, name: &str, text: &str) -> Response {
        if let Err(message) = crate::unit::validate_name(name) {
            return Response::Error { message };
        }
        let path = self.units_dir.join(format!("{name}.ron"));
        let unit = match crate::unit::parse_unit(&path, text) {
            Ok(unit) => unit,
            Err(e) => {
                return Response::Error {
                    message: e.to_string(),
                }
            }
        };
        if let Some(repo) = &unit.repo {
            // A repository that is missing, not git, without the base, or a branch taken at
            // another commit: refused now, nothing started.
            if let Err(e) = crate::checkout::check(&self.dirs, name, repo) {
                return Response::Error {
                    message: format!("{name}: {e}"),
                };
            }
        }
        let reservation = super::queue::Reservation::of(&unit.resources);
        if let Some(why) = super::queue::never_fits(&reservation, &self.config.capacity) {
            return Response::Error {
                message: format!("{name}: can never start: {why}"),
            };
        }
        if let Err(e) = crate::state::atomic_write(&path, text.as_bytes()) {
            return Response::Error {
                message: format!("cannot install the unit: {e}"),
            };
        }
        self.scan_units();
        Response::Ok {
            message: format!("{name}: installed as {}", path.display()),
        }
    }
}
