//! Bringing a task's branch home: its new objects are packed from the task's git directory
//! into the main repository's object store, then `refs/heads/<branch>` there moves — by
//! fast-forward only. Anything else (the branch moved in main meanwhile, or it is checked out
//! in one of main's work trees) is kept as `<branch>@<attempt>` and reported; nothing in main
//! is ever forced over. Only the task's git directory is read: a running task may be
//! harvested, and its work tree never needs to be mounted for it.

use std::fmt;
use std::io::Write;

use std::path::Path;

use git2::{Oid, Repository};

use super::error::{git_err, short, CheckoutError};
use super::limits;
use super::record::{self, CheckoutRecord};
use super::resolve;
use super::HarvestLimits;
use crate::state::StateDir;

/// What a harvest did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Harvest {
    /// The branch has no commit beyond the base: nothing to bring.
    Nothing { branch: String },
    /// The main repository has the branch's commits already.
    UpToDate { branch: String, commit: String },
    /// The main repository's branch was created (`from: None`) or fast-forwarded.
    Updated {
        branch: String,
        from: Option<String>,
        to: String,
        commits: usize,
    },
    /// Not a fast-forward: the commits are kept in main as `kept_as`; main's `branch` is
    /// untouched (at `main_at`).
    Kept {
        branch: String,
        kept_as: String,
        commit: String,
        main_at: String,
        why: String,
    },
    /// The task deleted its branch: nothing to bring (its other refs are reported by
    /// `checkout::state`).
    NoBranch { branch: String },
}

impl Harvest {
    /// Is the task's branch in the main repository now (under its name or a kept one)?
    pub fn harvested(&self) -> bool {
        !matches!(self, Harvest::NoBranch { .. })
    }
}

impl fmt::Display for Harvest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Harvest::Nothing { branch } => write!(f, "{branch}: no commits to harvest"),
            Harvest::UpToDate { branch, commit } => {
                write!(
                    f,
                    "{branch}: already in the main repository at {}",
                    short(commit)
                )
            }
            Harvest::Updated {
                branch,
                from: None,
                to,
                commits,
            } => write!(
                f,
                "harvested {branch} at {} ({commits} new commits)",
                short(to)
            ),
            Harvest::Updated {
                branch,
                from: Some(from),
                to,
                commits,
            } => write!(
                f,
                "harvested {branch}: fast-forward {}..{} ({commits} new commits)",
                short(from),
                short(to)
            ),
            Harvest::Kept {
                branch,
                kept_as,
                commit,
                main_at,
                why,
            } => write!(
                f,
                "{branch} not harvested over {} in the main repository ({why}): the task's {} \
                 is kept as {kept_as}, nothing was forced",
                short(main_at),
                short(commit)
            ),
            Harvest::NoBranch { branch } => {
                write!(
                    f,
                    "{branch}: the task deleted its branch, nothing to harvest"
                )
            }
        }
    }
}

/// What the harvest decision depends on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts {
    pub tip: Oid,
    pub base: Oid,
    /// The branch in the main repository.
    pub main_at: Option<Oid>,
    /// `tip` descends from `main_at` (a fast-forward).
    pub tip_descends: bool,
    /// `main_at` descends from `tip` (main has it all).
    pub main_descends: bool,
    /// The branch is checked out in a work tree of the main repository.
    pub checked_out: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Nothing,
    UpToDate,
    /// Set the branch to the tip, if it is still at `from` (`None`: absent).
    Update {
        from: Option<Oid>,
    },
    Keep {
        why: &'static str,
    },
}

/// Fast-forward only, never force. Pure.
pub(crate) fn decide(f: &Facts) -> Decision {
    match f.main_at {
        None if f.tip == f.base => Decision::Nothing,
        None => Decision::Update { from: None },
        Some(at) if at == f.tip || f.main_descends => Decision::UpToDate,
        Some(_) if !f.tip_descends => Decision::Keep {
            why: "the branch there has commits the task's has not",
        },
        // Moving a checked-out branch would leave that work tree looking changed.
        Some(_) if f.checked_out => Decision::Keep {
            why: "the branch is checked out there",
        },
        Some(at) => Decision::Update { from: Some(at) },
    }
}

/// `<branch>@<attempt>`, then `<branch>@<attempt>.2`, … : the name under which a tip that
/// cannot go onto the branch is kept.
pub(crate) fn kept_name(branch: &str, attempt: u32, n: u32) -> String {
    if n <= 1 {
        format!("{branch}@{attempt}")
    } else {
        format!("{branch}@{attempt}.{n}")
    }
}

