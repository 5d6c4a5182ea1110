//! The shim's process-level syscalls: the agent's exec plan and the report of its exec,
//! reaping, signal masks and process-group signals.
//!
//! Everything the agent's child needs (argv, environment, PATH candidates, the working
//! directory) is prepared in an [`ExecPlan`] *before* the fork: between fork and exec the
//! child only makes async-signal-safe calls on that memory ([`super::exec_child`]) and
//! reports a failure to the parent through a close-on-exec pipe (stage + errno), which
//! [`await_exec`] reads.

use super::wait::wait_for;
use nix::sys::signal::SigSet;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub use super::fds::{
    clear_cloexec, exit_now, grow_pipe, open_dev_null, pipe, set_cloexec, set_nonblocking,
    wait_readable,
};

/// The kernel's sigset size (`_NSIG / 8`) that rt_sigaction(2) insists on.
const KERNEL_SIGSET_BYTES: usize = 8;

/// PATH used for the lookup when the agent's environment has none (glibc's `_CS_PATH`).
pub const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Where in the child a spawn failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecStage {
    /// `setsid()`.
    Session,
    /// `prctl(PR_SET_PDEATHSIG)`.
    DeathSignal,
    /// `dup2` of stdin/stdout/stderr.
    Stdio,
    /// `chdir(cwd)`.
    Chdir,
    /// `execve` of every PATH candidate.
    Exec,
    /// The sandbox (namespaces, mounts, privileges): the message says which step and why.
    Sandbox,
}

impl ExecStage {
    /// The call that failed, for messages.
    pub fn call(self) -> &'static str {
        match self {
            ExecStage::Session => "setsid",
            ExecStage::DeathSignal => "prctl(PR_SET_PDEATHSIG)",
            ExecStage::Stdio => "dup2",
            ExecStage::Chdir => "chdir",
            ExecStage::Exec => "execve",
            ExecStage::Sandbox => "sandbox setup",
        }
    }
    pub(super) fn code(self) -> i32 {
        match self {
            ExecStage::Session => 1,
            ExecStage::DeathSignal => 2,
            ExecStage::Stdio => 3,
            ExecStage::Chdir => 4,
            ExecStage::Exec => 5,
            ExecStage::Sandbox => 6,
        }
    }
    fn from_code(code: i32) -> ExecStage {
        match code {
            1 => ExecStage::Session,
            2 => ExecStage::DeathSignal,
            3 => ExecStage::Stdio,
            4 => ExecStage::Chdir,
            6 => ExecStage::Sandbox,
            _ => ExecStage::Exec,
        }
    }
}

/// The child was forked but could not become the agent. It has been reaped already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecFailure {
    pub pid: i32,
    pub stage: ExecStage,
    pub errno: i32,
    /// For [`ExecStage::Sandbox`]: what failed and what to do about it.
    pub message: Option<String>,
}

/// An agent's argv, environment and working directory, ready to be used after a fork.
pub struct ExecPlan {
    pub(super) argv: Vec<CString>,
    pub(super) envp: Vec<CString>,
    pub(super) candidates: Vec<CString>,
    pub(super) cwd: CString,
}

