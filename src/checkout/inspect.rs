//! Is a checkout clean, is it harvested, how much disk does it use — and removing it, which
//! only happens when it is both (or when forced, after harvesting anyway).
//!
//! Clean is what `git status` says of the checkout's files, untracked files included and
//! ignored ones not. An overlay checkout is looked at through its merged view, mounted for
//! the moment in a private mount namespace (see `merged`): the upper layer alone cannot tell
//! a file changed and changed back from one never touched, and git's index is the authority
//! on what is tracked. That needs the task stopped (its sandbox mounts the same upper layer).

use std::fs;
use std::path::Path;

use git2::StatusOptions;

use super::base;
use super::error::{git_err, io_err, CheckoutError};
use super::files;
use super::harvest::{self, Harvest};
use super::merged;
use super::record::{self, CheckoutRecord, Files};
use super::resolve;
use crate::state::StateDir;

/// At most this many changed paths are listed (their count is always given).
const LISTED: usize = 20;

/// Disk used by a checkout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// The task's own: its git directory and its upper layer (or full checkout). Freed by
    /// removing the checkout.
    pub own_bytes: u64,
    /// The base tree under an overlay checkout, shared with every task on the same base
    /// commit (0 for a full checkout).
    pub base_bytes: u64,
}

/// What `keel prune` and `keel rm` need to know of a checkout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckoutState {
    pub branch: String,
    pub base_commit: String,
    /// An overlay over a shared base (else a full checkout).
    pub overlay: bool,
    /// Paths with uncommitted changes (untracked files included, ignored ones not), the
    /// first [`LISTED`]; `change_count` counts them all.
    pub changes: Vec<String>,
    pub change_count: usize,
    /// The task's branches (and a detached HEAD) whose commits the main repository lacks.
    pub unharvested: Vec<String>,
    pub disk: DiskUsage,
}

impl CheckoutState {
    pub fn clean(&self) -> bool {
        self.change_count == 0
    }
    pub fn harvested(&self) -> bool {
        self.unharvested.is_empty()
    }
    /// Why removing the checkout would lose something (empty: it would not).
    pub fn losses(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        if !self.clean() {
            let more = self.change_count.saturating_sub(self.changes.len());
            let mut list = self.changes.join(", ");
            if more > 0 {
                list.push_str(&format!(" and {more} more"));
            }
            reasons.push(format!(
                "{} uncommitted change{} ({list})",
                self.change_count,
                if self.change_count == 1 { "" } else { "s" }
            ));
        }
        if !self.harvested() {
            reasons.push(format!(
                "commits not in the main repository on {}",
                self.unharvested.join(", ")
            ));
        }
        reasons
    }
}

/// What a removal did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Removed {
    /// The harvest made first (`None`: there was no checkout, or it failed under `force`).
    pub harvest: Option<Harvest>,
    /// Bytes freed, the base tree's included when this was its last checkout.
    pub freed_bytes: u64,
    pub base_removed: bool,
}

/// The disk `unit`'s checkout uses. Cheap enough for `keel status`; works while it runs.
pub fn disk_usage(dirs: &StateDir, unit: &str) -> Result<DiskUsage, CheckoutError> {
    let record = load(dirs, unit)?;
    Ok(usage(dirs, unit, &record))
}

fn usage(dirs: &StateDir, unit: &str, record: &CheckoutRecord) -> DiskUsage {
    DiskUsage {
        own_bytes: files::disk_bytes(&record::checkout_dir(dirs, unit)),
        base_bytes: record
            .base_key()
            .map(|key| files::disk_bytes(&base::base_dir(dirs, key)))
            .unwrap_or(0),
    }
}

fn load(dirs: &StateDir, unit: &str) -> Result<CheckoutRecord, CheckoutError> {
    record::load(dirs, unit)?.ok_or_else(|| CheckoutError::NoCheckout {
        unit: unit.to_string(),
    })
}

fn refuse_running(dirs: &StateDir, unit: &str) -> Result<(), CheckoutError> {
    if crate::daemon::spawn::attempt_lock_held(&dirs.run_dir(unit)) {
        return Err(CheckoutError::Running {
            unit: unit.to_string(),
        });
    }
    Ok(())
}

/// Clean? Harvested? Disk? The task must be stopped.
pub fn state(dirs: &StateDir, unit: &str) -> Result<CheckoutState, CheckoutError> {
    let record = load(dirs, unit)?;
    refuse_running(dirs, unit)?;
    state_of(dirs, unit, &record)
}

fn state_of(
    dirs: &StateDir,
    unit: &str,
    record: &CheckoutRecord,
) -> Result<CheckoutState, CheckoutError> {
    let checkout = record::checkout_dir(dirs, unit);
    let git = record::git_dir(&checkout);
    super::create::guard_git_dir(&git, &record.common_dir)?;
    let changes = match &record.files {
        Files::Overlay { base_key } => {
            let lower = base::tree_path(&base::base_dir(dirs, base_key));
            let point = dirs.work_dir(unit);
            fs::create_dir_all(&point).map_err(io_err("creating", &point))?;
            let upper = record::upper_dir(&checkout);
            let work = record::overlay_work_dir(&checkout);
            merged::with_overlay(&lower, &upper, &work, &point, |view| changes(&git, view))
                .map_err(io_err("mounting the checkout to look at it", &upper))??
        }
        Files::Full { .. } => changes(&git, &record::full_files_dir(&checkout))?,
    };
    Ok(CheckoutState {
        branch: record.branch.clone(),
        base_commit: record.base_commit.clone(),
        overlay: record.base_key().is_some(),
        change_count: changes.len(),
        changes: changes.into_iter().take(LISTED).collect(),
        unharvested: unharvested(&git, record)?,
        disk: usage(dirs, unit, record),
    })
}

