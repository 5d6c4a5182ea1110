//! The agent's child: the process forked from the shim's (the daemon's clone, a spare, or a
//! shim on its own) that builds the sandbox and execs the agent. It shares its parent's
//! memory until its exec (a vfork-style clone: `crate::sys::exec_child::vfork_child`), and
//! its parent is suspended until then.
//!
//! Its steps, in order: every signal disposition back to default, a new session (the agent
//! leads its own process group), death signal SIGKILL, stdin `/dev/null` and stdout and
//! stderr the output pipe; the sandbox entered ([`Prepared::enter`]: mounts, the task's user
//! namespace, privileges, seccomp); `chdir` to the working directory, every descriptor
//! close-on-exec, an empty signal mask, and `execve` of each PATH candidate in turn. A failure
//! is written to the exec report (a close-on-exec pipe: stage, errno, message) and the child
//! exits; the shim reads it (`crate::sys::process::await_exec`).

use crate::sandbox::prepare::Prepared;
use crate::sys::exec_child::{
    close_on_exec_from_3, new_session, redirect_stdio, report_failure, report_sandbox_failure,
    vfork_child, ExecMemory,
};
use crate::sys::process::{pipe, ExecPlan, ExecStage, ForkedAgent};
use std::convert::Infallible;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

/// The sandbox the agent's child enters, and the task's user namespace (if it has one).
pub type Sandbox<'a> = (&'a Prepared, Option<BorrowedFd<'a>>);

/// Fork the agent's child of `plan`: stdin from `stdin`, stdout and stderr both to `output`,
/// in `sandbox` when the attempt has one. Returns once the child has exec'd or failed;
/// [`crate::sys::process::await_exec`] tells which.
///
/// The caller must be single-threaded. `stdin` and `output` must not be fds 0–2 (see
/// [`crate::sys::process::ensure_stdio_open`]).
pub fn fork_agent(
    plan: &ExecPlan,
    stdin: BorrowedFd<'_>,
    output: BorrowedFd<'_>,
    sandbox: Option<Sandbox<'_>>,
) -> io::Result<ForkedAgent> {
    // Everything the child touches is built here, before the fork.
    let memory = ExecMemory::new(plan);
    let (report_read, report_write) = pipe()?;
    let (stdin, output, report) = (
        stdin.as_raw_fd(),
        output.as_raw_fd(),
        report_write.as_raw_fd(),
    );
    let pid = vfork_child(&mut || -> Infallible { run(&memory, stdin, output, sandbox, report) })?;
    Ok(ForkedAgent {
        pid,
        report: report_read,
    })
}

/// The child's steps (see the module's notes), every signal blocked until just before the
/// exec: none may end it in the middle of the sandbox's allocations in the parent's heap.
fn run(
    memory: &ExecMemory<'_>,
    stdin: RawFd,
    output: RawFd,
    sandbox: Option<Sandbox<'_>>,
    report: RawFd,
) -> ! {
    // SIG_IGN survives exec.
    memory.reset_signal_dispositions();
    if let Err(errno) = new_session() {
        report_failure(report, ExecStage::Session, errno);
    }
    match memory.die_with_parent() {
        Ok(true) => {}
        // The shim died before the death signal was armed.
        Ok(false) => crate::sys::process::exit_now(127),
        Err(errno) => report_failure(report, ExecStage::DeathSignal, errno),
    }
    if let Err(errno) = redirect_stdio(stdin, output) {
        report_failure(report, ExecStage::Stdio, errno);
    }
    if let Some((prepared, userns)) = sandbox {
        // A panic must not unwind into the supervisor's code in this child.
        let entered =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| prepared.enter(userns)));
        match entered {
            Ok(Ok(())) => {}
            Ok(Err(message)) => report_sandbox_failure(report, &message),
            Err(_) => report_sandbox_failure(report, "the sandbox set-up panicked"),
        }
    }
    if let Err(errno) = memory.chdir() {
        report_failure(report, ExecStage::Chdir, errno);
    }
    // No fd of the shim (or leaked into it) reaches the agent.
    close_on_exec_from_3();
    // The agent starts with nothing blocked.
    memory.unblock_signals();
    let errno = memory.exec_candidates();
    report_failure(report, ExecStage::Exec, errno)
}