impl ExecPlan {
    /// Build a plan; `env` is the agent's complete environment. The program (`argv[0]`) is
    /// looked up as execvp(3) does, but with the PATH of `env`, not the shim's own.
    pub fn new(
        argv: &[String],
        env: &[(OsString, OsString)],
        cwd: &Path,
    ) -> Result<ExecPlan, String> {
        let program = argv.first().ok_or("the command is empty")?;
        let to_c = |bytes: &[u8], what: &str| {
            CString::new(bytes).map_err(|_| format!("{what} contains a NUL byte"))
        };
        let argv_c = argv
            .iter()
            .map(|a| to_c(a.as_bytes(), &format!("argument {a:?}")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut envp = Vec::with_capacity(env.len());
        for (name, value) in env {
            let name = name.as_bytes();
            if name.is_empty() || name.contains(&b'=') {
                return Err(format!(
                    "invalid environment variable name {:?}",
                    String::from_utf8_lossy(name)
                ));
            }
            let mut entry = name.to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            envp.push(to_c(&entry, "an environment variable")?);
        }
        let path = env
            .iter()
            .rev()
            .find(|(name, _)| name == "PATH")
            .map(|(_, value)| value.as_bytes());
        let candidates = exec_candidates(program.as_bytes(), path)
            .into_iter()
            .map(|c| to_c(&c, "the program path"))
            .collect::<Result<Vec<_>, _>>()?;
        let cwd = to_c(cwd.as_os_str().as_bytes(), "the working directory")?;
        Ok(ExecPlan {
            argv: argv_c,
            envp,
            candidates,
            cwd,
        })
    }

    /// The paths the child will try to execute, in order.
    pub fn candidates(&self) -> Vec<PathBuf> {
        self.candidates
            .iter()
            .map(|c| PathBuf::from(OsStr::from_bytes(c.as_bytes())))
            .collect()
    }
}

/// execvp's search: a name with a `/` is used as is; otherwise each PATH entry in order (an
/// empty entry means the current directory). An empty name is tried as is (and fails ENOENT).
pub fn exec_candidates(program: &[u8], path: Option<&[u8]>) -> Vec<Vec<u8>> {
    if program.is_empty() || program.contains(&b'/') {
        return vec![program.to_vec()];
    }
    let path = path.unwrap_or(DEFAULT_PATH.as_bytes());
    path.split(|&b| b == b':')
        .map(|dir| {
            if dir.is_empty() {
                program.to_vec()
            } else {
                let mut full = dir.to_vec();
                if !dir.ends_with(b"/") {
                    full.push(b'/');
                }
                full.extend_from_slice(program);
                full
            }
        })
        .collect()
}

/// An agent started by a vfork-style child (`crate::sandbox::start::agent_child`, through
/// [`super::exec_child`]): its child has exec'd or exited, and [`await_exec`]
/// reads which from `report` (the read end of the child's close-on-exec pipe) — the shim, which
/// takes the agent over after its own exec, reads it there.
pub struct ForkedAgent {
    pub pid: i32,
    pub report: OwnedFd,
}

/// Wait for the forked agent's exec: `Ok` once its report pipe closed without a word (the
/// exec succeeded), or the failure its child reported (the child is reaped here).
pub fn await_exec(agent: ForkedAgent) -> Result<i32, ExecFailure> {
    let ForkedAgent { pid, report } = agent;
    let mut report_read = std::fs::File::from(report);
    let mut report = [0u8; 8];
    let mut got = 0;
    while got < report.len() {
        match nix::unistd::read(report_read.as_fd(), &mut report[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    if got < report.len() {
        return Ok(pid);
    }
    let stage = ExecStage::from_code(i32::from_ne_bytes([
        report[0], report[1], report[2], report[3],
    ]));
    let errno = i32::from_ne_bytes([report[4], report[5], report[6], report[7]]);
    // A sandbox failure carries its message after the 8 bytes, up to EOF.
    let mut text = Vec::new();
    if stage == ExecStage::Sandbox {
        use std::io::Read;
        let _ = (&mut report_read)
            .take(MAX_REPORT_MESSAGE)
            .read_to_end(&mut text);
    }
    let message = (!text.is_empty()).then(|| String::from_utf8_lossy(&text).into_owned());
    // The child _exits right after writing; reap it here so nobody else sees it.
    let _ = wait_for(pid);
    Err(ExecFailure {
        pid,
        stage,
        errno,
        message,
    })
}

/// Put every signal's disposition back to default (SIG_IGN and handlers survive a fork; SIG_IGN
/// survives exec too). The raw syscall, because glibc's sigaction refuses its internal signals
/// 32 and 33, which its posix_spawn leaves ignored in whatever it starts (a shim run by std's
/// Command, say) and which would otherwise reach the agent ignored. Async-signal-safe.
///
/// `default_action`: an all-zero buffer at least as large as the kernel's `struct sigaction`
/// (SIG_DFL, no flags, empty mask); `max_signal`: `SIGRTMAX()`, read before a fork.
pub fn reset_signal_dispositions(max_signal: libc::c_int, default_action: &[u64; 8]) {
    for signal in 1..=max_signal {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            // SAFETY: rt_sigaction reads the zeroed buffer (larger than the kernel's struct)
            // and writes nothing (NULL old action); integer arguments otherwise.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    signal,
                    default_action.as_ptr(),
                    std::ptr::null_mut::<libc::c_void>(),
                    KERNEL_SIGSET_BYTES,
                )
            };
        }
    }
}

/// Longest sandbox failure message passed from the child.
pub(super) const MAX_REPORT_MESSAGE: u64 = 4096;

pub(super) fn empty_sigset() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it fully.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        set
    }
}

