//! Starting an attempt's agent, and handing it to the shim.
//!
//! The daemon clones the shim's process (`clone3`, PID 1 of the task's PID namespace, in the
//! task's cgroup) from its own image and, *before* that process execs `keel shim`, starts the
//! agent's child from it (a vfork-style clone: [`crate::sandbox::start::agent_child`]): the child
//! builds the sandbox and execs the agent, then the shim's exec and set-up (spec, records, log)
//! follow. The agent's start never waits for a 4 MB binary to load (docs/benchmarks.md,
//! "Start latency").
//!
//! The shim takes the agent over from its argv (`--agent PID --started-ms MS`) and three
//! descriptors ([`crate::sandbox::protocol`]): [`HANDOFF_OUTPUT_FD`], the read end of the agent's output pipe, and
//! [`HANDOFF_REPORT_FD`], the read end of the child's exec report (closed without a word when
//! the exec succeeded; see [`crate::sys::process::await_exec`]), and [`ID_CLAIM_FD`], the
//! claim on the task's block of host ids, which it only keeps open. Run on its own
//! (`keel shim --spec FILE`), the shim does the same [`start_agent`] itself.

use crate::sandbox::agent::agent_env;
use crate::sandbox::prepare::{prepare, Prepared};
use crate::sandbox::protocol::{
    Handed, ATTEMPT_LOCK_FD, HANDOFF_OUTPUT_FD, HANDOFF_REPORT_FD, ID_CLAIM_FD, SPEC_NOT_WRITTEN,
};
use crate::sandbox::spec::AttemptSpec;
use crate::sandbox::start::agent_child::fork_agent;
use crate::state::now_ms;
use crate::sys::process::{self, ExecPlan, ForkedAgent};
use std::ffi::{CString, OsString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// Everything the agent's start needs, resolved on the host before any fork: its argv,
/// environment and working directory, and its sandbox (user, `$HOME`, the host's `/`).
pub struct Launch {
    plan: ExecPlan,
    sandbox: Option<Prepared>,
    v1_procs: Vec<PathBuf>,
}

impl Launch {
    /// `inherited`: the environment the agent's is made from (the supervisor's own variables
    /// are removed); the sandbox is the whole mount plan (the daemon's starts may be built on a
    /// template: [`crate::sandbox::templates::resolve_launch`]). Errors say what to fix (an
    /// unknown user, a program path with a NUL).
    pub fn new<I>(spec: &AttemptSpec, inherited: I) -> Result<Launch, String>
    where
        I: IntoIterator<Item = (OsString, OsString)>,
    {
        let sandbox = match &spec.sandbox {
            Some(sandbox) => Some(
                prepare(sandbox, crate::sandbox::mounts::list_host_root)
                    .map_err(|e| format!("sandbox: {e}"))?,
            ),
            None => None,
        };
        Launch::with_sandbox(spec, inherited, sandbox)
    }

    /// [`Launch::new`] with the sandbox resolved already (a spare shim gets it from the
    /// daemon: [`crate::sandbox::spare`]).
    pub fn with_sandbox<I>(
        spec: &AttemptSpec,
        inherited: I,
        sandbox: Option<Prepared>,
    ) -> Result<Launch, String>
    where
        I: IntoIterator<Item = (OsString, OsString)>,
    {
        let mut spec_env = spec.env.clone();
        if let Some(sandbox) = &sandbox {
            // Before the unit's variables: a HOME the unit sets itself wins.
            spec_env.insert(0, ("HOME".into(), sandbox.home.display().to_string()));
        }
        let env = agent_env(inherited, &spec_env);
        let plan = ExecPlan::new(&spec.argv, &env, &spec.cwd)
            .map_err(|e| format!("cannot start the agent: {e}"))?;
        Ok(Launch {
            plan,
            sandbox,
            v1_procs: spec.cgroup_v1_procs.clone(),
        })
    }
}

impl Launch {
    /// The descriptor of the sandbox template this start uses, if any.
    pub fn template_fd(&self) -> Option<RawFd> {
        self.sandbox.as_ref().and_then(|s| s.template_fd())
    }

    /// The resolved sandbox, if the attempt has one.
    pub fn sandbox(&self) -> Option<&Prepared> {
        self.sandbox.as_ref()
    }

    /// The resolved sandbox, to hand it the task's user namespace.
    pub fn sandbox_mut(&mut self) -> Option<&mut Prepared> {
        self.sandbox.as_mut()
    }
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
pub fn start_agent(launch: &Launch) -> Result<Handoff, String> {
    crate::cgroup::join_v1(&launch.v1_procs)
        .map_err(|e| format!("cannot join the task's cgroup: {e}"))?;
    crate::sys::set_child_subreaper()
        .map_err(|e| format!("cannot become a child subreaper: {e}"))?;
    let (read_end, write_end) =
        process::pipe().map_err(|e| format!("cannot create the output pipe: {e}"))?;
    let dev_null = process::open_dev_null().map_err(|e| format!("cannot open /dev/null: {e}"))?;
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
        .map_err(|e| format!("cannot fork the agent: {e}"))?;
    // Only the agent (and what it spawns) holds the write end now.
    Ok(Handoff {
        agent,
        output: read_end,
        started_ms,
    })
}

/// The task's user namespace, made now with its block of host ids (`None`: the sandbox has
/// none), and its checkout's upper layer given to that block ([`crate::sandbox::ownership`]).
fn task_user_namespace(sandbox: &Prepared) -> Result<Option<OwnedFd>, String> {
    let Some(block) = sandbox.id_block() else {
        return Ok(None);
    };
    crate::sys::userns::create(block.first, block.count)
        .map(Some)
        .map_err(|e| {
            format!(
                "cannot create the task's user namespace (host ids {}–{}): {e}{}",
                block.first,
                block.first as u64 + block.count as u64 - 1,
                userns_hint(&e)
            )
        })
}

/// The checkout's upper layer given to the task's block ([`crate::sandbox::ownership`]).
fn give_upper_layer_to_block(sandbox: &Prepared) -> Result<(), String> {
    let Some(block) = sandbox.id_block() else {
        return Ok(());
    };
    if let Some(upper) = sandbox.upper_layer() {
        let changed = crate::sandbox::ownership::give_tree_to(upper, block).map_err(|e| {
            format!(
                "cannot give the checkout's upper layer to the task's ids ({}…): {e}",
                block.first
            )
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
fn userns_hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENOSPC) => {
            " — the limit of user namespaces is reached: raise `sysctl user.max_user_namespaces`"
        }
        Some(libc::EPERM) => " — keel needs CAP_SYS_ADMIN, CAP_SETUID and CAP_SETGID",
        _ => "",
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
    // claim and the sandbox template.
    let mut keep = vec![ATTEMPT_LOCK_FD];
    keep.extend(launch.template_fd());
    keep.extend(id_claim);
    keep.extend(
        launch
            .sandbox()
            .and_then(|s| s.user_namespace())
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
    started: Result<Handoff, String>,
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
        crate::sys::install_fds(fds)
            .map_err(|e| format!("cannot hand the agent over to the shim: {e}"))?;
        Ok((pid, handoff.started_ms))
    });
    match handoff {
        Ok((pid, started_ms)) => Handed::Agent { pid, started_ms },
        Err(message) => Handed::LaunchError(message),
    }
}

/// In the shim: the agent handed over by [`launch_for_exec`]; its descriptors are this
/// process's now (close-on-exec again).
pub fn take_over(pid: i32, started_ms: u64) -> Result<Handoff, String> {
    let adopt = |fd: RawFd| {
        crate::sys::adopt_fd(fd).map_err(|e| format!("no handed-over descriptor {fd}: {e}"))
    };
    Ok(Handoff {
        agent: ForkedAgent {
            pid,
            report: adopt(HANDOFF_REPORT_FD)?,
        },
        output: adopt(HANDOFF_OUTPUT_FD)?,
        started_ms,
    })
}

#[cfg(test)]
mod tests;
