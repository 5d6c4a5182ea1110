//! The loop's sources and timers: the mio poll, the signal pipe, the token of every registered
//! descriptor (shims' pidfds, OOM watches, clients, workers' stdout) and the deadline queue. A
//! registration the kernel refuses (ENOSPC, EMFILE) keeps its token: the source is then checked
//! on a timer and registered again when the kernel allows (`refused.rs`).

use super::task::LiveShim;
use super::timers::Timers;
use super::DaemonError;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use signal_hook_mio::v1_0::Signals;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Instant;

mod refused;
pub(crate) use refused::{note as polled_note, refusal, Fallback, POLL_EVERY};

pub(crate) const SIGNALS: Token = Token(0);
pub(crate) const INOTIFY: Token = Token(1);
pub(crate) const LISTENER: Token = Token(2);
pub(crate) const LIVENESS: Token = Token(3);
/// `keel daemon --metrics`'s listening socket (host_sleep.rs has 4).
pub(crate) const METRICS_LISTENER: Token = Token(5);
const FIRST_DYNAMIC_TOKEN: usize = 16;
/// What a shim's pidfd tells, and what a slice's OOM watch tells (the log, `keel status`).
pub(crate) const SHIM_EXIT: &str = "shim exit";
pub(crate) const OOM_KILLS: &str = "OOM kills";

/// The test hook's name for a registration (`KEEL_TEST_REFUSE_WATCH`).
fn hook_kind(what: &str) -> &'static str {
    match what {
        SHIM_EXIT => "shim",
        OOM_KILLS => "oom",
        _ => "other",
    }
}

/// What a dynamic token stands for.
pub(crate) enum Source {
    Shim(String),
    Oom(String),
    Client,
    /// A worker's stdout (the jobs subsystem, `jobs/`).
    Job(u64),
    /// A scrape connection of `--metrics` (`metrics_server.rs`).
    Scraper,
}

pub(crate) struct EventLoop {
    poll: Poll,
    pub signals: Signals,
    sources: HashMap<Token, Source>,
    next_token: usize,
    pub timers: Timers,
    /// When the current round began (after the poll returned): `keel health`'s loop age.
    pub last_tick: Instant,
    /// Registered tokens whose descriptor the kernel refused to watch: checked on a timer.
    refused: HashMap<Token, RefusedSource>,
    /// The timer that checks refused sources ([`super::timers::Timer::WatchFallback`]) is
    /// in the queue.
    pub fallback_armed: bool,
}

/// A descriptor the kernel refused to watch, and what to register it for once it allows.
struct RefusedSource {
    fd: RawFd,
    interest: Interest,
    /// What the descriptor tells, for the log and `keel status` (`shim exit`, `OOM kills`).
    what: &'static str,
    fallback: Fallback,
}

