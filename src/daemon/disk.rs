//! Disk budgets (docs/scheduling.md, "Disk"): what tasks write must not fill the state
//! filesystem (on most hosts, the root filesystem).
//!
//! - `keel.ron` `disk_reserve`: while the state filesystem has less free space than this, new
//!   starts wait, with the figures as their reason; running tasks are left alone by it.
//! - `resources.disk`: a task whose directory (`tasks/<unit>`: checkout or work directory,
//!   checkpoints, logs, progress file) holds more than its budget is stopped, last exit
//!   `disk`, and not restarted (its files are still there: a restart would be over budget at
//!   once).
//!
//! Every [`LOOK_EVERY`] the loop runs `statvfs` on the state directory itself: the state
//! filesystem is keel's own, which the loop already writes and fsyncs for every decision (if
//! it hangs, so does every persist), and `statvfs` reads the superblock's counters. The walk
//! of a task's directory depends on what the agent wrote (seconds for 500,000 files): it runs
//! in a worker, a `TaskDiskUse` job per running task, one at a time per task. The decisions
//! ([`reserve_hold`], [`over_budget`], [`budget_of`]) are pure.
//!
//! Where the state filesystem has project quotas and keel CAP_SYS_RESOURCE, the kernel
//! enforces the budget instead ([`quota`]): the walk becomes a read of the project's usage,
//! and a task at its quota is not stopped (its writes fail with EDQUOT).

use crate::fmt::format_bytes;
use std::path::Path;
use std::time::Duration;

mod daemon_side;
pub(crate) mod quota;
mod quota_side;
pub(crate) use daemon_side::take_disk_stop;

/// How often the loop looks at the state filesystem and asks for a walk of each running
/// task's directory (when its previous walk is done). What a task writes in two of these, one
/// walk and its stop is how far past its budget it can get (the slack).
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(2);

/// The state filesystem's space, as `statvfs` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FsSpace {
    /// Free to unprivileged writers (`f_bavail`): the root-reserved blocks are not counted.
    pub free: u64,
    /// The filesystem's size.
    pub total: u64,
}

/// Why new starts wait for disk space, if they do: `space` is the last figure (`None`: never
/// measured, or `statvfs` failed: starts are not held for keel's own lack of a figure);
/// `reserve` is keel.ron's `disk_reserve` (`None`: the default of
/// [`crate::config::default_disk_reserve`]).
pub(crate) fn reserve_hold(space: Option<FsSpace>, reserve: Option<u64>) -> Option<String> {
    let space = space?;
    let reserve = reserve.unwrap_or_else(|| crate::config::default_disk_reserve(space.total));
    (space.free < reserve).then(|| {
        format!(
            "state filesystem: {} free < disk_reserve {}",
            format_bytes(space.free, false),
            format_bytes(reserve, true)
        )
    })
}

/// A task's budget: its `resources.disk`, or half the state filesystem.
pub(crate) fn budget_of(disk: Option<u64>, filesystem_bytes: u64) -> u64 {
    disk.unwrap_or(filesystem_bytes / 2)
}

/// Why a task that holds `written` bytes with a budget of `budget` is stopped, if it is.
pub(crate) fn over_budget(written: u64, budget: u64, explicit: bool) -> Option<String> {
    (written > budget).then(|| {
        let whose = if explicit {
            "resources.disk"
        } else {
            "the default resources.disk, half the state filesystem"
        };
        format!(
            "wrote {} on the state filesystem, over {whose} ({})",
            format_bytes(written, true),
            format_bytes(budget, false)
        )
    })
}

/// The last look at the state filesystem.
#[derive(Debug, Default)]
pub(crate) struct DiskLook {
    /// The last `statvfs` of the state directory (`None`: never, or it failed).
    pub(crate) space: Option<FsSpace>,
    /// Whether the last look held new starts (a change re-runs the scheduler).
    pub(crate) held: bool,
    /// What the last look found of project quotas (`None`: not looked yet).
    pub(crate) probe: Option<quota::Probe>,
    /// Why the last attempt's quota could not be set, if it could not (until one is).
    pub(crate) apply_failed: Option<String>,
}

impl DiskLook {
    /// Look at the state filesystem now: its space, and whether it has project quotas.
    pub(crate) fn look(&mut self, root: &Path) {
        self.space = statvfs(root);
        let probe = quota_side::probe(root);
        if self.probe.as_ref() != Some(&probe) {
            let enforcement = quota::decide(Some(&probe));
            log::info!("disk budgets: {enforcement}");
            self.probe = Some(probe);
        }
    }

    /// How budgets are enforced now.
    pub(crate) fn enforcement(&self) -> quota::Enforcement {
        match (quota::decide(self.probe.as_ref()), &self.apply_failed) {
            (quota::Enforcement::Kernel, Some(why)) => quota::Enforcement::Measured(why.clone()),
            (decided, _) => decided,
        }
    }
}

/// `statvfs` of `path`: `None` (logged) when it fails.
fn statvfs(path: &Path) -> Option<FsSpace> {
    match nix::sys::statvfs::statvfs(path) {
        Ok(v) => {
            let fragment = v.fragment_size().max(1);
            Some(FsSpace {
                free: v.blocks_available().saturating_mul(fragment),
                total: v.blocks().saturating_mul(fragment),
            })
        }
        Err(e) => {
            log::warn!("statvfs {}: {e}", path.display());
            None
        }
    }
}

#[cfg(test)]
mod tests;
