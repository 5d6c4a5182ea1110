//! Making a task's checkout, or finding the one it has.
//!
//! A checkout is built in `tasks/<unit>/.checkout.tmp.<pid>.<n>`, synced, and renamed to
//! `tasks/<unit>/checkout` — its record inside it — so that after a crash there is either a
//! whole checkout or none (and a leftover the next build removes). The main repository's
//! pin is set first, so that from the moment a checkout exists its base cannot be collected.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use git2::{Oid, Repository};

use super::base;
use super::error::{git_err, io_err, CheckoutError};
use super::files;
use super::merged;
use super::record::{self, CheckoutRecord, Files};
use super::resolve::{self, Resolved};
use super::BaseProgress;
use crate::sandbox::mounts::overlay_path_problem;
use crate::sandbox::spec::{CheckoutFiles, CheckoutMounts};
use crate::state::StateDir;
use crate::unit::Repo;

/// How to make a checkout.
#[derive(Clone, Default)]
pub struct PrepareOptions {
    /// The agent's user (`sandbox.user` resolved to uid and gid), who must own the files;
    /// `None`: root.
    pub owner: Option<(u32, u32)>,
    /// Never an overlay: a full checkout of the task's own.
    pub full: bool,
    /// Told how far a base tree's build (or a full checkout's) is, as files are written: at
    /// most every ~1% or ~100 ms, and once at the end.
    pub progress: Option<std::sync::Arc<dyn Fn(BaseProgress) + Send + Sync>>,
}

impl std::fmt::Debug for PrepareOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrepareOptions")
            .field("owner", &self.owner)
            .field("full", &self.full)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// A task's checkout, ready to be put in its sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// For [`crate::sandbox::spec::SandboxSpec::checkout`].
    pub mounts: CheckoutMounts,
    pub branch: String,
    pub base_commit: String,
    /// Made now; `false`: the checkout the task had, reused exactly as it was.
    pub created: bool,
    /// The shared base tree was built now (the first checkout of this base commit).
    pub base_built: bool,
    /// A full checkout instead of an overlay, and why (for the journal).
    pub full_reason: Option<String>,
}

/// The task's checkout: the one it has, reused as it was (uncommitted changes included), or
/// a new one on its branch at `repo.base` — or at the branch's commit in the main repository
/// when it descends from the base (a task whose checkout was removed after a harvest goes on
/// from its work). Idempotent. The task must not be running.
pub fn prepare(
    dirs: &StateDir,
    unit: &str,
    repo: &Repo,
    options: &PrepareOptions,
) -> Result<Prepared, CheckoutError> {
    match record::load(dirs, unit)? {
        Some(record) => reuse(dirs, unit, repo, options, record),
        None => create(dirs, unit, repo, options),
    }
}

/// What the sandbox mounts for the checkout in `checkout` described by `record`.
pub(crate) fn mounts(dirs: &StateDir, checkout: &Path, record: &CheckoutRecord) -> CheckoutMounts {
    let files = match &record.files {
        Files::Overlay { base_key } => CheckoutFiles::Overlay {
            lower: base::tree_path(&base::base_dir(dirs, base_key)),
            upper: record::upper_dir(checkout),
            work: record::overlay_work_dir(checkout),
        },
        Files::Full { .. } => CheckoutFiles::Bind(record::full_files_dir(checkout)),
    };
    let objects = resolve::object_dirs(&record.common_dir);
    CheckoutMounts {
        files,
        git_dir: record::git_dir(checkout),
        repositories: resolve::repository_paths(&record.repo, &objects),
        objects,
    }
}

/// The directory in the checkout's files that the git directory is bound on.
fn dot_git(checkout: &Path, record_files: &Files) -> std::path::PathBuf {
    match record_files {
        Files::Overlay { .. } => record::upper_dir(checkout).join(".git"),
        Files::Full { .. } => record::full_files_dir(checkout).join(".git"),
    }
}

