//! What keel creates under the state directory is private to root (or, for the directories
//! the agent writes, to the task's user), whatever the umask and whatever the mode of the
//! state directory the operator made: keel's own directories are created mode 0700 and its
//! own files 0600 explicitly (a umask can only narrow a mode), and at start the entries an
//! earlier keel (or an operator's `mkdir`) made wider are tightened. A 0700 directory hides
//! everything below it, so the top-level entries are enough: the copies of the repository in
//! `bases/` and `tasks/*/checkout/` keep the repository's own modes (the agent sees them
//! through its overlay) and are private by the directories around them.
//!
//! The state directory's own mode is the operator's: it may be a directory keel does not own
//! alone, and a chmod of it could break what else lives there. Open to others, it shows only
//! the names of keel's entries.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use super::modes::{PRIVATE_DIR_MODE, PRIVATE_FILE_MODE};
use super::StateDir;

impl StateDir {
    /// Keel's own top-level entries: directories, then files. The default units directory is
    /// among them (the operator's unit files hold their `env` secrets); one elsewhere
    /// (`--units`) is the operator's.
    fn own_entries(&self) -> (Vec<std::path::PathBuf>, Vec<std::path::PathBuf>) {
        let dirs = ["tasks", "bases", "templates", "units"];
        let files = [
            "events.jsonl",
            "events.jsonl.1",
            "lock",
            "keel.sock",
            "exit-status",
            "shutdown.ron",
            ".keel.ron.accepted",
        ];
        (
            dirs.iter().map(|d| self.root.join(d)).collect(),
            files.iter().map(|f| self.root.join(f)).collect(),
        )
    }

    /// At start: take group and other permissions away from keel's own top-level entries
    /// that have them (made by an earlier keel, or under a wide umask by hand). One line
    /// per entry changed. A symlink (an operator's `bases -> /mnt/big/bases`) is followed:
    /// what it points at is keel's entry.
    pub fn tighten_own_entries(&self) {
        let (dirs, files) = self.own_entries();
        let wanted = dirs
            .iter()
            .map(|d| (d, PRIVATE_DIR_MODE))
            .chain(files.iter().map(|f| (f, PRIVATE_FILE_MODE)));
        for (path, mode) in wanted {
            let Ok(meta) = fs::metadata(path) else {
                continue;
            };
            let old = meta.permissions().mode() & 0o7777;
            if old & 0o077 == 0 {
                continue;
            }
            match fs::set_permissions(path, fs::Permissions::from_mode(mode)) {
                Ok(()) => log::info!(
                    "{}: mode {old:04o} made {mode:04o} (keel's files are private)",
                    path.display()
                ),
                Err(e) => log::warn!("{}: cannot make it private: {e}", path.display()),
            }
        }
        if let Ok(meta) = fs::metadata(&self.root) {
            let mode = meta.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                log::info!(
                    "state directory {} is mode {mode:04o} (left as the operator made it): \
                     keel's entries in it are private (0700 directories, 0600 files)",
                    self.root.display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
