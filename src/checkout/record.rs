//! `tasks/<unit>/checkout/checkout.ron`: what a checkout was made from and how. Written
//! atomically inside the checkout before the checkout is renamed into place, so that a
//! checkout directory without a readable record is never mistaken for one.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use super::error::CheckoutError;
use crate::state::StateDir;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckoutRecord {
    /// The main repository as the unit named it.
    pub repo: PathBuf,
    /// Its git directory (objects, refs).
    pub common_dir: PathBuf,
    /// `repo.base` as written in the unit, and the commit it was then.
    pub base: String,
    pub base_commit: String,
    /// The task's branch, harvested into the main repository under the same name.
    pub branch: String,
    /// The main repository's ref that keeps the base commit alive.
    pub pin: String,
    pub files: Files,
    /// The agent's user (`sandbox.user`), owner of the files; `None`: root.
    pub owner: Option<(u32, u32)>,
    pub created_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Files {
    /// An overlay over base `base_key`, with `upper/` and `ovl-work/` in the checkout.
    Overlay { base_key: String },
    /// A full checkout in `files/`, and why the overlay was not used.
    Full { reason: String },
}

impl CheckoutRecord {
    pub fn base_key(&self) -> Option<&str> {
        match &self.files {
            Files::Overlay { base_key } => Some(base_key),
            Files::Full { .. } => None,
        }
    }
}

/// `tasks/<unit>/checkout`.
pub fn checkout_dir(dirs: &StateDir, unit: &str) -> PathBuf {
    dirs.task_dir(unit).join("checkout")
}

pub(crate) fn record_path(checkout: &Path) -> PathBuf {
    checkout.join("checkout.ron")
}

/// The task's git directory.
pub(crate) fn git_dir(checkout: &Path) -> PathBuf {
    checkout.join("git")
}

/// The overlay's upper layer: the task's changes to the base tree.
pub(crate) fn upper_dir(checkout: &Path) -> PathBuf {
    checkout.join("upper")
}

/// overlayfs's scratch directory: on the same filesystem as the upper layer, as it must be.
pub(crate) fn overlay_work_dir(checkout: &Path) -> PathBuf {
    checkout.join("ovl-work")
}

/// A full checkout's files.
pub(crate) fn full_files_dir(checkout: &Path) -> PathBuf {
    checkout.join("files")
}

/// The record of `unit`'s checkout; `None` when it has none.
pub(crate) fn load(dirs: &StateDir, unit: &str) -> Result<Option<CheckoutRecord>, CheckoutError> {
    let path = record_path(&checkout_dir(dirs, unit));
    crate::state::read_ron(&path).map_err(|e| CheckoutError::Io {
        what: "reading the checkout's record".into(),
        path,
        source: std::io::Error::other(e.to_string()),
    })
}

/// The records of every task's checkout; `None` when the list may be incomplete — the tasks
/// directory or one of its entries unreadable (EMFILE, ENOMEM, EIO…), or a record unreadable
/// — so that nothing shared (a base tree: the lower layer of running overlays) is removed on
/// the strength of it. Only a tasks directory that does not exist means "no checkouts".
pub(crate) fn all(dirs: &StateDir) -> Option<Vec<CheckoutRecord>> {
    let tasks = dirs.tasks_dir();
    let entries = match std::fs::read_dir(&tasks) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(Vec::new()),
        Err(e) => {
            log::warn!("{}: {e}: not listing checkouts", tasks.display());
            return None;
        }
    };
    let mut records = Vec::new();
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                log::warn!("{}: {e}: not listing checkouts", tasks.display());
                return None;
            }
        };
        let Some(unit) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        match load(dirs, &unit) {
            Ok(Some(record)) => records.push(record),
            Ok(None) => {}
            Err(e) => {
                log::warn!("{unit}: {e}");
                return None;
            }
        }
    }
    Some(records)
}
