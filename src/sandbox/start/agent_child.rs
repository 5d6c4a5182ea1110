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

use super::daemon::{Prepared, TemplateNs};
use crate::sandbox::mounts::template::{AttemptOnTemplate, EnterError};
use crate::sandbox::mounts::{self, Idmap, KernelMounter};
use crate::sandbox::privileges;
use crate::sandbox::spec::CheckoutFiles;
use crate::sys::exec_child::{
    close_on_exec_from_3, new_session, redirect_stdio, report_failure, report_sandbox_failure,
    vfork_child, ExecMemory,
};
use crate::sys::process::{pipe, ExecPlan, ExecStage, ForkedAgent};
use std::convert::Infallible;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::path::PathBuf;

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
    if let Err(errno) = redirect_stdio(stdin, output, output) {
        report_failure(report, ExecStage::Stdio, errno);
    }
    if let Some((prepared, userns)) = sandbox {
        // A panic must not unwind into the supervisor's code in this child.
        let entered =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| prepared.enter(userns)));
        match entered {
            Ok(Ok(())) => {}
            Ok(Err(error)) => report_sandbox_failure(report, error.errno(), &error.to_string()),
            Err(_) => report_sandbox_failure(report, 0, "the sandbox set-up panicked"),
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

impl Prepared {
    /// In the agent's child: the sandbox built on the host's side, then the task's user
    /// namespace `userns` joined and the sandbox's namespaces made in it, then the
    /// privileges (which need the capabilities the mounts used, so they come last).
    ///
    /// With a user namespace, the mounts are made as the host's root in a mount namespace of
    /// the host's (a copy of the template, or of the host's), the task's own files idmapped;
    /// then `enter_user_namespace` copies that namespace into one the task's user namespace
    /// owns — every mount of it locked together (mount_namespaces(7), "Restrictions on mount
    /// namespaces"): the agent cannot unmount a hide to see what is under it, nor make a
    /// read-only mount writable — with the IPC, UTS (and network) namespaces, all owned by
    /// the task's user namespace. Without one, all of them are made with the mounts.
    pub fn enter(&self, userns: Option<BorrowedFd<'_>>) -> Result<(), SandboxSetupError> {
        // The network namespace first, before any mount: the sandbox's sysfs is of it.
        if self.network_none {
            self.enter_network_namespace()?;
        }
        let others = match userns {
            Some(_) => nix::sched::CloneFlags::empty(),
            None => mounts::task_namespaces(),
        };
        match &self.template {
            Some((attempt, ns)) => match ns.enter(attempt, others, userns) {
                Ok(()) => {}
                // The host's view is still ours: the whole plan, as without a template.
                Err(EnterError::Unjoined(_)) => self.build_in_full(others, userns)?,
                Err(EnterError::Failed(message)) => {
                    return Err(SandboxSetupError::OnTemplate(message))
                }
            },
            None => self.build_in_full(others, userns)?,
        }
        if let Some(userns) = userns {
            enter_user_namespace(userns)?;
        }
        privileges::apply(&self.privileges).map_err(SandboxSetupError::Privileges)?;
        // Last: it needs no_new_privs (set just above) and denies the mount calls used before.
        #[cfg(target_arch = "x86_64")]
        crate::sys::seccomp::install_seccomp_filter(self.seccomp)
            .map_err(SandboxSetupError::Seccomp)?;
        Ok(())
    }

    /// The attempt's network namespace, as the daemon made it (owned by the task's user
    /// namespace; for `Allow`, with its routes and the relay's sockets); a new one of the
    /// caller's when none was given (a shim started on its own).
    fn enter_network_namespace(&self) -> Result<(), SandboxSetupError> {
        use nix::sched::CloneFlags;
        match &self.netns {
            Some(ns) => nix::sched::setns(ns, CloneFlags::CLONE_NEWNET),
            None => nix::sched::unshare(CloneFlags::CLONE_NEWNET),
        }
        .map_err(SandboxSetupError::NetworkNamespace)
    }

    /// The whole mount plan, in a mount namespace copied from the caller's (with the task's
    /// `others` namespaces); the task's own files idmapped with `userns` when it has one.
    fn build_in_full(
        &self,
        others: nix::sched::CloneFlags,
        userns: Option<BorrowedFd<'_>>,
    ) -> Result<(), SandboxSetupError> {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS | others).map_err(|error| {
            SandboxSetupError::MountNamespace {
                with_others: !others.is_empty(),
                error,
            }
        })?;
        let mut mounter = KernelMounter::new(&self.layout.new_root);
        if let Some(userns) = userns {
            let userns = userns
                .try_clone_to_owned()
                .map_err(SandboxSetupError::HoldUserNamespace)?;
            mounter = mounter.with_idmap(Idmap {
                userns,
                own: self.own_sources(),
            });
        }
        mounts::build(&self.layout, &self.host_root, &mut mounter)
            .map_err(SandboxSetupError::Mounts)
    }

    /// The host paths of the task's own files, bound idmapped: its work directory (or full
    /// checkout) and git directory, its checkpoint directory and progress file, and the
    /// unit's `sandbox.writable` paths (shared by the operator: the agent's root writes
    /// there as the host's root did before user namespaces).
    fn own_sources(&self) -> Vec<PathBuf> {
        let layout = &self.layout;
        let mut own = vec![
            layout.work_source.clone(),
            layout.checkpoint_source.clone(),
            layout.progress_file.clone(),
        ];
        own.extend(layout.writable.iter().cloned());
        if let Some(checkout) = &layout.checkout {
            own.push(checkout.git_dir.clone());
            // Read-only (the plan's read-only pass, locked in the user namespace): owned by
            // the agent's root there, as they were by uid 0 before, so that objects of a
            // repository made under umask 077 stay readable.
            own.extend(checkout.objects.iter().cloned());
            if let CheckoutFiles::Bind(files) = &checkout.files {
                own.push(files.clone());
            }
        }
        own
    }
}

