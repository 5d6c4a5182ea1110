//! Notifications: the commands `keel.ron`'s `notify` names, run when chosen events are
//! journaled (docs/notifications.md). The loop never waits on a hook: [`Store::event`] keeps
//! the events a hook may want, the loop hands them here after each round; each is coalesced
//! per (hook, unit, event) (`coalesce.rs`), and a hook is cloned and left running — at most
//! [`MAX_RUNNING`] at once, [`MAX_WAITING`] more waiting, the rest counted and journaled as
//! `notify-dropped`. Its end comes through the daemon's one reaper (SIGCHLD), its timeout
//! through the timers, at which its whole process group is killed. A hook that fails (exits
//! non-zero, cannot be run, times out) is journaled as `notify-failed` and never run again
//! for that event: a notice is best-effort, and a retry of a broken hook would only repeat.
//!
//! [`Store::event`]: super::store::Store::event

mod coalesce;
mod event;
mod spawn;

use super::store::Store;
use super::timers::{Timer, Timers};
use crate::config::notify::{EventKind, Hook};
use crate::state::Event;
use coalesce::{Coalescer, Key};
use nix::sys::wait::WaitStatus;
use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// At most this many hooks run at once.
pub(crate) const MAX_RUNNING: usize = 4;
/// At most this many hook processes exist at once, counting those killed at their timeout and
/// not yet reaped (stuck in the kernel: a hung NFS write, say): past it no hook starts until
/// one is reaped, so stuck hooks cannot pile up.
pub(crate) const MAX_PROCESSES: usize = 16;
/// At most this many wait for a free slot; past it a notice is dropped (and counted).
pub(crate) const MAX_WAITING: usize = 64;
/// The hooks' stdout and stderr, in the state directory.
pub(crate) const LOG_FILE: &str = "notify.log";
/// Past this size the log is emptied before the next hook writes to it.
const LOG_LIMIT: u64 = 1 << 20;

/// A notice coalesced and ready to go.
struct Ready {
    hook: usize,
    event: Event,
    kind: EventKind,
    count: u64,
}

/// A hook's process, until it is reaped or killed at its timeout.
struct Running {
    describe: String,
    started: spawn::Started,
    event: Event,
    kind: EventKind,
    timeout: Duration,
    since: Instant,
}

pub(crate) struct Notifications {
    hooks: Vec<Hook>,
    coalescer: Coalescer<Event>,
    waiting: VecDeque<Ready>,
    running: BTreeMap<u64, Running>,
    next_id: u64,
    /// Hooks killed at their timeout, by pid, until they are reaped (their pidfd kept).
    killed: BTreeMap<i32, OwnedFd>,
    /// Notices dropped since the last `notify-dropped` line, by why.
    dropped: Dropped,
    /// The earliest coalescing flush in the timers.
    flush_at: Option<Instant>,
    log: Option<std::fs::File>,
    state_dir: PathBuf,
    host: String,
}

impl Notifications {
    pub fn new(hooks: Vec<Hook>, state_dir: PathBuf) -> Self {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default();
        Notifications {
            hooks,
            coalescer: Coalescer::default(),
            waiting: VecDeque::new(),
            running: BTreeMap::new(),
            next_id: 0,
            killed: BTreeMap::new(),
            dropped: Dropped::default(),
            flush_at: None,
            log: None,
            state_dir,
            host,
        }
    }

    /// `keel.ron` was reloaded: new hooks apply to the events from now on (what was held or
    /// waiting for the old ones is dropped, counted, and journaled at the next round).
    pub fn reconfigure(&mut self, hooks: &[Hook], store: &mut Store) {
        store.notify_kinds = wanted_kinds(hooks);
        if hooks != self.hooks.as_slice() {
            let held = self.coalescer.held_count();
            let waiting: u64 = self.waiting.iter().map(|r| r.count).sum();
            if held + waiting > 0 {
                log::info!(
                    "notify: the hooks changed: {} events held or waiting are dropped",
                    held + waiting
                );
            }
            self.dropped.reloaded += held + waiting;
            self.hooks = hooks.to_vec();
            self.coalescer.clear();
            self.waiting.clear();
        }
    }