/// `git status --porcelain` of the work tree `tree` of git directory `git`: the changed
/// paths.
fn changes(git: &Path, tree: &Path) -> Result<Vec<String>, CheckoutError> {
    let repo =
        super::resolve::open_git_dir(git).map_err(git_err("opening the git directory", git))?;
    repo.set_workdir(tree, false)
        .map_err(git_err("opening the checkout", tree))?;
    let mut options = StatusOptions::new();
    options
        .include_untracked(true)
        .include_ignored(false)
        .recurse_untracked_dirs(false)
        .exclude_submodules(false);
    let statuses = repo
        .statuses(Some(&mut options))
        .map_err(git_err("reading the checkout's status", tree))?;
    Ok(statuses
        .iter()
        .map(|s| String::from_utf8_lossy(s.path_bytes()).into_owned())
        .collect())
}

/// The task's branches, and HEAD when detached, whose commits the main repository lacks.
fn unharvested(git: &Path, record: &CheckoutRecord) -> Result<Vec<String>, CheckoutError> {
    let task =
        super::resolve::open_git_dir(git).map_err(git_err("opening the git directory", git))?;
    let main = resolve::open_main(&record.repo)?;
    let odb = main
        .odb()
        .map_err(git_err("opening the object store", &record.repo))?;
    let mut tips = Vec::new();
    let refs = task
        .references_glob("refs/heads/*")
        .map_err(git_err("listing the task's branches", git))?;
    for reference in refs.flatten() {
        if let Some(id) = reference.target() {
            let name = String::from_utf8_lossy(reference.shorthand_bytes()).into_owned();
            tips.push((name, id));
        }
    }
    if task.head_detached().unwrap_or(false) {
        if let Ok(id) = task.refname_to_id("HEAD") {
            tips.push(("HEAD (detached)".to_string(), id));
        }
    }
    Ok(tips
        .into_iter()
        .filter(|(_, id)| !odb.exists(*id))
        .map(|(name, _)| name)
        .collect())
}

/// Remove `unit`'s checkout: harvest first (`attempt` names a kept ref), then remove only
/// when clean and harvested — unless `force`, which removes it anyway (and still harvests
/// first). The main repository's pin goes, and the base tree too when no other checkout
/// uses it. No checkout: nothing to do. The task must be stopped.
pub fn remove(
    dirs: &StateDir,
    unit: &str,
    attempt: u32,
    force: bool,
) -> Result<Removed, CheckoutError> {
    let Some(record) = record::load(dirs, unit)? else {
        return Ok(Removed::default());
    };
    refuse_running(dirs, unit)?;
    let harvest = match harvest::harvest_record(dirs, unit, &record, attempt) {
        Ok(h) => Some(h),
        Err(e) if force => {
            log::warn!("{unit}: removing its checkout without a harvest: {e}");
            None
        }
        Err(e) => return Err(e),
    };
    match state_of(dirs, unit, &record) {
        Ok(state) if !force && !state.losses().is_empty() => {
            return Err(CheckoutError::NotRemovable {
                unit: unit.to_string(),
                reasons: state.losses(),
            })
        }
        Ok(_) => {}
        Err(e) if force => log::warn!("{unit}: removing its checkout unchecked: {e}"),
        Err(e) => return Err(e),
    }
    let checkout = record::checkout_dir(dirs, unit);
    let mut freed = files::disk_bytes(&checkout);
    // Renamed away first: from this instant there is no checkout, whole or half.
    let task = dirs.task_dir(unit);
    let doomed = files::build_path(&task, "checkout.removing");
    fs::rename(&checkout, &doomed).map_err(io_err("removing the checkout", &checkout))?;
    files::sync_dir(&task)?;
    files::remove_tree(&doomed).map_err(io_err("removing the checkout", &doomed))?;
    if let Ok(main) = resolve::open_main(&record.repo) {
        if let Ok(mut pin) = main.find_reference(&record.pin) {
            let _ = pin.delete();
        }
    }
    let mut base_removed = false;
    if let Some(key) = record.base_key() {
        let bytes = base::remove_if_unused(dirs, key)?;
        base_removed = bytes > 0;
        freed += bytes;
    }
    Ok(Removed {
        harvest,
        freed_bytes: freed,
        base_removed,
    })
}

/// Remove the base trees no checkout uses (left by a crash between a checkout's removal and
/// its base's). Returns the bytes freed. For `keel prune`.
pub fn prune_bases(dirs: &StateDir) -> Result<u64, CheckoutError> {
    let bases = base::bases_dir(dirs);
    let Ok(entries) = fs::read_dir(&bases) else {
        return Ok(0);
    };
    files::remove_stale_builds(&bases);
    let mut freed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            freed += base::remove_if_unused(dirs, &name)?;
        }
    }
    Ok(freed)
}
