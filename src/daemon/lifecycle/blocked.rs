//! A start the host refused (cgroups unavailable, a privilege keel lacks, a sandbox step the
//! kernel refuses, a `sandbox.user` this host does not have): never the task's failure. It
//! stays `queued` with its reason (`blocked: …` in `keel status`, the record's `blocked`),
//! nothing counted against its restart limit, its attempt number given back; it is tried
//! again after [`blocked_delay`] (5 s doubling, at most a minute), at once at `keel reload`
//! and SIGHUP ([`Daemon::retry_waiting_starts`]), and after a daemon restart. One
//! `start-blocked` journal entry per distinct reason, not one per retry.

use super::super::record::{Intent, TaskRecord, TaskState};
use super::super::spawn::SpawnError;
use super::super::store::Store;
use super::super::timers::{Timer, Timers};
use super::super::{Daemon, Task};
use std::time::{Duration, Instant};

/// The first wait before a blocked start is tried again.
const BLOCKED_RETRY_FIRST: Duration = Duration::from_secs(5);
/// The longest: a host fixed by hand (a user created, cgroups mounted) is noticed within it.
pub(crate) const BLOCKED_RETRY_MAX: Duration = Duration::from_secs(60);

/// How long a start blocked `retries` times in a row waits before its next try: 5 s, doubled
/// each time, at most a minute.
pub(crate) fn blocked_delay(retries: u32) -> Duration {
    BLOCKED_RETRY_FIRST
        .saturating_mul(1u32 << retries.min(16))
        .min(BLOCKED_RETRY_MAX)
}

/// Whether a spawn's failure is the host's: a state file keel cannot open (its disk), the
/// clone refused for want of a privilege or a resource (`EPERM`, `ENOSPC`: namespaces;
/// `EAGAIN`, `ENOMEM`: pids, memory), a start the host refused to resolve. The unit's own:
/// a start it cannot resolve (its command, its paths), a path with a NUL byte.
/// (`PreviousShimAlive` is a wait of its own, deferred.)
pub(crate) fn refused_by_host(error: &SpawnError) -> bool {
    match error {
        SpawnError::Open(..) | SpawnError::Refused(_) => true,
        SpawnError::Clone(e) => matches!(
            e.raw_os_error(),
            Some(libc::EPERM | libc::ENOSPC | libc::EAGAIN | libc::ENOMEM | libc::EUSERS)
        ),
        SpawnError::NulInPath | SpawnError::Launch(_) | SpawnError::PreviousShimAlive => false,
    }
}

/// The record of a task whose start the host refused: as it was before the decision
/// (`before`: its attempt number, last exit, restarts and failures untouched), `queued`, with
/// the reason; a generation spent meanwhile (`generation`) stays spent. The second value: the
/// reason is new (to journal), not the one it was blocked for already.
pub(crate) fn blocked_record(before: TaskRecord, generation: u64, why: &str) -> (TaskRecord, bool) {
    let new = before.blocked.as_deref() != Some(why);
    let mut record = before;
    record.generation = record.generation.max(generation);
    record.state = TaskState::Queued;
    record.shim = None;
    record.intent = Intent::None;
    record.stop_started_ms = None;
    record.backoff_until_ms = None;
    record.reason = Some(format!("blocked: {why}"));
    record.blocked = Some(why.to_string());
    (record, new)
}

/// The record before the decision of an attempt the host refused after its shim was
/// spawned: its attempt number given back, its start and end those of the attempt before
/// (none for a first attempt). Its last exit, restarts and failures were never changed.
pub(crate) fn before_refused_attempt(record: &TaskRecord) -> TaskRecord {
    let mut before = record.clone();
    before.attempt = before.attempt.saturating_sub(1);
    let previous = before.recent_exits.last();
    before.started_ms = previous.and_then(|p| p.started_ms);
    before.finished_ms = previous.map(|p| p.ended_ms);
    before
}

/// Hold `task` blocked (`blocked_record`), persisted, retried after [`blocked_delay`]; the
/// reason journaled (`start-blocked`) and logged when it is new.
pub(crate) fn block_start(
    task: &mut Task,
    before: TaskRecord,
    why: &str,
    store: &mut Store,
    timers: &mut Timers,
) {
    let generation = task.record.generation;
    if task.record.state.has_attempt() {
        // What the decided attempt reserved is free again.
        store.queue_changed = true;
    }
    let (record, new) = blocked_record(before, generation, why);
    task.record = record;
    task.started_at = None;
    task.reserved = None;
    task.preparing = None;
    let delay = blocked_delay(task.blocked_retries);
    task.blocked_retries = task.blocked_retries.saturating_add(1);
    task.start_retry_at = Some(Instant::now() + delay);
    if new {
        log::error!(
            "{}: start blocked (the host's, not the task's): {why}",
            task.name
        );
        store.task_event(task, "start-blocked", why);
    } else {
        log::debug!("{}: still blocked: {why}", task.name);
    }
    if let Err(e) = store.persist(task) {
        log::error!("{}: cannot record the blocked start: {e}", task.name);
    }
    timers.add_after(delay, Timer::Schedule);
}

/// Why `unit`'s `sandbox.user` cannot be resolved on this host (a user or group it does not
/// have), from the texts of `/etc/passwd` and `/etc/group`. Read on the loop, as the start's
/// own resolution reads them (`crate::sandbox::start::daemon::prepare`): two small files of
/// the root filesystem.
pub(crate) fn missing_user(unit: &crate::unit::Unit) -> Option<String> {
    let spec = unit.sandbox.user.as_deref()?;
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    crate::sandbox::start::daemon::missing_user(spec, &passwd, &group)
}

/// Test hook (docs/testing.md): `KEEL_TEST_REFUSE_SLICE_WHILE=PATH`: while PATH exists, the
/// task's cgroup cannot be made, as on a host whose cgroups are unavailable.
pub(crate) fn test_refuses_slice() -> Option<String> {
    let path = std::env::var_os("KEEL_TEST_REFUSE_SLICE_WHILE")?;
    std::path::Path::new(&path).exists().then(|| {
        "cgroups unavailable: refused by the test hook KEEL_TEST_REFUSE_SLICE_WHILE".to_string()
    })
}

impl Daemon {
    /// `keel reload` and SIGHUP: the host may have changed (a user created, cgroups
    /// mounted, room made): every queued task waiting out a blocked or deferred start is
    /// tried again now, its backoff started over (a burst of reloads must not leave the next
    /// periodic retry minutes away).
    pub(crate) fn retry_waiting_starts(&mut self) {
        let mut retried = 0;
        for task in self.tasks.values_mut() {
            if task.record.state == TaskState::Queued && task.start_retry_at.is_some() {
                task.start_retry_at = None;
                task.start_deferrals = 0;
                task.blocked_retries = 0;
                retried += 1;
            }
        }
        if retried > 0 {
            log::info!("{retried} waiting start(s) tried again now");
        }
        self.store.queue_changed = true;
    }
}
