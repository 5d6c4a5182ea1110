//! cgroups: one interface, a v2 backend and a hybrid backend (v1 controllers + the v2 mount).
//!
//! keel writes cgroup files itself (DESIGN, "cgroups"). [`detect`] reads `/proc/self/mountinfo`
//! and `/proc/self/cgroup` into a [`Layout`]; [`Tree::setup`] creates keel's own subtree under the
//! cgroup keel was started in:
//!
//! ```text
//! <base>/<name>/supervisor/     the daemon itself (v2's "no internal processes" rule)
//! <base>/<name>/tasks/<unit>/   one per task: limits, OOM events, cgroup.kill
//! ```
//!
//! (On v1 hierarchies the task directory is `units/`: v1 cgroups have a `tasks` file.)
//!
//! On v2, keel init in a non-root cgroup first moves into `<base>/keel-init` ([`INIT_LEAF`]),
//! so that `<base>` holds no process when the daemon enables controllers there.
//!
//! On a pure v2 host `<base>` is the daemon's cgroup in the unified hierarchy and cpu, memory
//! and pids are enabled down the path. On a hybrid host the same tree exists in the v2 mount
//! (which has no controllers, but has `cgroup.kill`, `cgroup.freeze`, `cgroup.events`,
//! `cpu.stat` and takes `CLONE_INTO_CGROUP`) and in each of the v1 cpu, cpuacct, memory and pids
//! hierarchies, which enforce the limits.
//!
//! Every write goes through [`CgroupFs`], so the plan of writes of each backend is unit-tested
//! without a kernel (`tests_plan.rs`); `tests/cgroup_kernel.rs` runs it on a real kernel.
//!
//! A [`Tree`] never writes outside its own `<base>/<name>` subtree, except to move the daemon
//! in and out (`<base>/cgroup.procs`) and to enable controllers in `<base>/cgroup.subtree_control`
//! on v2.

pub mod delegation;
mod detect;
mod error;
mod fs;
mod oom;
mod pressure;
mod task;
mod tree;

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

pub use detect::{
    cgroup2_mounts, detect, init_needs_leaf, missing_cgroup2_mount_point, parse_cpu_max,
    parse_layout, read_only_cgroup_mounts, Layout, Mode, V1Controller, INIT_LEAF,
};
pub use error::CgroupError;
pub use fs::{CgroupFs, RealFs};
pub use oom::OomWatch;
pub use pressure::{
    parse_some_avg10, PressureReading, PressureSource, TreePressure, HOST_PRESSURE_DIR,
};
pub use task::{join_v1, TaskCgroup};
pub use tree::{enter_init_leaf, Tree, V1_TASKS, V2_TASKS};

/// The period of the CFS bandwidth controller, in microseconds: 100 ms, the kernel's default
/// (cgroup-v2.rst, "cpu.max"; cgroup-v1 sched-bwc.rst).
pub const CPU_PERIOD_US: u64 = 100_000;

/// The smallest quota the kernel accepts: 1 ms per period (sched-bwc.rst: "the minimum quota
/// allowed for the quota or period is 1ms").
pub const CPU_MIN_QUOTA_US: u64 = 1_000;

/// The controllers keel enables on v2 and limits on v1, in the order they are written.
pub const CONTROLLERS: [&str; 3] = ["cpu", "memory", "pids"];

/// v2 `cpu.weight` of one core's request: the kernel's default weight (cgroup-v2.rst,
/// "cpu.weight": "The weight in the range [1, 10000]", default 100).
pub const CPU_WEIGHT_PER_CORE: f64 = 100.0;
/// The range of v2 `cpu.weight`.
pub const CPU_WEIGHT_RANGE: (u64, u64) = (1, 10_000);
/// v1 `cpu.shares` of one core's request: the kernel's default shares (1024, `scale_load_down`
/// of NICE_0_LOAD; cgroup-v1 sched-design-CFS "Group scheduler extensions").
pub const CPU_SHARES_PER_CORE: f64 = 1024.0;
/// The range the kernel accepts for v1 `cpu.shares` (MIN_SHARES 2, MAX_SHARES 2^18).
pub const CPU_SHARES_RANGE: (u64, u64) = (2, 1 << 18);

