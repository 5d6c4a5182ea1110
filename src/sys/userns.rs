//! A task's user namespace: made with a block of host ids, held as a descriptor, joined by the
//! agent's child once its sandbox is built.
//!
//! Only a process with `CAP_SETUID` and `CAP_SETGID` over the parent namespace may write a
//! map of more than its own id (user_namespaces(7), "Defining user and group ID mappings"),
//! and a process cannot write its own map once it is inside. So the namespace is made by a
//! child of the caller — `clone(CLONE_NEWUSER | CLONE_VM | CLONE_VFORK | CLONE_FILES)` on a
//! small stack of its own, which opens its own `/proc/self/ns/user` into the shared descriptor
//! table and exits — and the caller, still the host's root, writes the exited child's
//! `/proc/<pid>/uid_map` and `gid_map` before it reaps it (a zombie's entries still name its
//! namespace; measured on 6.18). The namespace lives on in that descriptor.
//!
//! The child shares the caller's memory but touches none of it. Every signal is blocked
//! across its life (a handler of the caller's must not run on its stack).

use std::io::{self, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// What [`create`] needs of its caller, for the messages that refuse it.
pub const CAPABILITIES_NEEDED: &str = "CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID and CAP_SETPCAP";

/// The child's stack: it makes one system call.
const CHILD_STACK_BYTES: usize = 128 << 10;

/// A new user namespace in which ids `0..count` are the host's `first..first + count` (uids
/// and gids alike), owned by `first` (not by the host's root: [`as_owner`]), as a
/// descriptor of `/proc/<pid>/ns/user` (setns(2), and the `userns_fd` of an idmapped mount:
/// mount_setattr(2)). The caller must be single-threaded and hold `CAP_SETUID`,
/// `CAP_SETGID`, `CAP_SETPCAP` and `CAP_SYS_ADMIN`. ~0.2 ms (a namespace's creation and its
/// maker's end), which is why the daemon makes one per task, not per attempt.
pub fn create(first: u32, count: u32) -> io::Result<OwnedFd> {
    let stack = super::vfork::Stack::new(CHILD_STACK_BYTES)?;
    let old_mask = super::block_all_signals()?;
    // The child must stay a zombie until its maps are written: not reaped by the kernel, as
    // it would be under an ignored SIGCHLD (or SA_NOCLDWAIT) the caller inherited.
    let old_sigchld = default_sigchld();
    let made = as_owner(first, || spawn_exited(&stack)).and_then(|(pid, ns)| {
        // The child has exited; until it is reaped its /proc entries still name its
        // namespace, and its maps are written through them.
        let mapped = write_maps(pid, first, count);
        let reaped = super::wait::wait_for(pid);
        mapped?;
        reaped?;
        Ok(ns)
    });
    restore_sigchld(old_sigchld);
    super::restore_signal_mask(&old_mask);
    made
}

/// SIGCHLD's disposition set to the default; the one before, to restore.
fn default_sigchld() -> Option<libc::sigaction> {
    let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: an all-zero sigaction is SIG_DFL with no flags and an empty mask.
    let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `dfl` and `old` are valid for the call; the kernel fills `old`.
    if unsafe { libc::sigaction(libc::SIGCHLD, &dfl, old.as_mut_ptr()) } < 0 {
        return None;
    }
    // SAFETY: sigaction succeeded, so it wrote `old`.
    Some(unsafe { old.assume_init() })
}

fn restore_sigchld(old: Option<libc::sigaction>) {
    if let Some(old) = old {
        // SAFETY: `old` is the action sigaction returned above.
        unsafe { libc::sigaction(libc::SIGCHLD, &old, std::ptr::null_mut()) };
    }
}

/// Run `make` with the effective uid and gid `owner` (the real and saved ones stay root's,
/// and `SECBIT_NO_SETUID_FIXUP` keeps the capabilities effective across the switch): a user
/// namespace made in it is owned by `owner`, not by the host's root. The kernel charges a
/// namespace's per-user counts (inotify instances and watches, message queues, pending
/// signals, processes) to its owner in the parent namespace as well as to the user inside
/// (ucounts): owned by root, a task holding 128 inotify instances would leave root — every
/// keel daemon — none. The block's first id is no host process's.
fn as_owner<T>(owner: u32, make: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    // SAFETY: prctl with an integer request and no pointer arguments.
    let bits = unsafe { libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0) };
    // SAFETY: as above. A change of euid marks the process non-dumpable: put back after.
    let dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
    if bits < 0 || dumpable < 0 {
        return Err(io::Error::last_os_error());
    }
    let no_fixup = bits as libc::c_ulong | SECBIT_NO_SETUID_FIXUP;
    // SAFETY: as above; needs CAP_SETPCAP, which the caller holds.
    if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, no_fixup, 0, 0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // The effective ids only (a namespace's owner is its creator's euid): the real and saved
    // ones stay root's, so that no process of `owner`'s could signal this one meanwhile.
    let keep = libc::uid_t::MAX;
    // SAFETY: integer arguments; -1 (uid_t::MAX) leaves an id as it is.
    let switched = unsafe { libc::setresgid(keep, owner, keep) } == 0
        // SAFETY: as above.
        && unsafe { libc::setresuid(keep, owner, keep) } == 0;
    let made = if switched {
        make()
    } else {
        Err(io::Error::last_os_error())
    };
    // SAFETY: integer arguments: back to the host's root (the saved uid is still 0).
    let back = unsafe { libc::setresuid(keep, 0, keep) } == 0
        // SAFETY: as above.
        && unsafe { libc::setresgid(keep, 0, keep) } == 0
        // SAFETY: prctl with integer arguments: the securebits as they were.
        && unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0, 0, 0) } == 0;
    // The dumpable flag as it was, where prctl takes it back (0 or 1; 2, set by the kernel
    // under fs.suid_dumpable=2, cannot be set: it stays what the id change made it).
    if dumpable == 0 || dumpable == 1 {
        // SAFETY: as above.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, dumpable as libc::c_ulong, 0, 0, 0) };
    }
    if !back {
        // This process would go on as another user: it must not.
        eprintln!(
            "keel: cannot return to root after making a user namespace: {}",
            io::Error::last_os_error()
        );
        super::fds::exit_now(127);
    }
    made
}