impl EventLoop {
    /// The poll, with the signals the daemon handles registered (and the inherited signal
    /// mask cleared).
    pub fn new() -> Result<Self, DaemonError> {
        let setup = super::setup;
        let poll = Poll::new().map_err(setup("create the event loop"))?;
        let mut signals = Signals::new([
            libc::SIGCHLD,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ])
        .map_err(setup("install signal handlers"))?;
        poll.registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)
            .map_err(setup("register signals"))?;
        // A parent may hand us a blocked signal mask (keel init blocks what it forwards; std's
        // spawn keeps the mask): with our handlers in place, unblock everything.
        nix::sys::signal::sigprocmask(
            nix::sys::signal::SigmaskHow::SIG_SETMASK,
            Some(&nix::sys::signal::SigSet::empty()),
            None,
        )
        .map_err(|e| DaemonError::Setup {
            what: "reset the signal mask",
            source: e.into(),
        })?;
        Ok(EventLoop {
            poll,
            signals,
            sources: HashMap::new(),
            next_token: FIRST_DYNAMIC_TOKEN,
            timers: Timers::default(),
            last_tick: Instant::now(),
            refused: HashMap::new(),
            fallback_armed: false,
        })
    }

    /// Register a descriptor of a fixed token (inotify, the control socket).
    pub fn register_fixed(&self, fd: RawFd, token: Token) -> std::io::Result<()> {
        self.poll
            .registry()
            .register(&mut SourceFd(&fd), token, Interest::READABLE)
    }

    fn new_token(&mut self) -> Token {
        self.next_token += 1;
        Token(self.next_token)
    }

    /// What a dynamic token stands for, if it is still registered.
    pub fn source(&self, token: Token) -> Option<&Source> {
        self.sources.get(&token)
    }

    /// Register `source` (a descriptor, a socket) for `interest` under a new token that stands
    /// for `what`.
    pub fn watch(
        &mut self,
        source: &mut impl mio::event::Source,
        interest: Interest,
        what: Source,
    ) -> std::io::Result<Token> {
        let token = self.new_token();
        self.poll.registry().register(source, token, interest)?;
        self.sources.insert(token, what);
        Ok(token)
    }

    /// Change what a registered source is watched for.
    pub fn rewatch(
        &self,
        source: &mut impl mio::event::Source,
        token: Token,
        interest: Interest,
    ) -> std::io::Result<()> {
        self.poll.registry().reregister(source, token, interest)
    }

    /// Stop watching `source` and forget its token.
    pub fn unwatch(&mut self, source: &mut impl mio::event::Source, token: Token) {
        let _ = self.poll.registry().deregister(source);
        self.sources.remove(&token);
        self.refused.remove(&token);
    }

    /// Forget a token whose source is gone already.
    pub fn forget(&mut self, token: Token) {
        self.sources.remove(&token);
        self.refused.remove(&token);
    }

    /// Watch the descriptor `fd` (`what` it tells: `shim exit`, `OOM kills`) under a new
    /// token that stands for `source`. Refused by the kernel, the token is kept all the same:
    /// the source is then checked on a timer ([`EventLoop::refused_due`]) and registered again
    /// when the kernel allows. Said once in the log.
    pub fn watch_fd(
        &mut self,
        fd: RawFd,
        interest: Interest,
        source: Source,
        what: &'static str,
        name: &str,
    ) -> Token {
        let token = self.new_token();
        let registered = match crate::state::refused_watch(hook_kind(what)) {
            Some(e) => Err(e),
            None => self
                .poll
                .registry()
                .register(&mut SourceFd(&fd), token, interest),
        };
        if let Err(e) = registered {
            let fallback = Fallback::new(refusal("epoll", &e), Instant::now());
            log::warn!(
                "{name}: cannot watch its {what} ({}): checking it every {}s instead, and \
                 watching again when the kernel allows",
                fallback.why,
                POLL_EVERY.as_secs()
            );
            self.refused.insert(
                token,
                RefusedSource {
                    fd,
                    interest,
                    what,
                    fallback,
                },
            );
        }
        self.sources.insert(token, source);
        token
    }

    /// Watch a new shim's pidfd: readable when the shim has ended.
    pub fn watch_shim(&mut self, unit: &str, pid: i32, pidfd: OwnedFd) -> LiveShim {
        let fd = pidfd.as_raw_fd();
        let source = Source::Shim(unit.to_string());
        let token = self.watch_fd(fd, Interest::READABLE, source, SHIM_EXIT, unit);
        LiveShim { pid, pidfd, token }
    }

    pub fn unwatch_shim(&mut self, shim: &LiveShim) {
        let fd = shim.pidfd.as_raw_fd();
        self.unwatch(&mut SourceFd(&fd), shim.token);
    }

    /// Whether any registered source is checked on a timer.
    pub fn has_refused(&self) -> bool {
        !self.refused.is_empty()
    }

    /// For `keel status`: how the source of `token` is watched, when not by the kernel
    /// (`shim exit: polled every 1s (epoll: No space left on device)`).
    pub fn refused_note(&self, token: Token) -> Option<String> {
        let refused = self.refused.get(&token)?;
        Some(refused::note(refused.what, &refused.fallback))
    }

    /// The timer of refused sources: try again to watch those whose retry is due (said in the
    /// log when the kernel allows), and return every token that was refused, to be checked by
    /// its owner now (a source watched again may have become ready before).
    pub fn refused_due(&mut self) -> Vec<Token> {
        let now = Instant::now();
        let tokens: Vec<Token> = self.refused.keys().copied().collect();
        for &token in &tokens {
            let Some(refused) = self.refused.get_mut(&token) else {
                continue;
            };
            if !refused.fallback.retry_due(now) {
                continue;
            }
            let registered = match crate::state::refused_watch(hook_kind(refused.what)) {
                Some(e) => Err(e),
                None => self.poll.registry().register(
                    &mut SourceFd(&refused.fd),
                    token,
                    refused.interest,
                ),
            };
            match registered {
                Ok(()) => {
                    let name = match self.sources.get(&token) {
                        Some(Source::Shim(unit) | Source::Oom(unit)) => unit.as_str(),
                        _ => "",
                    };
                    log::info!("{name}: its {} is watched again", refused.what);
                    self.refused.remove(&token);
                }
                Err(e) => refused.fallback.refused_again(refusal("epoll", &e), now),
            }
        }
        tokens
    }

    /// Stop the events of a descriptor of a fixed token for a while (its readiness is kept by
    /// the kernel: [`EventLoop::resume_fixed`] reports it).
    pub fn pause_fixed(&self, fd: RawFd) {
        let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
    }

    /// Watch a paused descriptor again; if it became readable meanwhile, the next wait says so.
    pub fn resume_fixed(&self, fd: RawFd, token: Token) -> std::io::Result<()> {
        if let Some(e) = crate::state::refused_watch("events") {
            return Err(e);
        }
        self.register_fixed(fd, token)
    }

    /// Sleep until an event or the earliest timer. False when the poll failed (a signal
    /// interrupted it): nothing to handle this round.
    pub fn wait(&mut self, events: &mut Events) -> bool {
        let timeout = self.timers.timeout(Instant::now());
        if let Err(e) = self.poll.poll(events, timeout) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                log::error!("event loop poll failed: {e}");
            }
            return false;
        }
        self.last_tick = Instant::now();
        true
    }
}

