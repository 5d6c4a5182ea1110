//! `keel pause --all`'s hold on starts: for a maintenance window or a provider's rate-limit
//! window, not only the running tasks are frozen but no queued task starts (and keel resumes
//! none it preempted) until `keel resume --all`. Persisted before it acts (a one-line file of
//! the state directory, written atomically; empty when released), so a restarted daemon keeps
//! the window.

use crate::state::StateDir;
use std::path::PathBuf;

const FILE: &str = "starts-held";

fn path(dirs: &StateDir) -> PathBuf {
    dirs.root.join(FILE)
}

/// The hold recorded in the state directory (read once, at the daemon's start): its words.
pub(crate) fn load(dirs: &StateDir) -> Option<String> {
    let text = std::fs::read_to_string(path(dirs)).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// Record the hold (`Some`) or its end (`None`) durably.
pub(crate) fn store(dirs: &StateDir, hold: Option<&str>) -> Result<(), crate::state::StateError> {
    crate::state::atomic_write(&path(dirs), hold.unwrap_or("").as_bytes())
}

/// What `keel status` shows for a queued task while the hold lasts.
pub(crate) fn reason(since: &str) -> String {
    format!("starts held by keel pause --all ({since}): keel resume --all ends the hold")
}
