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
use super::unread::{self, Layer};
use super::HarvestLimits;
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
    /// Files keel will not read (FIFOs, sockets, devices the agent left: see
    /// `checkout::unread`), the first few with what they are; `unread_count` counts them all.
    /// While there is one, libgit2 is not shown the files and `changes` is left empty.
    pub unread: Vec<String>,
    pub unread_count: usize,
    /// The task's refs (branches by their short name, `stash@{n}`, a detached HEAD, tags and
    /// others by their full name) whose objects the main repository lacks.
    pub unharvested: Vec<String>,
    pub disk: DiskUsage,
}

impl CheckoutState {
    pub fn clean(&self) -> bool {
        self.change_count == 0 && self.unread_count == 0
    }
    pub fn harvested(&self) -> bool {
        self.unharvested.is_empty()
    }
    /// Why removing the checkout would lose something (empty: it would not).
    pub fn losses(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        if self.unread_count > 0 {
            let more = self.unread_count.saturating_sub(self.unread.len());
            let mut list = self.unread.join(", ");
            if more > 0 {
                list.push_str(&format!(" and {more} more"));
            }
            reasons.push(format!(
                "changes keel will not read: {} file{} that {} not regular ({list}; a forced \
                 removal deletes them unopened)",
                self.unread_count,
                if self.unread_count == 1 { "" } else { "s" },
                if self.unread_count == 1 { "is" } else { "are" },
            ));
        }
        if self.change_count > 0 {
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
                "commits not in the main repository on {} (a forced removal keeps them \
                 under refs/keel/kept/)",
                self.unharvested.join(", ")
            ));
        }
        reasons
    }
}

/// What a removal did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Removed {
    /// The harvest made first (`None`: there was no checkout).
    pub harvest: Option<Harvest>,
    /// The task's other unharvested refs, kept in the main repository by a forced removal.
    pub kept: Vec<String>,
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

pub(crate) fn load(dirs: &StateDir, unit: &str) -> Result<CheckoutRecord, CheckoutError> {
    record::load(dirs, unit)?.ok_or_else(|| CheckoutError::NoCheckout {
        unit: unit.to_string(),
    })
}

pub(crate) fn refuse_running(dirs: &StateDir, unit: &str) -> Result<(), CheckoutError> {
    if crate::state::attempt_lock_held(&dirs.run_dir(unit)) {
        return Err(CheckoutError::Running {
            unit: unit.to_string(),
        });
    }
    Ok(())
}

/// Take `unit`'s attempt lock for as long as the returned file is open, so that no attempt
/// starts (and mounts the checkout's upper directory) while keel looks at its files: the
/// daemon defers a start while it cannot take the lock. `Running` when a shim holds it. A
/// task without a run directory has had no attempt: `None`, nothing to hold.
pub(crate) fn hold_stopped(
    dirs: &StateDir,
    unit: &str,
) -> Result<Option<std::fs::File>, CheckoutError> {
    let run_dir = dirs.run_dir(unit);
    if !run_dir.is_dir() {
        return Ok(None);
    }
    match crate::state::take_attempt_lock(&run_dir) {
        Ok(Some(lock)) => Ok(Some(lock)),
        Ok(None) => Err(CheckoutError::Running {
            unit: unit.to_string(),
        }),
        Err(e) => Err(io_err(
            "locking",
            &crate::state::attempt_lock_path(&run_dir),
        )(e)),
    }
}

/// Clean? Harvested? Disk? The task must be stopped (and stays so while it is looked at).
pub fn state(dirs: &StateDir, unit: &str) -> Result<CheckoutState, CheckoutError> {
    let record = load(dirs, unit)?;
    let _held = hold_stopped(dirs, unit)?;
    state_of(dirs, unit, &record)
}

fn state_of(
    dirs: &StateDir,
    unit: &str,
    record: &CheckoutRecord,
) -> Result<CheckoutState, CheckoutError> {
    let checkout = record::checkout_dir(dirs, unit);
    let git = record::git_dir(&checkout);
    super::guard::guard_git_dir(&git, &record.common_dir)?;
    // Nothing of the files goes to libgit2 before they are known to be safe to open.
    let unread = unreadable(dirs, unit, record)?;
    let changes = match unread.count {
        0 => with_files(dirs, unit, record, |view| changes(&git, view))?,
        _ => Vec::new(),
    };
    Ok(CheckoutState {
        branch: record.branch.clone(),
        base_commit: record.base_commit.clone(),
        overlay: record.base_key().is_some(),
        change_count: changes.len(),
        changes: changes.into_iter().take(LISTED).collect(),
        unread: unread.named,
        unread_count: unread.count,
        unharvested: unharvested(&git, record)?,
        disk: usage(dirs, unit, record),
    })
}

