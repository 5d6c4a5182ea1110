//! `keel shim --spec tasks/<unit>/run/attempt.ron`: the process between the daemon and one
//! attempt of an agent.
//!
//! It starts the agent, captures its stdout and stderr (one pipe, so their interleaving is
//! kept) into `run/output.log`, forwards signals to the agent's process group, reaps every
//! process reparented to it, and writes `run/exit.ron` when the agent ends. It owns the task's
//! data path, so a daemon crash or restart neither blocks nor kills the agent: nothing here
//! depends on the daemon after the spawn (no death signal on the shim, SIGPIPE ignored).
//!
//! The protocol with the daemon (files in `run/`, fencing by generation) is in
//! [`crate::sandbox::spec`].

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::SigSet;
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::fmt::signal_name;
use crate::sandbox::agent::{agent_env, spawn_failure};
use crate::sandbox::logs::LogWriter;
use crate::sandbox::protocol::{
    Handed, ATTEMPT_LOCK_FD, HANDOFF_OUTPUT_FD, HANDOFF_REPORT_FD, ID_CLAIM_FD, SETUP_FAILURE,
};
use crate::sandbox::spec::{
    exit_record_path, kill_request_signal, shim_record_path, AttemptSpec, ExitRecord, ShimRecord,
};
use crate::sandbox::start::clone::{start_agent, Handoff, StartError};
use crate::sandbox::start::daemon::Launch;
use crate::state::{now_ms, read_ron, write_ron};
use crate::sys::process::{self, ExecPlan, ForkedAgent};
use crate::sys::wait::{reap_any, AgentStatus, Reaped};
use std::os::fd::RawFd;

/// Signals forwarded to the agent's process group as they are: the contract with the daemon,
/// which refuses to send any other.
const FORWARDED: [i32; 8] = crate::sandbox::spec::FORWARDED_SIGNALS;

/// Size of the one read buffer for the agent's output.
const READ_BUFFER: usize = 64 * 1024;
/// Reads per wake-up before signals get a look-in again (the pipe stays drained quickly).
const READS_PER_WAKE: usize = 64;
/// Pipe capacity asked for: fewer stalls of a chatty agent between two reads.
const PIPE_CAPACITY: i32 = 1024 * 1024;

/// Run the shim for the attempt described at `spec_path`; returns the process exit code:
/// the agent's (`code`, or 128 + signal), 126/127 when it could not be executed, 125 when the
/// shim itself could not set up.
///
/// `handed`: the agent the daemon's clone of this process already started (see
/// [`crate::sandbox::start::clone`]); `None` to start it here.
pub fn run(spec_path: &Path, handed: Option<Handed>) -> i32 {
    install_logger();
    // Before anything else: a closed stderr (the daemon's end gone) must not kill us, and no
    // fd we open may land on 0–2.
    if let Err(e) = process::ignore_sigpipe() {
        log::warn!("cannot ignore SIGPIPE: {e}");
    }
    if let Err(e) = process::ensure_stdio_open() {
        log::warn!("cannot open /dev/null for closed stdio: {e}");
    }
    // Block the handled signals at once: one that comes during setup (a stop request, say)
    // then waits in the signalfd and is forwarded to the agent instead of killing the shim.
    let mut handled = vec![libc::SIGCHLD, kill_request_signal()];
    handled.extend_from_slice(&FORWARDED);
    let blocked = process::signal_set(&handled).and_then(|set| {
        process::set_signal_mask(&set)?;
        Ok(set)
    });
    let spec: AttemptSpec = match read_ron(spec_path) {
        Ok(Some(spec)) => spec,
        Ok(None) => {
            return setup_failure(
                None,
                format!(
                    "cannot read the attempt spec {}: no such file",
                    spec_path.display()
                ),
            )
        }
        Err(e) => return setup_failure(None, format!("cannot read the attempt spec: {e}")),
    };
    let blocked = match blocked {
        Ok(set) => set,
        Err(e) => {
            return setup_failure(Some(&spec), format!("cannot block signals: {e}"));
        }
    };
    match start(&spec, &blocked, handed) {
        Ok(mut shim) => {
            shim.supervise();
            shim.finish()
        }
        Err(code) => code,
    }
}

