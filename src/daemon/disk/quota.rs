//! Kernel project quotas for `resources.disk` (docs/scheduling.md, "Disk"): where the state
//! filesystem has project quotas on (ext4 or xfs mounted with `prjquota`) and keel has
//! CAP_SYS_RESOURCE, each task's agent-written directories (`work/`, `checkpoint/`, its
//! checkout) carry a project id of the task's own, whose hard limit is the budget: the kernel
//! refuses a write past it with EDQUOT. Elsewhere the budget is measured (`super`).
//!
//! Pure: the ids, the limits and the decision. The probe is the loop's (`quotactl_fd`
//! `Q_GETINFO` reads the kernel's in-memory quota state, like `statvfs`); setting ids and
//! limits, and reading usage, are a worker's (`quota_side`).

pub(crate) use crate::sys::quota::ProjectQuotas;
use std::io;

/// The first project id keel hands out: "KE" and a slot. Ids below are the operator's.
pub(crate) const PROJECT_BASE: u32 = 0x4b45_0000;
/// How many ids keel may use.
pub(crate) const PROJECT_SLOTS: u32 = 0x1_0000;

/// A task's project id: the one its record holds (kept across restarts of the task and of the
/// daemon), or the lowest id of keel's range that no other task's record holds. `None`: all
/// are taken.
pub(crate) fn project_for(own: Option<u32>, taken: impl IntoIterator<Item = u32>) -> Option<u32> {
    if let Some(own) = own.filter(|id| in_range(*id)) {
        return Some(own);
    }
    let mut taken: Vec<u32> = taken.into_iter().filter(|id| in_range(*id)).collect();
    taken.sort_unstable();
    taken.dedup();
    let mut next = PROJECT_BASE;
    for id in taken {
        if id != next {
            break;
        }
        next += 1;
    }
    in_range(next).then_some(next)
}

fn in_range(id: u32) -> bool {
    (PROJECT_BASE..PROJECT_BASE + PROJECT_SLOTS).contains(&id)
}

/// The limits for a budget: (hard, soft) in bytes. The hard limit is the budget; the soft
/// one 90% of it (what `repquota` and the like show as a warning).
pub(crate) fn limits(budget: u64) -> (u64, u64) {
    (budget, budget / 10 * 9)
}

/// What the loop found of the state filesystem and of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Probe {
    /// `Q_XGETQSTATV` answered.
    On {
        quotas: ProjectQuotas,
        cap_sys_resource: bool,
    },
    /// `Q_XGETQSTATV` failed with this errno.
    Off { errno: i32 },
    /// The state directory could not be opened (the message).
    Unreadable(String),
}

impl Probe {
    /// From the kernel's answers: `quotas` is `Q_XGETQSTATV`'s, `caps` the daemon's
    /// effective set.
    pub(crate) fn of(quotas: io::Result<ProjectQuotas>, caps: io::Result<u64>) -> Probe {
        match quotas {
            Ok(quotas) => Probe::On {
                quotas,
                cap_sys_resource: caps.is_ok_and(|effective| effective & (1 << 24) != 0),
            },
            Err(e) => Probe::Off {
                errno: e.raw_os_error().unwrap_or(0),
            },
        }
    }
}

/// How budgets are enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Enforcement {
    /// By the kernel: project quotas.
    Kernel,
    /// By measuring, and why not by the kernel.
    Measured(String),
}

impl std::fmt::Display for Enforcement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Enforcement::Kernel => write!(f, "kernel quotas"),
            Enforcement::Measured(why) => write!(f, "measured ({why})"),
        }
    }
}

/// The decision, from what the probe found (`None`: not looked yet).
pub(crate) fn decide(probe: Option<&Probe>) -> Enforcement {
    let why = match probe {
        None => "the state filesystem not looked at yet".to_string(),
        Some(Probe::On {
            quotas: ProjectQuotas { enforced: true, .. },
            cap_sys_resource: true,
        }) => return Enforcement::Kernel,
        Some(Probe::On {
            quotas:
                ProjectQuotas {
                    enforced: false,
                    accounted,
                },
            ..
        }) => match accounted {
            true => {
                "the state filesystem counts project quotas but does not enforce them: \
                     mount it with prjquota"
            }
            false => {
                "the state filesystem has no project quotas: mount it with prjquota \
                      (ext4: tune2fs -O project,quota first)"
            }
        }
        .to_string(),
        Some(Probe::On { .. }) => "the state filesystem has project quotas, but \
                                   CAP_SYS_RESOURCE is missing: run the daemon as root with it"
            .to_string(),
        Some(Probe::Off { errno }) => match *errno {
            libc::ENOSYS => "the kernel (CONFIG_QUOTA) or the state filesystem has no quota \
                             support"
                .to_string(),
            libc::ESRCH => "the state filesystem has no project quotas: mount it with prjquota \
                            (ext4: tune2fs -O project,quota first)"
                .to_string(),
            libc::EPERM | libc::EACCES => {
                "quotactl refused: CAP_SYS_RESOURCE is missing".to_string()
            }
            errno => format!(
                "the state filesystem has no project quotas ({}): ext4 or xfs mounted with \
                 prjquota has",
                io::Error::from_raw_os_error(errno)
            ),
        },
        Some(Probe::Unreadable(e)) => format!("cannot open the state directory: {e}"),
    };
    Enforcement::Measured(why)
}

/// Whether a project with `used` bytes and a hard limit of `hard` is at its quota: within a
/// margin (a sixteenth of the limit, at most 1 MiB) of it, as a refused write leaves it.
pub(crate) fn at_quota(used: u64, hard: u64) -> bool {
    hard > 0 && used.saturating_add((hard / 16).min(1 << 20)) >= hard
}

/// Whether a project holds more than its hard limit allows (past the same margin): the kernel
/// did not refuse the writes — an overlay checkout's upper directory is written with the
/// credentials of whoever mounted it, and a mounter holding CAP_SYS_RESOURCE passes any
/// quota. Then the budget is held as a measured one is: the task is stopped.
pub(crate) fn past_quota(used: u64, hard: u64) -> bool {
    hard > 0 && used > hard.saturating_add((hard / 16).min(1 << 20))
}

#[cfg(test)]
mod tests;
