//! The supervisor: one synchronous mio loop (no async runtime, no threads) that owns the
//! units, the queue, the timers, the journal and the control socket. The loop never waits on
//! work whose time depends on data outside keel's control: checkouts, base trees, harvests,
//! removals, `keel prune`, disk-use walks and the `lstat`s of paths a unit names run in
//! worker processes (`jobs/`, [`crate::worker`]), and their results come back as events.
//!
//! [`Daemon`] is a set of subsystems, each owning its data in a file of its own: the loop's
//! sources and timers (`event_loop.rs`), the state directory and journal (`store.rs`), the
//! tasks (`task.rs`), the units directory (`units_dir.rs`), the settings (`settings.rs`),
//! sandboxing's templates and spare (`sandboxing.rs`), the cgroup slices (`slices.rs`), the
//! liveness watches (`liveness/`), the jobs and their workers (`jobs/`), the notification
//! hooks (`notifications/`, never waited on) and the control
//! socket (`control/`, a file per request; `keel harvest`, `rm` and `prune` answer once their
//! job has ended), and `--metrics`' scrape connections (`metrics_server.rs`).
//! An event is dispatched here by its token or timer; its handler looks the task up once and
//! hands it, with the subsystems the step touches, to the lifecycle's steps: `store.rs`
//! (`transition`: state, persist, journal), `lifecycle.rs` (scheduling, the start in two
//! steps: decided and persisted, then — after its preparation job, `checkouts.rs` — spawned),
//! `settle.rs` (the end of an attempt), `stopping.rs`,
//! `recovery.rs` (after a restart), `shutdown.rs`. The decisions are pure and kernel-free:
//! `queue.rs`, `policy.rs`, `reconcile.rs`, `id_blocks.rs` (each task's block of host ids, and
//! the check of their range at start), [`crate::liveness`].

mod checkouts;
mod control;
mod dependencies;
mod disk;
mod event_loop;
mod freezer;
mod host_sleep;
pub mod id_blocks;
mod jobs;
mod lifecycle;
mod liveness;
mod metrics_server;
mod network;
mod notifications;
mod pausing;
pub mod policy;
mod preemption;
mod pressure;
mod progress_cap;
pub mod queue;
pub mod reconcile;
pub mod record;
mod recovery;
mod runtime_limit;
mod sandboxing;
mod settings;
mod settle;
mod shutdown;
mod slices;
pub mod spawn;
mod start_hold;
mod stopping;
mod store;
mod systemd;
mod task;
pub mod timers;
mod trash;
mod units_dir;
mod unwritable;

pub(crate) use shutdown::Shutdown;
pub(crate) use task::Task;

use crate::state::{now_ms, InstanceLock, Journal, StateDir, StateError};
use control::Control;
use event_loop::{EventLoop, Source, INOTIFY, LISTENER, LIVENESS, METRICS_LISTENER, SIGNALS};
use mio::Events;
use sandboxing::Sandboxing;
use settings::Settings;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use store::Store;
use task::Tasks;
use timers::Timer;
use units_dir::UnitsDir;

pub use settings::default_cgroup_name;
pub use spawn::{attempt_spec, last_progress_line, spawn_shim, spawn_shim_program, AttemptContext};
pub use stopping::merge_intent;

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
    /// `--metrics ADDR`: serve the metrics there (metrics_server.rs).
    pub metrics: Option<crate::metrics::address::Address>,
}

