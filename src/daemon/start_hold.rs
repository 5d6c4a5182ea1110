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
/// A file that cannot be read keeps the hold (a window silently dropped would let every
/// start through): the error is logged, `keel resume --all` ends it.
pub(crate) fn load(dirs: &StateDir) -> Option<String> {
    match std::fs::read_to_string(path(dirs)) {
        Ok(text) => {
            let text = text.trim();
            (!text.is_empty()).then(|| text.to_string())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            log::error!("{}: {e}: starts stay held", path(dirs).display());
            Some(format!("since an unknown time: {e}"))
        }
    }
}

/// Record the hold (`Some`) or its end (`None`) durably.
pub(crate) fn store(dirs: &StateDir, hold: Option<&str>) -> Result<(), crate::state::StateError> {
    crate::state::atomic_write(&path(dirs), hold.unwrap_or("").as_bytes())
}

/// What `keel status` shows for a queued task while the hold lasts.
pub(crate) fn reason(since: &str) -> String {
    format!("starts held by keel pause --all ({since}): keel resume --all ends the hold")
}
