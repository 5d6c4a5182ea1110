//! A daemon that is not root runs in a user namespace of its own, as its root (rootless):
//! the one-id map (`0 <uid> 1`, and the same for its gid) that any process may write for itself
//! (user_namespaces(7): "the data written to uid_map must consist of a single line that maps
//! the writing process's effective user ID"), after `deny` in `setgroups`. Inside it, keel does
//! what it does as root — mount, PID, IPC, UTS and network namespaces for its tasks, owned by
//! this user namespace — and the kernel holds it to what the user may do on the host: files
//! it creates are the user's, the host's mounts are locked in every mount namespace it makes
//! (mount_namespaces(7)), and nothing outside the user's own is reachable.
//!
//! Rootless Podman does the same (`podman unshare`), with a range of `/etc/subuid` ids
//! through the setuid `newuidmap`; keel maps the user's own id only (no helper, no
//! configuration), so every task's processes are that user on the host.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;

/// The user namespace the process was started in, once it has made its own
/// ([`become_root_of_own`]): the device and inode of its nsfs file.
static STARTED_IN: OnceLock<(u64, u64)> = OnceLock::new();
/// The uid and gid on the host that 0 stands for, once [`become_root_of_own`] ran.
static HOST_IDS: OnceLock<(u32, u32)> = OnceLock::new();

/// Whether this process is in the host's (initial) user namespace: its uid map is the
/// identity of every id (`0 0 4294967295`). Read once.
pub fn in_initial_user_namespace() -> bool {
    if STARTED_IN.get().is_some() {
        return false;
    }
    static INITIAL: OnceLock<bool> = OnceLock::new();
    *INITIAL.get_or_init(|| {
        std::fs::read_to_string("/proc/self/uid_map")
            .map(|map| is_identity_map(&map))
            // No /proc: assume the host's (what keel did before it looked).
            .unwrap_or(true)
    })
}

/// Whether a `uid_map` text maps every id to itself.
pub fn is_identity_map(map: &str) -> bool {
    let fields: Vec<&str> = map.split_whitespace().collect();
    fields == ["0", "0", "4294967295"]
}

/// Make a user namespace, enter it and be its root: `0` inside is this process's euid and
/// egid outside. The caller must be single-threaded (unshare(2): `CLONE_NEWUSER`). Returns the
/// uid and gid it now stands for on the host.
pub fn become_root_of_own() -> io::Result<(u32, u32)> {
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    let before = std::fs::metadata("/proc/self/ns/user")?;
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER).map_err(io::Error::from)?;
    // setgroups first: an unprivileged process may map its gid only with setgroups denied
    // (else it could drop a group that denies it access).
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("0 {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("0 {gid} 1"))?;
    let _ = STARTED_IN.set((before.dev(), before.ino()));
    let _ = HOST_IDS.set((uid, gid));
    Ok((uid, gid))
}

/// The uid and gid on the host this process stands for as 0, if it made its own user
/// namespace ([`become_root_of_own`]).
pub fn host_ids() -> Option<(u32, u32)> {
    HOST_IDS.get().copied()
}

/// Whether this process's `setgroups` is `deny` (its user namespace, or an ancestor, was made
/// by an unprivileged process): then it cannot change its supplementary groups.
pub fn setgroups_denied() -> bool {
    std::fs::read_to_string("/proc/self/setgroups").is_ok_and(|s| s.trim() == "deny")
}

/// Whether `uid` and `gid` are mapped in this process's user namespace (its `uid_map` and
/// `gid_map`).
pub fn maps_own(uid: u32, gid: u32) -> bool {
    let read =
        |file: &str| std::fs::read_to_string(format!("/proc/self/{file}")).unwrap_or_default();
    maps(&read("uid_map"), uid) && maps(&read("gid_map"), gid)
}

/// Whether the map text `map` (`inside outside count` lines) maps id `id` (inside).
pub fn maps(map: &str, id: u32) -> bool {
    map.lines().any(|line| {
        let fields: Vec<u64> = line
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        matches!(fields[..], [inside, _, count] if (inside..inside + count).contains(&u64::from(id)))
    })
}

/// The user namespace this process was started in, if it has made its own since.
pub fn started_in() -> Option<(u64, u64)> {
    STARTED_IN.get().copied()
}

#[cfg(test)]
mod tests;