/// A signal set from raw signal numbers (nix's `Signal` cannot name realtime signals).
pub fn signal_set(signals: &[i32]) -> io::Result<SigSet> {
    let mut set = empty_sigset();
    for &signal in signals {
        // SAFETY: `set` is an initialised sigset_t; sigaddset validates the number.
        if unsafe { libc::sigaddset(&mut set, signal) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: `set` was initialised by sigemptyset/sigaddset above.
    Ok(unsafe { SigSet::from_sigset_t_unchecked(set) })
}

/// Block exactly `set` (sigprocmask SIG_SETMASK; the shim is single-threaded): a shim started
/// by the daemon inherits every signal blocked (see `crate::sys::spawn_with_pidfd`).
pub fn set_signal_mask(set: &SigSet) -> io::Result<()> {
    nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(set), None)
        .map_err(io::Error::from)
}

/// Ignore SIGPIPE: a write to a closed pipe (the daemon's end of our stderr, say) then
/// returns EPIPE instead of killing the process. The agent gets it back at default.
pub fn ignore_sigpipe() -> io::Result<()> {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: SIG_IGN installs no handler code, so no async-signal-safety concern arises.
    unsafe { signal(Signal::SIGPIPE, SigHandler::SigIgn) }
        .map(drop)
        .map_err(io::Error::from)
}

/// Make sure fds 0, 1 and 2 are open (on /dev/null if they were closed), so that no pipe or
/// log file the shim opens later lands on them and gets mixed up with stdio.
pub fn ensure_stdio_open() -> io::Result<()> {
    for fd in 0..3 {
        // SAFETY: F_GETFD only queries the descriptor table.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0 {
            continue;
        }
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        let raw = std::os::fd::IntoRawFd::into_raw_fd(null);
        if raw != fd {
            // Lowest free fd should be `fd`; if not, dup it there and close the extra.
            // SAFETY: both are fds we own or that are unused.
            unsafe {
                libc::dup2(raw, fd);
                libc::close(raw);
            }
        }
        // The fd is now intentionally leaked as stdio (no OwnedFd owns it).
    }
    Ok(())
}

/// Send `signal` to every process of process group `pgid` (`kill(-pgid, signal)`).
/// Refuses pgid ≤ 1: `kill(0)` and `kill(-1)` would hit the shim's own group or everything.
pub fn kill_process_group(pgid: i32, signal: i32) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal process group {pgid}"),
        ));
    }
    // SAFETY: kill takes two integers; a negative pid targets the group only.
    if unsafe { libc::kill(-pgid, signal) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// This process's pid as seen by the mounted /proc (the host's, for a shim in a PID namespace
/// that kept the host's mount namespace), falling back to getpid().
pub fn host_pid() -> i32 {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse().ok()))
        .unwrap_or(std::process::id() as i32)
}

/// execv(2) of `program` with `argv` and this process's environment, its signal mask and
/// descriptors as they are (std's `Command` may reset the mask). Returns only on failure.
pub fn exec_as_is(program: &std::ffi::CStr, argv: &[std::ffi::CString]) -> io::Error {
    let mut pointers: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    pointers.push(std::ptr::null());
    // SAFETY: `program` and every argument are NUL-terminated C strings that outlive the
    // call; the array ends with a NULL pointer as execv(3) requires.
    unsafe { libc::execv(program.as_ptr(), pointers.as_ptr()) };
    io::Error::last_os_error()
}

/// execve(2) of `program` with `argv` and `envp`, its signal mask and descriptors as they are.
/// Returns only on failure. (It allocates the pointer arrays: for a forked copy that has run
/// ordinary code already, not a child sharing its parent's memory.)
pub fn exec_with_env(
    program: &std::ffi::CStr,
    argv: &[std::ffi::CString],
    envp: &[std::ffi::CString],
) -> io::Error {
    let pointers = |strings: &[std::ffi::CString]| {
        let mut pointers: Vec<*const libc::c_char> = strings.iter().map(|a| a.as_ptr()).collect();
        pointers.push(std::ptr::null());
        pointers
    };
    let (argv, envp) = (pointers(argv), pointers(envp));
    // SAFETY: `program` and every string are NUL-terminated and outlive the call; both arrays
    // end with a NULL pointer as execve(2) requires.
    unsafe { libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    io::Error::last_os_error()
}

#[cfg(test)]
mod tests;

/// This process's environment as `execve(2)` takes it, but for the variables `leave_out`
/// names (and any that holds a NUL): for keel's own children (workers, relays).
pub fn environment_except(leave_out: &[&str]) -> Vec<std::ffi::CString> {
    std::env::vars_os()
        .filter(|(k, _)| !leave_out.iter().any(|l| k == l))
        .filter_map(|(k, v)| {
            let mut pair = k.into_encoded_bytes();
            pair.push(b'=');
            pair.extend_from_slice(v.as_encoded_bytes());
            std::ffi::CString::new(pair).ok()
        })
        .collect()
}
