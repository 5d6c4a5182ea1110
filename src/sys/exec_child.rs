//! The calls a child makes between its clone and its exec, each a small safe primitive on
//! memory prepared before the clone ([`ExecMemory`]): the sequence they make up is the
//! caller's (the agent's child: `crate::sandbox::start::agent_child`; the daemon's clone that
//! becomes a shim: `crate::sandbox::start::clone`).
//!
//! Each primitive is async-signal-safe and allocates nothing: a child that shares its
//! parent's memory may be ended by nothing but SIGKILL in the middle of one. A failure is
//! reported to the parent through a close-on-exec pipe (stage + errno, and for a sandbox
//! failure its message: [`report_failure`], [`report_sandbox_failure`]), read by
//! [`super::process::await_exec`] — as posix_spawn does.

use super::process::{ExecPlan, ExecStage, MAX_REPORT_MESSAGE};
use std::convert::Infallible;
use std::io;
use std::os::fd::RawFd;

/// An errno, as a primitive below returns it.
pub type Errno = libc::c_int;

/// Everything the child's calls read, built before the clone: `plan`'s argv, environment and
/// PATH candidates as the NULL-terminated pointer arrays execve(2) takes, the parent's pid,
/// the last signal number and the two pieces of signal state the child restores.
pub struct ExecMemory<'a> {
    plan: &'a ExecPlan,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    candidates: Vec<*const libc::c_char>,
    parent: libc::pid_t,
    max_signal: libc::c_int,
    /// A kernel `struct sigaction` (not glibc's) that is all zero: SIG_DFL, no flags, empty
    /// mask. Larger than the kernel's struct on every architecture.
    default_action: [u64; 8],
    empty_mask: libc::sigset_t,
}

impl<'a> ExecMemory<'a> {
    /// Build it in the parent, before the clone.
    pub fn new(plan: &'a ExecPlan) -> ExecMemory<'a> {
        let mut argv: Vec<*const libc::c_char> = plan.argv.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> = plan.envp.iter().map(|e| e.as_ptr()).collect();
        envp.push(std::ptr::null());
        ExecMemory {
            plan,
            argv,
            envp,
            candidates: plan.candidates.iter().map(|c| c.as_ptr()).collect(),
            // SAFETY: getpid has no arguments and cannot fail.
            parent: unsafe { libc::getpid() },
            max_signal: libc::SIGRTMAX(),
            default_action: [0; 8],
            empty_mask: super::process::empty_sigset(),
        }
    }

    /// Every signal's disposition back to default (SIG_IGN survives exec).
    pub fn reset_signal_dispositions(&self) {
        super::process::reset_signal_dispositions(self.max_signal, &self.default_action);
    }

    /// `prctl(PR_SET_PDEATHSIG, SIGKILL)`: this child dies with its parent. `Ok(false)` when
    /// the parent died before the death signal was armed (this child must exit).
    pub fn die_with_parent(&self) -> Result<bool, Errno> {
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            )
        };
        if rc < 0 {
            return Err(errno());
        }
        // SAFETY: getppid has no arguments and cannot fail.
        Ok(unsafe { libc::getppid() } == self.parent)
    }

    /// `chdir` to the plan's working directory.
    pub fn chdir(&self) -> Result<(), Errno> {
        // SAFETY: a NUL-terminated string of the plan, alive for the call.
        match unsafe { libc::chdir(self.plan.cwd.as_ptr()) } {
            0 => Ok(()),
            _ => Err(errno()),
        }
    }

    /// An empty signal mask: the program starts with nothing blocked.
    pub fn unblock_signals(&self) {
        // SAFETY: an initialised set built before the clone; NULL old set.
        unsafe { libc::sigprocmask(libc::SIG_SETMASK, &self.empty_mask, std::ptr::null_mut()) };
    }

    /// execve(2) of each PATH candidate in turn, by execvp's rules: skip candidates that do
    /// not exist, remember EACCES, stop on any other error (the file exists but cannot be
    /// run). Returns only if none could be run: the errno to report.
    pub fn exec_candidates(&self) -> Errno {
        let mut saw_eacces = false;
        let mut last = libc::ENOENT;
        for &candidate in &self.candidates {
            // SAFETY: NUL-terminated strings and NULL-terminated arrays built before the
            // clone, alive for the call.
            unsafe { libc::execve(candidate, self.argv.as_ptr(), self.envp.as_ptr()) };
            last = errno();
            match last {
                libc::EACCES => saw_eacces = true,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => break,
            }
        }
        if saw_eacces && last != libc::ENOEXEC {
            last = libc::EACCES;
        }
        last
    }
}

