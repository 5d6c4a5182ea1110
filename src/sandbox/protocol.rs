//! What the processes of a start share, in one place: the descriptor numbers each hands the
//! next, the exit codes of a setup that failed, the shim's command line and environment, and
//! the messages between the daemon and a spare shim.
//!
//! The processes (docs/architecture.md, "The start path"): the daemon resolves the start and
//! clones the process that becomes the shim; that clone (or a spare shim) forks the agent's
//! child, which builds the sandbox and execs the agent; then the clone execs `keel shim`,
//! which takes the agent over. Each of them finds what the one before left at the numbers
//! below:
//!
//! | fd | what | from → to |
//! |---|---|---|
//! | 0, 1, 2 | `/dev/null`, `run/shim.log` twice | daemon → its clone → shim |
//! | [`ATTEMPT_LOCK_FD`] 3 | `run/attempt.lock`, held while the shim lives | daemon → its clone → shim |
//! | [`SPARE_SOCKET_FD`] 3 | a spare's end of its socket, until its task comes | daemon → spare |
//! | [`HANDOFF_OUTPUT_FD`] 4 | the agent's output pipe (read end) | clone → shim |
//! | [`HANDOFF_REPORT_FD`] 5 | the agent's child's exec report (read end) | clone → shim |
//! | [`ID_CLAIM_FD`] 6 | the claim on the task's block of host ids | daemon → clone → shim |
//!
//! The exec report is written by the agent's child and read by the shim
//! (`crate::sys::process::await_exec`: a stage, an errno and, for a sandbox failure, its
//! message; closed without a word when the exec succeeded).

use crate::sandbox::mounts::template::AttemptOnTemplate;
use crate::sandbox::mounts::{RootEntry, SandboxLayout};
use crate::sandbox::privileges::PrivilegePlan;
use crate::sandbox::spec::{AttemptSpec, IdBlock};
use crate::sys::fds::{receive_with_fds, send_with_fds};
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// The descriptor number on which a shim (and the daemon's clone before it) holds its attempt
/// lock. (`crate::sys` spawns with it: defined there, named here.)
pub use crate::sys::ATTEMPT_LOCK_FD;

/// The shim's descriptor of the agent's output pipe (read end), after a handoff.
pub const HANDOFF_OUTPUT_FD: RawFd = 4;
/// The shim's descriptor of the agent's exec report (read end), after a handoff.
pub const HANDOFF_REPORT_FD: RawFd = 5;
/// The shim's descriptor of its task's host-wide claim on its block of host ids (the
/// daemon's open file description: its lock is held while the shim lives, whatever becomes of
/// the daemon; `crate::daemon::id_blocks::claims`). Never the agent's.
pub const ID_CLAIM_FD: RawFd = 6;
/// The spare's end of its socket, from its spawn until its task comes.
pub const SPARE_SOCKET_FD: RawFd = 3;

/// The shim's exit code when it could not start the agent for a reason of its own (as
/// `docker run` uses 125): unreadable spec, no pipe, no log file.
pub const SETUP_FAILURE: i32 = 125;
/// The exit status of the daemon's clone when it could not write the attempt's spec. There is
/// no exit record then; a shim leaves one whenever it ends but with [`SETUP_FAILURE`] (its
/// spec unreadable).
pub const SPEC_NOT_WRITTEN: i32 = 124;

/// The environment a shim is given, and its agent's is made from: the daemon's, without its
/// crash-point hook (`KEEL_CRASH_AT`), which is for the daemon alone.
pub fn shim_env() -> impl Iterator<Item = (OsString, OsString)> {
    shim_env_of(std::env::vars_os())
}

/// [`shim_env`] of the daemon's environment `vars`: without the daemon's crash point, and
/// without the secrets' variables (`crate::secrets::ENV_SOURCE_PREFIX`), which only the
/// daemon and its relays hold.
pub fn shim_env_of(
    vars: impl Iterator<Item = (OsString, OsString)>,
) -> impl Iterator<Item = (OsString, OsString)> {
    vars.filter(|(k, _)| {
        k != "KEEL_CRASH_AT"
            && !k
                .as_encoded_bytes()
                .starts_with(crate::secrets::ENV_SOURCE_PREFIX.as_bytes())
    })
}

/// [`shim_env`] as execve(2) takes it.
pub fn shim_envp() -> Vec<CString> {
    shim_env()
        .filter_map(|(k, v)| {
            let mut pair = k.into_encoded_bytes();
            pair.push(b'=');
            pair.extend(v.into_encoded_bytes());
            CString::new(pair).ok()
        })
        .collect()
}

/// `keel shim --spec SPEC_PATH`: the shim's command line, before what [`Handed::to_args`]
/// appends. `Err` for a path with a NUL byte.
pub fn shim_argv(spec_path: &Path) -> Result<Vec<CString>, std::ffi::NulError> {
    shim_command("--spec", spec_path)
}

/// `keel shim --spare STATE_DIR`: a spare's command line (`ps` then tells whose spare it is).
/// `Err` for a path with a NUL byte.
pub fn spare_argv(state: &Path) -> Result<Vec<CString>, std::ffi::NulError> {
    shim_command("--spare", state)
}

fn shim_command(option: &str, path: &Path) -> Result<Vec<CString>, std::ffi::NulError> {
    let mut argv: Vec<CString> = ["keel", "shim", option]
        .iter()
        .map(|a| CString::new(*a).expect("no NUL"))
        .collect();
    argv.push(CString::new(path.as_os_str().as_encoded_bytes())?);
    Ok(argv)
}

