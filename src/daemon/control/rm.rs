//! `keel rm`: the unit file goes, the attempt is stopped, and the task's files go (a work
//! directory with files and an unharvested checkout stay, unless `--force`). Answered once the
//! attempt has ended, with what became of the files.

use super::{answer_when_ended, not_persisted, unknown_unit};
use crate::daemon::record::Intent;
use crate::daemon::stopping::{stop, Stop};
use crate::daemon::Daemon;
use crate::protocol::Response;
use mio::Token;

impl Daemon {
    pub(super) fn remove_request(
        &mut self,
        token: Token,
        unit: &str,
        force: bool,
    ) -> Option<Response> {
        let Some(task) = self.tasks.get_mut(unit) else {
            // A task forgotten when its unit file went away leaves its directory
            // (checkpoint, work, logs) behind: `keel rm` removes that too.
            return match self.remove_leftovers(unit, force) {
                Some(Some(message)) => Some(Response::Ok { message }),
                // Its checkout goes in a job: answered once it has ended.
                Some(None) => answer_when_ended(&mut self.control, token, unit, 0),
                None => Some(unknown_unit(unit, &self.units)),
            };
        };
        let path = self.units.file_of(unit);
        if let Err(e) = std::fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Some(Response::Error {
                    message: format!("cannot remove {}: {e}", path.display()),
                });
            }
        }
        task.unit = None;
        task.unit_text = None;
        task.force_remove = force;
        let generation = task.record.generation;
        match stop(
            task,
            Intent::Remove,
            &mut self.store,
            &mut self.events.timers,
        ) {
            Stop::NotPersisted => return Some(not_persisted(unit, &self.store.dirs.root)),
            Stop::Done => {}
            // No live attempt: gone now; the answer says what became of its files.
            Stop::RemoveNow { explicit } => self.remove_task(unit, explicit),
        }
        answer_when_ended(&mut self.control, token, unit, generation)
    }

    /// `keel rm` of a task without a record (forgotten when its unit file went away): remove
    /// its directory, keeping a work directory that holds files. `None` if there is nothing;
    /// `Some(None)` when a job removes its checkout first (the answer comes after).
    fn remove_leftovers(&mut self, unit: &str, force: bool) -> Option<Option<String>> {
        crate::unit::validate_name(unit).ok()?;
        let dir = self.store.dirs.task_dir(unit);
        if !dir.is_dir() || crate::state::attempt_lock_held(&self.store.dirs.run_dir(unit)) {
            return None;
        }
        let Some(kept) = self.delete_task_files(unit, (0, 0), force) else {
            return Some(None);
        };
        let message = match kept {
            kept if kept.is_empty() => format!("{unit}: leftovers removed"),
            kept => format!("{unit}: leftovers removed; {kept}"),
        };
        self.store.event(unit, 0, 0, "removed", &message);
        Some(Some(message))
    }
}
