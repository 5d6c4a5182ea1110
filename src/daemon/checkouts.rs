//! The daemon's side of per-task checkouts (DESIGN, "Checkouts"): created or reused before
//! each attempt, harvested after each, removed only when nothing would be lost. The git work
//! itself is [`crate::checkout`].

use super::store::Store;
use super::Task;
use crate::checkout::{self, CheckoutError, PrepareOptions};
use crate::sandbox::spec::AttemptSpec;
use crate::state::StateDir;
use crate::unit::Unit;

/// Before an attempt of a unit with a `repo`: its checkout, made now or reused exactly as
/// it was (uncommitted changes included), mounted at `workdir` by the sandbox.
pub(crate) fn prepare_checkout(
    store: &mut Store,
    unit: &str,
    unit_def: &Unit,
    spec: &mut AttemptSpec,
    (attempt, generation): (u32, u64),
) -> Result<(), String> {
    let Some(repo) = &unit_def.repo else {
        return Ok(());
    };
    let owner = agent_owner(unit_def)?;
    let prepared = checkout::prepare(
        &store.dirs,
        unit,
        repo,
        &PrepareOptions {
            owner,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    if prepared.created {
        let how = match &prepared.full_reason {
            Some(why) => format!("full checkout ({why})"),
            None => "overlay over the shared base".to_string(),
        };
        let detail = format!(
            "branch {} at {} from {}; {how}",
            prepared.branch,
            short(&prepared.base_commit),
            repo.path
        );
        log::info!("{unit}: checkout created: {detail}");
        store.event(unit, attempt, generation, "checkout-created", &detail);
    }
    if let Some(sandbox) = spec.sandbox.as_mut() {
        sandbox.checkout = Some(prepared.mounts);
    }
    Ok(())
}

/// After every attempt (whatever ended it): bring the task's branch home, fast-forward
/// only. A failure is reported, never the task's.
pub(crate) fn harvest_checkout(task: &Task, store: &mut Store) {
    let (unit, attempt) = (task.name.as_str(), task.record.attempt);
    if !checkout::exists(&store.dirs, unit) {
        return;
    }
    match checkout::harvest(&store.dirs, unit, attempt) {
        Ok(harvest) => {
            task.kept_branches.take();
            let detail = harvest.to_string();
            log::info!("{unit}: harvest: {detail}");
            store.task_event(task, "harvest", &detail);
        }
        Err(e) => {
            log::warn!("{unit}: harvest failed: {e}");
            store.task_event(task, "harvest-failed", &e.to_string());
        }
    }
}

/// `keel rm`: the checkout goes only when clean and harvested (harvesting first), or with
/// `force`. `Ok(note)` when the task's directory may go; `Err(why)` keeps it whole.
pub(crate) fn remove_checkout(
    dirs: &StateDir,
    unit: &str,
    attempt: u32,
    force: bool,
) -> Result<String, String> {
    if !checkout::exists(dirs, unit) {
        return Ok(String::new());
    }
    match checkout::remove(dirs, unit, attempt, force) {
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
        Err(e) => Err(match e {
            CheckoutError::NotRemovable { .. } => {
                format!("{e} (`keel rm --force {unit}` removes it anyway, after a harvest)")
            }
            other => other.to_string(),
        }),
    }
}

/// The checkout's own disk use (its git directory and changes; the shared base is not
/// walked). A walk of a big upper layer (`target/`, `node_modules/`) is not free and runs in
/// the loop: it is done at most once a minute per task, whatever the rate of `keel status`.
pub(crate) fn checkout_bytes(task: &Task, dirs: &StateDir) -> Option<u64> {
    let unit = task.name.as_str();
    if let Some((bytes, at)) = task.checkout_bytes.get() {
        if at.elapsed() < CHECKOUT_BYTES_TTL {
            return Some(bytes);
        }
    }
    if !checkout::exists(dirs, unit) {
        return None;
    }
    let bytes = checkout::disk_bytes(&checkout::checkout_dir(dirs, unit));
    task.checkout_bytes
        .set(Some((bytes, std::time::Instant::now())));
    Some(bytes)
}

/// The task's branches kept in the main repository by harvests that could not
/// fast-forward. Listed at most once a minute, and again after each harvest.
pub(crate) fn kept_branches(task: &Task, dirs: &StateDir) -> Vec<String> {
    let unit = task.name.as_str();
    if let Some((kept, at)) = task.kept_branches.borrow().as_ref() {
        if at.elapsed() < CHECKOUT_BYTES_TTL {
            return kept.clone();
        }
    }
    let kept = match checkout::record(dirs, unit) {
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
    *task.kept_branches.borrow_mut() = Some((kept.clone(), std::time::Instant::now()));
    kept
}

/// How long `keel status` reuses a checkout's disk use and its list of kept branches.
const CHECKOUT_BYTES_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// The uid and gid the agent runs as (`sandbox.user`), who must own its checkout's files.
fn agent_owner(unit: &Unit) -> Result<Option<(u32, u32)>, String> {
    let Some(user) = unit.sandbox.user.as_deref() else {
        return Ok(None);
    };
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    crate::sandbox::privileges::plan(&[], Some(user), false, &passwd, &group)
        .map(|plan| plan.user)
        .map_err(|e| e.to_string())
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}
