//! Spare shims: the part of a sandboxed start that is not the task's own, done ahead.
//!
//! Half of a sandboxed start happens before anything of the task's is done
//! (docs/benchmarks.md): the daemon's clone3 copies its page tables (~0.3 ms here), and the agent's
//! child joins the sandbox template, copies it and mounts `/proc` and `/dev/pts` (~0.25 ms).
//! A spare is that part made while no start waits: `keel shim --spare STATE_DIR`, cloned as
//! PID 1 of the PID namespace its task will have and exec'd, which copies the template of the
//! daemon's last start into a mount namespace of its own and mounts that PID namespace's
//! `/proc` and `/dev/pts` in it ([`AttemptOnTemplate::prepare_copy`]).
//!
//! A task's PID namespace is owned by the task's user namespace (docs/sandbox.md), and a PID
//! namespace's owner is fixed when it is made, before its PID 1 exists: so a spare is made
//! for one user namespace ([`Spare::spawn`]'s `userns`: a PID namespace made in it by
//! [`crate::sys::pidns::pid_namespace_in`], the spare cloned into it) and serves only starts
//! of the task with that user namespace ([`fits`], by the namespaces' device and inode). The
//! daemon makes it for the task it started last — the one start it knows can come is that
//! task's restart — and a start of another task takes the usual path, leaving the spare; the
//! next replenishment replaces it with one for the task then started last. A task without a
//! user namespace (`user_namespaces: Off`) takes a spare made for none (`CLONE_NEWPID`, a PID
//! namespace of the host's), whatever the task, as every start did before user namespaces.
//!
//! The daemon's next sandboxed start sends the spare the attempt over a `SOCK_SEQPACKET` pair:
//! its spec and its sandbox as the daemon resolved it (JSON), and, as `SCM_RIGHTS`, the
//! attempt lock, `run/shim.log`, the task's cgroup directory, the template's namespace and the
//! task's claim on its host ids. The
//! spare joins the cgroup, starts the agent (on its copy when it is a copy of that template;
//! else as the daemon's clone would) and execs `keel shim --spec …` with the agent handed over,
//! as the daemon's clone does: the spare changes when the work is done, never what is done.
//!
//! The daemon keeps at most one spare, made a moment after a sandboxed start while tasks run
//! ([`crate::sandbox::templates::SandboxTemplates::replenish_spare`]) and dropped (killed)
//! with the templates when none runs, when its task is removed or its task's user namespace
//! is made anew (`SandboxTemplates::user_namespace_gone`). The next sandboxed start of its
//! task takes it whatever its copy is of; a copy of another template, or of the host as it
//! was before a change, is not used ([`AttemptOnTemplate::can_use_copy_of`]). A spare whose daemon is gone reads end-of-file
//! and exits; one that cannot take a start (gone, the message too large) is dropped and the
//! start takes the usual path.

use crate::sandbox::mounts::template::{AttemptOnTemplate, EnterError};
use crate::sandbox::protocol::{
    receive_request, send_request, shim_argv, shim_envp, spare_argv, Assignment, Request,
    ATTEMPT_LOCK_FD, MAX_MESSAGE, SETUP_FAILURE, SPARE_SOCKET_FD,
};
use crate::sandbox::spec::AttemptSpec;
use crate::sandbox::start::clone::{hand_over, start_agent, task_pid_namespace, StartError};
use crate::sandbox::start::daemon::{Launch, Prepared};
use crate::sys::fds::{receive_with_fds, send_with_fds};
use crate::sys::pidns::NamespaceId;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