/// `f` of the checkout's files as the agent sees them: an overlay's merged view, mounted for
/// the moment in a private mount namespace (the task must be stopped), or a full checkout's
/// files. The caller has checked them with [`unread::find`] first.
pub(crate) fn with_files<T: Send>(
    dirs: &StateDir,
    unit: &str,
    record: &CheckoutRecord,
    f: impl FnOnce(&Path) -> Result<T, CheckoutError> + Send,
) -> Result<T, CheckoutError> {
    let checkout = record::checkout_dir(dirs, unit);
    match &record.files {
        Files::Overlay { base_key } => {
            let lower = base::tree_path(&base::base_dir(dirs, base_key));
            let point = dirs.work_dir(unit);
            fs::create_dir_all(&point).map_err(io_err("creating", &point))?;
            let upper = record::upper_dir(&checkout);
            let work = record::overlay_work_dir(&checkout);
            merged::with_overlay(&lower, &upper, &work, &point, f)
                .map_err(io_err("mounting the checkout to look at it", &upper))?
        }
        Files::Full { .. } => f(&record::full_files_dir(&checkout)),
    }
}

/// The files keel will not read in `unit`'s checkout (see [`unread`]).
pub(crate) fn unreadable(
    dirs: &StateDir,
    unit: &str,
    record: &CheckoutRecord,
) -> Result<unread::Unreadable, CheckoutError> {
    let checkout = record::checkout_dir(dirs, unit);
    match &record.files {
        Files::Overlay { .. } => unread::find(&record::upper_dir(&checkout), Layer::Upper),
        Files::Full { .. } => unread::find(&record::full_files_dir(&checkout), Layer::Files),
    }
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
        // A submodule's repository is the agent's (unread.rs refuses a checked-out one).
        .exclude_submodules(true);
    let statuses = repo
        .statuses(Some(&mut options))
        .map_err(git_err("reading the checkout's status", tree))?;
    Ok(statuses
        .iter()
        .map(|s| String::from_utf8_lossy(s.path_bytes()).into_owned())
        .collect())
}

/// A ref of the task's git directory whose object the main repository lacks.
pub(crate) struct Loss {
    /// As reported: a branch's short name, `stash@{n}`, `HEAD (detached)`, else the full ref.
    pub label: String,
    /// Its name under `refs/keel/kept/<unit>/` when kept by a forced removal.
    pub kept: String,
    pub id: git2::Oid,
}

/// Every ref of the task's git directory (branches, tags, notes, remotes, `refs/stash` and
/// each entry of its reflog, a detached HEAD) whose object the main repository lacks. An
/// unreadable ref is an error, never "nothing lost".
pub(crate) fn losses(git: &Path, record: &CheckoutRecord) -> Result<Vec<Loss>, CheckoutError> {
    let task =
        super::resolve::open_git_dir(git).map_err(git_err("opening the git directory", git))?;
    let main = resolve::open_main(&record.repo)?;
    let odb = main
        .odb()
        .map_err(git_err("opening the object store", &record.repo))?;
    let listing = "listing the task's refs";
    let mut tips = Vec::new();
    let refs = task.references().map_err(git_err(listing, git))?;
    for reference in refs {
        let reference = reference.map_err(git_err(listing, git))?;
        let Some(id) = reference.target() else {
            continue; // symbolic: its target is listed on its own
        };
        let name = String::from_utf8_lossy(reference.name_bytes()).into_owned();
        if name == "refs/stash" {
            continue; // below, with its reflog
        }
        let label = match name.strip_prefix("refs/heads/") {
            Some(branch) => branch.to_string(),
            None => name.clone(),
        };
        tips.push(Loss {
            label,
            kept: name,
            id,
        });
    }
    if let Ok(id) = task.refname_to_id("refs/stash") {
        // `git stash` keeps its entries in the reflog of refs/stash: stash@{0} is the ref.
        let mut ids = vec![id];
        if let Ok(log) = task.reflog("refs/stash") {
            ids = log.iter().map(|entry| entry.id_new()).collect();
            if ids.first() != Some(&id) {
                ids.insert(0, id);
            }
        }
        for (n, id) in ids.into_iter().enumerate() {
            tips.push(Loss {
                label: format!("stash@{{{n}}}"),
                kept: format!("stash/{n}"),
                id,
            });
        }
    }
    if task.head_detached().unwrap_or(false) {
        if let Ok(id) = task.refname_to_id("HEAD") {
            tips.push(Loss {
                label: "HEAD (detached)".to_string(),
                kept: "HEAD".to_string(),
                id,
            });
        }
    }
    Ok(tips.into_iter().filter(|t| !odb.exists(t.id)).collect())
}

fn unharvested(git: &Path, record: &CheckoutRecord) -> Result<Vec<String>, CheckoutError> {
    Ok(losses(git, record)?.into_iter().map(|l| l.label).collect())
}

/// The task's branches kept in the main repository by harvests that could not fast-forward
/// (`<branch>@<attempt>`, see [`harvest::kept_name`]): work that waits for a person.
pub fn kept_branches(record: &CheckoutRecord) -> Result<Vec<String>, CheckoutError> {
    let main = resolve::open_main(&record.repo)?;
    let listing = |e| CheckoutError::git("listing the kept branches", &record.repo, e);
    let mut kept: Vec<String> = main
        .references_glob(&format!("refs/heads/{}@*", record.branch))
        .map_err(listing)?
        .flatten()
        .filter_map(|r| r.shorthand().ok().map(str::to_string))
        .collect();
    kept.sort();
    Ok(kept)
}