    /// After a loop round: coalesce the round's events, send what is due, start what the cap
    /// allows, and set the timer of the next flush.
    pub fn run(&mut self, store: &mut Store, timers: &mut Timers) {
        let notices = std::mem::take(&mut store.notices);
        self.dropped.storm += std::mem::take(&mut store.notices_dropped);
        let now = Instant::now();
        for event in notices {
            let Some(kind) = EventKind::of_journal(&event.event) else {
                continue;
            };
            for (i, hook) in self.hooks.iter().enumerate() {
                if !hook.wants(kind, &event.unit) {
                    continue;
                }
                let key = Key {
                    hook: i,
                    unit: event.unit.clone(),
                    event: kind.journal_name(),
                };
                if let Some(send) = self.coalescer.offer(key, event.clone(), hook.coalesce, now) {
                    enqueue(&mut self.waiting, &mut self.dropped.full, send, kind);
                }
            }
        }
        for send in self.coalescer.due(now) {
            if let Some(kind) = EventKind::of_journal(send.key.event) {
                enqueue(&mut self.waiting, &mut self.dropped.full, send, kind);
            }
        }
        self.start_ready(store, timers);
        if let Some(due) = self.coalescer.next_due() {
            if self.flush_at.is_none_or(|at| due < at) {
                timers.add(due, Timer::NotifyFlush);
                self.flush_at = Some(due);
            }
        }
        if let Some(detail) = std::mem::take(&mut self.dropped).describe() {
            log::warn!("notify: {detail}");
            store.event("", 0, 0, "notify-dropped", &detail);
        }
    }

    /// [`Timer::NotifyFlush`]: the next round sends what is due.
    pub fn on_flush_due(&mut self) {
        if self.flush_at.is_some_and(|at| at <= Instant::now()) {
            self.flush_at = None;
        }
    }

    fn start_ready(&mut self, store: &mut Store, timers: &mut Timers) {
        while self.running.len() < MAX_RUNNING
            && self.running.len() + self.killed.len() < MAX_PROCESSES
        {
            let Some(ready) = self.waiting.pop_front() else {
                break;
            };
            self.start(ready, store, timers);
        }
    }

    fn start(&mut self, ready: Ready, store: &mut Store, timers: &mut Timers) {
        let Some(hook) = self.hooks.get(ready.hook).cloned() else {
            return;
        };
        let describe = format!("hook {} ({})", ready.hook + 1, hook.describe());
        let e = &ready.event;
        // Without the log, /dev/null: the hook runs all the same (its output is lost).
        let mut null = None;
        let output = match self.output() {
            Ok(fd) => fd,
            Err(log_error) => {
                log::warn!(
                    "notify: cannot open {LOG_FILE}: {log_error}; the hook's output is lost"
                );
                let file = std::fs::OpenOptions::new().write(true).open("/dev/null");
                match null.insert(file) {
                    Ok(file) => file.as_raw_fd(),
                    Err(null_error) => {
                        let detail = format!(
                            "{describe} on {}: not started: cannot open {LOG_FILE} ({log_error}) nor /dev/null ({null_error}) for its output",
                            ready.kind.name()
                        );
                        log::warn!("notify: {}: {detail}", e.unit);
                        store.event(&e.unit, e.attempt, e.generation, "notify-failed", &detail);
                        return;
                    }
                }
            }
        };
        let told = event::Told {
            event: &ready.event,
            kind: ready.kind,
            count: ready.count,
        };
        let origin = event::Origin {
            host: &self.host,
            state_dir: &self.state_dir,
        };
        let line = event::json_line(&told, &origin);
        let variables = event::variables(&told, &origin);
        match spawn::spawn(&hook, &line, &variables, output) {
            Ok(started) => {
                log::info!(
                    "notify: {describe} for {} {} ({}x): pid {}",
                    e.unit,
                    e.event,
                    ready.count,
                    started.pid
                );
                self.next_id += 1;
                let id = self.next_id;
                timers.add_after(hook.timeout, Timer::NotifyTimeout { id });
                self.running.insert(
                    id,
                    Running {
                        describe,
                        started,
                        timeout: hook.timeout,
                        since: Instant::now(),
                        event: ready.event,
                        kind: ready.kind,
                    },
                );
            }
            Err(err) => {
                let detail = format!(
                    "{describe} on {}: cannot start it: {err}",
                    ready.kind.name()
                );
                log::warn!("notify: {}: {detail}", e.unit);
                store.event(&e.unit, e.attempt, e.generation, "notify-failed", &detail);
            }
        }
    }

    /// The descriptor of `STATE/notify.log` (opened once, emptied past [`LOG_LIMIT`]).
    fn output(&mut self) -> std::io::Result<i32> {
        if self.log.is_none() {
            use std::os::unix::fs::OpenOptionsExt;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(self.state_dir.join(LOG_FILE))?;
            self.log = Some(file);
        }
        let file = self.log.as_ref().expect("opened above");
        if file.metadata()?.len() > LOG_LIMIT {
            file.set_len(0)?;
        }
        Ok(file.as_raw_fd())
    }

