//! The few raw syscalls keel needs that neither std nor nix wrap: pidfds, clone3, locks,
//! capabilities (`caps`), mounts (`mount`), a machine's PID 1 (`machine`), the agent's exec
//! plan and report (`process`), the calls a child makes before its exec (`exec_child`; the
//! sequence of those calls is its caller's), reaping (`wait`), the terminal's size (`term`), and libgit2's global settings (`git`).
//!
//! Every `unsafe` block of keel lives under `src/sys/`, each with a `// SAFETY:` line.
//! Everything else in the crate goes through these functions or through nix.

pub mod caps;
pub mod child;
pub mod exec_child;
pub mod fds;
pub mod git;
pub mod machine;
pub mod mount;
pub mod netlink;
pub mod netns;
pub mod own_userns;
pub mod packet;
pub mod pidns;
pub mod process;
pub mod quota;
pub mod seccomp;
pub mod splice;
pub mod term;
pub mod userns;
mod vfork;
pub mod wait;

use std::convert::Infallible;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// `pidfd_open(2)`: a file descriptor that refers to `pid` and to nothing else, ever.
/// Signals sent through it can never hit a recycled pid; it becomes readable when the process
/// exits (for a child or a non-child alike).
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes two integer arguments and returns a new fd or -1; no memory is
    // shared with the kernel.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `pidfd_send_signal(2)`. ESRCH once the process has been reaped: no pid-reuse race.
pub fn pidfd_send_signal(pidfd: &OwnedFd, signal: i32) -> io::Result<()> {
    // SAFETY: integer arguments only; a NULL siginfo means "as if kill(2)".
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `CLONE_INTO_CGROUP`: libc's constant is an `int` that overflows (KERNEL-NOTES).
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// What a spawned process gets: its argv, environment, and the three standard fds.
pub struct SpawnRequest<'a> {
    pub program: &'a CString,
    pub argv: &'a [CString],
    pub envp: &'a [CString],
    pub stdin: RawFd,
    pub stdout: RawFd,
    pub stderr: RawFd,
    /// Extra clone3 flags (namespaces; CLONE_INTO_CGROUP with `cgroup_fd`).
    pub extra_flags: u64,
    /// A PID namespace without a process yet (made by [`pidns::pid_namespace_in`]): the
    /// child is its PID 1, and no `CLONE_NEWPID` is needed in `extra_flags`.
    pub pid_namespace: Option<BorrowedFd<'a>>,
    pub cgroup_fd: Option<RawFd>,
    /// A descriptor the child keeps as fd 3 (the attempt lock); every other inherited
    /// descriptor is closed at exec.
    pub keep_as_fd3: Option<RawFd>,
    /// Descriptors the child keeps at their own numbers, open across exec (a relay's sockets:
    /// `crate::network::relay_protocol::RelayFds`).
    pub keep_fds: &'a [RawFd],
    /// `(soft, hard)` RLIMIT_NOFILE for the child: the limit the daemon was started with, not
    /// the one it raised for itself (select(2) breaks above 1024; agents expect the usual).
    pub nofile: Option<(u64, u64)>,
    /// The child execs with every signal blocked (from before the clone on), so that none is
    /// lost before the program sets its own mask: a spare shim, whose signals wait for the
    /// shim it becomes (crate::sandbox::spare).
    pub signals_blocked: bool,
}

impl SpawnRequest<'_> {
    /// In the cloned child: stdin, stdout and stderr as asked, a new session (it must not
    /// share the daemon's terminal or process group, so a Ctrl-C on a foreground daemon
    /// reaches the daemon only), every inherited descriptor close-on-exec (those inherited
    /// from whoever started the daemon — a shell's, systemd's — must not reach the program),
    /// [`SpawnRequest::keep_as_fd3`] at fd 3 and the `nofile` limit. Async-signal-safe.
    pub fn set_up_child(&self) -> Result<(), exec_child::Errno> {
        use exec_child::{close_on_exec_from_3, keep_as, new_session, redirect_stdio, set_nofile};
        redirect_stdio(self.stdin, self.stdout, self.stderr)?;
        // Failing (already a leader) is harmless.
        let _ = new_session();
        close_on_exec_from_3();
        if let Some(fd) = self.keep_as_fd3 {
            keep_as(fd, ATTEMPT_LOCK_FD)?;
        }
        for &fd in self.keep_fds {
            keep_as(fd, fd)?;
        }
        if let Some((soft, hard)) = self.nofile {
            set_nofile(soft, hard);
        }
        Ok(())
    }
}