/// A started attempt: the agent runs, the shim watches.
struct Shim<'a> {
    spec: &'a AttemptSpec,
    log: LogWriter,
    signals: SignalFd,
    /// Read end of the agent's stdout+stderr pipe; None once it reached EOF.
    output: Option<OwnedFd>,
    pipe_capacity: usize,
    agent: i32,
    started_ms: u64,
    buffer: Vec<u8>,
    ended: Option<(AgentStatus, u64)>,
    orphans_reaped: u64,
    /// The shim is PID 1 of the task's PID namespace (its sandbox).
    pid_namespace_init: bool,
}

/// Steps 1–3: records, reaper, signalfd (for the `handled` signals, blocked already), log,
/// the agent (started here, or taken over). `Err(exit code)` when the agent could not be
/// started (the exit record is written by then).
fn start<'a>(
    spec: &'a AttemptSpec,
    handled: &SigSet,
    handed: Option<Handed>,
) -> Result<Shim<'a>, i32> {
    let fail = |message: String| setup_failure(Some(spec), message);
    if let Some(Handed::LaunchError(message)) = handed {
        return Err(fail(message));
    }
    if let Some(message) = test_refuses_start() {
        return Err(fail(message));
    }
    // The attempt lock the daemon handed over as fd 3 stays with the shim alone: close-on-exec,
    // so no agent (nor anything it daemonizes) can keep the lock after the shim is gone,
    // whatever the kernel's close_range support.
    process::set_cloexec(ATTEMPT_LOCK_FD);
    // So does the claim on the task's host ids (fd 6, when the daemon had one), if it is open.
    process::set_cloexec(ID_CLAIM_FD);
    // Our pid as the host sees it (the daemon records it): /proc here is the host's, and in a
    // PID namespace getpid() would say 1.
    let pid = process::host_pid();
    let record = ShimRecord {
        generation: spec.generation,
        pid,
        start_time: crate::sys::process_start_time(pid)
            .map_err(|e| fail(format!("cannot read this process's start time: {e}")))?,
        boot_id: crate::sys::boot_id(),
    };
    // Read by a daemon only while this shim holds the attempt lock, i.e. is alive.
    crate::state::write_ron_volatile(&shim_record_path(&spec.run_dir), &record)
        .map_err(|e| fail(format!("cannot write the shim record: {e}")))?;
    crate::sys::set_child_subreaper()
        .map_err(|e| fail(format!("cannot become a child subreaper: {e}")))?;
    remove_stale_exit_record(spec);

    let signals = SignalFd::with_flags(handled, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| fail(format!("cannot create a signalfd: {e}")))?;

    let mut log =
        LogWriter::open(&spec.run_dir, spec.log_max_bytes, spec.log_keep).map_err(|e| {
            fail(format!(
                "cannot open the output log in {}: {e}",
                spec.run_dir.display()
            ))
        })?;
    let handoff = match handed {
        Some(Handed::Agent { pid, started_ms }) => take_over(pid, started_ms).map_err(fail)?,
        // Started on its own (`keel shim --spec`, tests): the same start, here.
        _ => Launch::new(spec, std::env::vars_os())
            .map_err(StartError::Resolve)
            .and_then(|launch| start_agent(&launch))
            .map_err(|e| failure(Some(spec), e.to_string(), e.refused_by_host()))?,
    };
    let Handoff {
        agent,
        output: read_end,
        started_ms,
    } = handoff;
    process::set_nonblocking(read_end.as_fd())
        .map_err(|e| fail(format!("cannot make the output pipe non-blocking: {e}")))?;
    let pipe_capacity = process::grow_pipe(read_end.as_fd(), PIPE_CAPACITY);
    let agent = match process::await_exec(agent) {
        Ok(pid) => pid,
        Err(failure) => {
            let env = agent_env(std::env::vars_os(), &spec.env);
            let found = ExecPlan::new(&spec.argv, &env, &spec.cwd)
                .map(|plan| plan.candidates().iter().any(|c| spec.cwd.join(c).is_file()))
                .unwrap_or(false);
            let (message, status) = spawn_failure(&spec.argv[0], &spec.cwd, &failure, found);
            log::error!("{message}");
            log.write(format!("[keel: {message}]\n").as_bytes());
            write_exit_record(
                spec,
                status,
                failure.pid,
                (started_ms, now_ms()),
                Some(message),
                refused_by_host(&failure),
            );
            return Err(status.exit_code());
        }
    };
    log::info!(
        "started agent pid {agent}: {:?} (unit {}, attempt {}, generation {})",
        spec.argv[0],
        spec.unit,
        spec.attempt,
        spec.generation
    );
    Ok(Shim {
        spec,
        log,
        signals,
        output: Some(read_end),
        pipe_capacity,
        agent,
        started_ms,
        buffer: vec![0; READ_BUFFER],
        ended: None,
        orphans_reaped: 0,
        pid_namespace_init: std::process::id() == 1,
    })
}

