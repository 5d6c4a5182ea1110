//! What the shim hands the agent and what it says when the agent cannot start: the agent's
//! environment (the supervisor's own variables removed) and the spawn-failure message.

use crate::sandbox::protocol::SETUP_FAILURE;
use crate::sys::process::{ExecFailure, ExecStage};
use crate::sys::wait::AgentStatus;
use nix::errno::Errno;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The agent's environment: the shim's own, minus what belongs to the supervisor (systemd's
/// notify/watchdog/socket-activation variables and every inherited `KEEL_*`), plus the spec's
/// variables (the spec wins; the last of duplicate spec entries wins).
pub fn agent_env<I>(inherited: I, spec_env: &[(String, String)]) -> Vec<(OsString, OsString)>
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    let mut env: Vec<(OsString, OsString)> = inherited
        .into_iter()
        .filter(|(name, _)| !is_supervisor_variable(name))
        .collect();
    for (name, value) in spec_env {
        env.retain(|(existing, _)| existing != name.as_str());
        env.push((name.into(), value.into()));
    }
    env
}

/// Variables of the supervisor's own environment that an agent must not inherit.
pub fn is_supervisor_variable(name: &OsStr) -> bool {
    let name = name.as_bytes();
    name == b"NOTIFY_SOCKET"
        || name.starts_with(b"WATCHDOG_")
        || name.starts_with(b"LISTEN_")
        || name.starts_with(b"KEEL_")
}

/// The message and status for an agent that could not be executed. `found`: a file exists at
/// one of the paths tried (so an ENOENT is about its `#!` interpreter).
pub fn spawn_failure(
    program: &str,
    cwd: &Path,
    failure: &ExecFailure,
    found: bool,
) -> (String, AgentStatus) {
    let reason = Errno::from_raw(failure.errno).desc();
    match failure.stage {
        ExecStage::Exec => {
            let not_found = matches!(failure.errno, libc::ENOENT | libc::ENOTDIR);
            let hint = if !not_found {
                ""
            } else if found {
                " (is the interpreter named on its #! line installed?)"
            } else if program.contains('/') {
                ""
            } else {
                " (is it installed and on PATH?)"
            };
            let code = if not_found && !found { 127 } else { 126 };
            (
                format!("spawn failed: {program}: {reason}{hint}"),
                AgentStatus::Exited(code),
            )
        }
        ExecStage::Chdir => (
            format!(
                "cannot enter the working directory {:?}: {reason}",
                cwd.display().to_string()
            ),
            AgentStatus::Exited(127),
        ),
        ExecStage::Sandbox => (
            format!(
                "sandbox: {}",
                failure.message.as_deref().unwrap_or("setup failed")
            ),
            AgentStatus::Exited(SETUP_FAILURE),
        ),
        stage => (
            format!("cannot start the agent: {}: {reason}", stage.call()),
            AgentStatus::Exited(127),
        ),
    }
}

#[cfg(test)]
mod tests;
