//! The process that becomes the shim, before its exec: the daemon's clone (`clone3`, PID 1 of
//! the task's PID namespace, in the task's cgroup), or a spare shim that took a start
//! ([`crate::sandbox::spare`]), or a shim started on its own. It runs keel's code from the
//! daemon's image: [`launch_for_exec`] keeps only the descriptors the shim needs,
//! [`start_agent`] joins the task's v1 cgroups, becomes a child subreaper, makes the output
//! pipe, gives the checkout's upper layer to the task's ids, makes the task's user namespace
//! if the daemon did not, and forks the agent's child ([`super::agent_child`]); then
//! [`hand_over`] writes the attempt's spec and puts the agent where the shim finds it
//! ([`crate::sandbox::protocol`]), and the process execs `keel shim --spec … --agent …`.
//! The agent's start never waits for a 4 MB binary to load (docs/benchmarks.md, "Start
//! latency").

use super::agent_child::fork_agent;
use super::daemon::{Launch, Prepared};
use crate::sandbox::protocol::{
    Handed, ATTEMPT_LOCK_FD, HANDOFF_OUTPUT_FD, HANDOFF_REPORT_FD, ID_CLAIM_FD, SPEC_NOT_WRITTEN,
};
use crate::sandbox::spec::{AttemptSpec, IdBlock};
use crate::state::now_ms;
use crate::sys::process::{self, ForkedAgent};
use crate::sys::SpawnRequest;
use std::convert::Infallible;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// Clone the process that becomes the task's shim (`clone3(CLONE_PIDFD)`), which starts the
/// agent ([`launch_for_exec`]) and execs `keel shim --spec … --agent …`. Returns its pid and
/// pidfd as soon as `clone3` returned: the agent's start goes on in the clone.
///
/// The clone starts with every signal blocked and puts every disposition back to default
/// before it runs keel's code (the daemon's handlers must never run there: they would wake
/// the daemon's loop with a signal that was not its own), and execs with every signal still
/// blocked: the shim sets its own mask (pending signals are kept across execve(2)). The caller
/// must be single-threaded (the daemon is).
pub fn clone_shim(
    request: &SpawnRequest<'_>,
    launch: &Launch,
    spec: &AttemptSpec,
    spec_path: &Path,
    id_claim: Option<RawFd>,
) -> io::Result<(i32, OwnedFd)> {
    crate::sys::clone3_with_pidfd(
        request.extra_flags,
        request.cgroup_fd,
        request.pid_namespace,
        true,
        &mut || -> Infallible { in_the_clone(request, launch, spec, spec_path, id_claim) },
    )
}

/// A PID namespace owned by the task's user namespace `userns`, for its shim to be PID 1 of
/// (the daemon's clone, or a spare: [`crate::sys::pidns`]). `None` where the kernel cannot
/// make one so (before Linux 6.11: no pidfd ioctl to open it by), said once: the clone then
/// makes one of the host's (`CLONE_NEWPID`), as before user namespaces.
pub fn task_pid_namespace(userns: BorrowedFd<'_>) -> Option<OwnedFd> {
    match crate::sys::pidns::pid_namespace_in(userns) {
        Ok(ns) => Some(ns),
        Err(e) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                log::warn!(
                    "{e}: tasks' PID namespaces are the host's user namespace's (Linux 6.11 makes them the task's)"
                )
            });
            None
        }
    }
}

/// The clone's steps until its exec: stdio, a new session, every inherited descriptor
/// close-on-exec, the attempt lock as fd 3, the daemon's original `RLIMIT_NOFILE`
/// ([`SpawnRequest::set_up_child`]), default dispositions; then the agent's start and the
/// exec of the shim, `request.argv` followed by what the handoff says.
fn in_the_clone(
    request: &SpawnRequest<'_>,
    launch: &Launch,
    spec: &AttemptSpec,
    spec_path: &Path,
    id_claim: Option<RawFd>,
) -> ! {
    if request.set_up_child().is_err() {
        process::exit_now(127);
    }
    process::reset_signal_dispositions(libc::SIGRTMAX(), &[0; 8]);
    let (extra, agent) = launch_for_exec(launch, spec, spec_path, id_claim);
    let mut argv = request.argv.to_vec();
    argv.extend(extra);
    let _ = process::exec_with_env(request.program, &argv, request.envp);
    if let Some(agent) = agent {
        // Nobody would supervise it (in a PID namespace our exit ends it anyway).
        let _ = process::kill_process_group(agent, libc::SIGKILL);
    }
    process::exit_now(127)
}

/// A started agent: its pid and exec report, the read end of its output pipe, and when it
/// started (ms since the epoch).
pub struct Handoff {
    pub agent: ForkedAgent,
    pub output: OwnedFd,
    pub started_ms: u64,
}