/// In the agent's child, its sandbox built: join the task's user namespace as its root, and
/// make the sandbox's mount namespace (a copy of the one built, every mount locked), IPC and
/// UTS namespaces (and network, for `network: None`) in it.
fn enter_user_namespace(userns: BorrowedFd<'_>) -> Result<(), SandboxSetupError> {
    crate::sys::userns::enter(userns).map_err(SandboxSetupError::JoinUserNamespace)?;
    let flags = nix::sched::CloneFlags::CLONE_NEWNS | mounts::task_namespaces();
    nix::sched::unshare(flags).map_err(SandboxSetupError::NamespacesInUserNamespace)
}

impl TemplateNs {
    fn enter(
        &self,
        attempt: &AttemptOnTemplate,
        others: nix::sched::CloneFlags,
        userns: Option<BorrowedFd<'_>>,
    ) -> Result<(), EnterError> {
        match self {
            TemplateNs::Template(ns) => attempt.enter(ns.as_fd(), others, userns),
            TemplateNs::PreparedCopy(ns) => attempt.enter_prepared(ns.as_fd(), others, userns),
        }
    }
}

/// A step of the sandbox's set-up in the agent's child that failed. Its message, sent to the
/// shim in the exec report and recorded as the attempt's spawn failure, names the step and
/// says what to fix.
#[derive(Debug)]
pub enum SandboxSetupError {
    /// `unshare(CLONE_NEWNS)` for the whole mount plan (`with_others`: with the task's IPC,
    /// UTS and network namespaces, when it has no user namespace).
    MountNamespace {
        with_others: bool,
        error: nix::errno::Errno,
    },
    /// The task's user namespace could not be held for its idmapped mounts.
    HoldUserNamespace(io::Error),
    /// A step of the mount plan (the error names it and its path).
    Mounts(mounts::SandboxError),
    /// A step on the sandbox template, once joined.
    OnTemplate(String),
    /// `setns` into the task's user namespace.
    JoinUserNamespace(io::Error),
    /// `unshare` of the sandbox's namespaces in the task's user namespace.
    NamespacesInUserNamespace(nix::errno::Errno),
    /// `setns` into the attempt's network namespace (or `unshare` of one).
    NetworkNamespace(nix::errno::Errno),
    /// Capabilities, groups and ids (the error names the step).
    Privileges(privileges::PrivilegeError),
    /// The seccomp filter.
    Seccomp(io::Error),
}

impl SandboxSetupError {
    /// The errno of the call that failed (0: none, a check of keel's own): the shim tells
    /// by it whether the host refused the step (`crate::sandbox::shim::refused_by_host`).
    pub fn errno(&self) -> i32 {
        let io = |e: &io::Error| e.raw_os_error().unwrap_or(0);
        match self {
            SandboxSetupError::MountNamespace { error, .. }
            | SandboxSetupError::NamespacesInUserNamespace(error)
            | SandboxSetupError::NetworkNamespace(error) => *error as i32,
            SandboxSetupError::HoldUserNamespace(e)
            | SandboxSetupError::JoinUserNamespace(e)
            | SandboxSetupError::Seccomp(e) => io(e),
            SandboxSetupError::Mounts(e) => e.io_error().map_or(0, io),
            SandboxSetupError::OnTemplate(_) => 0,
            SandboxSetupError::Privileges(e) => std::error::Error::source(e)
                .and_then(|source| source.downcast_ref::<io::Error>())
                .map_or(0, io),
        }
    }
}

impl std::fmt::Display for SandboxSetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SandboxSetupError::MountNamespace { with_others, error } => write!(
                f,
                "cannot create the task's mount namespace{} (unshare: {error}): run keel as root — namespaces need CAP_SYS_ADMIN",
                if *with_others { " and its IPC, UTS (and network) ones" } else { "" }
            ),
            SandboxSetupError::HoldUserNamespace(e) => {
                write!(f, "cannot hold the task's user namespace: {e}")
            }
            SandboxSetupError::Mounts(e) => e.fmt(f),
            SandboxSetupError::OnTemplate(message) => f.write_str(message),
            SandboxSetupError::JoinUserNamespace(e) => {
                write!(f, "cannot join the task's user namespace: {e}")
            }
            SandboxSetupError::NamespacesInUserNamespace(e) => write!(
                f,
                "cannot create the task's namespaces in its user namespace (unshare: {e})"
            ),
            SandboxSetupError::NetworkNamespace(e) => write!(
                f,
                "cannot enter the task's network namespace ({e}): network namespaces need \
                 CAP_SYS_ADMIN; sandbox.network: Host is the only network that needs none"
            ),
            SandboxSetupError::Privileges(e) => e.fmt(f),
            SandboxSetupError::Seccomp(e) => write!(
                f,
                "cannot install the seccomp filter: {e} (a kernel without CONFIG_SECCOMP_FILTER?)"
            ),
        }
    }
}

#[cfg(test)]
mod tests;