/// What `keel shim` was handed on its command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handed {
    /// The agent was forked (its exec may still be under way): take it over from
    /// [`HANDOFF_OUTPUT_FD`] and [`HANDOFF_REPORT_FD`].
    Agent { pid: i32, started_ms: u64 },
    /// The start failed before the agent existed.
    LaunchError(String),
}

impl Handed {
    /// The arguments that say this after `keel shim --spec FILE` ([`Handed::parse`]).
    pub fn to_args(&self) -> Vec<CString> {
        let arg = |s: String| CString::new(s).unwrap_or_default();
        match self {
            Handed::Agent { pid, started_ms } => vec![
                arg("--agent".into()),
                arg(pid.to_string()),
                arg("--started-ms".into()),
                arg(started_ms.to_string()),
            ],
            Handed::LaunchError(message) => {
                vec![arg("--launch-error".into()), arg(message.clone())]
            }
        }
    }

    /// The agent's pid, when it was started.
    pub fn agent(&self) -> Option<i32> {
        match self {
            Handed::Agent { pid, .. } => Some(*pid),
            Handed::LaunchError(_) => None,
        }
    }

    /// Parse what follows `keel shim --spec FILE`: nothing (the shim starts the agent itself),
    /// `--agent PID --started-ms MS`, or `--launch-error MESSAGE`.
    pub fn parse(rest: &[OsString]) -> Result<Option<Handed>, String> {
        let text: Vec<&str> = rest
            .iter()
            .map(|a| a.to_str().ok_or("non-UTF-8 shim argument"))
            .collect::<Result<_, _>>()?;
        match text.as_slice() {
            [] => Ok(None),
            ["--agent", pid, "--started-ms", started] => Ok(Some(Handed::Agent {
                pid: pid.parse().map_err(|_| format!("bad --agent {pid:?}"))?,
                started_ms: started
                    .parse()
                    .map_err(|_| format!("bad --started-ms {started:?}"))?,
            })),
            ["--launch-error", message] => Ok(Some(Handed::LaunchError(message.to_string()))),
            other => Err(format!("unexpected shim arguments {other:?}")),
        }
    }
}

/// The largest message a spare reads (an attempt's spec and sandbox: a few kB).
pub const MAX_MESSAGE: usize = 256 * 1024;

/// What the daemon asks of a spare.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum Request {
    /// Copy the template (its namespace is the message's descriptor) for starts of its shape.
    Prepare(AttemptOnTemplate),
    /// Say whether the copy is made (`ready`), once the requests before are done. Only on
    /// request: a reply left unread when the daemon closes its end would reset the
    /// connection (unix(7)) under a start sent just before.
    Ping,
    /// Become this attempt's shim.
    Assign(Box<Assignment>),
}

/// An attempt for a spare. Its descriptors, in order: the attempt lock, `run/shim.log`, then
/// the task's v2 cgroup directory, the template's namespace and the task's claim on its host
/// ids when the flags say so.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Assignment {
    pub spec: AttemptSpec,
    pub spec_path: PathBuf,
    pub sandbox: PreparedParts,
    pub cgroup: bool,
    pub template: bool,
    #[serde(default)]
    pub id_claim: bool,
    /// The task's user namespace, as the daemon made it, comes next.
    #[serde(default)]
    pub userns: bool,
    /// The attempt's network namespace, as the daemon made it, comes last.
    #[serde(default)]
    pub netns: bool,
}

/// A resolved sandbox without its descriptors, as the daemon hands it to a spare shim
/// (`crate::sandbox::start::daemon::Prepared::parts`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PreparedParts {
    pub layout: SandboxLayout,
    pub host_root: Vec<RootEntry>,
    pub privileges: PrivilegePlan,
    pub network_none: bool,
    pub template: Option<AttemptOnTemplate>,
    pub home: PathBuf,
    #[serde(default)]
    pub id_block: Option<IdBlock>,
}

/// Send `request` with `fds` (as `SCM_RIGHTS`) on a spare's socket. A request larger than a
/// spare reads is refused here (it would come cut, and the start be lost).
pub fn send_request(socket: BorrowedFd<'_>, request: &Request, fds: &[RawFd]) -> io::Result<()> {
    let bytes = serde_json::to_vec(request).map_err(io::Error::other)?;
    if bytes.len() > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a {} kB request, over {} kB",
                bytes.len() >> 10,
                MAX_MESSAGE >> 10
            ),
        ));
    }
    send_with_fds(socket, &bytes, fds)
}

/// The next request on a spare's socket, with its descriptors; `None` at end-of-file (the
/// daemon dropped the spare, or is gone). `buffer`: [`MAX_MESSAGE`] bytes.
pub fn receive_request(
    socket: BorrowedFd<'_>,
    buffer: &mut [u8],
) -> io::Result<Option<(Request, Vec<OwnedFd>)>> {
    let received = match receive_with_fds(socket, buffer) {
        // The daemon closed its end with a reply unread: what it sent before is still here
        // to read (the error is reported once).
        Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => receive_with_fds(socket, buffer),
        other => other,
    };
    let Some((bytes, fds)) = received? else {
        return Ok(None);
    };
    let request = serde_json::from_slice(&buffer[..bytes])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad request: {e}")))?;
    Ok(Some((request, fds)))
}

#[cfg(test)]
mod tests;
