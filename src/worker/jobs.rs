//! The jobs themselves, as a worker runs them: [`crate::checkout`]'s calls, with the figures
//! and messages the daemon passes on.

use super::protocol::{Job, JobFailure, JobRequest, JobResult, PreparedCheckout, StartPaths};
use super::Reporter;
use crate::checkout::{self, BaseProgress, CheckoutError, PrepareOptions};
use crate::sandbox::mounts::template::path_line;
use crate::sandbox::spec::{check_writable_paths, PathFindings};
use crate::state::StateDir;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Run the request's job; its result, or why it failed.
pub(super) fn run(request: &JobRequest, reporter: &Arc<Reporter>) -> Result<JobResult, JobFailure> {
    let dirs = StateDir::new(&request.state_dir);
    match &request.job {
        Job::Prepare {
            unit,
            repo,
            owner,
            paths,
            quota,
        } => {
            let checkout = match repo {
                Some(repo) => {
                    reporter.report("checkout", 0, 0);
                    let repo = crate::unit::Repo {
                        path: repo.path.clone(),
                        base: repo.base.clone(),
                        branch: repo.branch.clone(),
                    };
                    Some(Box::new(prepare(&dirs, unit, &repo, *owner, reporter)?))
                }
                None => None,
            };
            // After the checkout (which may take minutes): the template's key is then what
            // the host shows as the agent starts, not as it was before the base build.
            let lines = path_lines(paths, reporter);
            reporter.report("check writable paths", 0, 0);
            let objects = checkout.as_ref().map_or(&[][..], |c| &c.mounts.objects[..]);
            let writable = check_writable_paths(&paths.writable, &paths.keel_dirs, objects);
            // After the checkout: its directories exist, and get the project id too.
            let quota = quota.as_ref().map(|ask| {
                reporter.report("quota", 0, 0);
                super::quota::apply(&dirs, unit, ask)
            });
            Ok(JobResult::Prepared {
                quota,
                checkout,
                findings: PathFindings {
                    writable: writable.err(),
                    lines,
                    secrets: secret_problems(&paths.secret_files, reporter),
                },
            })
        }
        Job::Harvest {
            unit,
            attempt,
            limits,
        } => checkout::harvest_with_limits(&dirs, unit, *attempt, limits)
            .map(|harvest| JobResult::Harvested {
                detail: harvest.to_string(),
            })
            .map_err(unit_mistake),
        Job::Remove {
            unit,
            attempt,
            force,
            limits,
        } => remove(&dirs, unit, *attempt, *force, limits).map(|note| JobResult::Removed { note }),
        Job::Prune { finished, limits } => Ok(prune(&dirs, finished, limits)),
        Job::DiskUse { unit, work } => Ok(disk_use(&dirs, unit, *work)),
        Job::TaskDiskUse {
            unit,
            project: None,
        } => Ok(JobResult::TaskDiskUse {
            bytes: checkout::disk_bytes(&dirs.task_dir(unit)),
            quota_hard: None,
        }),
        Job::TaskDiskUse {
            project: Some(project),
            ..
        } => super::quota::usage(&dirs, *project)
            .map(|found| JobResult::TaskDiskUse {
                bytes: found.used,
                quota_hard: Some(found.hard),
            })
            .map_err(|message| JobFailure {
                message,
                unit_mistake: false,
            }),
        Job::Delete { path } => match std::fs::remove_dir_all(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(JobFailure {
                message: format!("cannot delete {}: {e}", path.display()),
                unit_mistake: false,
            }),
            _ => Ok(JobResult::Deleted),
        },
    }
}

fn unit_mistake(e: CheckoutError) -> JobFailure {
    JobFailure {
        message: e.to_string(),
        unit_mistake: true,
    }
}

/// Each path the sandbox names (hidden, then writable), as the templates' key reads it
/// (`lstat`): a path on a filesystem that does not answer hangs here, in the worker, until its
/// deadline — never in the daemon's loop, which takes these lines instead of reading them.
fn path_lines(paths: &StartPaths, reporter: &Reporter) -> BTreeMap<PathBuf, String> {
    let all: Vec<(&PathBuf, bool)> = (paths.hidden.iter().map(|p| (p, true)))
        .chain(paths.writable.iter().map(|p| (p, false)))
        .collect();
    let mut lines = BTreeMap::new();
    for (done, (path, is_hidden)) in all.iter().enumerate() {
        reporter.report("check paths", done as u64, all.len() as u64);
        lines.insert((*path).clone(), path_line(path, *is_hidden));
    }
    lines
}

/// Each secret file that keel could not read as it is now: `secret NAME: why` (the value is
/// read and dropped, zeroed; never sent to the daemon).
fn secret_problems(files: &[(String, PathBuf)], reporter: &Reporter) -> Vec<String> {
    let mut problems = Vec::new();
    for (done, (name, path)) in files.iter().enumerate() {
        reporter.report("check secret files", done as u64, files.len() as u64);
        if let Err(error) = crate::secrets::check_file(path) {
            problems.push(format!("secret {name}: {error}"));
        }
    }
    problems
}