/// The descriptor number on which a shim holds its attempt lock.
pub const ATTEMPT_LOCK_FD: RawFd = 3;

/// Spawn a process with `clone3(CLONE_PIDFD)`: returns its pid and a pidfd for the event loop.
/// The child starts a new session (it must not share the daemon's terminal or process group,
/// so a Ctrl-C on a foreground daemon reaches the daemon only), resets its signal mask and
/// execs. Only async-signal-safe calls happen between clone3 and execve: the argument arrays
/// are built before the clone.
pub fn spawn_with_pidfd(request: &SpawnRequest<'_>) -> io::Result<(i32, OwnedFd)> {
    let mut argv: Vec<*const libc::c_char> = request.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = request.envp.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    clone3_pidfd(
        request.extra_flags,
        request.cgroup_fd,
        request.pid_namespace,
        request.signals_blocked,
        // The child only calls async-signal-safe functions (dup2, setsid, sigprocmask,
        // execve, _exit) on memory prepared above.
        &mut || child_exec(request, &argv, &envp),
    )
}

/// Run `child` in a process cloned with `clone3(CLONE_PIDFD | flags)` (a copy of this one:
/// no `CLONE_VM`), in the cgroup `cgroup_fd` from its first instruction when given
/// (`CLONE_INTO_CGROUP`), as PID 1 of `pid_namespace` when given (`pidns::clone_into`),
/// and every signal blocked across the call (and in the child) when `signals_blocked`. Returns the child's pid and a pidfd for the event loop. `child` never
/// returns (it ends in execve(2) or _exit(2)); a panic in it ends the child (exit 127), never
/// unwinds into this process's frames.
///
/// The caller must be single-threaded (the child is a copy of one thread: a lock another
/// thread held stays held there).
pub fn clone3_with_pidfd(
    flags: u64,
    cgroup_fd: Option<RawFd>,
    pid_namespace: Option<BorrowedFd<'_>>,
    signals_blocked: bool,
    child: &mut dyn FnMut() -> Infallible,
) -> io::Result<(i32, OwnedFd)> {
    clone3_pidfd(
        flags,
        cgroup_fd,
        pid_namespace,
        signals_blocked,
        &mut || {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut *child));
            fds::exit_now(127)
        },
    )
}

fn clone3_pidfd(
    flags: u64,
    cgroup_fd: Option<RawFd>,
    pid_namespace: Option<BorrowedFd<'_>>,
    signals_blocked: bool,
    child: &mut dyn FnMut() -> Infallible,
) -> io::Result<(i32, OwnedFd)> {
    match pid_namespace {
        Some(ns) => pidns::clone_into(ns, || clone3_here(flags, cgroup_fd, signals_blocked, child)),
        None => clone3_here(flags, cgroup_fd, signals_blocked, child),
    }
}

fn clone3_here(
    flags: u64,
    cgroup_fd: Option<RawFd>,
    signals_blocked: bool,
    child: &mut dyn FnMut() -> Infallible,
) -> io::Result<(i32, OwnedFd)> {
    let mut pidfd: libc::c_int = -1;
    let mut args: libc::clone_args = clone_args_zeroed();
    args.flags = libc::CLONE_PIDFD as u64 | flags;
    args.pidfd = &mut pidfd as *mut libc::c_int as u64;
    args.exit_signal = libc::SIGCHLD as u64;
    if let Some(fd) = cgroup_fd {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd as u64;
    }
    let restore = match signals_blocked {
        true => Some(block_all_signals()?),
        false => None,
    };
    // SAFETY: clone3 without CLONE_VM behaves like fork: the child gets a copy of our address
    // space. keel's daemon is single-threaded (the caller's contract), and the child runs
    // only `child`, which never returns.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        )
    };
    let clone_error = (pid < 0).then(io::Error::last_os_error);
    if pid == 0 {
        // Never returns.
        child();
    }
    if let Some(old) = restore {
        restore_signal_mask(&old);
    }
    if let Some(e) = clone_error {
        return Err(e);
    }
    // SAFETY: CLONE_PIDFD stored a fresh fd owned by nobody else in `pidfd`.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok((pid as i32, pidfd))
}

