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
//! The figures are measured off the loop, by two threads ([`DiskMonitor`]): one runs `statvfs`
//! on the state directory, the other walks each running task's directory
//! ([`crate::checkout::disk_bytes`], the walk `keel status` uses for checkouts), each every
//! [`LOOK_EVERY`]. A walk of a large tree takes seconds and `statvfs` can hang on a network
//! filesystem; the loop only reads the last figures. The decisions ([`reserve_hold`],
//! [`over_budget`], [`budget_of`]) are pure.

use crate::fmt::format_bytes;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

mod daemon_side;
pub(crate) use daemon_side::take_disk_stop;

/// How often the threads measure (and the loop looks at its figures). What a task writes in
/// this time plus one walk of its directory is how far past its budget it can get (the slack).
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(2);

/// A free-space figure older than this means `statvfs` hangs: starts wait.
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(30);

/// The state filesystem's space, as `statvfs` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FsSpace {
    /// Free to unprivileged writers (`f_bavail`): the root-reserved blocks are not counted.
    pub free: u64,
    /// The filesystem's size.
    pub total: u64,
}

/// Why new starts wait for disk space, if they do: `space` is the last figure (`None`: never
/// measured, or `statvfs` failed: starts are not held for keel's own lack of a figure) and
/// `age` how old it is; `reserve` is keel.ron's `disk_reserve` (`None`: the default of
/// [`crate::config::default_disk_reserve`]).
pub(crate) fn reserve_hold(
    space: Option<FsSpace>,
    age: Duration,
    reserve: Option<u64>,
) -> Option<String> {
    let space = space?;
    if age >= STALE_AFTER {
        return Some(format!(
            "state filesystem: its free space is unknown (statvfs has not answered for {})",
            crate::fmt::duration(age)
        ));
    }
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

/// What the threads measured and what they are asked to.
#[derive(Default)]
struct Shared {
    /// The last `statvfs` of the state directory, and when (`None`: it failed).
    space: Option<(FsSpace, Instant)>,
    /// The tasks whose directory is walked: unit → directory.
    wanted: BTreeMap<String, PathBuf>,
    /// Each walked task's bytes, with when the walk began (unix ms).
    written: HashMap<String, (u64, u64)>,
}

/// The measuring threads' figures, shared with the loop. The threads end once this is
/// dropped (they hold only a weak reference).
pub(crate) struct DiskMonitor {
    shared: Arc<Mutex<Shared>>,
    /// Whether the last look held new starts (a change re-runs the scheduler).
    pub(crate) held: bool,
}

impl DiskMonitor {
    /// Measure the state filesystem once now (the daemon's start: the first schedule has a
    /// figure), then start the threads.
    pub(crate) fn start(root: &Path) -> DiskMonitor {
        let shared = Arc::new(Mutex::new(Shared {
            space: statvfs(root).map(|s| (s, Instant::now())),
            ..Shared::default()
        }));
        // Two threads: a walk of a large tree (seconds, minutes for millions of files) must
        // not age the free-space figure into "unknown".
        for (name, job) in [
            (
                "keel-statvfs",
                measure_space as fn(&Path, &Weak<Mutex<Shared>>) -> bool,
            ),
            ("keel-disk-use", measure_tasks),
        ] {
            let weak = Arc::downgrade(&shared);
            let root = root.to_path_buf();
            let spawned = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || loop {
                    std::thread::sleep(LOOK_EVERY);
                    if !job(&root, &weak) {
                        return;
                    }
                });
            if let Err(e) = spawned {
                log::warn!(
                    "cannot start the thread {name}: {e}; its disk figures stay as they are"
                );
            }
        }
        DiskMonitor {
            shared,
            held: false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The last figure of the state filesystem and its age.
    pub(crate) fn space(&self) -> (Option<FsSpace>, Duration) {
        let shared = self.lock();
        match shared.space {
            Some((space, at)) => (Some(space), at.elapsed()),
            None => (None, Duration::ZERO),
        }
    }

    /// Walk these tasks' directories from now on (and forget the others' figures).
    pub(crate) fn measure(&self, wanted: BTreeMap<String, PathBuf>) {
        let mut shared = self.lock();
        shared.written.retain(|unit, _| wanted.contains_key(unit));
        shared.wanted = wanted;
    }

    /// The last walk of `unit`'s directory: its bytes, and when the walk began (unix ms).
    pub(crate) fn written(&self, unit: &str) -> Option<(u64, u64)> {
        self.lock().written.get(unit).copied()
    }
}

/// One `statvfs` of the state directory; false once the monitor is gone.
fn measure_space(root: &Path, shared: &Weak<Mutex<Shared>>) -> bool {
    let space = statvfs(root);
    let Some(strong) = shared.upgrade() else {
        return false;
    };
    let mut s = strong.lock().unwrap_or_else(|e| e.into_inner());
    s.space = space.map(|space| (space, Instant::now()));
    true
}

/// One walk of each wanted task's directory; false once the monitor is gone.
fn measure_tasks(_root: &Path, shared: &Weak<Mutex<Shared>>) -> bool {
    let Some(wanted) = shared.upgrade().map(|strong| {
        let s = strong.lock().unwrap_or_else(|e| e.into_inner());
        s.wanted.clone()
    }) else {
        return false;
    };
    for (unit, dir) in wanted {
        let began = crate::state::now_ms();
        let bytes = crate::checkout::disk_bytes(&dir);
        let Some(strong) = shared.upgrade() else {
            return false;
        };
        let mut s = strong.lock().unwrap_or_else(|e| e.into_inner());
        if s.wanted.contains_key(&unit) {
            s.written.insert(unit, (bytes, began));
        }
    }
    true
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