impl super::Daemon {
    /// A shim's pidfd or a slice's OOM watch is ready (an event, or found so on the timer of
    /// refused watches).
    pub(super) fn on_source_event(&mut self, token: Token) {
        match self.events.source(token) {
            Some(Source::Shim(unit)) => {
                let unit = unit.clone();
                self.on_shim_exit(&unit);
            }
            Some(Source::Oom(unit)) => {
                let unit = unit.clone();
                self.on_oom_event(&unit, true);
            }
            Some(Source::Client | Source::Job(_) | Source::Scraper) | None => {}
        }
    }

    /// While any watch is refused, its timer is in the queue ([`POLL_EVERY`]).
    pub(super) fn arm_watch_fallback(&mut self) {
        let refused = self.events.has_refused() || self.liveness.has_refused();
        if refused && !self.events.fallback_armed {
            self.events.fallback_armed = true;
            (self.events.timers).add_after(POLL_EVERY, super::timers::Timer::WatchFallback);
        }
    }

    /// The timer of refused watches: try watching again those whose retry is due, and look at
    /// each source now — an ended shim (its pidfd readable) is settled, an OOM counter read,
    /// a progress file's mtime compared.
    pub(super) fn on_watch_fallback_due(&mut self) {
        self.events.fallback_armed = false;
        for token in self.events.refused_due() {
            match self.events.source(token) {
                Some(Source::Shim(unit)) => {
                    let shim = self.tasks.get(unit).and_then(|t| t.shim.as_ref());
                    if shim.is_some_and(|shim| ended(&shim.pidfd)) {
                        let unit = unit.clone();
                        self.on_shim_exit(&unit);
                    }
                }
                // The counter is read whether or not the kernel's notification is pending.
                Some(Source::Oom(unit)) => {
                    let unit = unit.clone();
                    self.on_oom_event(&unit, false);
                }
                Some(Source::Client | Source::Job(_) | Source::Scraper) | None => {}
            }
        }
        self.look_at_polled_progress();
        self.arm_watch_fallback();
    }
}

/// At most this much is read *and discarded* from one connection per readiness event: a peer
/// that writes as fast as it can after its request (and never reads its answer, so the
/// connection stays open) gets its turn, then the loop goes back to everything else. (What is
/// kept is bounded by `limit` instead, and read to the end: readiness is edge-triggered, and a
/// request left half-read in the socket would wake nobody.)
const DISCARD_BUDGET: usize = 64 * 1024;

/// Read what a non-blocking `stream` holds now, without waiting: appended to `into` until it
/// is longer than `limit`, or (`None`) read and discarded, at most [`DISCARD_BUDGET`] bytes.
/// True when the peer has closed the connection (or it failed).
pub(crate) fn read_available(
    stream: &mut impl std::io::Read,
    mut into: Option<&mut Vec<u8>>,
    limit: usize,
) -> bool {
    let mut buf = [0u8; 8192];
    let mut read = 0usize;
    loop {
        if into.is_none() && read >= DISCARD_BUDGET {
            // What is left stays in the socket; more arriving (or a hang-up) wakes us again.
            return false;
        }
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => {
                read += n;
                if let Some(into) = into.as_deref_mut() {
                    into.extend_from_slice(&buf[..n]);
                    if into.len() > limit {
                        return false;
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

/// Write what of `output` a non-blocking `stream` takes now (written bytes leave `output`).
/// False when it would block with some left (to be written once it is writable); true when
/// all is written, or the peer is gone (`output` is then cleared).
pub(crate) fn write_pending(stream: &mut impl std::io::Write, output: &mut Vec<u8>) -> bool {
    while !output.is_empty() {
        match stream.write(output) {
            Ok(n) => {
                output.drain(..n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => output.clear(),
        }
    }
    true
}

/// Whether the process of `pidfd` has ended (its pidfd is readable), without waiting.
fn ended(pidfd: &OwnedFd) -> bool {
    use std::os::fd::AsFd;
    crate::sys::fds::wait_readable(pidfd.as_fd(), Some(std::time::Duration::ZERO))
}

#[cfg(test)]
mod tests;
