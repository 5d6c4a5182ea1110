//! The supervisor: one synchronous mio loop (no async runtime, no threads) that owns the
//! units, the queue, the timers, the journal and the control socket.

mod checkouts;
mod control;
mod lifecycle;
mod liveness;
pub mod policy;
pub mod queue;
pub mod reconcile;
pub mod record;
mod recovery;
mod settings;
mod slices;
pub mod spawn;
mod status;
mod stopping;
mod systemd;
mod task;
pub mod timers;
mod units_dir;
mod unwritable;

pub(crate) use task::{LiveShim, Task};

use crate::state::{now_ms, Event, InstanceLock, Journal, StateDir, StateError};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use signal_hook_mio::v1_0::Signals;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use timers::{Timer, Timers};

pub use settings::default_cgroup_name;
pub use spawn::{attempt_spec, last_progress_line, spawn_shim, spawn_shim_program, AttemptContext};
pub use stopping::merge_intent;

const SIGNALS: Token = Token(0);
const INOTIFY: Token = Token(1);
const LISTENER: Token = Token(2);
const LIVENESS: Token = Token(3);
const FIRST_DYNAMIC_TOKEN: usize = 16;

/// After the stop timeout's SIGKILL, how long before the shim itself is killed.
const FORCE_KILL_GRACE: Duration = Duration::from_secs(5);

pub struct Options {
    pub state_dir: PathBuf,
    pub units_dir: PathBuf,
    /// Given with `--units`: it must exist (a typo or an unmounted filesystem must not look
    /// like "every unit was removed"). The default `STATE/units` is created.
    pub units_dir_explicit: bool,
    /// `--config PATH`; default `STATE/keel.ron` (a missing file means every default).
    pub config_path: Option<PathBuf>,
    /// The name of keel's cgroup tree under the cgroup the daemon starts in; `None`: derived
    /// from the state directory ([`default_cgroup_name`]).
    pub cgroup_name: Option<String>,
}

enum Source {
    Shim(String),
    Oom(String),
    Client,
}

/// Why the loop is ending.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Shutdown {
    /// Stop every task (they resume at the next start), then exit with this code.
    StopTasks { exit_code: i32 },
    /// Leave tasks running, to be re-adopted by the next daemon.
    KeepTasks,
}

pub struct Daemon {
    dirs: StateDir,
    units_dir: PathBuf,
    poll: Poll,
    signals: Signals,
    watch: units_dir::UnitsWatch,
    listener: mio::net::UnixListener,
    pub(crate) tasks: BTreeMap<String, Task>,
    /// Unit files that failed to parse: file name → `file:line:col: message`.
    invalid_units: BTreeMap<String, String>,
    sources: HashMap<Token, Source>,
    next_token: usize,
    clients: HashMap<Token, control::Client>,
    timers: Timers,
    journal: Journal,
    /// Exit statuses of shims reaped before their pidfd event was handled.
    reaped: HashMap<i32, nix::sys::wait::WaitStatus>,
    shutdown: Option<Shutdown>,
    /// `Some(instance)` under `keel init` (its pid, start time and boot id).
    under_init: Option<String>,
    started_ms: u64,
    last_tick: Instant,
    schedule_pending: bool,
    /// The units directory changed: rescan at this instant (pushed back by each new event).
    rescan_at: Option<Instant>,
    /// The first event of the current burst (bounds how long a rescan can be pushed back).
    rescan_first: Option<Instant>,
    boot_id: String,
    /// `keel.ron`: capacity and starvation limit (re-read on reload).
    config: crate::config::Config,
    config_path: PathBuf,
    host: crate::config::HostCapacity,
    /// keel's cgroup tree, or why there is none (retried at each reload).
    slices: slices::Slices,
    cgroup_name: String,
    /// What is seen of each live attempt's work (progress files, output, CPU).
    liveness: liveness::Watches,
    /// systemd's notify socket and watchdog (no-ops elsewhere).
    notifier: crate::notify::Notifier,
    /// What `keel rm` did with a removed task's files, for the client waiting on it.
    removal_notes: HashMap<String, String>,
    /// Read-only host views copied by each sandboxed start (dropped while nothing runs).
    templates: crate::sandbox::templates::SandboxTemplates,
    /// A [`Timer::ReplenishSpare`] is pending.
    spare_due: bool,
    /// The task counts may have changed this round (for systemd's `STATUS=`).
    summary_dirty: bool,
    _lock: InstanceLock,
}

