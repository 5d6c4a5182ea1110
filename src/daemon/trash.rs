//! `keel rm`'s deletions, off the loop: what goes (a task's run files, checkpoint, task
//! directory — an agent may have put anything in them) is renamed into `STATE/trash` at once,
//! an O(1) step on the same filesystem, and a worker deletes it (`Job::Delete`). A daemon that
//! dies first leaves it there; the next one sweeps the trash at its start.

use super::jobs::{Owner, Pending, Then};
use super::Daemon;
use crate::worker::protocol::Job;
use std::path::Path;

impl Daemon {
    /// Take `path` (of `unit`) out of the state directory now, and have a worker delete it.
    /// Nothing there: nothing to do. A rename that fails leaves it in place, said in the log.
    pub(crate) fn throw_away(&mut self, unit: &str, path: &Path) {
        if std::fs::symlink_metadata(path).is_err() {
            return;
        }
        let trash = self.store.dirs.trash_dir();
        if let Err(e) = crate::state::create_private_dir(&trash) {
            log::error!(
                "{unit}: cannot make {}: {e}; {} left in place",
                trash.display(),
                path.display()
            );
            return;
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let at = trash.join(format!(
            "{unit}.{}.{}",
            name.unwrap_or_default(),
            crate::state::now_ms()
        ));
        if let Err(e) = std::fs::rename(path, &at) {
            log::error!(
                "{unit}: cannot move {} to the trash: {e}; left in place",
                path.display()
            );
            return;
        }
        self.delete_in_worker(unit, &at);
    }

    fn delete_in_worker(&mut self, unit: &str, path: &Path) {
        let pending = Pending {
            generation: 0,
            job: Job::Delete {
                path: path.to_path_buf(),
            },
            then: Then::Nothing,
        };
        // The task's own queue: after whatever job of it is still ending (a cancelled
        // preparation's worker).
        self.jobs.submit(Owner::Task(unit.to_string()), pending);
    }

    /// At start: what an earlier daemon put in the trash and did not see deleted.
    pub(crate) fn sweep_trash(&mut self) {
        let Ok(entries) = std::fs::read_dir(self.store.dirs.trash_dir()) else {
            return;
        };
        let leftovers: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        for path in leftovers {
            let unit = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.split('.').next())
                .unwrap_or("trash")
                .to_string();
            self.delete_in_worker(&unit, &path);
        }
    }
}