/// Fork the agent's child from the calling (single-threaded) process, which becomes its
/// supervisor: it joins the task's v1 cgroups first (hybrid hosts: the agent is confined from
/// its first instruction) and becomes a child subreaper (orphans come back to it). Does not
/// wait for the exec.
pub fn start_agent(launch: &Launch) -> Result<Handoff, StartError> {
    crate::cgroup::join_v1(&launch.v1_procs).map_err(StartError::JoinV1Cgroups)?;
    crate::sys::set_child_subreaper().map_err(StartError::Subreaper)?;
    let (read_end, write_end) = process::pipe().map_err(StartError::OutputPipe)?;
    let dev_null = process::open_dev_null().map_err(StartError::DevNull)?;
    // The daemon's, or made now (a standalone shim, a daemon that could not make one).
    let made = match &launch.sandbox {
        Some(sandbox) if sandbox.user_namespace().is_none() => task_user_namespace(sandbox)?,
        _ => None,
    };
    if let Some(sandbox) = &launch.sandbox {
        give_upper_layer_to_block(sandbox)?;
    }
    let userns_fd = made
        .as_ref()
        .map(|fd| fd.as_fd())
        .or_else(|| launch.sandbox.as_ref().and_then(|s| s.user_namespace()));
    let sandbox = launch.sandbox.as_ref().map(|s| (s, userns_fd));
    let started_ms = now_ms();
    let agent = fork_agent(&launch.plan, dev_null.as_fd(), write_end.as_fd(), sandbox)
        .map_err(StartError::ForkAgent)?;
    // Only the agent (and what it spawns) holds the write end now.
    Ok(Handoff {
        agent,
        output: read_end,
        started_ms,
    })
}

/// The task's user namespace, made now with its block of host ids (`None`: the sandbox has
/// none), and its checkout's upper layer given to that block ([`crate::sandbox::ownership`]).
fn task_user_namespace(sandbox: &Prepared) -> Result<Option<OwnedFd>, StartError> {
    let Some(block) = sandbox.id_block() else {
        return Ok(None);
    };
    crate::sys::userns::create(block.first, block.count)
        .map(Some)
        .map_err(|error| StartError::UserNamespace { block, error })
}

/// The checkout's upper layer given to the task's block ([`crate::sandbox::ownership`]).
fn give_upper_layer_to_block(sandbox: &Prepared) -> Result<(), StartError> {
    let Some(block) = sandbox.id_block() else {
        return Ok(());
    };
    if let Some(upper) = sandbox.upper_layer() {
        let changed = crate::sandbox::ownership::give_tree_to(upper, block).map_err(|error| {
            StartError::UpperLayer {
                path: upper.to_path_buf(),
                first: block.first,
                error,
            }
        })?;
        if changed > 0 {
            eprintln!(
                "keel: the checkout's upper layer {}: {changed} entries given to the task's ids (from {})",
                upper.display(),
                block.first
            );
        }
    }
    Ok(())
}

/// What to change when the kernel refuses a user namespace.
fn userns_hint(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOSPC) => {
            " — the limit of user namespaces is reached: raise `sysctl user.max_user_namespaces`"
                .to_string()
        }
        Some(libc::EPERM) => format!(" — keel needs {}", crate::sys::userns::CAPABILITIES_NEEDED),
        _ => String::new(),
    }
}

/// In the daemon's clone of the shim, before its exec: start the agent, write the attempt's
/// `spec` at `spec_path` (the shim reads it after its exec; written here, it is off the agent's
/// path), and put the agent's handoff where the shim finds it. Returns the arguments to append
/// to `keel shim --spec FILE`, and the agent's pid (to kill if that exec fails). A failure to
/// start is handed over as `--launch-error`: the shim records it as the attempt's setup failure.
/// A spec that cannot be written leaves no shim to become: the agent is killed, the reason goes
/// to `run/shim.log` (this process's stderr), and this process exits with
/// [`SPEC_NOT_WRITTEN`] — the daemon sees a shim that ended without a record.
///
/// `id_claim`: the daemon's descriptor (inherited by this clone) of the task's claim on its
/// block of host ids; the shim keeps it as [`ID_CLAIM_FD`].
pub fn launch_for_exec(
    launch: &Launch,
    spec: &AttemptSpec,
    spec_path: &Path,
    id_claim: Option<RawFd>,
) -> (Vec<CString>, Option<i32>) {
    // Nothing of the daemon's stays open here while the agent starts (its instance lock, its
    // sockets, other tasks' pidfds and claims): only stdio, the attempt lock, the task's own
    // claim, the sandbox template and the task's namespaces.
    let mut keep = vec![ATTEMPT_LOCK_FD];
    keep.extend(launch.template_fd());
    keep.extend(id_claim);
    keep.extend(
        launch
            .sandbox()
            .and_then(|s| s.user_namespace())
            .map(|fd| fd.as_raw_fd()),
    );
    // The attempt's network namespace, which the agent's child joins.
    keep.extend(
        launch
            .sandbox()
            .and_then(|s| s.network_namespace())
            .map(|fd| fd.as_raw_fd()),
    );
    crate::sys::close_fds_except(&keep);
    // The attempt lock and the claim are the shim's alone: not the agent's, even where
    // close_range(2) is not there to close them at the agent's exec. They are handed on
    // across the shim's exec below.
    process::set_cloexec(ATTEMPT_LOCK_FD);
    let id_claim = id_claim.and_then(|fd| match crate::sys::adopt_fd(fd) {
        Ok(claim) => Some(claim),
        Err(e) => {
            eprintln!("keel: the task's claim on its host ids (fd {fd}) is not here: {e}");
            None
        }
    });
    let started = start_agent(launch);
    process::clear_cloexec(ATTEMPT_LOCK_FD);
    let handed = hand_over(started, spec, spec_path, id_claim);
    (handed.to_args(), handed.agent())
}