/// Start-up failures: each names what to fix.
#[derive(Debug)]
pub enum DaemonError {
    State(StateError),
    Config(String),
    Setup {
        what: &'static str,
        source: std::io::Error,
    },
}

impl std::fmt::Display for DaemonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DaemonError::State(e) => write!(f, "{e}"),
            DaemonError::Config(message) => f.write_str(message),
            DaemonError::Setup { what, source } => write!(f, "cannot {what}: {source}"),
        }
    }
}

impl From<StateError> for DaemonError {
    fn from(e: StateError) -> Self {
        DaemonError::State(e)
    }
}

fn setup(what: &'static str) -> impl FnOnce(std::io::Error) -> DaemonError {
    move |source| DaemonError::Setup { what, source }
}

impl Daemon {
    /// Take the state directory (lock first: a second daemon stops here), open the journal,
    /// the control socket, inotify and the signal pipe.
    pub fn new(options: Options) -> Result<Self, DaemonError> {
        let dirs = StateDir::new(&options.state_dir);
        let mut templates =
            crate::sandbox::templates::SandboxTemplates::new(dirs.root.join("templates"));
        dirs.create()?;
        let lock = InstanceLock::acquire(&dirs.lock_path())?;
        if options.units_dir_explicit && !options.units_dir.is_dir() {
            return Err(DaemonError::Config(format!(
                "units directory {} does not exist: create it, or fix --units",
                options.units_dir.display()
            )));
        }
        std::fs::create_dir_all(&options.units_dir).map_err(setup("create the units directory"))?;
        let _ = std::fs::remove_file(dirs.exit_status_path());
        let journal = Journal::open(&dirs.events_path())?;
        let config_path = options
            .config_path
            .clone()
            .unwrap_or_else(|| dirs.root.join(crate::config::CONFIG_FILE));
        // What keel may use: the host's CPUs and memory, capped by the cgroup it starts in.
        let cgroup_name = options
            .cgroup_name
            .clone()
            .unwrap_or_else(|| default_cgroup_name(&dirs.root));
        let layout = crate::cgroup::detect(&cgroup_name);
        let (quota, memory_limit) = layout.as_ref().map_or((None, None), |l| {
            (l.base_cpu_quota(), l.base_memory_limit())
        });
        let host = crate::config::HostCapacity::detect(quota, memory_limit)
            .map_err(setup("read the host's CPUs and memory (/proc/meminfo)"))?;
        let config = settings::load_at_start(&dirs, &config_path, &host)?;
        raise_open_file_limit();

        let under_init = std::env::var("KEEL_UNDER_INIT")
            .ok()
            .filter(|v| !v.is_empty());
        if std::process::id() != 1 {
            crate::sys::set_child_subreaper().map_err(setup("become a child subreaper"))?;
        }

        let slices = slices::setup_slices(layout, &cgroup_name);
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        templates.spares_pay_off(slices::spares_pay_off(
            slices.as_ref().ok().map(|t| t.mode()),
            &mountinfo,
        ));
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

        let watch = units_dir::UnitsWatch::new(&options.units_dir)?;
        poll.registry()
            .register(&mut SourceFd(&watch.raw_fd()), INOTIFY, Interest::READABLE)
            .map_err(setup("register inotify"))?;

        let liveness = liveness::Watches::new().map_err(setup(
            "initialise inotify for progress files (raise fs.inotify.max_user_instances?)",
        ))?;
        poll.registry()
            .register(
                &mut SourceFd(&liveness.raw_fd()),
                LIVENESS,
                Interest::READABLE,
            )
            .map_err(setup("register inotify for progress files"))?;

        let mut listener = control::bind(&dirs.socket_path())?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(setup("register the control socket"))?;

        Ok(Daemon {
            dirs,
            units_dir: options.units_dir,
            poll,
            signals,
            watch,
            listener,
            tasks: BTreeMap::new(),
            invalid_units: BTreeMap::new(),
            sources: HashMap::new(),
            next_token: FIRST_DYNAMIC_TOKEN,
            clients: HashMap::new(),
            timers: Timers::default(),
            journal,
            reaped: HashMap::new(),
            shutdown: None,
            under_init,
            started_ms: now_ms(),
            last_tick: Instant::now(),
            schedule_pending: true,
            rescan_at: None,
            rescan_first: None,
            boot_id: crate::sys::boot_id(),
            config,
            config_path,
            host,
            slices,
            cgroup_name,
            liveness,
            notifier: crate::notify::Notifier::from_env(),
            summary_dirty: true,
            removal_notes: HashMap::new(),
            templates,
            spare_due: false,
            _lock: lock,
        })
    }