    /// Whether `pid` was a hook; if so its end is judged (a failure journaled) and a waiting
    /// hook may start.
    pub fn on_reaped(
        &mut self,
        pid: i32,
        status: WaitStatus,
        store: &mut Store,
        timers: &mut Timers,
    ) -> bool {
        if self.killed.remove(&pid).is_some() {
            log::debug!("notify: hook {pid}, killed at its timeout, is reaped");
            return true;
        }
        let Some(&id) = self
            .running
            .iter()
            .find(|(_, r)| r.started.pid == pid)
            .map(|(id, _)| id)
        else {
            return false;
        };
        let Some(hook) = self.running.remove(&id) else {
            return false;
        };
        let took = crate::fmt::duration_precise(hook.since.elapsed());
        match failure(&status) {
            None => log::info!("notify: {} (pid {pid}) ended after {took}", hook.describe),
            Some(why) => {
                let e = &hook.event;
                let detail = format!("{} on {}: {why}", hook.describe, hook.kind.name());
                log::warn!("notify: {}: {detail}", e.unit);
                store.event(&e.unit, e.attempt, e.generation, "notify-failed", &detail);
            }
        }
        self.start_ready(store, timers);
        true
    }

    /// [`Timer::NotifyTimeout`]: a hook still running is killed, its process group with it,
    /// and journaled; its slot is free at once (a process stuck in the kernel is reaped
    /// whenever it exits).
    pub fn on_timeout(&mut self, id: u64, store: &mut Store, timers: &mut Timers) {
        let Some(hook) = self.running.remove(&id) else {
            return;
        };
        spawn::kill_group(&hook.started);
        let e = &hook.event;
        let detail = format!(
            "{} on {}: did not end within its timeout of {}: killed (pid {} and its process group)",
            hook.describe,
            hook.kind.name(),
            crate::unit::format_duration(hook.timeout),
            hook.started.pid
        );
        log::warn!("notify: {}: {detail}", e.unit);
        store.event(&e.unit, e.attempt, e.generation, "notify-failed", &detail);
        self.killed.insert(hook.started.pid, hook.started.pidfd);
        self.start_ready(store, timers);
    }
}

/// The hooks' event kinds, for [`Store::event`] to keep only what some hook is run on.
pub(crate) fn wanted_kinds(hooks: &[Hook]) -> Vec<EventKind> {
    let mut kinds: Vec<EventKind> = hooks.iter().flat_map(|h| h.on.iter().copied()).collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// Events a hook would have been run for but was not, by why (`notify-dropped`).
#[derive(Debug, Default, PartialEq, Eq)]
struct Dropped {
    /// [`MAX_WAITING`] notices waited already.
    full: u64,
    /// Past [`super::store::MAX_NOTICES`] in one loop round.
    storm: u64,
    /// Held or waiting when `keel.ron`'s hooks changed.
    reloaded: u64,
}

impl Dropped {
    /// The `notify-dropped` detail, if anything was dropped.
    fn describe(&self) -> Option<String> {
        let mut why = Vec::new();
        if self.full > 0 {
            why.push(format!(
                "{} as {MAX_RUNNING} hooks ran and {MAX_WAITING} notices waited",
                self.full
            ));
        }
        if self.storm > 0 {
            why.push(format!(
                "{} past {} events in one loop round",
                self.storm,
                super::store::MAX_NOTICES
            ));
        }
        if self.reloaded > 0 {
            why.push(format!(
                "{} held for coalescing or waiting when keel.ron's hooks changed",
                self.reloaded
            ));
        }
        let total = self.full + self.storm + self.reloaded;
        (total > 0).then(|| format!("{total} notices dropped: {}", why.join("; ")))
    }
}

/// A notice to the queue, or (the queue full) counted as dropped.
fn enqueue(
    waiting: &mut VecDeque<Ready>,
    dropped: &mut u64,
    send: coalesce::Send<Event>,
    kind: EventKind,
) {
    if waiting.len() >= MAX_WAITING {
        *dropped += send.count;
        return;
    }
    waiting.push_back(Ready {
        hook: send.key.hook,
        event: send.event,
        kind,
        count: send.count,
    });
}

/// Why a hook's exit is a failure; `None` for exit 0.
fn failure(status: &WaitStatus) -> Option<String> {
    match status {
        WaitStatus::Exited(_, 0) => None,
        WaitStatus::Exited(_, spawn::EXIT_CANNOT_RUN) => Some(format!(
            "exited {}: its program could not be run (not found or not executable; {LOG_FILE} in the state directory says why)",
            spawn::EXIT_CANNOT_RUN
        )),
        WaitStatus::Exited(_, spawn::EXIT_CANNOT_SETUP) => Some(format!(
            "exited {}: it could not be set up or become its user ({LOG_FILE} in the state directory says why)",
            spawn::EXIT_CANNOT_SETUP
        )),
        WaitStatus::Exited(_, code) => Some(format!("exited {code}")),
        WaitStatus::Signaled(_, signal, _) => Some(format!("killed by {}", signal.as_str())),
        other => Some(format!("ended: {other:?}")),
    }
}

impl super::Daemon {
    /// After each round: the round's events to the hooks.
    pub(super) fn run_notifications(&mut self) {
        (self.notifications).run(&mut self.store, &mut self.events.timers);
    }

    pub(super) fn on_notify_timeout(&mut self, id: u64) {
        (self.notifications).on_timeout(id, &mut self.store, &mut self.events.timers);
    }
}

#[cfg(test)]
mod tests;
