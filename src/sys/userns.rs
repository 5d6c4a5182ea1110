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
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

/// The child's stack: it makes two system calls.
const CHILD_STACK_BYTES: usize = 256 << 10;

/// A new user namespace in which ids `0..count` are the host's `first..first + count` (uids
/// and gids alike), as a descriptor of `/proc/<pid>/ns/user` (setns(2), and the
/// `userns_fd` of an idmapped mount: mount_setattr(2)). The caller must be single-threaded
/// and hold `CAP_SETUID`, `CAP_SETGID` and `CAP_SYS_ADMIN`.
pub fn create(first: u32, count: u32) -> io::Result<OwnedFd> {
    let (wait_end, release_end) = super::fds::pipe()?;
    let stack = super::vfork::Stack::new(CHILD_STACK_BYTES)?;
    let old_mask = super::block_all_signals()?;
    let ends = [wait_end.as_raw_fd(), release_end.as_raw_fd()];
    let made = spawn_waiting(&stack, &ends);
    let result = made.and_then(|pid| {
        let mapped = map_and_open(pid, first, count);
        // The child's read returns 0 once the last write end is closed.
        drop(release_end);
        let reaped = super::wait::wait_for(pid);
        let ns = mapped?;
        reaped?;
        Ok(ns)
    });
    super::restore_signal_mask(&old_mask);
    drop(stack);
    result
}

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
/// its own — and exits. The caller has every signal blocked.
fn spawn_waiting(stack: &super::vfork::Stack, ends: &[libc::c_int; 2]) -> io::Result<libc::pid_t> {
    extern "C" fn wait_then_exit(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` points at the caller's `ends`, alive until the caller has reaped this
        // child; it is only read.
        let [wait_fd, release_fd] = unsafe { *(arg as *const [libc::c_int; 2]) };
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
    // SAFETY: the child runs `wait_then_exit` on `stack`, which outlives it (the caller
    // reaps it before dropping the stack); it touches nothing of the shared memory but its
    // own stack. SIGCHLD: the caller reaps it like a forked child.
    let pid = unsafe {
        libc::clone(
            wait_then_exit,
            stack.top(),
            libc::CLONE_NEWUSER | libc::CLONE_VM | libc::SIGCHLD,
            ends.as_ptr() as *mut libc::c_void,
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
