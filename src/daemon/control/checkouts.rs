//! `keel harvest UNIT` (bring the task's branch home now, between attempts) and `keel prune`
//! (remove the checkouts of finished tasks that are clean and harvested, and unused bases).

use crate::checkout;
use crate::daemon::Daemon;
use crate::protocol::Response;

impl Daemon {
    /// `keel harvest UNIT`: the same, now — between attempts. While an agent runs it can
    /// rewrite its git directory under the harvest's feet; its attempt's end harvests anyway.
    pub(super) fn harvest_request(&mut self, unit: &str) -> Response {
        // The name becomes a path under the state directory: never `..` or a slash.
        if let Err(message) = crate::unit::validate_name(unit) {
            return Response::Error { message };
        }
        if crate::state::attempt_lock_held(&self.store.dirs.run_dir(unit)) {
            return Response::Error {
                message: format!(
                    "{unit}: running; its branch is harvested when the attempt ends (or `keel stop {unit}` first)"
                ),
            };
        }
        let task = self.tasks.get(unit);
        let (attempt, generation) =
            task.map_or((0, 0), |t| (t.record.attempt, t.record.generation));
        if !checkout::exists(&self.store.dirs, unit) {
            return Response::Error {
                message: format!("{unit}: has no checkout (its unit has no repo)"),
            };
        }
        match checkout::harvest(&self.store.dirs, unit, attempt) {
            Ok(harvest) => {
                if let Some(task) = task {
                    task.kept_branches.take();
                }
                let detail = harvest.to_string();
                self.store
                    .event(unit, attempt, generation, "harvest", &detail);
                Response::Ok {
                    message: format!("{unit}: {detail}"),
                }
            }
            Err(e) => Response::Error {
                message: e.to_string(),
            },
        }
    }

    /// `keel prune`: remove the checkouts of finished tasks that are clean and harvested, and
    /// the base trees no checkout uses; say what was freed and what was kept, and why.
    pub(super) fn prune(&mut self) -> Response {
        let finished: Vec<(String, u32)> = self
            .tasks
            .values()
            .filter(|t| t.record.state.is_final())
            .map(|t| (t.name.clone(), t.record.attempt))
            .collect();
        let (mut freed, mut removed, mut kept) = (0u64, Vec::new(), Vec::new());
        for (unit, attempt) in finished {
            if !checkout::exists(&self.store.dirs, &unit) {
                continue;
            }
            match checkout::remove(&self.store.dirs, &unit, attempt, false) {
                Ok(done) => {
                    freed += done.freed_bytes;
                    removed.push(unit.clone());
                    self.store
                        .event(&unit, attempt, 0, "checkout-removed", "keel prune");
                }
                Err(e) => kept.push(format!("{unit}: {e}")),
            }
        }
        match checkout::prune_bases(&self.store.dirs) {
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
}
