//! `resources: Resources(...)`: what a task requests (what the queue counts) and what it is
//! limited to (what the kernel enforces). Kept apart, as Kubernetes learnt to: an agent waits
//! on a model most of the time (near 0% of a core) and then bursts into a build, so what it
//! needs on average is far below what it may use for a minute.
//!
//! ```ron
//! resources: Resources(cpu: 0.25, memory: "512M", pids: 1024,
//!                      cpu_limit: Some(4.0), memory_limit: Some("4G")),
//! ```
//!
//! - `cpu`: the CPU request, in cores. The queue admits a task while the requests of the
//!   running tasks leave room for it, and under contention the kernel shares the CPUs in
//!   proportion to requests (v2 `cpu.weight`, v1 `cpu.shares`); it is no cap.
//! - `cpu_limit`: `None` (the default): no cap, an idle machine is the task's; `Some(cores)`:
//!   a CFS quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us`).
//! - `memory`: the memory request, counted by the queue (and v1's soft limit: reclaimed first
//!   above it when the host runs short).
//! - `memory_limit`: the enforced limit (v2 `memory.max` with `memory.high` at 90% of it, v1
//!   `memory.limit_in_bytes`), swap off. `None` (the default): [`DEFAULT_MEMORY_LIMIT`], or the
//!   request where that is larger: keel never runs a task without a memory limit.
//! - `pids`: `pids.max`.
//!
//! The defaults (0.25 CPU, 512M) are what an idle coding agent needs with room to spare:
//! Claude Code 2.1.197 at rest, run under keel, used 343 MB and 1% of a core
//! (docs/scheduling.md, "Requests and limits", has the measurements and the reasoning).

use super::values::Size;
use serde::Deserialize;

/// The default memory limit of a unit that writes no `memory_limit`: 4 GiB, room for a build
/// on top of the agent (an incremental build of keel's own test binary peaked at 1.1 GiB in
/// its cgroup, page cache included: docs/scheduling.md, "Requests and limits").
pub const DEFAULT_MEMORY_LIMIT: u64 = 4 << 30;

/// What a task requests and what it is limited to.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// The CPU request, in cores (fractional): what the queue counts; the task's weight when
    /// CPUs are contended.
    #[serde(default = "Resources::default_cpu")]
    pub cpu: f64,
    /// The memory request: what the queue counts.
    #[serde(default = "Resources::default_memory")]
    pub memory: Size,
    #[serde(default = "Resources::default_pids")]
    pub pids: u32,
    /// A hard cap on CPU, in cores; `None`: none.
    #[serde(default)]
    pub cpu_limit: Option<f64>,
    /// The enforced memory limit; `None`: [`Resources::memory_limit_bytes`]'s default.
    #[serde(default)]
    pub memory_limit: Option<Size>,
    /// `disk: Some("20G")`: the most the task may write on the state filesystem (its task
    /// directory: checkout, work directory, checkpoints, logs); over it, keel stops it with
    /// last exit `disk`. Left out (or `None`): half the state filesystem's size
    /// (`crate::daemon::disk`).
    #[serde(default)]
    pub disk: Option<Size>,
}

impl Resources {
    fn default_cpu() -> f64 {
        0.25
    }
    fn default_memory() -> Size {
        Size(512 << 20)
    }
    fn default_pids() -> u32 {
        1024
    }

    /// The memory limit the kernel enforces: `memory_limit`, or without one
    /// [`DEFAULT_MEMORY_LIMIT`] (the request where that is larger).
    pub fn memory_limit_bytes(&self) -> u64 {
        match self.memory_limit {
            Some(Size(limit)) => limit,
            None => DEFAULT_MEMORY_LIMIT.max(self.memory.0),
        }
    }
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpu: Self::default_cpu(),
            memory: Self::default_memory(),
            pids: Self::default_pids(),
            cpu_limit: None,
            memory_limit: None,
            disk: None,
        }
    }
}
