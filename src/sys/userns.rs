//! A task's user namespace: made with a block of host ids, held as a descriptor, joined by the
//! agent's child once its sandbox is built.
//!
//! Only a process with `CAP_SETUID` and `CAP_SETGID` over the parent namespace may write a
//! map of more than its own id (user_namespaces(7), "Defining user and group ID mappings"),
//! and a process cannot write its own map once it is inside. So the namespace is made by a
//! short-lived child of the caller — `clone(CLONE_NEWUSER | CLONE_VM)` on a small stack of its
//! own, which does nothing but wait on a pipe — while the caller, still the host's root,
//! writes `/proc/<child>/uid_map` and `gid_map` and opens `/proc/<child>/ns/user`. The
//! namespace lives on in that descriptor after the child is reaped.
//!
//! The child shares the caller's memory but touches none of it: it blocks in read(2) and
//! _exits. Every signal is blocked across its life (a handler of the caller's must not run on
//! its stack).

use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// The child's stack: it makes two system calls.
const CHILD_STACK_BYTES: usize = 256 << 10;

/// A task's user namespace, and the child that made it until it is reaped.
pub struct UserNamespace {
    ns: OwnedFd,
    /// The child (released: it exits on its own) and the stack it runs on, which must stay
    /// mapped until it is gone.
    maker: Option<(libc::pid_t, super::vfork::Stack)>,
}

impl UserNamespace {
    /// `/proc/<pid>/ns/user` of the namespace: for setns(2) and idmapped mounts.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.ns.as_fd()
    }

    /// Reap the child that made the namespace. It was released when the namespace was made
    /// and exits as soon as it runs; waiting for that can take a scheduler's wake-up (ms on
    /// an idle VM), so a caller with something to do first — start the agent — reaps it
    /// after. Dropping the namespace reaps it too.
    pub fn reap_maker(&mut self) -> io::Result<()> {
        match self.maker.take() {
            Some((pid, stack)) => {
                let reaped = super::wait::wait_for(pid).map(drop);
                drop(stack);
                reaped
            }
            None => Ok(()),
        }
    }
}

impl Drop for UserNamespace {
    fn drop(&mut self) {
        let _ = self.reap_maker();
    }
}

/// A new user namespace in which ids `0..count` are the host's `first..first + count` (uids
/// and gids alike), owned by `first` (not by the host's root: [`as_owner`]). The caller must
/// be single-threaded and hold `CAP_SETUID`, `CAP_SETGID`, `CAP_SETPCAP` and
/// `CAP_SYS_ADMIN`.
pub fn create(first: u32, count: u32) -> io::Result<UserNamespace> {
    let (wait_end, release_end) = super::fds::pipe()?;
    let stack = super::vfork::Stack::new(CHILD_STACK_BYTES)?;
    let old_mask = super::block_all_signals()?;
    let ends = [wait_end.as_raw_fd(), release_end.as_raw_fd()];
    let made = as_owner(first, || spawn_waiting(&stack, &ends));
    super::restore_signal_mask(&old_mask);
    let pid = made?;
    let mapped = map_and_open(pid, first, count);
    // The child's read returns 0 once the last write end is closed: it exits.
    drop(release_end);
    let userns = UserNamespace {
        ns: match mapped {
            Ok(ns) => ns,
            Err(e) => {
                let _ = super::wait::wait_for(pid);
                return Err(e);
            }
        },
        maker: Some((pid, stack)),
    };
    Ok(userns)
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
    if bits < 0 {
        return Err(io::Error::last_os_error());
    }
    let no_fixup = bits as libc::c_ulong | SECBIT_NO_SETUID_FIXUP;
    // SAFETY: as above; needs CAP_SETPCAP, which the caller holds.
    if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, no_fixup, 0, 0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
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
/// parent namespace, and the agent's `sandbox.user` gets its groups set) and open its
/// namespace.
fn map_and_open(pid: libc::pid_t, first: u32, count: u32) -> io::Result<OwnedFd> {
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
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
    Ok(OwnedFd::from(ns))
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

/// clone(2) a child in a new user namespace that closes its copy of the pipe's write end
/// (`ends[1]`), waits until the read end (`ends[0]`) reads end-of-file — the caller closed
/// its own — and exits. The caller has every signal blocked (the child keeps that mask).
fn spawn_waiting(stack: &super::vfork::Stack, ends: &[libc::c_int; 2]) -> io::Result<libc::pid_t> {
    extern "C" fn wait_then_exit(arg: *mut libc::c_void) -> libc::c_int {
        // The two descriptors travel in the argument itself, not in the caller's memory:
        // the caller goes on (and its stack frame is gone) while this child runs.
        let packed = arg as usize;
        let wait_fd = (packed & 0xffff_ffff) as libc::c_int;
        let release_fd = (packed >> 32) as libc::c_int;
        let mut byte = 0u8;
        // SAFETY: close and read act on this child's own copy of the descriptor table; the
        // byte read into is on this child's own stack. _exit ends the child without running
        // anything of the caller's (no atexit handlers, no unwinding).
        unsafe {
            libc::close(release_fd);
            while libc::read(wait_fd, (&mut byte as *mut u8).cast(), 1) > 0 {}
            libc::_exit(0)
        }
    }
    let packed = (ends[0] as u32 as usize) | ((ends[1] as u32 as usize) << 32);
    // SAFETY: the child runs `wait_then_exit` on `stack`, which outlives it (it is kept
    // until the child is reaped); it touches nothing of the shared memory but its own stack.
    // SIGCHLD: the caller reaps it like a forked child.
    let pid = unsafe {
        libc::clone(
            wait_then_exit,
            stack.top(),
            libc::CLONE_NEWUSER | libc::CLONE_VM | libc::SIGCHLD,
            packed as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
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