fn prepare(
    dirs: &StateDir,
    unit: &str,
    repo: &crate::unit::Repo,
    owner: Option<(u32, u32)>,
    reporter: &Arc<Reporter>,
) -> Result<PreparedCheckout, JobFailure> {
    let reporter = Arc::clone(reporter);
    // Every file written: the index and the sync of the whole tree follow, which say nothing
    // more — a step of their own, so that the idle deadline counts from there.
    let progress = Arc::new(move |p: BaseProgress| {
        let step = match p.total > 0 && p.done >= p.total {
            true => "base tree: index and sync",
            false => "base tree",
        };
        reporter.report(step, p.done, p.total)
    });
    let options = PrepareOptions {
        owner,
        full: false,
        progress: Some(progress),
    };
    let prepared = checkout::prepare(dirs, unit, repo, &options).map_err(unit_mistake)?;
    Ok(PreparedCheckout {
        mounts: prepared.mounts,
        branch: prepared.branch,
        base_commit: prepared.base_commit,
        created: prepared.created,
        base_built: prepared.base_built,
        full_reason: prepared.full_reason,
    })
}

/// `keel rm`'s removal of the checkout: `Ok(note)` when the task's directory may go;
/// `Err(why)` keeps it whole.
fn remove(
    dirs: &StateDir,
    unit: &str,
    attempt: u32,
    force: bool,
    limits: &checkout::HarvestLimits,
) -> Result<String, JobFailure> {
    if !checkout::exists(dirs, unit) {
        return Ok(String::new());
    }
    match checkout::remove_with_limits(dirs, unit, attempt, force, limits) {
        Ok(removed) => {
            let mut note = format!(
                "checkout removed ({} freed)",
                crate::fmt::format_bytes(removed.freed_bytes, false)
            );
            if let Some(harvest) = removed.harvest {
                note.push_str(&format!("; {harvest}"));
            }
            if !removed.kept.is_empty() {
                note.push_str(&format!(
                    "; kept in the main repository: {}",
                    removed.kept.join(", ")
                ));
            }
            Ok(note)
        }
        Err(e) => Err(JobFailure {
            message: match e {
                CheckoutError::NotRemovable { .. } => {
                    format!("{e} (`keel rm --force {unit}` removes it anyway, after a harvest)")
                }
                other => other.to_string(),
            },
            unit_mistake: true,
        }),
    }
}

/// `keel prune`: remove the checkouts of finished tasks that are clean and harvested, and the
/// base trees no checkout uses; say what was freed and what was kept, and why.
fn prune(
    dirs: &StateDir,
    finished: &[(String, u32)],
    limits: &checkout::HarvestLimits,
) -> JobResult {
    let (mut freed, mut removed, mut kept) = (0u64, Vec::new(), Vec::new());
    for (unit, attempt) in finished {
        if !checkout::exists(dirs, unit) {
            continue;
        }
        match checkout::remove_with_limits(dirs, unit, *attempt, false, limits) {
            Ok(done) => {
                freed += done.freed_bytes;
                removed.push((unit.clone(), *attempt));
            }
            Err(e) => kept.push(format!("{unit}: {e}")),
        }
    }
    match checkout::prune_bases(dirs) {
        Ok(bytes) => freed += bytes,
        Err(e) => kept.push(format!("base trees: {e}")),
    }
    let names: Vec<&str> = removed.iter().map(|(u, _)| u.as_str()).collect();
    let mut message = format!(
        "freed {} ({} checkout{} removed{})",
        crate::fmt::format_bytes(freed, false),
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        if names.is_empty() {
            String::new()
        } else {
            format!(": {}", names.join(", "))
        }
    );
    for why in kept {
        message.push_str(&format!("\nkept {why}"));
    }
    JobResult::Pruned { message, removed }
}

/// The checkout's own disk use (its git directory and changes; the shared base is not
/// walked) and the task's branches kept in the main repository.
fn disk_use(dirs: &StateDir, unit: &str, work: bool) -> JobResult {
    if !checkout::exists(dirs, unit) {
        return JobResult::DiskUse {
            bytes: None,
            kept_branches: Vec::new(),
            work: None,
        };
    }
    let bytes = checkout::disk_bytes(&checkout::checkout_dir(dirs, unit));
    let kept_branches = match checkout::record(dirs, unit) {
        Ok(Some(record)) => checkout::kept_branches(&record).unwrap_or_else(|e| {
            log::warn!("{unit}: cannot list the kept branches: {e}");
            Vec::new()
        }),
        Ok(None) => Vec::new(),
        Err(e) => {
            log::warn!("{unit}: cannot list the kept branches: {e}");
            Vec::new()
        }
    };
    JobResult::DiskUse {
        bytes: Some(bytes),
        kept_branches,
        work: work.then(|| work_facts(dirs, unit)).flatten(),
    }
}

/// A stopped task's work and what was reviewed of it (`None`: it runs, or cannot be read).
fn work_facts(dirs: &StateDir, unit: &str) -> Option<crate::worker::protocol::WorkFacts> {
    if crate::state::attempt_lock_held(&dirs.run_dir(unit)) {
        return None; // its files are mounted in its sandbox only
    }
    let review = match checkout::work(dirs, unit) {
        Ok(review) => review,
        Err(e) => {
            log::warn!("{unit}: cannot look at the task's work: {e}");
            return None;
        }
    };
    if review.uncommitted == checkout::Uncommitted::Running {
        return None;
    }
    let reviewed: Option<checkout::Reviewed> =
        crate::state::read_ron(&checkout::reviewed_path(dirs, unit)).unwrap_or(None);
    Some(crate::worker::protocol::WorkFacts {
        has_work: review.has_work(),
        fingerprint: review.fingerprint,
        reviewed: reviewed.map(|r| r.fingerprint),
    })
}
