//! A task's PID namespace, owned by the task's user namespace, with the shim — a process of
//! the host's user namespace, the host's root — as its PID 1.
//!
//! A namespace belongs to the user namespace its creator's credentials are in
//! (namespaces(7)), and a child's credentials are its parent's: a `clone3(CLONE_NEWPID)` by
//! the daemon makes a PID namespace of the host's. So the namespace is made apart from the
//! process that will be its PID 1 ([`pid_namespace_in`]): a child of the caller joins the
//! task's user namespace and unshares one, which exists without any process yet (its
//! `pid_for_children` link cannot be opened then — proc(5) gives `ENOENT` until it has an
//! init — but the pidfd ioctl `PIDFD_GET_PID_FOR_CHILDREN_NAMESPACE` hands it out). Then the
//! caller clones the shim into it (`clone_into`): `setns(CLONE_NEWPID)` changes only the
//! calling thread's namespace for its next children (allowed in a multi-threaded process;
//! it needs `CAP_SYS_ADMIN` over the namespace's owner and over the caller's own user
//! namespace, which the host's root holds), so the next child is PID 1 of it, and the
//! caller's own goes back at once. Measured on 6.18: ~45 µs for the namespace's maker.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The maker's stack: it makes a few system calls.
const CHILD_STACK_BYTES: usize = 128 << 10;

/// `PIDFD_GET_PID_FOR_CHILDREN_NAMESPACE`: `_IO(PIDFS_IOCTL_MAGIC = 0xFF, 6)`, Linux 6.11.
const PIDFD_GET_PID_FOR_CHILDREN_NAMESPACE: libc::c_ulong = 0xFF06;
/// `NS_GET_USERNS`: `_IO(NSIO = 0xb7, 0x1)` (ioctl_ns(2)).
const NS_GET_USERNS: libc::c_ulong = 0xb701;

/// A new PID namespace owned by the user namespace `userns`, with no process yet, as a
/// descriptor for `clone_into`. The caller must hold `CAP_SYS_ADMIN` over `userns` (the
/// host's root does over every namespace below its own). Fails with `ENOTTY` before Linux
/// 6.11 (no pidfd namespace ioctls).
///
/// Made by a child — `clone(CLONE_VM | CLONE_VFORK | CLONE_FILES)`, neither `CLONE_FS` nor
/// `CLONE_THREAD`, so that it may join a user namespace (setns(2): its filesystem
/// information and thread group are its own) — which joins `userns`, unshares a PID
/// namespace, opens it through a pidfd of its own into the descriptor table it shares with
/// the caller, and exits. Every signal is blocked across its life (a handler of the
/// caller's must not run on its stack).
pub fn pid_namespace_in(userns: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    namespace_in(userns, Kind::Pid)
}

/// Which namespace the maker makes.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub(super) enum Kind {
    /// A PID namespace, with no process yet.
    Pid,
    /// A network namespace (only `lo`, down), opened through the maker's `/proc/self/ns/net`
    /// while it is in it.
    Net,
}

/// A new namespace of `kind` owned by the user namespace `userns` ([`pid_namespace_in`]'s
/// maker; `crate::sys::netns::create_in` for a network namespace).
pub(super) fn namespace_in(userns: BorrowedFd<'_>, kind: Kind) -> io::Result<OwnedFd> {
    let stack = super::vfork::Stack::new(CHILD_STACK_BYTES)?;
    let old_mask = super::block_all_signals()?;
    let made = spawn_maker(&stack, userns.as_raw_fd(), kind);
    super::restore_signal_mask(&old_mask);
    made
}

/// What the maker passes back: the namespace's descriptor, or the failed step and its errno.
#[repr(C)]
struct Made {
    userns: libc::c_int,
    kind: Kind,
    /// The descriptor (>= 0) or -errno.
    result: libc::c_int,
    /// The step that failed (an index into [`STEPS`]).
    step: libc::c_int,
}

const STEPS: [&str; 6] = [
    "join the task's user namespace (setns)",
    "unshare a PID namespace",
    "open a pidfd of its own",
    "open the new PID namespace (pidfd ioctl PIDFD_GET_PID_FOR_CHILDREN_NAMESPACE, Linux 6.11)",
    "unshare a network namespace",
    "open the new network namespace (/proc/self/ns/net)",
];

/// The maker's `/proc/self/ns/net`, as open(2) takes it.
const OWN_NET_NAMESPACE: &[u8] = b"/proc/self/ns/net\0";

