//! Whose a start's failure is, as the daemon resolves it: the host's (a `sandbox.user` it
//! does not have, a privilege keel lacks) or the unit's. Pure: the texts of `/etc/passwd`
//! and `/etc/group` are given.

use super::ResolveError;
use crate::sandbox::privileges;

impl ResolveError {
    /// Whether the host refused the start, not the unit: a `sandbox.user` (or its group) this
    /// host does not have, a capability keel itself lacks, a daemon whose user namespace maps
    /// no other user, `CAP_NET_ADMIN` with `keel.ron`'s user namespaces off, the host's `/`
    /// that cannot be listed, or the task's own directories that cannot be given to its user
    /// for want of a privilege or of room. What the daemon does with it: the task waits,
    /// `blocked`, rather than spend its restart budget (`crate::daemon::lifecycle`).
    pub fn refused_by_host(&self) -> bool {
        match self {
            ResolveError::Privileges(privileges::PrivilegeError::User(_, problem)) => {
                missing_account(problem)
            }
            ResolveError::Privileges(privileges::PrivilegeError::NotHeld(_)) => true,
            ResolveError::GiveToUser { error, .. } => matches!(
                error,
                nix::errno::Errno::EPERM
                    | nix::errno::Errno::EACCES
                    | nix::errno::Errno::EROFS
                    | nix::errno::Errno::ENOSPC
                    | nix::errno::Errno::EDQUOT
            ),
            ResolveError::ListHostRoot(_)
            | ResolveError::UnmappedUser { .. }
            | ResolveError::NetAdminWithoutUserNamespace => true,
            ResolveError::Privileges(_)
            | ResolveError::Writable(_)
            | ResolveError::OutsideUserNamespace { .. }
            | ResolveError::Command(_) => false,
        }
    }
}

/// Whether `problem`, what [`privileges::plan`] says of a `sandbox.user`, is a user or group
/// this host's `/etc/passwd` or `/etc/group` does not have (rather than a malformed value).
pub fn missing_account(problem: &str) -> bool {
    problem.starts_with("no such user") || problem.starts_with("no such group")
}

/// Why `sandbox.user` (`spec`) cannot be resolved on this host for want of the user or group
/// it names, with the fix; `None` when it resolves, or fails for another reason (a malformed
/// value is the unit's, and validation's to say). `passwd`, `group`: the databases' texts.
pub fn missing_user(spec: &str, passwd: &str, group: &str) -> Option<String> {
    let Err(privileges::PrivilegeError::User(_, problem)) =
        privileges::plan(&[], Some(spec), false, passwd, group)
    else {
        return None;
    };
    if !missing_account(&problem) {
        return None;
    }
    let (user, group_part) = match spec.trim().split_once(':') {
        Some((user, group)) => (user, Some(group)),
        None => (spec.trim(), None),
    };
    Some(match (problem.starts_with("no such group"), group_part) {
        (true, Some(group)) => format!(
            "no such group {group:?} on this host (sandbox.user {spec:?}): create it \
             (groupadd {group}), or give a numeric gid, or set sandbox.user to None"
        ),
        _ => format!(
            "no such user {user:?} on this host (sandbox.user {spec:?}): create it \
             (useradd --create-home {user}), or set `user: None`"
        ),
    })
}
