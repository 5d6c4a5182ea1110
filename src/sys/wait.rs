//! How a child process ended: waitpid(2) and its decoded status.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::io;

/// How a child ended (for keel, the agent): its exit code or the signal that killed it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum AgentStatus {
    Exited(i32),
    Signaled(i32),
}

impl AgentStatus {
    /// The exit code a shell (and tini) would report: the code, or 128 + the signal number.
    pub fn exit_code(self) -> i32 {
        match self {
            AgentStatus::Exited(code) => code,
            AgentStatus::Signaled(signal) => 128 + signal,
        }
    }
    pub fn success(self) -> bool {
        self == AgentStatus::Exited(0)
    }
}

impl fmt::Display for AgentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentStatus::Exited(code) => write!(f, "exit:{code}"),
            AgentStatus::Signaled(signal) => {
                write!(f, "signal:{}", crate::fmt::signal_name(*signal))
            }
        }
    }
}

/// What one `waitpid(-1, WNOHANG)` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaped {
    Child(i32, AgentStatus),
    /// Children exist but none has ended.
    NoneReady,
    /// No children left (ECHILD).
    NoChildren,
}

/// Reap one ended child, any child (orphans reparented to us included), without blocking.
pub fn reap_any() -> io::Result<Reaped> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a valid out pointer for the duration of the call.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid == 0 {
            return Ok(Reaped::NoneReady);
        }
        if pid < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::ECHILD) => return Ok(Reaped::NoChildren),
                Some(libc::EINTR) => continue,
                _ => return Err(err),
            }
        }
        if let Some(decoded) = decode_wait_status(status) {
            return Ok(Reaped::Child(pid, decoded));
        }
    }
}

/// Block until child `pid` has ended and reap it.
pub fn wait_for(pid: i32) -> io::Result<AgentStatus> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a valid out pointer for the duration of the call.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(err);
        }
        if let Some(decoded) = decode_wait_status(status) {
            return Ok(decoded);
        }
    }
}

/// A wait status as exit code or terminating signal (None for stop/continue reports).
pub fn decode_wait_status(status: libc::c_int) -> Option<AgentStatus> {
    if libc::WIFEXITED(status) {
        Some(AgentStatus::Exited(libc::WEXITSTATUS(status)))
    } else if libc::WIFSIGNALED(status) {
        Some(AgentStatus::Signaled(libc::WTERMSIG(status)))
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