/// Harvest `unit`'s branch into the main repository (when an attempt ends, and on
/// `keel harvest`). `attempt` names the kept ref when it cannot be a fast-forward. Within
/// the default [`HarvestLimits`].
pub fn harvest(dirs: &StateDir, unit: &str, attempt: u32) -> Result<Harvest, CheckoutError> {
    harvest_with_limits(dirs, unit, attempt, &HarvestLimits::default())
}

/// [`harvest`], refused ([`CheckoutError::HarvestTooBig`], nothing written to main, the
/// branch left in the checkout) when what it would bring is past `limits`.
pub fn harvest_with_limits(
    dirs: &StateDir,
    unit: &str,
    attempt: u32,
    limits: &HarvestLimits,
) -> Result<Harvest, CheckoutError> {
    let record = record::load(dirs, unit)?.ok_or_else(|| CheckoutError::NoCheckout {
        unit: unit.to_string(),
    })?;
    harvest_record(dirs, unit, &record, attempt, limits)
}

pub(crate) fn harvest_record(
    dirs: &StateDir,
    unit: &str,
    record: &CheckoutRecord,
    attempt: u32,
    limits: &HarvestLimits,
) -> Result<Harvest, CheckoutError> {
    let git = record::git_dir(&record::checkout_dir(dirs, unit));
    super::guard::guard_git_dir(&git, &record.common_dir)?;
    let task = super::resolve::open_git_dir(&git)
        .map_err(git_err("opening the task's git directory", &git))?;
    let refname = format!("refs/heads/{}", record.branch);
    let branch = record.branch.clone();
    let Ok(tip) = task.refname_to_id(&refname) else {
        return Ok(Harvest::NoBranch { branch });
    };
    // Its header only: the commit itself is read (inflated) after the walk has weighed it.
    let is_commit = task
        .odb()
        .and_then(|odb| odb.read_header(tip))
        .is_ok_and(|(_, kind)| kind == git2::ObjectType::Commit);
    if !is_commit {
        return Err(CheckoutError::Tampered {
            path: git.join(&refname),
            what: format!(
                "the branch names {}, which is no commit",
                short(&tip.to_string())
            ),
        });
    }
    let main = resolve::open_main(&record.repo)?;
    let path = record.repo.as_path();
    let base = Oid::from_str(&record.base_commit).map_err(git_err("reading the record", path))?;
    let main_at = main.refname_to_id(&refname).ok();
    bring_objects(&main, &git, &[tip], limits, (unit, &dirs.task_dir(unit)))?;
    let descends = |a: Oid, b: Oid| main.graph_descendant_of(a, b).unwrap_or(false);
    let facts = Facts {
        tip,
        base,
        main_at,
        tip_descends: main_at.is_some_and(|at| descends(tip, at)),
        main_descends: main_at.is_some_and(|at| descends(at, tip)),
        checked_out: checked_out(&main, &refname),
    };
    let message = format!("keel harvest {unit} (attempt {attempt})");
    let commits = |from: Option<Oid>| count_new(&main, tip, from.unwrap_or(base));
    match decide(&facts) {
        Decision::Nothing => Ok(Harvest::Nothing { branch }),
        Decision::UpToDate => Ok(Harvest::UpToDate {
            branch,
            commit: main_at.unwrap_or(tip).to_string(),
        }),
        Decision::Update { from } => {
            match from {
                None => main.reference(&refname, tip, false, &message),
                Some(at) => main.reference_matching(&refname, tip, true, at, &message),
            }
            .map_err(git_err("updating the branch", path))?;
            Ok(Harvest::Updated {
                branch,
                from: from.map(|o| o.to_string()),
                to: tip.to_string(),
                commits: commits(from),
            })
        }
        Decision::Keep { why } => {
            let kept_as = keep(&main, &record.branch, attempt, tip, &message)?;
            Ok(Harvest::Kept {
                branch,
                kept_as,
                commit: tip.to_string(),
                main_at: main_at.unwrap_or(base).to_string(),
                why: why.to_string(),
            })
        }
    }
}

