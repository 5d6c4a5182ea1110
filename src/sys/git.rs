//! libgit2's process-wide settings that git2 only exposes as `unsafe`.

use std::sync::Once;

/// Let libgit2 open repositories whatever user owns them. keel runs as root and opens the
/// repositories its unit files name (owned by their users), and the tasks' git directories
/// (owned by the agent's user under `sandbox.user`); libgit2 would refuse them all ("not owned
/// by current user", its copy of git's `safe.directory` rule). That rule guards against a
/// repository's config running commands (core.fsmonitor, hooks, filter drivers) for whoever
/// opens it; libgit2 runs none of them, and keel reads those repositories only through it.
pub fn trust_repository_owners() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: this writes a global flag of libgit2 that its repository-open path reads
        // without synchronisation; `Once` makes this the only write, and it happens before
        // any repository is opened by a caller of this function (each calls it first).
        if let Err(e) = unsafe { git2::opts::set_verify_owner_validation(false) } {
            log::warn!("cannot turn off libgit2's owner validation: {e}");
        }
    });
}
