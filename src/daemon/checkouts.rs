//! The daemon's side of per-task checkouts (DESIGN, "Checkouts"): created or reused before
//! each attempt, harvested after each, removed only when nothing would be lost. The git work
//! itself is [`crate::checkout`].

use super::Daemon;
use crate::checkout::{self, CheckoutError, PrepareOptions};
use crate::protocol::Response;
use crate::sandbox::spec::AttemptSpec;
use crate::unit::Unit;

impl Daemon {
    /// Before an attempt of a unit with a `repo`: its checkout, made now or reused exactly as
    /// it was (uncommitted changes included), mounted at `workdir` by the sandbox.
    pub(crate) fn prepare_checkout(
        &mut self,
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
            &self.dirs,
            unit,
            repo,
            &PrepareOptions { owner, full: false },
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
            self.journal_event(unit, attempt, generation, "checkout-created", &detail);
        }
        if let Some(sandbox) = spec.sandbox.as_mut() {
            sandbox.checkout = Some(prepared.mounts);
        }
        Ok(())
    }

    /// After every attempt (whatever ended it): bring the task's branch home, fast-forward
    /// only. A failure is reported, never the task's.
    pub(crate) fn harvest_checkout(&mut self, unit: &str, attempt: u32, generation: u64) {
        if !checkout::exists(&self.dirs, unit) {
            return;
        }
        match checkout::harvest(&self.dirs, unit, attempt) {
            Ok(harvest) => {
                if let Some(task) = self.tasks.get(unit) {
                    task.kept_branches.take();
                }
                let detail = harvest.to_string();
                log::info!("{unit}: harvest: {detail}");
                self.journal_event(unit, attempt, generation, "harvest", &detail);
            }
            Err(e) => {
                log::warn!("{unit}: harvest failed: {e}");
                self.journal_event(unit, attempt, generation, "harvest-failed", &e.to_string());
            }
        }
    }

    /// `keel harvest UNIT`: the same, now — between attempts. While an agent runs it can
    /// rewrite its git directory under the harvest's feet; its attempt's end harvests anyway.
    pub(crate) fn harvest_request(&mut self, unit: &str) -> Response {
        if crate::state::attempt_lock_held(&self.dirs.run_dir(unit)) {
            return Response::Error {
                message: format!(
                    "{unit}: running; its branch is harvested when the attempt ends (or `keel stop {unit}` first)"
                ),
            };
        }
        let (attempt, generation) = self
            .tasks
            .get(unit)
            .map_or((0, 0), |t| (t.record.attempt, t.record.generation));
        if !checkout::exists(&self.dirs, unit) {
            return Response::Error {
                message: format!("{unit}: has no checkout (its unit has no repo)"),
            };
        }
        match checkout::harvest(&self.dirs, unit, attempt) {
            Ok(harvest) => {
                if let Some(task) = self.tasks.get(unit) {
                    task.kept_branches.take();
                }
                let detail = harvest.to_string();
                self.journal_event(unit, attempt, generation, "harvest", &detail);
                Response::Ok {
                    message: format!("{unit}: {detail}"),
                }
            }
            Err(e) => Response::Error {
                message: e.to_string(),
            },
        }
    }

    /// `keel rm`: the checkout goes only when clean and harvested (harvesting first), or with
    /// `force`. `Ok(note)` when the task's directory may go; `Err(why)` keeps it whole.
    pub(crate) fn remove_checkout(
        &mut self,
        unit: &str,
        attempt: u32,
        force: bool,
    ) -> Result<String, String> {
        if !checkout::exists(&self.dirs, unit) {
            return Ok(String::new());
        }
        match checkout::remove(&self.dirs, unit, attempt, force) {
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

    /// `keel prune`: remove the checkouts of finished tasks that are clean and harvested, and
    /// the base trees no checkout uses; say what was freed and what was kept, and why.
    pub(crate) fn prune(&mut self) -> Response {
        let finished: Vec<(String, u32)> = self
            .tasks
            .values()
            .filter(|t| t.record.state.is_final())
            .map(|t| (t.name.clone(), t.record.attempt))
            .collect();
        let (mut freed, mut removed, mut kept) = (0u64, Vec::new(), Vec::new());
        for (unit, attempt) in finished {
            if !checkout::exists(&self.dirs, &unit) {
                continue;
            }
            match checkout::remove(&self.dirs, &unit, attempt, false) {
                Ok(done) => {
                    freed += done.freed_bytes;
                    removed.push(unit.clone());
                    self.journal_event(&unit, attempt, 0, "checkout-removed", "keel prune");
                }
                Err(e) => kept.push(format!("{unit}: {e}")),
            }
        }
        match checkout::prune_bases(&self.dirs) {
            Ok(bytes) => freed += bytes,
            Err(e) => kept.push(format!("base trees: {e}")),
        }
        let mut message = format!(
            "freed {} ({} checkout{} removed{})",
            crate::fmt::format_bytes(freed, false),
            removed.len(),
            if removed.len() == 1 { "" } else { "s" },
            if removed.is_empty() {
                String::new()
            } else {
                format!(": {}", removed.join(", "))
            }
        );
        for why in kept {
            message.push_str(&format!("\nkept {why}"));
        }
        Response::Ok { message }
    }

    /// The checkout's own disk use (its git directory and changes; the shared base is not
    /// walked). A walk of a big upper layer (`target/`, `node_modules/`) is not free and runs in
    /// the loop: it is done at most once a minute per task, whatever the rate of `keel status`.
    pub(crate) fn checkout_bytes(&self, unit: &str) -> Option<u64> {
        let task = self.tasks.get(unit)?;
        if let Some((bytes, at)) = task.checkout_bytes.get() {
            if at.elapsed() < CHECKOUT_BYTES_TTL {
                return Some(bytes);
            }
        }
        if !checkout::exists(&self.dirs, unit) {
            return None;
        }
        let bytes = checkout::disk_bytes(&checkout::checkout_dir(&self.dirs, unit));
        task.checkout_bytes
            .set(Some((bytes, std::time::Instant::now())));
        Some(bytes)
    }

    /// The task's branches kept in the main repository by harvests that could not
    /// fast-forward. Listed at most once a minute, and again after each harvest.
    pub(crate) fn kept_branches(&self, unit: &str) -> Vec<String> {
        let Some(task) = self.tasks.get(unit) else {
            return Vec::new();
        };
        if let Some((kept, at)) = task.kept_branches.borrow().as_ref() {
            if at.elapsed() < CHECKOUT_BYTES_TTL {
                return kept.clone();
            }
        }
        let kept = match checkout::record(&self.dirs, unit) {
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