/// `setsid()`: a new session and process group, this child their leader.
pub fn new_session() -> Result<(), Errno> {
    // SAFETY: setsid has no arguments.
    match unsafe { libc::setsid() } {
        -1 => Err(errno()),
        _ => Ok(()),
    }
}

/// `stdin`, `stdout` and `stderr` at 0, 1 and 2 ([`keep_as`] each).
pub fn redirect_stdio(stdin: RawFd, stdout: RawFd, stderr: RawFd) -> Result<(), Errno> {
    keep_as(stdin, 0)?;
    keep_as(stdout, 1)?;
    keep_as(stderr, 2)
}

/// `fd` at `target`, open across exec (dup2; a descriptor already at its number has its
/// close-on-exec flag cleared instead, which dup2 onto itself would leave set).
pub fn keep_as(fd: RawFd, target: RawFd) -> Result<(), Errno> {
    // SAFETY: fcntl and dup2 on descriptors the caller owns; integer arguments only.
    let rc = unsafe {
        if fd == target {
            libc::fcntl(fd, libc::F_SETFD, 0)
        } else {
            libc::dup2(fd, target)
        }
    };
    if rc < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// `RLIMIT_NOFILE` set to `(soft, hard)`. A failure leaves the limit as it was, which is
/// harmless.
pub fn set_nofile(soft: u64, hard: u64) {
    let limit = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct on our stack.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
}

/// Every descriptor from 3 up close-on-exec (close_range(2), `CLOSE_RANGE_CLOEXEC`): none of
/// the parent's reaches the program. Best effort (Linux ≥ 5.11).
pub fn close_on_exec_from_3() {
    // SAFETY: integer arguments only.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
}

/// Report `stage` and `errno` on `report` and exit 127.
pub fn report_failure(report: RawFd, stage: ExecStage, errno: Errno) -> ! {
    let mut msg = [0u8; 8];
    msg[..4].copy_from_slice(&stage.code().to_ne_bytes());
    msg[4..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: write(2) and _exit(2) are async-signal-safe; `msg` is a live stack buffer. A
    // short or failed write leaves the parent with "exec succeeded", and the reaper then
    // reports exit 127.
    unsafe {
        libc::write(report, msg.as_ptr().cast(), msg.len());
        libc::_exit(127)
    }
}

/// Report a sandbox failure with the errno of the step that failed (0: none) and its message
/// (cut at `MAX_REPORT_MESSAGE` bytes) on `report` and exit 127. It allocates: only for a
/// child whose sandbox set-up has used ordinary code already (its parent is single-threaded
/// and suspended).
pub fn report_sandbox_failure(report: RawFd, errno: i32, message: &str) -> ! {
    let mut msg = Vec::with_capacity(8 + message.len());
    msg.extend_from_slice(&ExecStage::Sandbox.code().to_ne_bytes());
    msg.extend_from_slice(&errno.to_ne_bytes());
    msg.extend_from_slice(&message.as_bytes()[..message.len().min(MAX_REPORT_MESSAGE as usize)]);
    // SAFETY: write(2) of a live buffer, then _exit(2), which never returns.
    unsafe {
        libc::write(report, msg.as_ptr().cast(), msg.len());
        libc::_exit(127)
    }
}

/// Run `child` in a vfork-style child (`CLONE_VM | CLONE_VFORK` on a stack of its own: see
/// `sys::vfork`) and return its pid once it has exec'd or exited; the caller is suspended
/// until then. `child` starts with every signal blocked and never returns (its type says so:
/// it ends in execve(2) or _exit(2)); a panic in it ends the child (exit 127), never unwinds
/// into the caller's frames.
///
/// The caller must be single-threaded (no other thread may run on the shared memory while
/// the child does), and `child` must not rely on anything the suspended caller holds (a lock
/// taken before the call, say).
pub fn vfork_child(child: &mut dyn FnMut() -> Infallible) -> io::Result<libc::pid_t> {
    let mut guarded = || -> libc::c_int {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut *child));
        // SAFETY: _exit never returns and runs nothing of the parent's.
        unsafe { libc::_exit(127) }
    };
    // SAFETY: the caller's contract above (single-threaded); `guarded` ends in execve (inside
    // `child`) or _exit, and never unwinds.
    unsafe { super::vfork::vfork_exec(&mut guarded) }
}

fn errno() -> Errno {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