/// `keel shim --spare`: wait for a task, then be its shim. Returns the process exit code.
pub fn run_spare() -> i32 {
    if let Err(e) = crate::sys::process::ignore_sigpipe() {
        log::warn!("cannot ignore SIGPIPE: {e}");
    }
    let socket = match crate::sys::adopt_fd(SPARE_SOCKET_FD) {
        Ok(socket) => socket,
        Err(e) => {
            log::error!("spare shim: no socket at fd {SPARE_SOCKET_FD}: {e}");
            return SETUP_FAILURE;
        }
    };
    // What every start needs and no task changes, done before there is a task.
    #[cfg(target_arch = "x86_64")]
    crate::sandbox::seccomp::filter();
    crate::sandbox::privileges::last_cap();
    let mut buffer = vec![0u8; MAX_MESSAGE];
    let mut prepared: Option<(AttemptOnTemplate, OwnedFd)> = None;
    loop {
        let (request, fds) = match receive_request(socket.as_fd(), &mut buffer) {
            Ok(Some(received)) => received,
            // The daemon dropped this spare, or is gone.
            Ok(None) => return 0,
            Err(e) => {
                log::error!("spare shim: {e}");
                return SETUP_FAILURE;
            }
        };
        match request {
            Request::Prepare(attempt) => {
                match fds.first().map(|ns| attempt.prepare_copy(ns.as_fd())) {
                    Some(Ok(copy)) => prepared = Some((attempt, copy)),
                    // Starts take the template as they would without a spare.
                    Some(Err(EnterError::Unjoined(why))) => {
                        log::warn!("spare shim: no copy of the sandbox template: {why}")
                    }
                    Some(Err(EnterError::Failed(why))) => {
                        log::error!("spare shim: {why}");
                        return SETUP_FAILURE;
                    }
                    None => log::warn!("spare shim: a template came without its namespace"),
                }
            }
            Request::Ping => {
                let reply = if prepared.is_some() {
                    "ready"
                } else {
                    "unprepared"
                };
                let _ = send_with_fds(socket.as_fd(), reply.as_bytes(), &[]);
            }
            Request::Assign(assignment) => {
                drop(socket);
                return become_shim(*assignment, fds, prepared);
            }
        }
    }
}

/// The attempt's shim from here on: its descriptors where the daemon's clone has them, its
/// cgroup joined, its agent started, its spec written, then `keel shim --spec …` exec'd with
/// the agent handed over (or, should that exec fail, [`crate::sandbox::shim::run`] here).
fn become_shim(
    assignment: Assignment,
    fds: Vec<OwnedFd>,
    prepared: Option<(AttemptOnTemplate, OwnedFd)>,
) -> i32 {
    // Every signal is blocked, from the spare's clone on (`signals_blocked`), until the
    // shim's own mask, as in the daemon's clone: a stop the daemon sends as soon as this start
    // is sent, and the SIGCHLD of an agent that ends before the shim's exec, wait pending (kept
    // across execve(2)) for the shim's signalfd, where unblocked default ones would be lost.
    let mut fds = fds.into_iter();
    let (Some(lock), Some(shim_log)) = (fds.next(), fds.next()) else {
        log::error!("spare shim: an attempt came without its descriptors");
        return SETUP_FAILURE;
    };
    let cgroup = if assignment.cgroup { fds.next() } else { None };
    let template = if assignment.template {
        fds.next()
    } else {
        None
    };
    // Close-on-exec (received so) while the agent starts; the shim keeps it (hand_over).
    let id_claim = if assignment.id_claim {
        fds.next()
    } else {
        None
    };
    let userns = if assignment.userns { fds.next() } else { None };
    let netns = if assignment.netns { fds.next() } else { None };
    let installed = shim_log.try_clone().and_then(|stderr| {
        crate::sys::install_fds(vec![(shim_log, 1), (stderr, 2), (lock, ATTEMPT_LOCK_FD)])
    });
    crate::logger::stderr_replaced();
    if let Err(e) = installed {
        // Without its lock and log this cannot be the attempt's shim: the daemon sees a
        // shim that ended without a record.
        log::error!("spare shim: cannot take the attempt's descriptors: {e}");
        return SETUP_FAILURE;
    }
    let Assignment {
        spec,
        spec_path,
        sandbox,
        ..
    } = assignment;
    let mut sandbox = Prepared::from_parts(sandbox, template, prepared, userns);
    if let Some(netns) = netns {
        sandbox.hold_network_namespace(netns);
    }
    let built = if sandbox.on_prepared_copy() {
        "on the copy it prepared"
    } else if sandbox.template_fd().is_some() {
        "on the template"
    } else {
        "in full"
    };
    let started = join_cgroup(cgroup.as_ref())
        .and_then(|()| {
            Launch::with_sandbox(&spec, std::env::vars_os(), Some(sandbox))
                .map_err(StartError::Resolve)
        })
        .and_then(|launch| {
            // The lock is the shim's alone, never the agent's.
            crate::sys::process::set_cloexec(ATTEMPT_LOCK_FD);
            start_agent(&launch)
        });
    drop(cgroup);
    let handed = hand_over(started, &spec, &spec_path, id_claim);
    log::info!(
        "spare shim took attempt {} of {} (its sandbox built {built})",
        spec.attempt,
        spec.unit
    );
    // Now the agent runs, the shim proper, as the daemon's clone execs it: `keel shim --spec
    // …` in `ps` like every other, on a fresh image. The lock goes with it as fd 3.
    // Signals stay blocked across the exec: those that came meanwhile wait for the shim.
    crate::sys::process::clear_cloexec(ATTEMPT_LOCK_FD);
    // The daemon opened files under this path: it has no NUL.
    let mut argv = shim_argv(&spec_path).unwrap_or_default();
    argv.extend(handed.to_args());
    let error = crate::sys::process::exec_as_is(c"/proc/self/exe", &argv);
    // The same shim, without the fresh image.
    log::warn!("spare shim: cannot exec keel shim ({error}): supervising from here");
    crate::sandbox::shim::run(&spec_path, Some(handed))
}