/// securebits(7): uid changes leave the capability sets alone.
const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;

/// Write the child's maps (`setgroups` is left allowed: the writer holds `CAP_SETGID` in the
/// parent namespace, and the agent's `sandbox.user` gets its groups set).
fn write_maps(pid: libc::pid_t, first: u32, count: u32) -> io::Result<()> {
    let pid = proc_pid(pid)?;
    let map = format!("0 {first} {count}\n");
    for file in ["uid_map", "gid_map"] {
        let path = format!("/proc/{pid}/{file}");
        let mut f = std::fs::OpenOptions::new().write(true).open(&path)?;
        f.write_all(map.as_bytes()).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot write {path} ({}): {e}", map.trim_end()),
            )
        })?;
    }
    Ok(())
}

/// `pid` (of the caller's PID namespace) as the mounted `/proc` names it: a shim is PID 1 of
/// a namespace of its own but sees the host's `/proc`. The `Pid:` line of a pidfd's fdinfo
/// is the pid in the namespace of the procfs it is read through (proc(5)).
fn proc_pid(pid: libc::pid_t) -> io::Result<libc::pid_t> {
    let pidfd = super::pidfd_open(pid)?;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd()))?;
    info.lines()
        .find_map(|line| line.strip_prefix("Pid:"))
        .and_then(|value| value.trim().parse::<libc::pid_t>().ok())
        .filter(|&p| p > 0)
        .ok_or_else(|| {
            io::Error::other(format!(
                "the child {pid} has no pid in the mounted /proc (fdinfo of its pidfd)"
            ))
        })
}

/// clone(2) a child in a new user namespace that opens its own `/proc/self/ns/user` into the
/// descriptor table it shares with the caller (`CLONE_FILES`: a process may always open its
/// own namespaces, where another's ask for ptrace(2) access — CAP_SYS_PTRACE, which a
/// container may not give) and exits; the caller resumes when it has (`CLONE_VFORK`), so the
/// child's stack is free again on return. The caller has every signal blocked (the child
/// keeps that mask). Returns the child's pid and the namespace.
fn spawn_exited(stack: &super::vfork::Stack) -> io::Result<(libc::pid_t, OwnedFd)> {
    extern "C" fn open_own_then_exit(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` points at the caller's `opened`, alive while the caller is suspended
        // (CLONE_VFORK); the path is a NUL-terminated literal. syscall(2), not libc's open,
        // which is a cancellation point and may touch the caller's thread state (shared
        // here); a failure's errno (the caller's, through the shared thread pointer, which
        // it does not read meanwhile) is passed back as -errno. _exit ends the child without
        // running anything of the caller's.
        unsafe {
            let fd = libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                c"/proc/self/ns/user".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            *(arg as *mut libc::c_int) = if fd < 0 {
                -*libc::__errno_location()
            } else {
                fd as libc::c_int
            };
            libc::_exit(0)
        }
    }
    let mut opened: libc::c_int = -1;
    // SAFETY: the child runs `open_own_then_exit` on `stack`, which outlives it (CLONE_VFORK:
    // the caller is suspended until it has exited); of the shared memory it writes `opened`
    // only. SIGCHLD: the caller reaps it like a forked child.
    let pid = unsafe {
        libc::clone(
            open_own_then_exit,
            stack.top(),
            libc::CLONE_NEWUSER
                | libc::CLONE_VM
                | libc::CLONE_VFORK
                | libc::CLONE_FILES
                | libc::SIGCHLD,
            &mut opened as *mut libc::c_int as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if opened < 0 {
        let _ = super::wait::wait_for(pid);
        let why = io::Error::from_raw_os_error(-opened);
        return Err(io::Error::new(
            why.kind(),
            format!("the new user namespace's child could not open its /proc/self/ns/user: {why}"),
        ));
    }
    // SAFETY: the child opened this descriptor in the table it shared with us; nothing else
    // owns it.
    Ok((pid, unsafe { OwnedFd::from_raw_fd(opened) }))
}

/// Join the user namespace `ns` and become its root (uid and gid 0 inside, no
/// supplementary groups): the caller then holds every capability in that namespace and none
/// outside it. Namespaces it makes afterwards belong to `ns`.
pub fn enter(ns: BorrowedFd<'_>) -> io::Result<()> {
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWUSER).map_err(io::Error::from)?;
    // The caller's ids are the host's root, which the namespace does not map: its own root
    // now (with the capabilities setns gave, which a switch to a mapped root keeps).
    // SAFETY: setgroups with an empty list (NULL, 0) reads no memory.
    if unsafe { libc::setgroups(0, std::ptr::null()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain integer arguments.
    if unsafe { libc::setresgid(0, 0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain integer arguments.
    if unsafe { libc::setresuid(0, 0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