/// The rest of [`launch_for_exec`] once the agent's start is done (or failed): the spec, then
/// the handoff (the agent's descriptors at [`HANDOFF_OUTPUT_FD`] and [`HANDOFF_REPORT_FD`],
/// the claim on the task's host ids at [`ID_CLAIM_FD`], each open across the shim's exec). A
/// start that failed hands no claim on: nothing of the task's runs.
pub fn hand_over(
    started: Result<Handoff, StartError>,
    spec: &AttemptSpec,
    spec_path: &Path,
    id_claim: Option<OwnedFd>,
) -> Handed {
    // After a power cut the attempt is lost whatever the spec says: no fsync.
    if let Err(e) = crate::state::write_ron_volatile(spec_path, spec) {
        eprintln!("keel: cannot write the attempt spec: {e}: the attempt is abandoned");
        if let Ok(handoff) = &started {
            let _ = process::kill_process_group(handoff.agent.pid, libc::SIGKILL);
        }
        process::exit_now(SPEC_NOT_WRITTEN);
    }
    let handoff = started.and_then(|handoff| {
        let pid = handoff.agent.pid;
        // The child has exec'd or failed by now (fork_agent returns then); its report is left
        // unread for the shim.
        let mut fds = vec![
            (handoff.output, HANDOFF_OUTPUT_FD),
            (handoff.agent.report, HANDOFF_REPORT_FD),
        ];
        fds.extend(id_claim.map(|claim| (claim, ID_CLAIM_FD)));
        crate::sys::install_fds(fds).map_err(StartError::HandOver)?;
        Ok((pid, handoff.started_ms))
    });
    match handoff {
        Ok((pid, started_ms)) => Handed::Agent { pid, started_ms },
        Err(error) => Handed::LaunchError(error.to_string()),
    }
}

/// A step of the agent's start that failed in the process that becomes the shim, before the
/// agent's child existed or while it was handed over. The shim records its message as the
/// attempt's setup failure (`--launch-error`): it names the step and says what to fix.
#[derive(Debug)]
pub enum StartError {
    /// The start could not be resolved (a spare shim resolves what the daemon sent it).
    Resolve(super::daemon::ResolveError),
    /// The task's v2 cgroup (a spare shim joins it; the daemon's clone starts in it).
    JoinCgroup(std::io::Error),
    /// The task's v1 cgroups (hybrid hosts).
    JoinV1Cgroups(crate::cgroup::CgroupError),
    Subreaper(std::io::Error),
    OutputPipe(std::io::Error),
    DevNull(std::io::Error),
    /// The task's user namespace, made here for its block of host ids.
    UserNamespace {
        block: IdBlock,
        error: std::io::Error,
    },
    /// The checkout's upper layer given to the task's ids (`first`…).
    UpperLayer {
        path: PathBuf,
        first: u32,
        error: std::io::Error,
    },
    ForkAgent(std::io::Error),
    /// The agent's descriptors put where the shim finds them.
    HandOver(std::io::Error),
}

impl StartError {
    /// Whether the host refused the start rather than the unit: every step of the clone's is
    /// the host's (a cgroup, a pipe, a namespace, a fork); a start the unit's own values could
    /// not resolve is the unit's unless [`super::daemon::ResolveError::refused_by_host`] says
    /// otherwise.
    pub fn refused_by_host(&self) -> bool {
        match self {
            StartError::Resolve(e) => e.refused_by_host(),
            _ => true,
        }
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Resolve(e) => e.fmt(f),
            StartError::JoinCgroup(e) => write!(f, "cannot join the task's cgroup: {e}"),
            StartError::JoinV1Cgroups(e) => write!(f, "cannot join the task's cgroup: {e}"),
            StartError::Subreaper(e) => write!(f, "cannot become a child subreaper: {e}"),
            StartError::OutputPipe(e) => write!(f, "cannot create the output pipe: {e}"),
            StartError::DevNull(e) => write!(f, "cannot open /dev/null: {e}"),
            StartError::UserNamespace { block, error } => write!(
                f,
                "cannot create the task's user namespace (host ids {}–{}): {error}{}",
                block.first,
                block.first as u64 + block.count as u64 - 1,
                userns_hint(error)
            ),
            StartError::UpperLayer { path, first, error } => write!(
                f,
                "cannot give the checkout's upper layer {} to the task's ids ({first}…): {error}",
                path.display()
            ),
            StartError::ForkAgent(e) => write!(f, "cannot fork the agent: {e}"),
            StartError::HandOver(e) => write!(f, "cannot hand the agent over to the shim: {e}"),
        }
    }
}

#[cfg(test)]
mod tests;