/// The supervisor's state, by subsystem; each owns its data and its file.
pub struct Daemon {
    /// The state directory and the journal (store.rs).
    store: Store,
    /// The poll, the signals, every registered descriptor and the timers (event_loop.rs).
    events: EventLoop,
    /// The control socket and its clients (control/).
    control: Control,
    /// `--metrics`' socket and its scrape connections (metrics_server.rs).
    metrics_server: Option<metrics_server::MetricsServer>,
    /// The units directory: its watch, invalid files, the pending rescan (units_dir.rs).
    units: UnitsDir,
    /// `keel.ron`, the host's capacity, the cgroup tree's name (settings.rs).
    settings: Settings,
    /// Templates and the spare shim (sandboxing.rs).
    sandboxing: Sandboxing,
    /// Every task, by name (task.rs).
    pub(crate) tasks: Tasks,
    /// The host-wide claims on the tasks' blocks of host ids (`None`: user namespaces off)
    /// (id_blocks/claims.rs).
    id_claims: Option<id_blocks::claims::Claims>,
    /// keel's cgroup tree, or why there is none (retried at each reload) (slices.rs).
    slices: slices::Slices,
    /// The pressure readings of the queue's admission, and their recheck (pressure.rs).
    pressure: pressure::PressureWatch,
    /// What is seen of each live attempt's work (progress files, output, CPU) (liveness/).
    liveness: liveness::Watches,
    /// The slow work, in worker processes: checkouts, harvests, removals (jobs/).
    jobs: jobs::Jobs,
    /// The hooks `keel.ron`'s `notify` names, run on chosen events (notifications/).
    notifications: notifications::Notifications,
    /// systemd's notify socket and watchdog (no-ops elsewhere) (systemd.rs).
    notifier: crate::notify::Notifier,
    /// Who this daemon is: its start, its boot, whether it runs under `keel init`.
    instance: Instance,
    /// Why the loop is ending, once it is (shutdown.rs).
    shutdown: Option<Shutdown>,
    /// A [`Timer::Network`] is in the queue (one for all relays, however many start).
    network_look_armed: bool,
    /// How the host's sleeps are noticed (host_sleep.rs).
    sleep_watch: host_sleep::SleepWatch,
    /// The state filesystem's free space, as last looked at (disk.rs).
    disk: disk::DiskLook,
    /// `keel pause --all`'s hold on starts, in words (start_hold.rs).
    starts_held: Option<String>,
    /// Preemption: when keel last paused a task for memory pressure, and tasks whose pause
    /// failed (not tried again before then) (lifecycle/preempting.rs).
    preemption: lifecycle::PreemptionMemory,
    _lock: InstanceLock,
}

/// Who this daemon is.
pub(crate) struct Instance {
    /// `Some(instance)` under `keel init` (its pid, start time and boot id).
    pub under_init: Option<String>,
    pub started_ms: u64,
    pub boot_id: String,
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
        let mut templates = crate::sandbox::templates::SandboxTemplates::new(dirs.templates_dir());
        dirs.create()?;
        let lock = InstanceLock::acquire(&dirs.lock_path())?;
        // Keel's files are private whatever the state directory's mode (crate::state's
        // `private`): what an earlier keel left wider is tightened, and the default units
        // directory (the operator's units, their `env` secrets) is born 0700.
        dirs.tighten_own_entries();
        if options.units_dir == dirs.default_units_dir() {
            crate::state::create_private_dir(&options.units_dir)
                .map_err(setup("create the units directory"))?;
        }
        let units = UnitsDir::open(options.units_dir, options.units_dir_explicit)?;
        let _ = std::fs::remove_file(dirs.exit_status_path());
        let journal = Journal::open(&dirs.events_path())?;
        let (settings, layout) = Settings::load(&dirs, options.config_path, options.cgroup_name)?;
        // The tasks' host ids must be no one else's, and the kernel must let us use them.
        id_blocks::check_at_start(
            &settings.config.user_namespaces,
            &settings.config_path,
            &dirs.root,
        )
        .map_err(DaemonError::Config)?;
        // No two live tasks of the host, whatever their daemon, share a block.
        let id_claims = id_blocks::open_claims(&settings.config.user_namespaces)
            .map_err(DaemonError::Config)?;
        raise_open_file_limit();
        // The CA of the tasks' secrets, once per state directory, and the sandboxes' bundle.
        network::prepare_authority(&dirs.root);

        let under_init = std::env::var("KEEL_UNDER_INIT")
            .ok()
            .filter(|v| !v.is_empty());
        if std::process::id() != 1 {
            crate::sys::set_child_subreaper().map_err(setup("become a child subreaper"))?;
        }

        let slices = slices::set_up(layout, &settings.cgroup_name, &mut templates);
        let jobs = jobs::Jobs::new(
            dirs.root.clone(),
            settings.config.jobs,
            slices::workers_for(&slices, settings.config.jobs.memory),
        );
        let events = EventLoop::new()?;
        events
            .register_fixed(units.raw_fd(), INOTIFY)
            .map_err(setup("register inotify"))?;
        let liveness = liveness::Watches::new().map_err(setup(
            "initialise inotify for progress files (raise fs.inotify.max_user_instances?)",
        ))?;
        events
            .register_fixed(liveness.raw_fd(), LIVENESS)
            .map_err(setup("register inotify for progress files"))?;
        // Born 0600 (then set so again by bind): no instant in which another user could
        // connect, whatever the operator's umask. The umask is the process's: put back.
        let umask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
        let control = Control::bind(&dirs.socket_path(), &events);
        let sleep_watch = host_sleep::SleepWatch::start(&events);
        nix::sys::stat::umask(umask);
        let control = control?;
        let metrics_server = (options.metrics.as_ref())
            .map(|address| metrics_server::MetricsServer::bind(address, &events))
            .transpose()?;