/// `refs/keel/kept/<unit>`: where a forced removal keeps the task's unharvested refs (a unit
/// name a ref cannot carry is spelled in hex, as in [`resolve::pin_ref`]).
pub(crate) fn kept_prefix(unit: &str) -> String {
    let plain = format!("refs/keel/kept/{unit}");
    if git2::Reference::is_valid_name(&format!("{plain}/HEAD")) {
        plain
    } else {
        let hex: String = unit.bytes().map(|b| format!("{b:02x}")).collect();
        format!("refs/keel/kept/x-{hex}")
    }
}

/// Keep every unharvested ref of the task in the main repository, under
/// `refs/keel/kept/<unit>/<ref>` (`<ref>@2`, … when that is taken at another commit), its
/// objects brought in as a harvest brings them. Returns the refs made.
fn keep_losses(
    dirs: &StateDir,
    unit: &str,
    record: &CheckoutRecord,
    limits: &HarvestLimits,
) -> Result<Vec<String>, CheckoutError> {
    let git = record::git_dir(&record::checkout_dir(dirs, unit));
    super::guard::guard_git_dir(&git, &record.common_dir)?;
    let losses = losses(&git, record)?;
    if losses.is_empty() {
        return Ok(Vec::new());
    }
    let main = resolve::open_main(&record.repo)?;
    let ids: Vec<git2::Oid> = losses.iter().map(|l| l.id).collect();
    harvest::bring_objects(&main, &git, &ids, limits, (unit, &dirs.task_dir(unit)))?;
    let prefix = kept_prefix(unit);
    let message = format!("keel rm --force {unit}: kept");
    let path = record.repo.as_path();
    let mut kept = Vec::new();
    for loss in losses {
        let mut done = false;
        for n in 1..1000 {
            let name = match n {
                1 => format!("{prefix}/{}", loss.kept),
                n => format!("{prefix}/{}@{n}", loss.kept),
            };
            match main.refname_to_id(&name) {
                Ok(at) if at == loss.id => {}
                Ok(_) => continue,
                Err(_) => {
                    main.reference(&name, loss.id, false, &message)
                        .map_err(git_err("keeping the task's ref", path))?;
                }
            }
            log::info!(
                "{unit}: its {} is kept in {} as {name}",
                loss.label,
                path.display()
            );
            kept.push(name);
            done = true;
            break;
        }
        if !done {
            return Err(CheckoutError::Git {
                what: format!("keeping the task's {}", loss.label),
                path: path.to_path_buf(),
                message: "a thousand kept refs of that name: delete some".into(),
            });
        }
    }
    Ok(kept)
}

/// Remove `unit`'s checkout: harvest first (`attempt` names a kept ref), then remove only
/// when clean and harvested. `force` discards uncommitted changes, nothing else: every other
/// unharvested ref (another branch, a stash, a tag, a detached HEAD) is first kept in the
/// main repository under `refs/keel/kept/<unit>/`; if the harvest or that fails, nothing is
/// removed. What was written in main is made durable (syncfs) before the checkout goes. The
/// main repository's pin goes, and the base tree too when no other checkout uses it. No
/// checkout: nothing to do. The task must be stopped. Files of the checkout that are not
/// regular (a FIFO, a socket, a device) make it not removable unless forced, and a forced
/// removal deletes them without opening them. Harvests within the default [`HarvestLimits`].
pub fn remove(
    dirs: &StateDir,
    unit: &str,
    attempt: u32,
    force: bool,
) -> Result<Removed, CheckoutError> {
    remove_with_limits(dirs, unit, attempt, force, &HarvestLimits::default())
}

/// [`remove`], its harvest (and the keeping of other refs) within `limits`: a refused harvest
/// refuses the removal.
pub fn remove_with_limits(
    dirs: &StateDir,
    unit: &str,
    attempt: u32,
    force: bool,
    limits: &HarvestLimits,
) -> Result<Removed, CheckoutError> {
    let Some(record) = record::load(dirs, unit)? else {
        return Ok(Removed::default());
    };
    refuse_running(dirs, unit)?;
    let harvest = harvest::harvest_record(dirs, unit, &record, attempt, limits)?;
    let mut kept = Vec::new();
    if force {
        kept = keep_losses(dirs, unit, &record, limits)?;
    } else {
        let state = state_of(dirs, unit, &record)?;
        if !state.losses().is_empty() {
            return Err(CheckoutError::NotRemovable {
                unit: unit.to_string(),
                reasons: state.losses(),
            });
        }
    }
    // The harvest and the kept refs reach the disk before the only other copy goes.
    files::sync_filesystem(&record.common_dir)?;
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
        harvest: Some(harvest),
        kept,
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
    super::base_lock::sweep(dirs);
    let mut freed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            freed += base::remove_if_unused(dirs, &name)?;
        }
    }
    Ok(freed)
}