fn child_exec(
    request: &SpawnRequest<'_>,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> Infallible {
    // We are the freshly cloned child: every call below is async-signal-safe and uses memory
    // built before the clone; on failure we _exit(127) without unwinding.
    if request.set_up_child().is_err() {
        fds::exit_now(127);
    }
    if !request.signals_blocked {
        let mut empty = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
        // SAFETY: sigemptyset initialises the set it is given, which lives on our stack.
        unsafe { libc::sigemptyset(empty.as_mut_ptr()) };
        // SAFETY: the set was initialised just above; a NULL old-set pointer is allowed.
        unsafe { libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut()) };
    }
    // SAFETY: program, argv and envp are NUL-terminated arrays of C strings built before the
    // clone and still alive (our copy of the parent's memory).
    unsafe { libc::execve(request.program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    fds::exit_now(127)
}

/// Block every signal; returns the previous mask (for [`restore_signal_mask`]).
pub(super) fn block_all_signals() -> io::Result<libc::sigset_t> {
    let mut all = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
    let mut old = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
    // SAFETY: sigfillset initialises the set on our stack; sigprocmask reads it and writes the
    // old mask into `old`, also on our stack.
    let rc = unsafe {
        libc::sigfillset(all.as_mut_ptr());
        libc::sigprocmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr())
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sigprocmask succeeded, so it wrote the old mask.
    Ok(unsafe { old.assume_init() })
}

pub(super) fn restore_signal_mask(old: &libc::sigset_t) {
    // SAFETY: `old` is an initialised mask from block_all_signals; NULL old-set is allowed.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
}

/// Close every descriptor but 0–2 and those of `keep` (close_range(2) over the gaps): what a
/// child of the daemon must not hold while it works before its exec (the daemon's instance
/// lock, its sockets, other tasks' pidfds).
pub fn close_fds_except(keep: &[RawFd]) {
    let mut keep: Vec<u32> = keep
        .iter()
        .filter(|&&fd| fd > 2)
        .map(|&fd| fd as u32)
        .collect();
    keep.sort_unstable();
    let mut from = 3u32;
    for fd in keep.into_iter().chain(std::iter::once(u32::MAX)) {
        if fd > from {
            // SAFETY: integer arguments only; closes descriptors of this process.
            unsafe { libc::syscall(libc::SYS_close_range, from, fd - 1, 0u32) };
        }
        from = fd.saturating_add(1);
    }
}

/// Move each descriptor to its target number, without close-on-exec (dup2(2)); the originals
/// are closed. Safe when a target is another entry's current number: every descriptor is
/// first duplicated above all targets.
pub fn install_fds(fds: Vec<(OwnedFd, RawFd)>) -> io::Result<()> {
    let above = fds.iter().map(|(_, target)| *target).max().unwrap_or(0) + 1;
    let mut moved = Vec::with_capacity(fds.len());
    for (fd, target) in fds {
        // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own returns a new one (or -1).
        let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, above) };
        if high < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `high` was just returned by fcntl and is owned by nobody else.
        moved.push((unsafe { OwnedFd::from_raw_fd(high) }, target));
    }
    for (fd, target) in &moved {
        // SAFETY: dup2 onto a number we are entitled to replace (the caller names it); the
        // new descriptor has close-on-exec cleared, as dup2(2) documents.
        if unsafe { libc::dup2(fd.as_raw_fd(), *target) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Take ownership of an inherited descriptor `fd`, making it close-on-exec. Fails (EBADF) when
/// it is not open.
pub fn adopt_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only queries the descriptor table.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above, on an open descriptor.
    unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
    // SAFETY: the descriptor is open and, by the handoff contract, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn clone_args_zeroed() -> libc::clone_args {
    // SAFETY: clone_args is a plain C struct of integers; all-zero is its documented default.
    unsafe { std::mem::zeroed() }
}

/// `flock(LOCK_EX|LOCK_NB)`: `Ok(true)` when we now hold the lock, `Ok(false)` when another
/// open file description holds it. The lock lives as long as any descriptor of this open file
/// description — across fork and exec, which is what the attempt lock relies on.
pub fn try_lock_exclusive(file: &std::fs::File) -> io::Result<bool> {
    // SAFETY: flock takes a descriptor we own (borrowed for the call) and an integer.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(error)
    }
}

