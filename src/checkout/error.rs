//! Why a checkout could not be made, harvested or removed — each message names the path and
//! says what to fix.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub enum CheckoutError {
    /// `repo.path` does not exist.
    RepoMissing { path: PathBuf },
    /// `repo.path` exists but git cannot open it as a repository.
    NotARepository { path: PathBuf, message: String },
    /// `repo.base` names no commit of the repository.
    BaseNotFound { repo: PathBuf, base: String },
    /// The task's branch is not a valid branch name (the default `keel/<unit>` when the unit
    /// name is not usable in a ref, e.g. `a..b`).
    BadBranch { branch: String },
    /// The branch exists in the main repository at another commit than the base.
    BranchExists {
        repo: PathBuf,
        branch: String,
        at: String,
        base: String,
        base_commit: String,
    },
    /// The checkout on disk was made from another repository than the unit now names.
    OtherRepository {
        unit: String,
        recorded: PathBuf,
        wanted: PathBuf,
    },
    /// The checkout was made for another `sandbox.user`.
    OtherOwner {
        unit: String,
        recorded: Option<(u32, u32)>,
        wanted: Option<(u32, u32)>,
    },
    /// The unit has no checkout (nothing to harvest or inspect).
    NoCheckout { unit: String },
    /// A shim of the task is alive: its sandbox has the checkout mounted.
    Running { unit: String },
    /// Removal refused: what is not safe yet.
    NotRemovable { unit: String, reasons: Vec<String> },
    /// The task's git directory holds something keel will not follow.
    Tampered { path: PathBuf, what: String },
    /// A harvest refused before anything was copied: an object of the task's new history
    /// (`object` describes it: kind, path, commit, id; `object_bytes` its size), or all of
    /// them together (`size`), past `harvest_limits.<setting>` (`limit`).
    HarvestTooBig {
        unit: String,
        object: String,
        object_bytes: u64,
        size: u64,
        limit: u64,
        setting: &'static str,
    },
    /// A git operation failed: what was being done, on which repository.
    Git {
        what: String,
        path: PathBuf,
        message: String,
    },
    /// A file operation failed.
    Io {
        what: String,
        path: PathBuf,
        source: io::Error,
    },
}

impl CheckoutError {
    pub(crate) fn git(what: impl Into<String>, path: &Path, e: git2::Error) -> CheckoutError {
        CheckoutError::Git {
            what: what.into(),
            path: path.to_path_buf(),
            message: e.message().to_string(),
        }
    }

    pub(crate) fn io(what: impl Into<String>, path: &Path, source: io::Error) -> CheckoutError {
        CheckoutError::Io {
            what: what.into(),
            path: path.to_path_buf(),
            source,
        }
    }
}

/// `map_err` helpers: `.map_err(git_err("reading HEAD", path))`.
pub(crate) fn git_err<'a>(
    what: &'a str,
    path: &'a Path,
) -> impl FnOnce(git2::Error) -> CheckoutError + 'a {
    move |e| CheckoutError::git(what, path, e)
}

pub(crate) fn io_err<'a>(
    what: &'a str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> CheckoutError + 'a {
    move |e| CheckoutError::io(what, path, e)
}

fn owner_text(owner: &Option<(u32, u32)>) -> String {
    match owner {
        Some((uid, gid)) => format!("uid {uid}, gid {gid}"),
        None => "root".to_string(),
    }
}

impl fmt::Display for CheckoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckoutError::RepoMissing { path } => write!(
                f,
                "repository {} does not exist: fix repo.path in the unit",
                path.display()
            ),
            CheckoutError::NotARepository { path, message } => write!(
                f,
                "{} is not a git repository ({message}): repo.path must name a repository's \
                 top directory (or a bare repository)",
                path.display()
            ),
            CheckoutError::BaseNotFound { repo, base } => write!(
                f,
                "base {base:?} is not a commit of {}: name a branch, tag or commit it has in \
                 repo.base (git -C {} rev-parse {base:?} fails too)",
                repo.display(),
                repo.display()
            ),
            CheckoutError::BadBranch { branch } => write!(
                f,
                "{branch:?} cannot be a git branch name: set repo.branch in the unit to a \
                 valid one"
            ),
            CheckoutError::BranchExists {
                repo,
                branch,
                at,
                base,
                base_commit,
            } => write!(
                f,
                "branch {branch} already exists in {} at {}, not at base {base} ({}): the \
                 task would not start from it; delete the branch (git branch -D {branch}) or \
                 set repo.branch to another name",
                repo.display(),
                short(at),
                short(base_commit)
            ),
            CheckoutError::OtherRepository {
                unit,
                recorded,
                wanted,
            } => write!(
                f,
                "{unit}: its checkout was made from {}, but the unit now names {}: put \
                 repo.path back, or remove the checkout first (keel harvest, then keel rm)",
                recorded.display(),
                wanted.display()
            ),
            CheckoutError::OtherOwner {
                unit,
                recorded,
                wanted,
            } => write!(
                f,
                "{unit}: its checkout belongs to {}, but the unit now runs as {}: put \
                 sandbox.user back, or remove the checkout first (keel harvest, then keel rm)",
                owner_text(recorded),
                owner_text(wanted)
            ),
            CheckoutError::NoCheckout { unit } => write!(f, "{unit} has no checkout"),
            CheckoutError::Running { unit } => write!(
                f,
                "{unit} is running (its sandbox has the checkout mounted): stop it first"
            ),
            CheckoutError::NotRemovable { unit, reasons } => write!(
                f,
                "{unit}: checkout kept: {}; commit and harvest it (keel harvest {unit}), or \
                 force the removal",
                reasons.join("; ")
            ),
            CheckoutError::Tampered { path, what } => write!(
                f,
                "{}: {what}: the task altered its git directory in a way keel will not \
                 follow; look at it, then remove the checkout (forced)",
                path.display()
            ),
            CheckoutError::HarvestTooBig {
                unit,
                object,
                object_bytes,
                size,
                limit,
                setting,
            } => {
                let bytes = |n: u64| crate::fmt::format_bytes(n, false);
                if *setting == "max_object_bytes" {
                    write!(f, "{unit}: harvest refused: {object} is {}", bytes(*size))?;
                } else {
                    write!(
                        f,
                        "{unit}: harvest refused: the branch's new objects add up to {} \
                         (the largest: {object}, {})",
                        bytes(*size),
                        bytes(*object_bytes)
                    )?;
                }
                write!(
                    f,
                    ", past harvest_limits.{setting} ({}): nothing was copied, the branch \
                     stays in the task's checkout; raise the limit in keel.ron \
                     (harvest_limits: HarvestLimits({setting}: \"{}\"), or more) or take the object \
                     out of the task's branch",
                    bytes(*limit),
                    crate::unit::format_size(size.div_ceil(1 << 20).max(1) << 20)
                )
            }
            CheckoutError::Git {
                what,
                path,
                message,
            } => write!(f, "{what} ({}): {message}", path.display()),
            CheckoutError::Io { what, path, source } => {
                write!(f, "{what} ({}): {source}", path.display())?;
                if source.kind() == io::ErrorKind::StorageFull {
                    write!(
                        f,
                        ": free disk space (keel prune removes finished checkouts)"
                    )?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for CheckoutError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CheckoutError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The first 12 hex digits of a commit id, as people quote them.
pub(crate) fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}