        let notifications =
            notifications::Notifications::new(settings.config.notify.clone(), dirs.root.clone());
        let mut store = Store::new(dirs, journal);
        store.notify_kinds = notifications::wanted_kinds(&settings.config.notify);
        Ok(Daemon {
            store,
            notifications,
            events,
            control,
            metrics_server,
            units,
            settings,
            sandboxing: Sandboxing::new(templates),
            tasks: Tasks::default(),
            id_claims,
            slices,
            pressure: pressure::PressureWatch::default(),
            starts_held: None,
            preemption: Default::default(),
            liveness,
            jobs,
            notifier: crate::notify::Notifier::from_env(),
            instance: Instance {
                under_init,
                started_ms: now_ms(),
                boot_id: crate::sys::boot_id(),
            },
            shutdown: None,
            network_look_armed: false,
            sleep_watch,
            disk: disk::DiskLook::default(),
            _lock: lock,
        })
    }

    /// Reconcile, then run the loop until an orderly shutdown. Returns the exit code.
    pub fn run(mut self) -> i32 {
        self.start_up();
        let mut events = Events::with_capacity(256);
        loop {
            // Act on what the previous round decided before sleeping again.
            self.schedule_if_changed();
            self.run_jobs();
            self.run_notifications();
            self.answer_waiters();
            self.notify_status();
            self.store.sync();
            self.arm_watch_fallback();
            if let Some(code) = self.finished_shutdown() {
                return self.exit(code);
            }
            let woke = self.events.wait(&mut events);
            self.notice_host_sleep();
            if !woke {
                continue;
            }
            for event in events.iter() {
                self.dispatch(event);
            }
            self.fire_due_timers();
        }
    }

    /// Before the loop: recover every recorded task, sweep the cgroups, read the units
    /// directory, finish a shutdown an earlier daemon began, tell systemd.
    fn start_up(&mut self) {
        log::info!(
            "daemon started: pid {}, state {}, units {}",
            std::process::id(),
            self.store.dirs.root.display(),
            self.units.dir.display()
        );
        self.store.event(
            "",
            0,
            0,
            "daemon-start",
            &format!("pid {}", std::process::id()),
        );
        self.starts_held = start_hold::load(&self.store.dirs);
        if let Some(since) = &self.starts_held {
            log::warn!("{}", start_hold::reason(since));
        }
        self.reconcile_all();
        self.sweep_trash();
        self.sweep_slices();
        self.scan_units();
        self.resume_shutdown();
        self.on_disk_due();
        self.notify_ready();
        if std::env::var_os("KEEL_SHUTDOWN_ON_START").is_some() {
            log::info!("KEEL_SHUTDOWN_ON_START: stopping tasks after reconcile");
            self.begin_shutdown(Shutdown::StopTasks { exit_code: 0 });
        }
    }

    fn schedule_if_changed(&mut self) {
        if std::mem::take(&mut self.store.queue_changed) {
            self.schedule();
        }
    }

    fn fire_due_timers(&mut self) {
        for timer in self.events.timers.pop_due(Instant::now()) {
            self.fire(timer);
        }
    }

    fn dispatch(&mut self, event: &mio::event::Event) {
        match event.token() {
            SIGNALS => self.on_signals(),
            INOTIFY => self.on_units_dir_event(),
            LIVENESS => self.on_liveness_event(),
            host_sleep::WAKE_ALARM => self.on_wake_alarm(),
            LISTENER => self.control.accept(&mut self.events),
            METRICS_LISTENER => self.on_metrics_listener(),
            token => match self.events.source(token) {
                Some(Source::Client) => self.on_client_event(token, event),
                Some(Source::Scraper) => self.on_scraper_event(token, event),
                Some(Source::Job(id)) => {
                    let id = *id;
                    self.on_job_event(id);
                }
                Some(_) => self.on_source_event(token),
                None => {}
            },
        }
    }

    fn on_signals(&mut self) {
        let pending: Vec<i32> = self.events.signals.pending().collect();
        for signal in pending {
            match signal {
                libc::SIGCHLD => self.reap_children(),
                libc::SIGTERM | libc::SIGINT => {
                    log::info!("{}: orderly shutdown", crate::fmt::signal_name(signal));
                    self.begin_shutdown(Shutdown::StopTasks { exit_code: 0 });
                }
                libc::SIGHUP => {
                    log::info!("SIGHUP: reloading units");
                    self.store.event("", 0, 0, "reload", "SIGHUP");
                    if let Err(e) = self.reload_config() {
                        log::error!("{e}");
                    }
                    self.scan_units();
                    self.retry_waiting_starts();
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

    /// [`Timer::Network`]: journal what each running task's relay refused since the last
    /// look (`net-denied`, coalesced per destination), start again a relay that died, and
    /// look again in [`network::CHECK_EVERY`] while any task has a relay.
    fn on_network_due(&mut self) {
        self.network_look_armed = false;
        let now = std::time::Instant::now();
        let mut any = false;
        for task in self.tasks.values_mut() {
            let Some(network) = task.network.as_mut() else {
                continue;
            };
            any |= network.has_relay();
            let name = task.name.clone();
            let events = network.check(&name, now);
            journal_network_events(task, events, &mut self.store);
        }
        if any {
            self.arm_network_look();
        }
    }

    /// The next [`Timer::Network`], unless one is in the queue already.
    pub(crate) fn arm_network_look(&mut self) {
        if !self.network_look_armed {
            self.network_look_armed = true;
            (self.events.timers).add_after(network::CHECK_EVERY, Timer::Network);
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
                        if self.tasks.is_shim(pid.as_raw()) {
                            self.tasks.reaped.insert(pid.as_raw(), status);
                        } else if !self.jobs.on_reaped(pid.as_raw(), status, &mut self.events) {
                            let (store, timers) = (&mut self.store, &mut self.events.timers);
                            (self.notifications).on_reaped(pid.as_raw(), status, store, timers);
                        }
                    }
                }
            }
        }
    }

    fn fire(&mut self, timer: Timer) {
        match timer {
            Timer::RescanUnits => self.on_rescan_due(),
            Timer::WatchUnits => self.rewatch_units_dir(),
            Timer::Schedule => self.store.queue_changed = true,
            Timer::ReconcileRetry { unit, tries } => self.reconcile_one(&unit, tries),
            Timer::ClientDeadline { token } => self
                .control
                .on_deadline(mio::Token(token), &mut self.events),
            Timer::ScrapeDeadline { token } => self.on_scrape_deadline(token),
            Timer::BackoffExpired { unit, generation } => {
                self.on_backoff_expired(&unit, generation)
            }
            Timer::StopTimeout { unit, generation } => self.on_stop_timeout(&unit, generation),
            Timer::StopForce { unit, generation } => self.on_stop_force(&unit, generation),
            Timer::RemoveSlice { unit, tries } => self.on_remove_slice_due(&unit, tries),
            Timer::OomRecheck { unit } => self.on_oom_event(&unit, false),
            Timer::Liveness { unit, generation } => self.on_liveness_due(&unit, generation),
            Timer::Watchdog => self.on_watchdog_due(),
            Timer::ProgressEvents => self.on_progress_events_due(),
            Timer::WatchFallback => self.on_watch_fallback_due(),
            Timer::AcceptRetry => self.control.accept_again(&mut self.events),
            Timer::JobDeadline { id } => self.on_job_deadline(id),
            Timer::Network => self.on_network_due(),
            Timer::MaxRuntime { unit, generation } => self.on_max_runtime_due(&unit, generation),
            Timer::FreezeCheck {
                unit,
                generation,
                tries,
            } => self.on_freeze_check(&unit, generation, tries),
            Timer::Disk => self.on_disk_due(),
            Timer::NotifyFlush => self.notifications.on_flush_due(),
            Timer::NotifyTimeout { id } => self.on_notify_timeout(id),
            Timer::ReplenishSpare => self
                .sandboxing
                .replenish_spare(self.shutdown.is_some(), self.tasks.any_shim()),
        }
    }
}

/// Journal what a task's relay's report calls for: `net-denied` (one event per destination
/// refused since the last look), `secret-misdirected` (per secret and destination).
pub(crate) fn journal_network_events(
    task: &Task,
    events: Vec<network::NetworkEvent>,
    store: &mut store::Store,
) {
    for (kind, line) in events {
        match kind {
            "secret-misdirected" => log::warn!("{}: {kind} {line}", task.name),
            _ => log::info!("{}: {kind} {line}", task.name),
        }
        store.task_event(task, kind, &line);
    }
}

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
