use super::*;
use crate::sys::process::{ExecFailure, ExecStage};

fn failure(stage: ExecStage, errno: i32) -> ExecFailure {
    ExecFailure {
        pid: 1,
        stage,
        errno,
        message: Some("cannot mount /proc".into()),
    }
}

#[test]
fn a_sandbox_step_the_host_refuses_is_the_hosts_and_the_agents_own_failures_are_not() {
    for errno in [
        libc::EPERM,
        libc::EACCES,
        libc::ENOSPC,
        libc::ENOMEM,
        libc::EAGAIN,
    ] {
        assert!(
            refused_by_host(&failure(ExecStage::Sandbox, errno)),
            "{errno}"
        );
    }
    // A step of keel's own checks (no errno), a path of the unit's a mount cannot use.
    for errno in [0, libc::ENOENT, libc::ENOTDIR, libc::EINVAL] {
        assert!(
            !refused_by_host(&failure(ExecStage::Sandbox, errno)),
            "{errno}"
        );
    }
    // The agent's program missing or not executable, a bad working directory.
    assert!(!refused_by_host(&failure(ExecStage::Exec, libc::ENOENT)));
    assert!(!refused_by_host(&failure(ExecStage::Exec, libc::EACCES)));
    assert!(!refused_by_host(&failure(ExecStage::Chdir, libc::EACCES)));
}