/// Join the task's v2 cgroup (`dir`): what `CLONE_INTO_CGROUP` does for the daemon's clone.
fn join_cgroup(dir: Option<&OwnedFd>) -> Result<(), StartError> {
    let Some(dir) = dir else { return Ok(()) };
    // /proc is the host's here: "self" is this process, whatever its PID namespace.
    let procs = format!("/proc/self/fd/{}/cgroup.procs", dir.as_raw_fd());
    std::fs::write(&procs, "0").map_err(StartError::JoinCgroup)
}

/// The daemon's handle of a spare shim (its child).
pub struct Spare {
    pid: i32,
    /// `None` once the spare took a start (its pidfd went with it).
    pidfd: Option<OwnedFd>,
    socket: OwnedFd,
    /// It was asked to copy a template.
    copying: bool,
    /// The user namespace that owns its PID namespace: only a start of the task with this
    /// user namespace may take it (`None`: a PID namespace of the host's, for a task
    /// without one).
    user_namespace: Option<NamespaceId>,
}

impl Spare {
    /// Spawn a spare from `keel` (this binary, or a benchmark's) with the daemon's original
    /// `nofile` limit, and ask it to copy `template` (a template's attempt and namespace).
    /// `userns`: the user namespace of the task it is for, which owns its PID namespace
    /// (`None`: for a task without one; a PID namespace of the host's).
    /// `state`: the daemon's state directory, in the spare's command line (`ps` then tells
    /// whose spare it is, and whose shim once it took a start).
    pub fn spawn(
        keel: &Path,
        nofile: Option<(u64, u64)>,
        state: &Path,
        template: Option<(&AttemptOnTemplate, BorrowedFd<'_>)>,
        userns: Option<BorrowedFd<'_>>,
    ) -> io::Result<Spare> {
        let nul = |_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path");
        // PID 1 of a PID namespace of the task's user namespace (crate::sys::pidns), or,
        // for a task without one, of a new one of the host's (CLONE_NEWPID), as the
        // daemon's clone would be.
        // Keyed by the task's user namespace even where the kernel cannot make its PID
        // namespace so (the daemon's clone would then make one of the host's, as this does).
        let user_namespace = userns.map(NamespaceId::of).transpose()?;
        let pid_namespace = userns.and_then(task_pid_namespace);
        let (ours, theirs) = crate::sys::fds::seqpacket_pair()?;
        let devnull = std::fs::File::open("/dev/null")?;
        let program = CString::new(keel.as_os_str().as_encoded_bytes()).map_err(nul)?;
        let argv = spare_argv(state).map_err(nul)?;
        let envp = shim_envp();
        let request = crate::sys::SpawnRequest {
            program: &program,
            argv: &argv,
            envp: &envp,
            stdin: devnull.as_raw_fd(),
            stdout: devnull.as_raw_fd(),
            // The daemon's own, until the spare takes a start (then run/shim.log): what goes
            // wrong before is the daemon's to log. A spare ends with its daemon, so it never
            // holds a pipe the daemon left.
            stderr: libc::STDERR_FILENO,
            extra_flags: match pid_namespace {
                Some(_) => 0,
                None => libc::CLONE_NEWPID as u64,
            },
            pid_namespace: pid_namespace.as_ref().map(|ns| ns.as_fd()),
            cgroup_fd: None,
            keep_as_fd3: Some(theirs.as_raw_fd()),
            keep_fds: &[],
            nofile,
            signals_blocked: true,
        };
        let (pid, pidfd) = crate::sys::spawn_with_pidfd(&request)?;
        let mut spare = Spare {
            pid,
            pidfd: Some(pidfd),
            socket: ours,
            copying: false,
            user_namespace,
        };
        if let Some((attempt, ns)) = template {
            spare.send(&Request::Prepare(attempt.clone()), &[ns.as_raw_fd()])?;
            spare.copying = true;
        }
        Ok(spare)
    }

    /// Whether the spare is still there (its pidfd is readable once it has ended).
    pub fn alive(&self) -> bool {
        self.pidfd.as_ref().is_some_and(|pidfd| {
            !crate::sys::fds::wait_readable(pidfd.as_fd(), Some(Duration::ZERO))
        })
    }

    /// Whether the spare was asked to copy a template (there was one to copy).
    pub fn copying(&self) -> bool {
        self.copying
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The user namespace owning the spare's PID namespace (`None`: the host's).
    pub fn user_namespace(&self) -> Option<NamespaceId> {
        self.user_namespace
    }

    /// Whether a start of the task whose user namespace is `task` (`None`: it has none) may
    /// take this spare: its PID namespace must be owned by that very user namespace.
    pub fn fits(&self, task: Option<NamespaceId>) -> bool {
        fits(self.user_namespace, task)
    }

    /// Wait up to `timeout` for the spare to have made its copy: `Some("ready")`, or
    /// `Some("unprepared")` (it has none); `None` when it said nothing in time.
    pub fn wait_ready(&self, timeout: Duration) -> Option<String> {
        self.send(&Request::Ping, &[]).ok()?;
        if !crate::sys::fds::wait_readable(self.socket.as_fd(), Some(timeout)) {
            return None;
        }
        let mut buffer = [0u8; 4096];
        match receive_with_fds(self.socket.as_fd(), &mut buffer) {
            Ok(Some((bytes, _))) => Some(String::from_utf8_lossy(&buffer[..bytes]).into_owned()),
            _ => None,
        }
    }

    /// Hand the spare an attempt: `launch` as the daemon resolved it, the attempt `lock`, the
    /// shim's log, the task's v2 `cgroup`, the task's claim on its host ids. Returns the
    /// shim's pid and pidfd, as a spawn does; an error when the spare could not take it (it is
    /// killed then: start the usual way).
    #[allow(clippy::too_many_arguments)]
    pub fn assign(
        mut self,
        spec: &AttemptSpec,
        spec_path: &Path,
        launch: &Launch,
        lock: BorrowedFd<'_>,
        shim_log: BorrowedFd<'_>,
        cgroup: Option<BorrowedFd<'_>>,
        id_claim: Option<BorrowedFd<'_>>,
    ) -> io::Result<(i32, OwnedFd)> {
        let sandbox = launch
            .sandbox()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no sandbox"))?;
        let template = launch.template_fd();
        let userns = sandbox.user_namespace().map(|fd| fd.as_raw_fd());
        let netns = sandbox.network_namespace().map(|fd| fd.as_raw_fd());
        let mut fds = vec![lock.as_raw_fd(), shim_log.as_raw_fd()];
        fds.extend(cgroup.map(|fd| fd.as_raw_fd()));
        fds.extend(template);
        fds.extend(id_claim.map(|fd| fd.as_raw_fd()));
        fds.extend(userns);
        fds.extend(netns);
        let assignment = Assignment {
            spec: spec.clone(),
            spec_path: spec_path.to_path_buf(),
            sandbox: sandbox.parts(),
            cgroup: cgroup.is_some(),
            template: template.is_some(),
            id_claim: id_claim.is_some(),
            userns: userns.is_some(),
            netns: netns.is_some(),
        };
        self.send(&Request::Assign(Box::new(assignment)), &fds)?;
        let pidfd = self.pidfd.take().expect("a spare not yet assigned");
        Ok((self.pid, pidfd))
    }

    /// A request too large for the spare is refused: the start takes the usual path.
    fn send(&self, request: &Request, fds: &[RawFd]) -> io::Result<()> {
        send_request(self.socket.as_fd(), request, fds)
    }
}

impl Drop for Spare {
    /// An unassigned spare is killed (through its pidfd: no pid-reuse race) and reaped if it
    /// is gone already; the daemon's reaper takes it otherwise (a kill in the middle of a
    /// mount on a hung filesystem must not hold the daemon up).
    fn drop(&mut self) {
        if let Some(pidfd) = &self.pidfd {
            let _ = crate::sys::pidfd_send_signal(pidfd, libc::SIGKILL);
            let _ = nix::sys::wait::waitid(
                nix::sys::wait::Id::PIDFd(pidfd.as_fd()),
                nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOHANG,
            );
        }
    }
}

/// The spare-keying decision: a spare made for the user namespace `spare` serves a start of
/// the task whose user namespace is `task`, and no other (`None` for both: neither has one;
/// such a spare is as any before user namespaces). A PID namespace's owner is fixed when it
/// is made, and the spare is its PID 1 before it knows its task.
pub fn fits(spare: Option<NamespaceId>, task: Option<NamespaceId>) -> bool {
    spare == task
}

#[cfg(test)]
mod tests;