/// Put `tip` under the first kept name that is free, or already at it, or a fast-forward.
fn keep(
    main: &Repository,
    branch: &str,
    attempt: u32,
    tip: Oid,
    message: &str,
) -> Result<String, CheckoutError> {
    let path = main.path();
    for n in 1..1000 {
        let name = kept_name(branch, attempt, n);
        let refname = format!("refs/heads/{name}");
        let result = match main.refname_to_id(&refname) {
            Err(_) => main.reference(&refname, tip, false, message),
            Ok(at) if at == tip => return Ok(name),
            Ok(at) if main.graph_descendant_of(tip, at).unwrap_or(false) => {
                main.reference_matching(&refname, tip, true, at, message)
            }
            Ok(_) => continue,
        };
        result.map_err(git_err("keeping the task's branch", path))?;
        return Ok(name);
    }
    Err(CheckoutError::Git {
        what: format!("keeping the task's branch {branch}"),
        path: path.to_path_buf(),
        message: "a thousand kept refs for one attempt: delete some".into(),
    })
}

/// Commits reachable from `tip` and not from `from`.
fn count_new(main: &Repository, tip: Oid, from: Oid) -> usize {
    main.graph_ahead_behind(tip, from)
        .map(|(ahead, _)| ahead)
        .unwrap_or(0)
}

/// Copy the objects of `tips`' histories that the main repository lacks into it, as one
/// pack — after weighing them against `limits` on their headers ([`super::limits`]): past a
/// limit, nothing is written. The walk is made on main's side — a second handle on main that
/// also reads the task's objects directory (a disk alternate) — from the tips down to the
/// objects main has: the task's `shallow` or grafts never apply, and an object missing on the
/// way (a parent, a tree, a blob) fails the walk, so main never gets a ref to a commit whose
/// ancestors it lacks. Tags are brought with what they point at. `scratch`: a directory of
/// keel's for a moment's file.
pub(crate) fn bring_objects(
    main: &Repository,
    task_git: &Path,
    tips: &[Oid],
    limits: &HarvestLimits,
    (unit, scratch): (&str, &Path),
) -> Result<(), CheckoutError> {
    let path = main.path();
    let odb = main
        .odb()
        .map_err(git_err("opening the object store", path))?;
    let wanted: Vec<Oid> = tips.iter().copied().filter(|t| !odb.exists(*t)).collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let walker = resolve::open_git_dir(main.commondir())
        .map_err(git_err("opening the main repository", path))?;
    let objects = task_git.join("objects");
    let reading = "reading the task's objects";
    let alternate = objects.to_str().ok_or_else(|| CheckoutError::Git {
        what: reading.into(),
        path: objects.clone(),
        message: "the path is not UTF-8".into(),
    })?;
    walker
        .odb()
        .and_then(|o| o.add_disk_alternate(alternate))
        .map_err(git_err(reading, task_git))?;
    limits::own_objects_within(&objects, limits, unit)?;
    let new = limits::objects_to_bring(&odb, &walker, &wanted, limits, unit)?;
    let config = limits::bound_packing(&walker, scratch)?;
    let mut pack = walker
        .packbuilder()
        .map_err(git_err("packing the task's objects", task_git))?;
    drop(config);
    for object in &new {
        pack.insert_object(object.id, object.path.as_deref())
            .map_err(git_err("packing the task's objects", task_git))?;
    }
    let mut writer = odb.packwriter().map_err(git_err("writing a pack", path))?;
    let mut failed = None;
    pack.foreach(|chunk| match writer.write_all(chunk) {
        Ok(()) => true,
        Err(e) => {
            failed = Some(e);
            false
        }
    })
    .map_err(git_err("packing the task's objects", task_git))?;
    if let Some(e) = failed {
        return Err(CheckoutError::io("writing a pack", path, e));
    }
    writer.commit().map_err(git_err("writing a pack", path))?;
    for tip in tips {
        if !odb.exists(*tip) {
            return Err(CheckoutError::Git {
                what: "bringing the task's objects".into(),
                path: path.to_path_buf(),
                message: format!("{tip} is still missing after the pack was written"),
            });
        }
    }
    Ok(())
}

/// Is `refname` checked out in the main repository's work tree or one of its linked ones?
fn checked_out(main: &Repository, refname: &str) -> bool {
    let head_is = |repo: &Repository| {
        repo.find_reference("HEAD")
            .ok()
            .is_some_and(|head| head.symbolic_target_bytes() == Some(refname.as_bytes()))
    };
    if !main.is_bare() && head_is(main) {
        return true;
    }
    let Ok(names) = main.worktrees() else {
        return false;
    };
    names.iter().flatten().flatten().any(|name| {
        main.find_worktree(name)
            .and_then(|wt| Repository::open_from_worktree(&wt))
            .is_ok_and(|repo| head_is(&repo))
    })
}