/// What the kernel is told of a task: the unit's `resources`. The requests weigh the task
/// against its siblings (CPU) and mark what it may keep when the host runs short (memory);
/// the limits cap it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// The CPU request in cores (fractional): the task's weight under contention.
    pub cpu_request: f64,
    /// A hard cap on CPU in cores; `None`: none.
    pub cpu_limit: Option<f64>,
    /// The memory request (v1: the soft limit).
    pub memory_request: u64,
    /// The enforced memory limit.
    pub memory_limit: u64,
    pub pids: u32,
}

/// `cores × per_core`, rounded, within `range` (a NaN or negative share is the minimum).
fn scaled(cores: f64, per_core: f64, (min, max): (u64, u64)) -> u64 {
    let value = (cores * per_core).round();
    if value.is_nan() || value < min as f64 {
        min
    } else if value > max as f64 {
        max
    } else {
        value as u64
    }
}

impl Limits {
    /// v2 `cpu.weight`: 100 per core requested, so that contended CPUs are shared in
    /// proportion to requests (0.25 → 25, 2.0 → 200).
    pub fn cpu_weight(&self) -> u64 {
        scaled(self.cpu_request, CPU_WEIGHT_PER_CORE, CPU_WEIGHT_RANGE)
    }

    /// v1 `cpu.shares`: 1024 per core requested (0.25 → 256, 2.0 → 2048).
    pub fn cpu_shares(&self) -> u64 {
        scaled(self.cpu_request, CPU_SHARES_PER_CORE, CPU_SHARES_RANGE)
    }

    /// The CFS quota per [`CPU_PERIOD_US`] of the CPU limit, never below [`CPU_MIN_QUOTA_US`];
    /// `None` without a limit.
    pub fn cpu_quota_us(&self) -> Option<u64> {
        let limit = self.cpu_limit?;
        let quota = (limit * CPU_PERIOD_US as f64).round();
        Some(if quota.is_finite() && quota >= CPU_MIN_QUOTA_US as f64 {
            // `as` saturates at u64::MAX; the kernel then refuses the write with EINVAL.
            quota as u64
        } else {
            CPU_MIN_QUOTA_US
        })
    }

    /// v2 `cpu.max`: "$MAX $PERIOD", "max $PERIOD" without a limit (cgroup-v2.rst, "cpu.max").
    pub fn cpu_max(&self) -> String {
        match self.cpu_quota_us() {
            Some(quota) => format!("{quota} {CPU_PERIOD_US}"),
            None => format!("max {CPU_PERIOD_US}"),
        }
    }

    /// v1 `cpu.cfs_quota_us`: the quota, or -1 for none (cgroup-v1 sched-bwc.rst).
    pub fn cfs_quota_us(&self) -> String {
        self.cpu_quota_us()
            .map_or_else(|| "-1".to_string(), |quota| quota.to_string())
    }

    /// v2 `memory.high`: 90% of `memory.max`, so the kernel throttles and reclaims before the
    /// OOM killer runs at the hard limit (cgroup-v2.rst, "memory.high": "the main mechanism to
    /// control memory usage").
    pub fn memory_high(&self) -> u64 {
        (self.memory_limit as u128 * 9 / 10) as u64
    }
}

/// A task cgroup's figures, for `keel status` and the liveness CPU signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// CPU time used by the task's processes, in microseconds.
    pub cpu_usage_usec: u64,
    pub memory_current: u64,
    /// The high-water mark, where the kernel keeps one (v2 `memory.peak` is Linux ≥ 5.19).
    pub memory_peak: Option<u64>,
    pub pids_current: u64,
    /// Processes of the task killed by the OOM killer.
    pub oom_kills: u64,
}

/// What [`TaskCgroup::try_remove`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Every directory of the task is gone (or was never there).
    Removed,
    /// A directory still holds processes (killed ones that have not exited yet): try again
    /// later, from a timer.
    Busy,
}

/// A tree or task name must be a single ordinary path component, so that joining it to a base
/// can never leave that base.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\0')
        && !name.contains('\n')
}

fn check_name(name: &str) -> Result<(), CgroupError> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(CgroupError::InvalidName {
            name: name.to_string(),
        })
    }
}

/// Read a flat-keyed file ("key value" lines: `cpu.stat`, `memory.events`, `cgroup.events`,
/// `memory.oom_control`) and return `key`'s value.
fn keyed_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        if parts.next()? == key {
            parts.next()?.parse().ok()
        } else {
            None
        }
    })
}