impl Shim<'_> {
    /// Step 4: until the agent has been reaped, copy output and handle signals.
    fn supervise(&mut self) {
        while self.ended.is_none() {
            let (signal_ready, output_ready) = self.wait();
            if output_ready {
                self.pump(READS_PER_WAKE);
            }
            if signal_ready {
                self.handle_signals();
            }
        }
        // The attempt is over: nothing of it may run on beside the next one. What is left of
        // the agent's process group (a child that ignored the stop signal) is killed here; in
        // a PID namespace everything else dies with the shim, its PID 1.
        match process::kill_process_group(self.agent, libc::SIGKILL) {
            Ok(()) => log::info!("killed what was left of process group {}", self.agent),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => log::warn!("cannot kill process group {}: {e}", self.agent),
        }
        // Step 5: what the agent wrote before it ended is in the pipe now; orphans may keep
        // the write end open, so read what is there and stop at EAGAIN (or EOF).
        let limit = self.pipe_capacity.max(READ_BUFFER) * 2 / READ_BUFFER + 1;
        self.pump(limit);
    }

    /// Block until the signalfd or the pipe is ready: (signals, output).
    fn wait(&mut self) -> (bool, bool) {
        let readable = PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR;
        let mut fds = vec![PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
        if let Some(output) = &self.output {
            fds.push(PollFd::new(output.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {
                let ready = |fd: &PollFd| fd.revents().is_some_and(|r| r.intersects(readable));
                (ready(&fds[0]), fds.get(1).is_some_and(ready))
            }
            Err(Errno::EINTR) => (false, false),
            Err(e) => {
                log::warn!("poll: {e}");
                std::thread::sleep(std::time::Duration::from_millis(50));
                (true, true)
            }
        }
    }

    /// Copy up to `reads` buffers from the pipe to the log; stops at EAGAIN or EOF.
    fn pump(&mut self, reads: usize) {
        for _ in 0..reads {
            let Some(output) = &self.output else { return };
            match nix::unistd::read(output.as_fd(), &mut self.buffer) {
                Ok(0) => {
                    log::debug!("output pipe closed by every writer");
                    self.output = None;
                    return;
                }
                Ok(n) => self.log.write(&self.buffer[..n]),
                Err(Errno::EAGAIN) => return,
                Err(Errno::EINTR) => {}
                Err(e) => {
                    log::warn!("reading the agent's output: {e}; no more output is captured");
                    self.output = None;
                    return;
                }
            }
        }
    }

    fn handle_signals(&mut self) {
        let mut reap = false;
        loop {
            match self.signals.read_signal() {
                Ok(Some(info)) => {
                    let signal = info.ssi_signo as i32;
                    if signal == libc::SIGCHLD {
                        reap = true;
                    } else if self.pid_namespace_init && info.ssi_pid != 0 {
                        // Sent from inside the task's own PID namespace (the agent signalling
                        // PID 1): only keel, outside it (seen as pid 0), may stop or kill.
                        log::warn!(
                            "ignored {} sent by pid {} inside the sandbox",
                            signal_name(signal),
                            info.ssi_pid
                        );
                    } else {
                        self.forward(signal);
                    }
                }
                Ok(None) => break,
                Err(Errno::EINTR) => {}
                Err(e) => {
                    log::warn!("reading signals: {e}");
                    reap = true;
                    break;
                }
            }
        }
        if reap {
            self.reap();
        }
    }

    /// Pass a signal to the agent's process group; the kill request becomes SIGKILL.
    fn forward(&mut self, signal: i32) {
        if self.ended.is_some() {
            return;
        }
        let sent = if signal == kill_request_signal() {
            log::info!(
                "kill requested: SIGKILL to the agent's process group {}",
                self.agent
            );
            libc::SIGKILL
        } else {
            log::info!(
                "forwarding {} to the agent's process group {}",
                signal_name(signal),
                self.agent
            );
            signal
        };
        if let Err(e) = process::kill_process_group(self.agent, sent) {
            if e.raw_os_error() == Some(libc::ESRCH) {
                log::debug!("process group {} is gone", self.agent);
            } else {
                log::warn!("cannot signal process group {}: {e}", self.agent);
            }
        }
    }

    /// Reap every ended child: the agent (remember its status) and any orphan.
    fn reap(&mut self) {
        loop {
            match reap_any() {
                Ok(Reaped::Child(pid, status)) if pid == self.agent => {
                    log::debug!("agent pid {pid} ended: {status}");
                    self.ended = Some((status, now_ms()));
                }
                Ok(Reaped::Child(pid, status)) => {
                    self.orphans_reaped += 1;
                    log::debug!("reaped orphan pid {pid}: {status}");
                }
                Ok(Reaped::NoneReady) | Ok(Reaped::NoChildren) => return,
                Err(e) => {
                    log::warn!("waitpid: {e}");
                    return;
                }
            }
        }
    }

    /// Step 5: the exit record, one log line, the exit code.
    fn finish(self) -> i32 {
        let Some((status, ended_ms)) = self.ended else {
            return SETUP_FAILURE;
        };
        let dropped = self.log.dropped_bytes();
        let recorded = write_exit_record(
            self.spec,
            status,
            self.agent,
            (self.started_ms, ended_ms),
            None,
            false,
        );
        let note = if recorded {
            ""
        } else {
            " (exit record NOT written)"
        };
        log::info!(
            "agent pid {} ended: {status} after {} ms; {} orphan(s) reaped{}{}",
            self.agent,
            ended_ms.saturating_sub(self.started_ms),
            self.orphans_reaped,
            if dropped > 0 {
                format!("; {dropped} bytes of output dropped")
            } else {
                String::new()
            },
            note,
        );
        status.exit_code()
    }
}

/// An exit record of an older generation must not be read as this attempt's result.
fn remove_stale_exit_record(spec: &AttemptSpec) {
    let path = exit_record_path(&spec.run_dir);
    match read_ron::<ExitRecord>(&path) {
        Ok(None) => {}
        Ok(Some(old)) if old.generation > spec.generation => log::warn!(
            "{} is from generation {}, newer than ours ({}); left alone",
            path.display(),
            old.generation,
            spec.generation
        ),
        found => {
            let what = match found {
                Ok(Some(old)) => format!("of generation {}", old.generation),
                _ => "(unreadable)".to_string(),
            };
            match std::fs::remove_file(&path) {
                Ok(()) => log::info!("removed stale exit record {what}"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => log::warn!("cannot remove stale exit record {what}: {e}"),
            }
        }
    }
}

/// Write `run/exit.ron`; false (logged) when it cannot be written.
fn write_exit_record(
    spec: &AttemptSpec,
    status: AgentStatus,
    agent_pid: i32,
    (started_ms, ended_ms): (u64, u64),
    spawn_error: Option<String>,
    host_refused: bool,
) -> bool {
    let record = ExitRecord {
        generation: spec.generation,
        attempt: spec.attempt,
        status,
        agent_pid,
        started_ms,
        ended_ms,
        spawn_error,
        host_refused,
    };
    match write_ron(&exit_record_path(&spec.run_dir), &record) {
        Ok(()) => true,
        Err(e) => {
            log::error!("cannot write the exit record: {e}");
            false
        }
    }
}

/// The shim could not do its own job: say why, record it where possible, exit 125. Its own
/// set-up (its records, a signalfd, the output log, what the daemon's clone did before it:
/// cgroups, a pipe, a fork) is the host's: recorded as refused by the host, so that the
/// daemon does not spend the task's restart budget on it.
fn setup_failure(spec: Option<&AttemptSpec>, message: String) -> i32 {
    failure(spec, message, true)
}

/// [`setup_failure`] whose blame is given: `host_refused` false for the unit's own mistake
/// (a `sandbox.writable` that would give away keel's state, a command with a NUL byte), which
/// spends the restart budget like any failed start.
fn failure(spec: Option<&AttemptSpec>, message: String, host_refused: bool) -> i32 {
    log::error!("{message}");
    if let Some(spec) = spec {
        let now = now_ms();
        write_exit_record(
            spec,
            AgentStatus::Exited(SETUP_FAILURE),
            0,
            (now, now),
            Some(message),
            host_refused,
        );
    }
    SETUP_FAILURE
}

/// Test hook (docs/testing.md): `KEEL_TEST_SHIM_REFUSE_WHILE=PATH`: while PATH exists, the
/// shim's own set-up fails, as on a host that refuses it (the agent, forked already, dies
/// with the shim's PID namespace).
fn test_refuses_start() -> Option<String> {
    let path = std::env::var_os("KEEL_TEST_SHIM_REFUSE_WHILE")?;
    Path::new(&path)
        .exists()
        .then(|| "the shim's set-up refused by the test hook KEEL_TEST_SHIM_REFUSE_WHILE".into())
}

/// Whether the agent's child failed for a reason of the host's: a sandbox step the kernel
/// refused for want of a privilege (`EPERM`, `EACCES`: a namespace, a mount, a capability
/// keel lacks) or of a resource (`ENOSPC`: a namespace or mount limit; `ENOMEM`, `EAGAIN`,
/// `EMFILE`, `ENFILE`, `EUSERS`), or a kernel without the feature (`ENOSYS`, `EOPNOTSUPP`).
/// Anything else (the program missing or not executable, a bad working directory, a path of
/// the unit's that a mount cannot use) is the unit's or its agent's.
pub fn refused_by_host(failure: &crate::sys::process::ExecFailure) -> bool {
    failure.stage == crate::sys::process::ExecStage::Sandbox
        && matches!(
            failure.errno,
            libc::EPERM
                | libc::EACCES
                | libc::ENOSPC
                | libc::ENOMEM
                | libc::EAGAIN
                | libc::EMFILE
                | libc::ENFILE
                | libc::EUSERS
                | libc::ENOSYS
                | libc::EOPNOTSUPP
        )
}

/// In the shim: the agent handed over by [`crate::sandbox::start::clone::launch_for_exec`]; its descriptors are this
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

/// One line per event on stderr (`run/shim.log`), unless the binary installed a logger first.
/// Write errors are ignored: a shim whose log is gone keeps running its agent.
struct ShimLogger;

impl log::Log for ShimLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let _ = writeln!(
                std::io::stderr().lock(),
                "{} keel shim[{}] {}: {}",
                crate::state::rfc3339(now_ms()),
                std::process::id(),
                record.level(),
                record.args()
            );
        }
    }
    fn flush(&self) {}
}

fn install_logger() {
    if log::set_boxed_logger(Box::new(ShimLogger)).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}

#[cfg(test)]
mod tests;