fn reuse(
    dirs: &StateDir,
    unit: &str,
    repo: &Repo,
    options: &PrepareOptions,
    record: CheckoutRecord,
) -> Result<Prepared, CheckoutError> {
    if record.repo != Path::new(&repo.path) {
        return Err(CheckoutError::OtherRepository {
            unit: unit.to_string(),
            recorded: record.repo,
            wanted: repo.path.clone().into(),
        });
    }
    if record.owner != options.owner {
        return Err(CheckoutError::OtherOwner {
            unit: unit.to_string(),
            recorded: record.owner,
            wanted: options.owner,
        });
    }
    let branch = repo
        .branch
        .clone()
        .unwrap_or_else(|| resolve::default_branch(unit));
    if record.base != repo.base || record.branch != branch {
        log::info!(
            "{unit}: reusing its checkout as it was (base {}, branch {}): a new base or \
             branch applies to a new checkout",
            record.base,
            record.branch
        );
    }
    let commit = Oid::from_str(&record.base_commit)
        .map_err(git_err("reading the checkout's record", &record.repo))?;
    let main = resolve::open_main(&record.repo)?;
    if main.find_reference(&record.pin).is_err() {
        // Someone deleted it: put it back while the commit is still there.
        log::warn!(
            "{unit}: {} was missing in {}: set again",
            record.pin,
            record.repo.display()
        );
        main.reference(&record.pin, commit, true, "keel: base of a checkout")
            .map_err(git_err("pinning the base commit", &record.repo))?;
    }
    let mut base_built = false;
    if let Files::Overlay { base_key } = &record.files {
        base_built = base::ensure_base(
            dirs,
            base_key,
            &record.common_dir,
            commit,
            record.owner,
            options.progress.as_ref(),
        )?;
    }
    let checkout = record::checkout_dir(dirs, unit);
    ensure_dir(&dot_git(&checkout, &record.files), record.owner)?;
    Ok(Prepared {
        mounts: mounts(dirs, &checkout, &record),
        branch: record.branch.clone(),
        base_commit: record.base_commit.clone(),
        created: false,
        base_built,
        full_reason: match &record.files {
            Files::Full { reason } => Some(reason.clone()),
            Files::Overlay { .. } => None,
        },
    })
}

/// The `.git` mountpoint must be a directory (never a symlink the bind would follow).
fn ensure_dir(path: &Path, owner: Option<(u32, u32)>) -> Result<(), CheckoutError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => fs::remove_file(path).map_err(io_err("replacing", path))?,
        Err(_) => {}
    }
    fs::create_dir(path).map_err(io_err("creating", path))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(io_err("chown", path))?;
    }
    Ok(())
}

fn create(
    dirs: &StateDir,
    unit: &str,
    repo: &Repo,
    options: &PrepareOptions,
) -> Result<Prepared, CheckoutError> {
    // The branch may be in main already past the base (harvested, then the checkout
    // pruned): the new checkout goes on from there.
    let resolved = resolve::resolve_existing(repo, unit)?;
    let main = resolve::open_main(&resolved.repo)?;
    let commit = Oid::from_str(&resolved.base_commit)
        .map_err(git_err("reading the base commit", &resolved.repo))?;
    main.reference(&resolved.pin, commit, true, "keel: base of a checkout")
        .map_err(git_err("pinning the base commit", &resolved.repo))?;
    let task = dirs.task_dir(unit);
    crate::state::create_private_dir(&task)
        .map_err(io_err("creating the task directory", &task))?;
    files::remove_stale_builds(&task);
    let tmp = files::build_path(&task, "checkout");
    // 0700: `checkout/` is keel's; what the agent sees in it (`git/`, `upper/`, `files/`) is
    // mounted in its sandbox, whose mounts do not look at the directories around them.
    crate::state::create_new_private_dir(&tmp).map_err(io_err("creating the checkout", &tmp))?;
    let result = build(dirs, unit, &resolved, &main, commit, options, &tmp);
    if result.is_err() {
        let _ = files::remove_tree(&tmp);
        let _ = main
            .find_reference(&resolved.pin)
            .and_then(|mut r| r.delete());
    }
    result
}

