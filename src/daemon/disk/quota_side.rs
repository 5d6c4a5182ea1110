//! The loop's side of kernel quotas ([`super::quota`]): the probe of the state filesystem at
//! each look, the task's project id and limits handed to its preparation job (a worker sets
//! them: the loop never waits on the disk), and a task at its quota journaled once per
//! attempt — not stopped: the kernel refuses its writes past the budget.

use super::budget_of;
use super::quota::{at_quota, limits, project_for, Enforcement, Probe};
use crate::daemon::Daemon;
use crate::worker::protocol::QuotaAsk;
use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;

/// Whether the filesystem of `root` has project quotas on, and the daemon CAP_SYS_RESOURCE:
/// `Q_XGETQSTATV` reads the kernel's in-memory quota state (no I/O), `capget` the daemon's own.
pub(super) fn probe(root: &Path) -> Probe {
    let dir = match File::open(root) {
        Ok(dir) => dir,
        Err(e) => return Probe::Unreadable(e.to_string()),
    };
    let quotas = crate::sys::quota::project_quotas(dir.as_fd());
    let caps = crate::sys::caps::current_caps().map(|(effective, _, _)| effective);
    Probe::of(quotas, caps)
}

impl Daemon {
    /// The quota for `unit`'s next attempt under kernel quotas: its project id (its own, or
    /// one no other task holds) and its budget's limits. `None`: budgets are measured, or no
    /// budget is known yet (no explicit one, and no figure of the filesystem).
    pub(crate) fn quota_ask_for(&self, unit: &str, disk: Option<u64>) -> Option<QuotaAsk> {
        if self.disk.enforcement() != Enforcement::Kernel {
            return None;
        }
        let total = self.disk.space.map_or(0, |s| s.total);
        if disk.is_none() && total == 0 {
            return None;
        }
        let own = self.tasks.get(unit).and_then(|t| t.record.quota_project);
        let taken = (self.tasks.values())
            .filter(|t| t.name != unit)
            .filter_map(|t| t.record.quota_project);
        let Some(project) = project_for(own, taken) else {
            log::warn!("{unit}: every project id of keel's range is taken: measured");
            return None;
        };
        let (hard, soft) = limits(budget_of(disk, total));
        Some(QuotaAsk {
            project,
            hard,
            soft,
        })
    }

    /// The preparation job's account of the attempt's quota: the attempt `generation` is
    /// the kernel's to hold to its budget, or (the reason logged and shown by `keel status`)
    /// measured.
    pub(crate) fn note_quota_applied(
        &mut self,
        unit: &str,
        generation: u64,
        applied: Option<Result<(), String>>,
    ) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        match applied {
            None => task.record.quota_generation = None,
            Some(Ok(())) => {
                log::info!(
                    "{unit}: disk budget held by the kernel (project {:#x})",
                    task.record.quota_project.unwrap_or(0)
                );
                task.record.quota_generation = Some(generation);
                self.disk.apply_failed = None;
            }
            Some(Err(why)) => {
                log::warn!("{unit}: {why}: its disk budget is measured");
                task.record.quota_generation = None;
                self.disk.apply_failed = Some(why);
            }
        }
    }

    /// A figure read from the kernel's quota for `unit`'s attempt `generation`: at its
    /// quota, journaled (`disk-quota`) once per attempt; the task is not stopped. Past it
    /// (the kernel let the writes through: [`super::quota::past_quota`]), stopped as a
    /// measured budget is.
    pub(crate) fn judge_quota(&mut self, unit: &str, generation: u64, used: u64, hard: u64) {
        if super::quota::past_quota(used, hard) {
            let why = format!(
                "wrote {} on the state filesystem, over resources.disk ({}): the kernel's quota \
                 did not hold it (an overlay checkout mounted with CAP_SYS_RESOURCE passes it; \
                 user namespaces on make it hold)",
                crate::fmt::format_bytes(used, true),
                crate::fmt::format_bytes(hard, false)
            );
            return self.stop_for_disk(unit, why);
        }
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        if !at_quota(used, hard) || task.quota_reached == Some(generation) {
            return;
        }
        task.quota_reached = Some(generation);
        let why = format!(
            "at its disk quota: {} of {} (resources.disk, kernel quotas): its writes fail \
             with EDQUOT",
            crate::fmt::format_bytes(used, true),
            crate::fmt::format_bytes(hard, false)
        );
        log::warn!("{unit}: {why}");
        self.store.task_event(task, "disk-quota", &why);
    }
}
