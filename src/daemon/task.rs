//! The tasks: what the daemon holds of each in memory (its record, its unit, its live attempt,
//! what it has observed of it), the shims' statuses reaped before their pidfd event, and what
//! `keel rm` did with a removed task's files.

use super::queue;
use super::record::TaskRecord;
use crate::state::now_ms;
use crate::unit::Unit;
use mio::Token;
use nix::sys::wait::WaitStatus;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::time::Instant;

/// Every task by name, and what belongs to none of them alone.
#[derive(Default)]
pub(crate) struct Tasks {
    by_name: BTreeMap<String, Task>,
    /// Exit statuses of shims reaped before their pidfd event was handled.
    pub reaped: HashMap<i32, WaitStatus>,
    /// What `keel rm` did with a removed task's files, for the client waiting on it.
    pub removal_notes: HashMap<String, String>,
    /// Removed tasks whose checkout a job is removing: their `keel rm` is answered after.
    pub removals_pending: std::collections::HashSet<String>,
}

impl Tasks {
    pub fn get(&self, name: &str) -> Option<&Task> {
        self.by_name.get(name)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut Task> {
        self.by_name.get_mut(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    pub fn insert(&mut self, task: Task) {
        self.by_name.insert(task.name.clone(), task);
    }

    pub fn remove(&mut self, name: &str) -> Option<Task> {
        self.by_name.remove(name)
    }

    /// In name order.
    pub fn values(&self) -> impl Iterator<Item = &Task> {
        self.by_name.values()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Task> {
        self.by_name.values_mut()
    }

    pub fn names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether any attempt has a live shim watched by this daemon.
    pub fn any_shim(&self) -> bool {
        self.by_name.values().any(|t| t.shim.is_some())
    }

    /// Whether `pid` is the shim of one of the tasks.
    pub fn is_shim(&self, pid: i32) -> bool {
        self.by_name
            .values()
            .any(|t| t.shim.as_ref().is_some_and(|s| s.pid == pid))
    }
}

/// A live attempt: its shim and the pidfd registered in the loop.
pub(crate) struct LiveShim {
    pub pid: i32,
    pub pidfd: OwnedFd,
    pub token: Token,
}

pub(crate) struct Task {
    pub name: String,
    pub record: TaskRecord,
    /// The latest valid version of the unit file; `None` when the file is gone or never parsed.
    pub unit: Option<Unit>,
    pub unit_text: Option<String>,
    /// The text the current (or last) attempt was started with.
    pub accepted_text: Option<String>,
    pub shim: Option<LiveShim>,
    /// Monotonic time the current attempt started (for `reset_after`).
    pub started_at: Option<Instant>,
    /// A start that could not be persisted is retried after this instant.
    pub start_retry_at: Option<Instant>,
    /// Starts deferred in a row (a host-side problem each time): the next retry waits longer
    /// ([`crate::daemon::lifecycle`]'s `deferral_delay`). Back to 0 once a shim runs.
    pub start_deferrals: u32,
    /// Starts the host refused in a row (`lifecycle::blocked`): the next retry waits longer
    /// (at most a minute). Back to 0 once an attempt ends on the agent's own terms.
    pub blocked_retries: u32,
    /// First scan that found the unit file missing (removal needs two scans, 0.5 s apart).
    pub missing_since: Option<Instant>,
    /// This daemon has seen the unit file. A task whose file was never seen (a wrong or not
    /// yet mounted units directory) is neither started nor forgotten: `keel rm` forgets it.
    pub seen_file: bool,
    /// Why the scheduler keeps this queued task waiting ("needs 4 CPU, 1.5 free", "cpu
    /// pressure 63% > 40%").
    pub waiting: Option<queue::WaitReason>,
    /// When the task last became queued (unix ms): what `starvation_limit` is measured from.
    pub queued_since_ms: u64,
    /// What the live attempt reserved (from the unit it started with).
    pub reserved: Option<queue::Reservation>,
    /// The live attempt's OOM watch.
    pub oom: Option<OomWatched>,
    /// When the watch last saw the OOM killer strike in the attempt's cgroup, and when keel
    /// itself last sent the attempt a SIGKILL (unix ms): which came last decides `oom`.
    pub last_oom_ms: Option<u64>,
    pub keel_kill_ms: Option<u64>,
    /// `keel rm --force`: the checkout goes even if it holds changes (harvested first).
    pub force_remove: bool,
    /// The checkout's disk use, as a job last measured it (for `keel status`; `None`: not
    /// yet, or no checkout).
    pub checkout_bytes: Option<u64>,
    /// The branches kept in the main repository, as a job last listed them.
    pub kept_branches: Vec<String>,
    /// A stopped task's work, as the last disk-use job saw it (`keel status`'s unreviewed).
    pub work: Option<crate::worker::protocol::WorkFacts>,
    /// When `keel status` last had a job measure the two (at most once a minute).
    pub disk_use_asked: Option<Instant>,
    /// What the task's directory held at the last measurement (`resources.disk`): the
    /// attempt's generation it was made during, and bytes.
    pub disk_written: Option<(u64, u64)>,
    /// The generation of the attempt whose reaching its quota was journaled (once each).
    pub quota_reached: Option<u64>,
    /// While the attempt's checkout is prepared (a job): what its start needs to go on.
    pub preparing: Option<Box<PendingStart>>,
    /// An ended attempt whose harvest (a job) runs: how it ended, recorded after.
    pub settling: Option<super::record::Ending>,
    /// CPU time at earlier `keel status` calls (older, newer), at least a second apart.
    pub cpu_samples: std::cell::Cell<(Option<CpuSample>, Option<CpuSample>)>,
    /// An orderly shutdown could not record its stop: left running for the next daemon.
    pub left_running: bool,
    /// The task's user namespace (for its block of host ids), made at its first start by this
    /// daemon and handed to every attempt: ~0.2 ms the agent's start does not wait for.
    pub user_namespace: Option<(crate::sandbox::spec::IdBlock, std::os::fd::OwnedFd)>,
    /// The live attempt's network namespace and relay (`network: None | Allow`).
    pub network: Option<super::network::TaskNetwork>,
    /// Monotonic time the current pause began (`record.paused`), and whether the kernel has
    /// said the cgroup is frozen (`cgroup.events`) (`pausing.rs`).
    pub paused_at: Option<Instant>,
    pub frozen: bool,
    /// The paused attempt's v2 cgroup (to thaw it where no slices are at hand: a stop).
    pub frozen_cgroup: Option<std::path::PathBuf>,
    /// When the `max_runtime` timer armed last is due (`runtime_limit.rs`).
    pub runtime_due: Option<Instant>,
}

impl Task {
    /// The unit's stop signal (SIGTERM without a unit).
    pub(crate) fn stop_signal(&self) -> i32 {
        self.unit
            .as_ref()
            .map_or(libc::SIGTERM, |u| u.stop.signal.0)
    }

    /// How long after the stop signal the attempt is killed (30 s without a unit).
    pub(crate) fn stop_timeout(&self) -> std::time::Duration {
        self.unit
            .as_ref()
            .map_or(std::time::Duration::from_secs(30), |u| u.stop.timeout.0)
    }

    /// A task as the daemon first holds it: no live attempt, nothing observed yet. Callers set
    /// what they know (the accepted unit, when the attempt started, whether the file was seen).
    pub(crate) fn new(
        name: &str,
        record: TaskRecord,
        unit: Option<Unit>,
        unit_text: Option<String>,
    ) -> Task {
        Task {
            name: name.to_string(),
            record,
            unit,
            unit_text,
            accepted_text: None,
            shim: None,
            started_at: None,
            start_retry_at: None,
            start_deferrals: 0,
            blocked_retries: 0,
            missing_since: None,
            seen_file: false,
            waiting: None,
            queued_since_ms: now_ms(),
            reserved: None,
            oom: None,
            last_oom_ms: None,
            keel_kill_ms: None,
            force_remove: false,
            checkout_bytes: None,
            kept_branches: Vec::new(),
            work: None,
            disk_use_asked: None,
            disk_written: None,
            quota_reached: None,
            preparing: None,
            settling: None,
            cpu_samples: std::cell::Cell::new((None, None)),
            left_running: false,
            user_namespace: None,
            network: None,
            paused_at: None,
            frozen: false,
            frozen_cgroup: None,
            runtime_due: None,
        }
    }
}

/// A start waiting for its preparation job (its checkout, the check of its paths): the
/// attempt is decided and persisted (`starting`); what the spawn needs is kept here.
pub(crate) struct PendingStart {
    /// The record before the decision, to put back if the start is deferred.
    pub before: TaskRecord,
    pub spec: crate::sandbox::spec::AttemptSpec,
    /// The attempt's v2 cgroup, open (`CLONE_INTO_CGROUP`).
    pub cgroup_dir: OwnedFd,
    pub unit_def: Unit,
}

/// The OOM watch of a live attempt, registered in the loop (kept by `slices.rs`).
pub(crate) struct OomWatched {
    pub(super) watch: crate::cgroup::OomWatch,
    pub(super) token: mio::Token,
}

/// A task's CPU time at an instant: `keel status` shows the share since an earlier sample.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuSample {
    pub(super) usage_usec: u64,
    pub(super) at: Instant,
}
