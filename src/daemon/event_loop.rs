//! The loop's sources and timers: the mio poll, the signal pipe, the token of every registered
//! descriptor (shims' pidfds, OOM watches, clients, workers' stdout) and the deadline queue.

use super::task::LiveShim;
use super::timers::Timers;
use super::DaemonError;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use signal_hook_mio::v1_0::Signals;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Instant;

pub(crate) const SIGNALS: Token = Token(0);
pub(crate) const INOTIFY: Token = Token(1);
pub(crate) const LISTENER: Token = Token(2);
pub(crate) const LIVENESS: Token = Token(3);
const FIRST_DYNAMIC_TOKEN: usize = 16;

/// What a dynamic token stands for.
pub(crate) enum Source {
    Shim(String),
    Oom(String),
    Client,
    /// A worker's stdout (the jobs subsystem, `jobs/`).
    Job(u64),
}

pub(crate) struct EventLoop {
    poll: Poll,
    pub signals: Signals,
    sources: HashMap<Token, Source>,
    next_token: usize,
    pub timers: Timers,
    /// When the current round began (after the poll returned): `keel health`'s loop age.
    pub last_tick: Instant,
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
    }

    /// Forget a token whose source is gone already.
    pub fn forget(&mut self, token: Token) {
        self.sources.remove(&token);
    }

    /// Watch a new shim's pidfd: readable when the shim has ended.
    pub fn watch_shim(&mut self, unit: &str, pid: i32, pidfd: OwnedFd) -> LiveShim {
        let fd = pidfd.as_raw_fd();
        let what = Source::Shim(unit.to_string());
        let token = match self.watch(&mut SourceFd(&fd), Interest::READABLE, what) {
            Ok(token) => token,
            Err(e) => {
                // Kept as a token of its own all the same, as before: the shim's end is then
                // noticed by the reaper and reconcile, not by its pidfd.
                log::error!("{unit}: cannot watch shim {pid}: {e}");
                let token = self.new_token();
                self.sources.insert(token, Source::Shim(unit.to_string()));
                token
            }
        };
        LiveShim { pid, pidfd, token }
    }

    pub fn unwatch_shim(&mut self, shim: &LiveShim) {
        let fd = shim.pidfd.as_raw_fd();
        self.unwatch(&mut SourceFd(&fd), shim.token);
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
