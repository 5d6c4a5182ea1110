//! The unit's `repo` against the main repository: does it exist, is it one, which commit is
//! the base, which branch will the task work on, and is that branch free.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use git2::{ObjectType, Oid, Repository};

use super::error::{git_err, CheckoutError};
use crate::unit::Repo;

/// A unit's `repo`, resolved against the main repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The repository as the unit names it.
    pub repo: PathBuf,
    /// Its git directory that holds objects and refs (`.git`, or the repository itself when
    /// bare; the main one for a linked worktree).
    pub common_dir: PathBuf,
    /// `repo.base` as the unit names it, and as a full commit id.
    pub base: String,
    pub base_commit: String,
    /// The task's branch: `repo.branch`, else `keel/<unit>`.
    pub branch: String,
    /// The ref in the main repository that keeps the base commit from being collected.
    pub pin: String,
}

/// The task's branch when the unit names none.
pub fn default_branch(unit: &str) -> String {
    format!("keel/{unit}")
}

/// `refs/keel/base/<unit>`: held at the base commit in the main repository while the checkout
/// exists, so that `git gc` there never drops what the checkout borrows. A unit name that a
/// ref cannot carry (`a..b`, `x.lock`) is spelled in hex.
pub fn pin_ref(unit: &str) -> String {
    let plain = format!("refs/keel/base/{unit}");
    if git2::Reference::is_valid_name(&plain) {
        plain
    } else {
        let hex: String = unit.bytes().map(|b| format!("{b:02x}")).collect();
        format!("refs/keel/base/x-{hex}")
    }
}

/// Open the main repository, telling a missing path from a path that is no repository.
/// Exactly `path`: no search upwards (a directory inside some other repository is not it).
pub(crate) fn open_main(path: &Path) -> Result<Repository, CheckoutError> {
    if std::fs::symlink_metadata(path).is_err() {
        return Err(CheckoutError::RepoMissing {
            path: path.to_path_buf(),
        });
    }
    crate::sys::git::trust_repository_owners();
    let flags = git2::RepositoryOpenFlags::NO_SEARCH;
    Repository::open_ext(path, flags, std::iter::empty::<&std::ffi::OsStr>()).map_err(|e| {
        CheckoutError::NotARepository {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        }
    })
}

/// Open a git directory as it is (a task's, or main's own), without a work tree: keel only
/// reads and writes refs and objects through it.
pub(crate) fn open_git_dir(path: &Path) -> Result<Repository, git2::Error> {
    crate::sys::git::trust_repository_owners();
    Repository::open_bare(path)
}

/// `repo.base` as a commit of `main`.
pub(crate) fn base_commit(
    main: &Repository,
    path: &Path,
    base: &str,
) -> Result<Oid, CheckoutError> {
    let not_found = || CheckoutError::BaseNotFound {
        repo: path.to_path_buf(),
        base: base.to_string(),
    };
    let object = main.revparse_single(base).map_err(|_| not_found())?;
    let commit = object.peel(ObjectType::Commit).map_err(|_| not_found())?;
    Ok(commit.id())
}

/// Check the unit's `repo` for `keel add`, and resolve it: the repository exists and is one,
/// the base is one of its commits, the branch is a valid name that the main repository does
/// not already hold at another commit. Nothing is written anywhere.
pub fn validate(repo: &Repo, unit: &str) -> Result<Resolved, CheckoutError> {
    resolve(repo, unit, false)
}

/// [`validate`], for a new checkout of a task that exists already (its checkout was removed,
/// say by `keel prune`, after its branch was harvested): a branch in main that descends from
/// the base is where the task goes on from — the returned `base_commit` is then that
/// branch's commit (the base tree is built for it, the pin holds it).
pub(crate) fn resolve_existing(repo: &Repo, unit: &str) -> Result<Resolved, CheckoutError> {
    resolve(repo, unit, true)
}