    /// Reconcile, then run the loop until an orderly shutdown. Returns the exit code.
    pub fn run(mut self) -> i32 {
        log::info!(
            "daemon started: pid {}, state {}, units {}",
            std::process::id(),
            self.dirs.root.display(),
            self.units_dir.display()
        );
        self.journal_event(
            "",
            0,
            0,
            "daemon-start",
            &format!("pid {}", std::process::id()),
        );
        self.reconcile_all();
        self.sweep_slices();
        self.scan_units();
        self.resume_shutdown();
        self.notify_ready();
        if std::env::var_os("KEEL_SHUTDOWN_ON_START").is_some() {
            log::info!("KEEL_SHUTDOWN_ON_START: stopping tasks after reconcile");
            self.begin_shutdown(Shutdown::StopTasks { exit_code: 0 });
        }

        let mut events = Events::with_capacity(256);
        loop {
            // Act on what the previous round decided before sleeping again.
            if self.schedule_pending {
                self.schedule_pending = false;
                self.schedule();
            }
            self.answer_waiters();
            self.notify_status();
            if let Err(e) = self.journal.sync() {
                log::error!("journal: {e}");
            }
            if let Some(code) = self.finished_shutdown() {
                return self.exit(code);
            }
            let timeout = self.timers.timeout(Instant::now());
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    log::error!("event loop poll failed: {e}");
                }
                continue;
            }
            self.last_tick = Instant::now();
            for event in events.iter() {
                self.dispatch(event);
            }
            for timer in self.timers.pop_due(Instant::now()) {
                self.fire(timer);
            }
        }
    }

    fn exit(&mut self, code: i32) -> i32 {
        self.teardown_slices();
        self.write_exit_status(code);
        let _ = std::fs::remove_file(self.dirs.shutdown_marker_path());
        self.journal_event("", 0, 0, "daemon-stop", &format!("exit {code}"));
        let _ = self.journal.sync();
        log::info!("daemon stopped (exit {code})");
        let _ = std::fs::remove_file(self.dirs.socket_path());
        code
    }

    fn dispatch(&mut self, event: &mio::event::Event) {
        match event.token() {
            SIGNALS => self.on_signals(),
            INOTIFY => self.on_units_dir_event(),
            LIVENESS => self.on_liveness_event(),
            LISTENER => self.accept_clients(),
            token => match self.sources.get(&token) {
                Some(Source::Shim(unit)) => {
                    let unit = unit.clone();
                    self.on_shim_exit(&unit);
                }
                Some(Source::Oom(unit)) => {
                    let unit = unit.clone();
                    self.check_oom(&unit, true);
                }
                Some(Source::Client) => self.on_client_event(token, event),
                None => {}
            },
        }
    }

    fn on_signals(&mut self) {
        let pending: Vec<i32> = self.signals.pending().collect();
        for signal in pending {
            match signal {
                libc::SIGCHLD => self.reap_children(),
                libc::SIGTERM | libc::SIGINT => {
                    log::info!("{}: orderly shutdown", crate::fmt::signal_name(signal));
                    self.begin_shutdown(Shutdown::StopTasks { exit_code: 0 });
                }
                libc::SIGHUP => {
                    log::info!("SIGHUP: reloading units");
                    self.journal_event("", 0, 0, "reload", "SIGHUP");
                    if let Err(e) = self.reload_config() {
                        log::error!("{e}");
                    }
                    self.scan_units();
                }
                // Forwarded by keel init from whoever signals the container; a supervisor
                // must not die of them. They report the counts, as a cheap "are you there".
                _ => log::info!("{}: {}", crate::fmt::signal_name(signal), self.summary()),
            }
        }
    }

    /// `"3 tasks: 1 queued, 2 running"`.
    pub(crate) fn summary(&self) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for task in self.tasks.values() {
            *counts.entry(task.record.state.as_str()).or_default() += 1;
        }
        let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
        match self.tasks.len() {
            0 => "0 tasks".to_string(),
            1 => format!("1 task: {}", parts.join(", ")),
            n => format!("{n} tasks: {}", parts.join(", ")),
        }
    }

    /// The one reaper: `waitid(P_ALL, WEXITED|WNOHANG)` until nothing is left. Shims' statuses
    /// are kept for their pidfd event; orphans reparented to us are simply reaped.
    fn reap_children(&mut self) {
        use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
        loop {
            match waitid(Id::All, WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG) {
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(status) => {
                    if let Some(pid) = status.pid() {
                        let is_shim = self
                            .tasks
                            .values()
                            .any(|t| t.shim.as_ref().is_some_and(|s| s.pid == pid.as_raw()));
                        if is_shim {
                            self.reaped.insert(pid.as_raw(), status);
                        }
                    }
                }
            }
        }
    }

    /// [`Timer::ReplenishSpare`]: a spare shim for the next sandboxed start, while tasks run
    /// (an idle daemon keeps none: [`Daemon::settle`] drops it with the templates).
    fn replenish_spare(&mut self) {
        self.spare_due = false;
        if self.shutdown.is_some() || !self.tasks.values().any(|t| t.shim.is_some()) {
            return;
        }
        // This very binary, even if an upgrade replaced the file on disk (as spawn_shim).
        let nofile = ORIGINAL_NOFILE.get().copied();
        self.templates
            .replenish_spare(std::path::Path::new("/proc/self/exe"), nofile);
    }

    fn fire(&mut self, timer: Timer) {
        match timer {
            Timer::RescanUnits => self.on_rescan_due(),
            Timer::WatchUnits => self.rewatch_units_dir(),
            Timer::Schedule => self.schedule_pending = true,
            Timer::ReconcileRetry { unit, tries } => self.reconcile_one(&unit, tries),
            Timer::ClientDeadline { token } => self.on_client_deadline(Token(token)),
            Timer::BackoffExpired { unit, generation } => {
                self.on_backoff_expired(&unit, generation)
            }
            Timer::StopTimeout { unit, generation } => self.on_stop_timeout(&unit, generation),
            Timer::StopForce { unit, generation } => self.on_stop_force(&unit, generation),
            Timer::RemoveSlice { unit, tries } => self.on_remove_slice_due(&unit, tries),
            Timer::OomRecheck { unit } => self.check_oom(&unit, false),
            Timer::Liveness { unit, generation } => self.on_liveness_due(&unit, generation),
            Timer::Watchdog => self.on_watchdog_due(),
            Timer::ReplenishSpare => self.replenish_spare(),
        }
    }

    pub(crate) fn new_token(&mut self) -> Token {
        self.next_token += 1;
        Token(self.next_token)
    }

    pub(crate) fn register_shim(&mut self, unit: &str, pid: i32, pidfd: OwnedFd) -> LiveShim {
        let token = self.new_token();
        let fd = pidfd.as_raw_fd();
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut SourceFd(&fd), token, Interest::READABLE)
        {
            log::error!("{unit}: cannot watch shim {pid}: {e}");
        }
        self.sources.insert(token, Source::Shim(unit.to_string()));
        LiveShim { pid, pidfd, token }
    }

    pub(crate) fn deregister_shim(&mut self, shim: &LiveShim) {
        let fd = shim.pidfd.as_raw_fd();
        let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
        self.sources.remove(&shim.token);
        self.reaped.remove(&shim.pid);
    }

    /// Append to the journal (synced once per loop round); a failing journal is logged, never
    /// fatal.
    pub(crate) fn journal_event(
        &mut self,
        unit: &str,
        attempt: u32,
        generation: u64,
        event: &str,
        detail: &str,
    ) {
        let ts_ms = now_ms();
        self.summary_dirty = true;
        let entry = Event {
            time: crate::state::rfc3339(ts_ms),
            ts_ms,
            unit: unit.to_string(),
            attempt,
            generation,
            event: event.to_string(),
            detail: detail.to_string(),
        };
        if let Err(e) = self.journal.append(&entry) {
            log::error!("journal: {e}");
        }
    }

    pub(crate) fn begin_shutdown(&mut self, kind: Shutdown) {
        if self.shutdown.is_some() && kind != Shutdown::KeepTasks {
            return;
        }
        self.shutdown = Some(kind);
        self.notifier.stopping();
        if let Shutdown::StopTasks { exit_code } = kind {
            // Decide, persist, act: a daemon respawned mid-shutdown finishes it.
            self.persist_shutdown(exit_code);
            let names: Vec<String> = self.tasks.keys().cloned().collect();
            for name in names {
                self.interrupt_for_shutdown(&name);
            }
        }
    }

    /// `Some(exit code)` once the shutdown in progress has nothing left to wait for.
    fn finished_shutdown(&self) -> Option<i32> {
        match self.shutdown? {
            Shutdown::KeepTasks => Some(0),
            Shutdown::StopTasks { exit_code } => {
                // Adopted or not: a live attempt keeps the daemon (and PID 1) alive.
                let busy = self
                    .tasks
                    .values()
                    .any(|t| t.record.state.has_attempt() && !t.left_running);
                (!busy).then_some(exit_code)
            }
        }
    }

    /// Tell `keel init` that this exit is on purpose (absent file = a crash to recover from).
    fn write_exit_status(&self, code: i32) {
        if let Err(e) = crate::state::atomic_write(
            &self.dirs.exit_status_path(),
            format!("{code}\n").as_bytes(),
        ) {
            log::error!("cannot record the exit status: {e}");
        }
    }
}

/// How long after a sandboxed start the next spare shim is made: once that start is done
/// with the CPU (~2 ms), so the two do not compete for it.
const SPARE_DELAY: std::time::Duration = std::time::Duration::from_millis(50);

/// The RLIMIT_NOFILE the daemon was started with, restored for every shim (and agent).
pub(crate) static ORIGINAL_NOFILE: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();

/// A daemon holds a pidfd per task and a descriptor per client: raise the soft limit on open
/// files to the hard limit (systemd's default soft limit is 1024). Children get the original.
fn raise_open_file_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = ORIGINAL_NOFILE.set((soft, hard));
        if soft < hard {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                log::warn!("cannot raise the open-file limit from {soft} to {hard}: {e}");
            }
        }
    }
}