/// `prctl(PR_SET_CHILD_SUBREAPER)`: orphans of our descendants are reparented to us, so we
/// reap them (and a shim that outlives a daemon crash is reparented to the nearest subreaper).
/// Make the calling process background work: CPU `nice` value `nice` and the lowest
/// best-effort I/O priority (`ioprio_set`, class 2 level 7), so that the daemon it serves wins
/// the CPU and the disk when both want them (keel's workers).
pub fn run_in_background(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority with integer arguments only.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0 {
        return Err(io::Error::last_os_error());
    }
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const BEST_EFFORT_LOWEST: libc::c_long = (2 << 13) | 7;
    // SAFETY: ioprio_set with integer arguments only.
    if unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0,
            BEST_EFFORT_LOWEST,
        )
    } < 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn set_child_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// A process's start time in clock ticks since boot (`/proc/<pid>/stat`, field 22). Together with
/// the pid and the boot id it names one process for the lifetime of the machine.
pub fn process_start_time(pid: i32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_time(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unparsable /proc/{pid}/stat"),
        )
    })
}

/// Field 22 of a `/proc/<pid>/stat` line. The command name (field 2) may contain spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // after_comm starts at field 3 (state); field 22 is the 20th from there.
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

/// The kernel's boot id: changes at every boot, so a recorded pid from an earlier boot is
/// known to be gone. Test hook: `KEEL_TEST_BOOT_ID`, when set, replaces it, so that a test can
/// simulate a host reboot (docs/testing.md, "Testing hooks"); the shims inherit it with the
/// daemon's environment, so one daemon and its shims agree.
pub fn boot_id() -> String {
    if let Some(id) = std::env::var_os("KEEL_TEST_BOOT_ID") {
        return id.to_string_lossy().into_owned();
    }
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Is `pid` alive and the same process as recorded (same start time)?
pub fn same_process_alive(pid: i32, start_time: u64) -> bool {
    match process_start_time(pid) {
        Ok(now) => now == start_time && !is_zombie(pid),
        Err(_) => false,
    }
}

/// Does `/proc/<pid>/cgroup` put the process in the v2 cgroup `cgroup` (as that file names
/// cgroups: relative to the reader's cgroup namespace, e.g. `/system.slice/keel/tasks/a`)?
/// Part of a recorded shim's identity at adoption: a pid + start time that match by chance
/// (another boot's clock, a hand-edited record) still cannot name a process outside the
/// task's own cgroup. `Err` when the process is gone.
pub fn process_in_v2_cgroup(pid: i32, cgroup: &std::path::Path) -> io::Result<bool> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
    Ok(v2_cgroup_matches(&text, cgroup))
}

/// The pure part of [`process_in_v2_cgroup`]: the `0::<path>` line must name `cgroup` whole.
/// (A suffix match let a process in `/job` pass for the shim of unit `job`.)
pub fn v2_cgroup_matches(proc_cgroup: &str, cgroup: &std::path::Path) -> bool {
    proc_cgroup
        .lines()
        .filter_map(|line| line.strip_prefix("0::"))
        .map(|path| std::path::Path::new(path.trim()))
        // The root cgroup ("/") is never a task's.
        .any(|path| path != std::path::Path::new("/") && path == cgroup)
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = &stat[stat.rfind(')')? + 1..];
            after.split_whitespace().next().map(|s| s == "Z")
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests;
