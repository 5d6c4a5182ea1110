//! What the shim hands the agent and what it says when the agent cannot start: the agent's
//! environment (the supervisor's own variables removed) and the spawn-failure message.

use crate::sandbox::spec::SETUP_FAILURE;
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
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn environment_drops_supervisor_variables_and_spec_wins() {
        let inherited = vars(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
            ("NOTIFY_SOCKET", "/run/systemd/notify"),
            ("WATCHDOG_USEC", "1000"),
            ("WATCHDOG_PID", "1"),
            ("LISTEN_FDS", "1"),
            ("LISTEN_PID", "1"),
            ("LISTEN_FDNAMES", "x"),
            ("KEEL_STATE_DIR", "/var/lib/keel"),
            ("KEEL_CRASH_AT", "mid-write"),
            ("KEEL_UNIT", "stale"),
            ("RUST_LOG", "warn"),
            ("LISTENER", "kept"),
        ]);
        let spec = vec![
            ("KEEL_UNIT".to_string(), "demo".to_string()),
            ("RUST_LOG".to_string(), "info".to_string()),
            ("X".to_string(), "1".to_string()),
            ("X".to_string(), "2".to_string()),
        ];
        let env = agent_env(inherited, &spec);
        assert_eq!(
            env,
            vars(&[
                ("PATH", "/usr/bin"),
                ("HOME", "/root"),
                ("LISTENER", "kept"),
                ("KEEL_UNIT", "demo"),
                ("RUST_LOG", "info"),
                ("X", "2"),
            ])
        );
    }

    fn failure(stage: ExecStage, errno: i32) -> ExecFailure {
        ExecFailure {
            pid: 10,
            stage,
            errno,
            message: None,
        }
    }

    #[test]
    fn spawn_failures_read_well() {
        let cwd = Path::new("/work");
        let (msg, status) = spawn_failure(
            "claude",
            cwd,
            &failure(ExecStage::Exec, libc::ENOENT),
            false,
        );
        assert_eq!(
            msg,
            "spawn failed: claude: No such file or directory (is it installed and on PATH?)"
        );
        assert_eq!(status, AgentStatus::Exited(127));

        let (msg, status) = spawn_failure(
            "./x.sh",
            cwd,
            &failure(ExecStage::Exec, libc::ENOENT),
            false,
        );
        assert_eq!(msg, "spawn failed: ./x.sh: No such file or directory");
        assert_eq!(status, AgentStatus::Exited(127));

        let (msg, status) =
            spawn_failure("x.sh", cwd, &failure(ExecStage::Exec, libc::ENOENT), true);
        assert!(msg.ends_with("(is the interpreter named on its #! line installed?)"));
        assert_eq!(status, AgentStatus::Exited(126));

        let (msg, status) =
            spawn_failure("tool", cwd, &failure(ExecStage::Exec, libc::EACCES), true);
        assert_eq!(msg, "spawn failed: tool: Permission denied");
        assert_eq!(status, AgentStatus::Exited(126));

        let (msg, _) = spawn_failure("tool", cwd, &failure(ExecStage::Chdir, libc::ENOENT), false);
        assert_eq!(
            msg,
            "cannot enter the working directory \"/work\": No such file or directory"
        );
    }
}