fn spawn_maker(
    stack: &super::vfork::Stack,
    userns: libc::c_int,
    kind: Kind,
) -> io::Result<OwnedFd> {
    extern "C" fn make_then_exit(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` points at the caller's `Made`, alive while the caller is suspended
        // (CLONE_VFORK). Raw syscall(2)s only, which touch no thread state of libc's (the
        // thread pointer is the caller's); errno is read through the shared thread pointer,
        // which the caller does not read meanwhile. _exit ends the child without running
        // anything of the caller's.
        unsafe {
            let made = &mut *(arg as *mut Made);
            let fail = |made: &mut Made, step: libc::c_int| {
                made.result = -*libc::__errno_location();
                made.step = step;
                libc::_exit(0)
            };
            if libc::syscall(libc::SYS_setns, made.userns, libc::CLONE_NEWUSER) < 0 {
                fail(made, 0);
            }
            if made.kind == Kind::Net {
                if libc::syscall(libc::SYS_unshare, libc::CLONE_NEWNET) < 0 {
                    fail(made, 4);
                }
                let path = OWN_NET_NAMESPACE.as_ptr();
                let flags = libc::O_RDONLY | libc::O_CLOEXEC;
                let ns = libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path, flags);
                if ns < 0 {
                    fail(made, 5);
                }
                made.result = ns as libc::c_int;
                libc::_exit(0)
            }
            if libc::syscall(libc::SYS_unshare, libc::CLONE_NEWPID) < 0 {
                fail(made, 1);
            }
            let pid = libc::syscall(libc::SYS_getpid);
            let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
            if pidfd < 0 {
                fail(made, 2);
            }
            let ns = libc::syscall(
                libc::SYS_ioctl,
                pidfd,
                PIDFD_GET_PID_FOR_CHILDREN_NAMESPACE,
                0,
            );
            if ns < 0 {
                let errno = *libc::__errno_location();
                libc::syscall(libc::SYS_close, pidfd);
                *libc::__errno_location() = errno;
                fail(made, 3);
            }
            libc::syscall(libc::SYS_close, pidfd);
            made.result = ns as libc::c_int;
            libc::_exit(0)
        }
    }
    let mut made = Made {
        userns,
        kind,
        result: -libc::EINVAL,
        step: 0,
    };
    // SAFETY: the child runs `make_then_exit` on `stack`, which outlives it (CLONE_VFORK: the
    // caller is suspended until it has exited); of the shared memory it writes `made` only.
    // SIGCHLD: the caller reaps it like a forked child.
    let pid = unsafe {
        libc::clone(
            make_then_exit,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::SIGCHLD,
            &mut made as *mut Made as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    super::wait::wait_for(pid)?;
    if made.result < 0 {
        let why = io::Error::from_raw_os_error(-made.result);
        let step = STEPS.get(made.step as usize).copied().unwrap_or("?");
        return Err(io::Error::new(
            why.kind(),
            format!("the maker of the task's namespace could not {step}: {why}"),
        ));
    }
    // SAFETY: the child opened this descriptor (close-on-exec, as nsfs opens them) in the
    // table it shared with us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(made.result) })
}

/// Run `clone` (which clones one child) with the calling thread's namespace for new
/// children set to `pid_ns`: that child is PID 1 of `pid_ns` when it is the first process
/// there. The thread's own namespace for children is put back afterwards, whatever `clone`
/// returned; a process that could not put it back would make every later child in the
/// task's namespace, so it exits then (it cannot happen with the capabilities the first
/// setns needed).
pub(super) fn clone_into<T>(
    pid_ns: BorrowedFd<'_>,
    clone: impl FnOnce() -> io::Result<T>,
) -> io::Result<T> {
    let own = std::fs::File::open("/proc/thread-self/ns/pid_for_children")?;
    nix::sched::setns(pid_ns, nix::sched::CloneFlags::CLONE_NEWPID).map_err(|e| {
        io::Error::other(format!(
            "cannot join the task's PID namespace for the shim's clone (setns: {e})"
        ))
    })?;
    let cloned = clone();
    if let Err(e) = nix::sched::setns(&own, nix::sched::CloneFlags::CLONE_NEWPID) {
        // Not the log: the caller's logger may be anywhere now.
        eprintln!("keel: cannot return to its own PID namespace after a clone: {e}");
        super::fds::exit_now(127);
    }
    cloned
}

/// The user namespace that owns the namespace `ns` (ioctl_ns(2), `NS_GET_USERNS`).
pub fn owner_of(ns: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: an ioctl with no argument on a descriptor we borrow; it returns a new
    // descriptor (close-on-exec) or -1.
    let fd = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_USERNS as _) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A namespace's identity: the device and inode of its nsfs file (ioctl_ns(2): two
/// descriptors name the same namespace when both match). An inode number is reused once
/// its namespace is freed, never while the namespace lives (a descriptor of it, a process
/// in it, or a namespace it owns keeps it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamespaceId {
    pub dev: u64,
    pub ino: u64,
}

impl NamespaceId {
    pub fn of(ns: BorrowedFd<'_>) -> io::Result<NamespaceId> {
        let stat = nix::sys::stat::fstat(ns).map_err(io::Error::from)?;
        Ok(NamespaceId {
            dev: stat.st_dev,
            ino: stat.st_ino,
        })
    }
}

#[cfg(test)]
mod tests;