fn build(
    dirs: &StateDir,
    unit: &str,
    resolved: &Resolved,
    main: &Repository,
    commit: Oid,
    options: &PrepareOptions,
    tmp: &Path,
) -> Result<Prepared, CheckoutError> {
    let checkout = record::checkout_dir(dirs, unit);
    let git = record::git_dir(tmp);
    init_git_dir(&git, unit, resolved, main)?;
    let key = base::base_key(&resolved.common_dir, &resolved.base_commit, options.owner);
    let refusal = if options.full {
        Some("a full checkout was asked for".to_string())
    } else {
        overlay_refusal(dirs, &key, &checkout, tmp)
    };
    let mut base_built = false;
    // Held until the checkout (whose record names the base) is in place: until then no
    // removal may take the base (`base_lock.rs`).
    let mut _base_lock = None;
    let files = match refusal {
        None => {
            _base_lock = Some(super::base_lock::lock_shared(dirs, &key)?);
            base_built = base::ensure_base(
                dirs,
                &key,
                &resolved.common_dir,
                commit,
                options.owner,
                options.progress.as_ref(),
            )?;
            super::base_lock::pause_if_asked(unit);
            let from = base::index_path(&base::base_dir(dirs, &key));
            let to = git.join("index");
            fs::copy(&from, &to).map_err(io_err("copying the base's index", &to))?;
            Files::Overlay { base_key: key }
        }
        Some(reason) => {
            log::warn!("{unit}: a full checkout instead of an overlay: {reason}");
            let target = record::full_files_dir(tmp);
            let index = git.join("index");
            base::write_checkout(
                &resolved.common_dir,
                commit,
                &target,
                &index,
                options.owner,
                options.progress.as_ref(),
            )?;
            Files::Full { reason }
        }
    };
    ensure_dir(&dot_git(tmp, &files), options.owner)?;
    if let Some(owner) = options.owner {
        files::chown_tree(&git, owner)?;
        if matches!(files, Files::Overlay { .. }) {
            files::chown_tree(&record::upper_dir(tmp), owner)?;
        }
    }
    let record = CheckoutRecord {
        repo: resolved.repo.clone(),
        common_dir: resolved.common_dir.clone(),
        base: resolved.base.clone(),
        base_commit: resolved.base_commit.clone(),
        branch: resolved.branch.clone(),
        pin: resolved.pin.clone(),
        files,
        owner: options.owner,
        created_ms: crate::state::now_ms(),
    };
    // Not fsynced on its own: the sync below covers it and everything else built here.
    crate::state::write_ron_volatile(&record::record_path(tmp), &record)
        .map_err(|e| CheckoutError::io("writing the record", tmp, std::io::Error::other(e)))?;
    match &record.files {
        // A handful of files (the git directory, an empty upper layer): each fsynced, so
        // that a new checkout never waits for the rest of the filesystem's dirty data.
        Files::Overlay { .. } => files::sync_tree(tmp)?,
        // Thousands of files: one syncfs.
        Files::Full { .. } => files::sync_filesystem(tmp)?,
    }
    fs::rename(tmp, &checkout).map_err(io_err("renaming the checkout into place", &checkout))?;
    files::sync_dir(checkout.parent().unwrap_or(Path::new("/")))?;
    Ok(Prepared {
        mounts: mounts(dirs, &checkout, &record),
        branch: record.branch.clone(),
        base_commit: record.base_commit.clone(),
        created: true,
        base_built,
        full_reason: match &record.files {
            Files::Full { reason } => Some(reason.clone()),
            Files::Overlay { .. } => None,
        },
    })
}

/// Filesystems (st_dev) on which an overlay was mounted already by this process: the probe
/// costs a thread, a mount namespace and a mount (15 ms here), and the answer does not change
/// while keel runs. A failure is not remembered: it is tried again at the next checkout.
static PROBED: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