fn resolve(repo: &Repo, unit: &str, go_on: bool) -> Result<Resolved, CheckoutError> {
    let path = Path::new(&repo.path);
    let main = open_main(path)?;
    let base = base_commit(&main, path, &repo.base)?;
    let branch = repo.branch.clone().unwrap_or_else(|| default_branch(unit));
    let full = format!("refs/heads/{branch}");
    if !git2::Reference::is_valid_name(&full) {
        return Err(CheckoutError::BadBranch { branch });
    }
    let mut start = base;
    if let Ok(existing) = main.find_reference(&full) {
        let at = existing
            .peel(ObjectType::Commit)
            .map_err(git_err("reading the branch", path))?
            .id();
        if at != base && go_on && main.graph_descendant_of(at, base).unwrap_or(false) {
            start = at;
        } else if at != base {
            return Err(CheckoutError::BranchExists {
                repo: path.to_path_buf(),
                branch,
                at: at.to_string(),
                base: repo.base.clone(),
                base_commit: base.to_string(),
            });
        }
    }
    Ok(Resolved {
        repo: path.to_path_buf(),
        // Without libgit2's trailing `/`: the path is hashed into the base's key.
        common_dir: main.commondir().components().collect(),
        base: repo.base.clone(),
        base_commit: start.to_string(),
        branch,
        pin: pin_ref(unit),
    })
}

/// The object directories a checkout of a repository whose git directory is `common_dir`
/// reads: its own, then those it borrows from (its `objects/info/alternates`, and theirs,
/// breadth first; git follows five levels, and a few dozen directories is already absurd).
/// The sandbox shows each read-only.
pub(crate) fn object_dirs(common_dir: &Path) -> Vec<PathBuf> {
    const MAX: usize = 32;
    let mut found = vec![common_dir.join("objects")];
    let mut next = 0;
    while next < found.len() && found.len() < MAX {
        let dir = found[next].clone();
        next += 1;
        let Ok(text) = std::fs::read_to_string(dir.join("info/alternates")) else {
            continue;
        };
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let alternate = normalize(&dir.join(line));
            if !found.contains(&alternate) && found.len() < MAX {
                found.push(alternate);
            }
        }
    }
    found
}

/// The repositories a checkout borrows objects from, which its sandbox shows only through
/// those object directories ([`crate::sandbox::spec::CheckoutMounts::repositories`]): the
/// main repository as the unit names it (its work tree, or itself when bare) and, for each
/// object directory that is a git directory's `objects` (the main one's, those it borrows
/// from), that git directory and, when it is a work tree's `.git`, that work tree. As real
/// paths: the sandbox follows no symlink on the way to a mount. A path that does not resolve
/// is not there to be seen, and is left out.
pub(crate) fn repository_paths(repo: &Path, objects: &[PathBuf]) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    let mut add = |path: &Path| {
        if let Ok(real) = std::fs::canonicalize(path) {
            if real.parent().is_some() && !found.contains(&real) {
                found.push(real);
            }
        }
    };
    add(repo);
    for dir in objects {
        let Some(git_dir) = dir.parent() else {
            continue;
        };
        let is_git_dir = std::fs::symlink_metadata(git_dir.join("HEAD")).is_ok_and(|m| m.is_file());
        if dir.file_name() != Some(OsStr::new("objects")) || !is_git_dir {
            continue;
        }
        add(git_dir);
        if git_dir.file_name() == Some(OsStr::new(".git")) {
            add(git_dir.parent().unwrap_or(git_dir));
        }
        // A submodule's git directory is inside its superproject's `.git/modules/…`: that
        // `.git` (its config, hooks) and its work tree are covered too.
        let outer = git_dir
            .ancestors()
            .skip(1)
            .find(|dir| dir.file_name() == Some(OsStr::new(".git")));
        if let Some(outer) = outer {
            add(outer);
            add(outer.parent().unwrap_or(outer));
        }
    }
    found
}

/// `path` with `.` and `..` resolved lexically (alternates are often `../../other/objects`);
/// the sandbox binds need a plain absolute path.
fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}