/// Why an overlay cannot be used for this checkout (`None`: it can): a path the mount options
/// cannot carry, or overlayfs refusing an overlay whose upper layer lies where this
/// checkout's will — tried for real, in a private mount namespace, over an empty lower layer.
fn overlay_refusal(dirs: &StateDir, key: &str, checkout: &Path, tmp: &Path) -> Option<String> {
    let lower = base::tree_path(&base::base_dir(dirs, key));
    let upper = record::upper_dir(checkout);
    let work = record::overlay_work_dir(checkout);
    if let Some(problem) = [&lower, &upper, &work]
        .into_iter()
        .find_map(|p| overlay_path_problem(p))
    {
        return Some(problem);
    }
    let (upper, work) = (record::upper_dir(tmp), record::overlay_work_dir(tmp));
    for dir in [&upper, &work] {
        if let Err(e) = fs::create_dir(dir) {
            return Some(format!("cannot create {}: {e}", dir.display()));
        }
    }
    let device = fs::metadata(tmp).map(|m| m.dev()).ok()?;
    let mut probed = PROBED.lock().unwrap_or_else(|e| e.into_inner());
    if probed.contains(&device) {
        return None;
    }
    let (empty, point) = (tmp.join("probe-lower"), tmp.join("probe"));
    let outcome = fs::create_dir(&empty)
        .and_then(|()| fs::create_dir(&point))
        .and_then(|()| merged::with_overlay(&empty, &upper, &work, &point, |_| ()));
    let _ = fs::remove_dir(&empty);
    let _ = fs::remove_dir(&point);
    let Err(e) = outcome else {
        probed.push(device);
        return None;
    };
    let _ = files::remove_tree(&upper);
    let _ = files::remove_tree(&work);
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) => ": keel is not root (mounts need CAP_SYS_ADMIN)",
        Some(libc::ENODEV) => ": this kernel has no overlayfs (modprobe overlay)",
        Some(libc::EINVAL) => ": the state directory's filesystem cannot hold an upper layer",
        _ => "",
    };
    Some(format!("overlayfs cannot be mounted here ({e}){hint}"))
}

/// The task's git directory: its own refs, index and new objects, borrowing the main
/// repository's objects (alternates), with its branch at the base and HEAD on it.
///
/// Written by hand rather than by `git init` or libgit2's: the layout of a minimal git
/// directory is fixed and small, and every file created costs about a millisecond on a
/// journaled root disk — libgit2's init (templates, one config rewrite per setting) took
/// 25 ms of a 60 ms checkout here. The branch goes in `packed-refs`, which needs no
/// directories made for `keel/`.
fn init_git_dir(
    git: &Path,
    unit: &str,
    resolved: &Resolved,
    main: &Repository,
) -> Result<(), CheckoutError> {
    let info = git.join("objects/info");
    for dir in [&info, &git.join("refs")] {
        fs::create_dir_all(dir).map_err(io_err("creating the git directory", dir))?;
    }
    let (name, email) = identity(main, unit);
    let objects = resolved.common_dir.join("objects");
    let files = [
        (info.join("alternates"), format!("{}\n", objects.display())),
        (
            git.join("HEAD"),
            format!("ref: refs/heads/{}\n", resolved.branch),
        ),
        (
            git.join("packed-refs"),
            format!(
                "# pack-refs with: peeled fully-peeled sorted \n{} refs/heads/{}\n",
                resolved.base_commit, resolved.branch
            ),
        ),
        (git.join("config"), git_config(&name, &email)),
    ];
    for (path, text) in files {
        fs::write(&path, text).map_err(io_err("writing the git directory", &path))?;
    }
    // A shallow main repository: the task's history stops where main's does.
    let shallow = resolved.common_dir.join("shallow");
    if shallow.is_file() {
        fs::copy(&shallow, git.join("shallow")).map_err(io_err("copying", &shallow))?;
    }
    Ok(())
}

/// The task's git configuration.
pub(crate) fn git_config(name: &str, email: &str) -> String {
    format!(
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\
         \tlogallrefupdates = true\n\
         # The host's signing setup is not the agent's (and its keys are out of its sight).\n\
         [commit]\n\tgpgsign = false\n[tag]\n\tgpgsign = false\n\
         [user]\n\tname = {}\n\temail = {}\n",
        config_value(name),
        config_value(email)
    )
}

/// A git config value, quoted (git-config(1), "Syntax": inside double quotes, `"` and `\`
/// are escaped, and a newline is written `\n`).
pub(crate) fn config_value(value: &str) -> String {
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Who the agent's commits are by: whoever commits in the main repository (its config as
/// keel sees it), else keel on behalf of the unit — so that `git commit` works in a sandbox
/// whose `$HOME` holds no git config.
fn identity(main: &Repository, unit: &str) -> (String, String) {
    let config = main.config().and_then(|mut c| c.snapshot());
    let get = |key: &str| config.as_ref().ok().and_then(|c| c.get_string(key).ok());
    match (get("user.name"), get("user.email")) {
        (Some(name), Some(email)) => (name, email),
        _ => (format!("keel ({unit})"), format!("{unit}@keel.invalid")),
    }
}
