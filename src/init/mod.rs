//! `keel init`: PID 1 of a container or VM. It stays tiny and boring (Erlang's lesson: the root
//! supervisor must never itself crash): it runs the daemon as its child, reaps every zombie,
//! forwards SIGTERM/SIGINT/SIGHUP/SIGUSR1/SIGUSR2 to the daemon, respawns a daemon that dies
//! (tasks keep running: their shims do not depend on it), and exits with the status the daemon
//! chose — an essential unit's, or 0 after an orderly shutdown.
//!
//! How init tells a deliberate daemon exit from a crash: a daemon that exits on purpose first
//! writes `state_dir/exit-status`; a daemon that died without writing it crashed.
//!
//! `keel init -- COMMAND...` also runs COMMAND next to the daemon, outside any sandbox, as
//! init's own child (as tini runs a container's program): a container's entry script, a
//! machine's boot check. When it exits, keel init shuts down in order (as on SIGTERM) and its
//! status becomes keel init's (128 + signal for a signal). A COMMAND still running once the
//! daemon has shut down gets SIGTERM and [`COMPANION_GRACE`] before SIGKILL.
//!
//! As the PID 1 of a machine (see [`machine`]), keel init mounts what the kernel did not and
//! powers the machine off at the end instead of exiting.

pub mod machine;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// Signals passed on to the daemon.
const FORWARDED: [Signal; 5] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Respawn intensity: more than this many daemon crashes within `CRASH_WINDOW` and init gives
/// up (exit 1) rather than crash-looping forever unseen — so that the orchestrator restarts the
/// container, whose tasks then resume from their state. With the backoff below, a daemon that
/// cannot start at all is retried for about four minutes first.
const MAX_CRASHES: usize = 12;
const CRASH_WINDOW: Duration = Duration::from_secs(600);

/// How long a companion command still running after the daemon's shutdown has between
/// SIGTERM and SIGKILL; the same for every other process left on a machine before power-off.
pub const COMPANION_GRACE: Duration = Duration::from_secs(5);

/// The exit status of a process as a shell reports it: its code, or 128 + its signal.
pub fn status_code(status: WaitStatus) -> Option<i32> {
    match status {
        WaitStatus::Exited(_, code) => Some(code),
        WaitStatus::Signaled(_, signal, _) => Some(128 + signal as i32),
        _ => None,
    }
}

/// keel init's exit status once the daemon has exited on purpose with `daemon`: a companion
/// command's status when there is one (it was given to report the outcome), else the daemon's.
pub fn final_status(daemon: i32, companion: Option<i32>) -> i32 {
    companion.unwrap_or(daemon)
}

/// The delay before respawning a daemon that crashed, given earlier crash times; `None` when
/// the intensity limit is reached. Pure: unit-tested below.
pub fn respawn_delay(crashes: &[Instant], now: Instant) -> Option<Duration> {
    let recent = crashes
        .iter()
        .filter(|&&t| now.saturating_duration_since(t) < CRASH_WINDOW)
        .count();
    if recent > MAX_CRASHES {
        return None;
    }
    // 0.25 s, 0.5 s, 1 s, 2 s, … capped at 30 s.
    let exponent = recent.saturating_sub(1).min(7) as u32;
    Some(Duration::from_millis(250 * 2u64.pow(exponent)).min(Duration::from_secs(30)))
}

struct Init<'a> {
    /// Names this init for the daemon: a shutdown recorded under it is finished by a
    /// respawned daemon, not by the daemon of a restarted container.
    instance: String,
    state_dir: &'a Path,
    units_dir: Option<&'a Path>,
    cgroup_name: Option<&'a str>,
    daemon: Option<Pid>,
    crashes: Vec<Instant>,
    respawn_at: Option<Instant>,
    shutting_down: bool,
    /// The companion command (empty: none), its pid while it runs, its status once it ended.
    companion: &'a [OsString],
    companion_pid: Option<Pid>,
    companion_status: Option<i32>,
    /// The daemon exited on purpose with this status; init waits for the companion to end.
    daemon_done: Option<i32>,
    /// When a companion still running after the daemon's shutdown gets SIGKILL.
    companion_kill_at: Option<Instant>,
}

/// What `keel init` was asked to run.
pub struct Options<'a> {
    pub state_dir: &'a Path,
    pub units_dir: Option<&'a Path>,
    pub cgroup_name: Option<&'a str>,
    /// `-- COMMAND...`: run next to the daemon; its status becomes init's.
    pub companion: &'a [OsString],
}

/// Run as init; returns the exit status — or, as the PID 1 of a machine, powers it off.
pub fn run(options: &Options<'_>) -> i32 {
    let pid1 = std::process::id() == 1;
    let machine = pid1 && is_machine();
    if machine {
        if std::env::var_os("PATH").is_none() {
            // The kernel starts init with HOME and TERM only.
            std::env::set_var(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            );
        }
        machine::prepare(|| std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
    }
    let code = supervise(options, pid1);
    if machine {
        power_off(code)
    } else {
        code
    }
}

/// Whether this is the PID 1 of the machine rather than of a container's PID namespace.
fn is_machine() -> bool {
    mount_proc_if_missing();
    match crate::sys::machine::pid_namespace_inode() {
        Ok(inode) => inode == crate::sys::machine::PROC_PID_INIT_INO,
        Err(e) => {
            log::warn!("cannot read /proc/self/ns/pid ({e}): taken for a container");
            false
        }
    }
}

/// The end of a machine's PID 1: every process left gets SIGTERM, then SIGKILL after
/// [`COMPANION_GRACE`]; the filesystems are synced and the machine powered off. Returns only
/// if the kernel refuses (then init exits with `code`).
fn power_off(code: i32) -> i32 {
    use crate::sys::machine::signal_all;
    let deadline = Instant::now() + COMPANION_GRACE;
    if signal_all(Signal::SIGTERM).unwrap_or(false) {
        while Instant::now() < deadline {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Err(nix::errno::Errno::ECHILD) => break,
                Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(20)),
                _ => {}
            }
        }
        if signal_all(Signal::SIGKILL).unwrap_or(false) {
            while waitpid(Pid::from_raw(-1), None).is_ok() {}
        }
    }
    eprintln!("{}", machine::power_off_line(code));
    let e = crate::sys::machine::power_off();
    log::error!("cannot power off: {e}");
    code
}

fn supervise(options: &Options<'_>, pid1: bool) -> i32 {
    let Options {
        state_dir,
        units_dir,
        cgroup_name,
        companion,
    } = *options;
    if pid1 {
        mount_proc_if_missing();
        make_cgroups_writable();
        mount_cgroup2_if_missing();
    } else {
        // Not PID 1 (a test, or run under another init): orphans still come to us.
        if let Err(e) = crate::sys::set_child_subreaper() {
            log::error!("cannot become a child subreaper: {e}");
            return 1;
        }
        log::info!("not PID 1: running as a child subreaper");
    }
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    for signal in FORWARDED {
        mask.add(signal);
    }
    if let Err(e) = nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None) {
        log::error!("cannot block signals: {e}");
        return 1;
    }
    let signals = match SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
    {
        Ok(fd) => fd,
        Err(e) => {
            log::error!("cannot create a signalfd: {e}");
            return 1;
        }
    };
    enter_cgroup_leaf();
    let pid = std::process::id() as i32;
    let instance = format!(
        "{pid}:{}:{}",
        crate::sys::process_start_time(pid).unwrap_or(0),
        crate::sys::boot_id()
    );
    let mut init = Init {
        instance,
        state_dir,
        units_dir,
        cgroup_name,
        daemon: None,
        crashes: Vec::new(),
        respawn_at: Some(Instant::now()),
        shutting_down: false,
        companion,
        companion_pid: None,
        companion_status: None,
        daemon_done: None,
        companion_kill_at: None,
    };
    let mut companion_started = companion.is_empty();
    loop {
        if let Some(at) = init.respawn_at {
            if Instant::now() >= at {
                init.respawn_at = None;
                if let Err(code) = init.spawn_daemon() {
                    return code;
                }
            }
        }
        if !companion_started {
            companion_started = true;
            init.spawn_companion();
        }
        if let Some(code) = init.finished() {
            return code;
        }
        if let Some(at) = init.companion_kill_at {
            if Instant::now() >= at {
                init.companion_kill_at = None;
                init.signal_companion(Signal::SIGKILL);
            }
        }
        let timeout = match [init.respawn_at, init.companion_kill_at]
            .into_iter()
            .flatten()
            .min()
        {
            Some(at) => {
                let ms = at
                    .saturating_duration_since(Instant::now())
                    .as_millis()
                    .min(60_000);
                PollTimeout::try_from(ms as i32).unwrap_or(PollTimeout::MAX)
            }
            None => PollTimeout::NONE,
        };
        let mut fds = [PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                log::error!("poll: {e}");
                continue;
            }
        }
        while let Ok(Some(info)) = signals.read_signal() {
            let Ok(signal) = Signal::try_from(info.ssi_signo as i32) else {
                continue;
            };
            if signal == Signal::SIGCHLD {
                if let Some(code) = init.reap() {
                    return code;
                }
            } else {
                init.forward(signal);
            }
        }
    }
}

impl Init<'_> {
    fn spawn_daemon(&mut self) -> Result<(), i32> {
        let mut command = std::process::Command::new("/proc/self/exe");
        command
            .arg0("keel")
            .arg("daemon")
            .arg("--state")
            .arg(self.state_dir)
            .env("KEEL_UNDER_INIT", &self.instance);
        if let Some(name) = self.cgroup_name {
            command.arg("--cgroup-name").arg(name);
        }
        if let Some(units) = self.units_dir {
            command.arg("--units").arg(units);
        }
        // A stale exit status (an earlier init killed before reading it) must not be taken
        // for this daemon's.
        let _ =
            std::fs::remove_file(crate::state::StateDir::new(self.state_dir).exit_status_path());
        if self.shutting_down {
            // A daemon respawned during shutdown stops the tasks it re-adopts, then exits.
            command.env("KEEL_SHUTDOWN_ON_START", "1");
        }
        // The child inherits our blocked signal mask; the daemon resets it once its handlers
        // are installed (a signal arriving in between stays pending, not lost).
        use std::os::unix::process::CommandExt;
        match command.spawn() {
            Ok(child) => {
                let pid = Pid::from_raw(child.id() as i32);
                log::info!("daemon started: pid {pid}");
                // Reaped by our own waitpid(-1) loop, never through `child`.
                std::mem::forget(child);
                self.daemon = Some(pid);
                Ok(())
            }
            Err(e) => {
                log::error!("cannot start the daemon: {e}");
                self.on_crash()
            }
        }
    }

    fn spawn_companion(&mut self) {
        let Some((program, args)) = self.companion.split_first() else {
            return;
        };
        let mut command = std::process::Command::new(program);
        command.args(args).env_remove("KEEL_UNDER_INIT");
        match command.spawn() {
            Ok(child) => {
                let pid = Pid::from_raw(child.id() as i32);
                log::info!("{} started: pid {pid}", program.to_string_lossy());
                // Reaped by our own waitpid(-1) loop, never through `child`.
                std::mem::forget(child);
                self.companion_pid = Some(pid);
            }
            Err(e) => {
                log::error!("cannot run {}: {e}", program.to_string_lossy());
                // As a shell reports a command it cannot run.
                self.companion_status = Some(127);
                self.forward(Signal::SIGTERM);
            }
        }
    }

    fn signal_companion(&self, signal: Signal) {
        if let Some(pid) = self.companion_pid {
            if let Err(e) = kill(pid, signal) {
                log::warn!("sending {signal} to the companion command: {e}");
            }
        }
    }

    /// `Some(code)` once init is done: the daemon has exited on purpose and the companion
    /// command, if any, has ended.
    fn finished(&self) -> Option<i32> {
        let daemon = self.daemon_done?;
        if self.companion_pid.is_some() {
            return None;
        }
        Some(final_status(daemon, self.companion_status))
    }

    /// Reap every zombie. `Some(code)` when init should exit.
    fn reap(&mut self) -> Option<i32> {
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return None,
                Ok(status) => {
                    if status.pid().is_some() && status.pid() == self.daemon {
                        self.daemon = None;
                        if let Some(code) = self.on_daemon_exit(status) {
                            return Some(code);
                        }
                    } else if status.pid().is_some() && status.pid() == self.companion_pid {
                        self.on_companion_exit(status);
                    }
                }
            }
        }
    }

    fn on_companion_exit(&mut self, status: WaitStatus) {
        self.companion_pid = None;
        self.companion_kill_at = None;
        let code = status_code(status).unwrap_or(1);
        log::info!("companion command exited: status {code}");
        self.companion_status = Some(code);
        if !self.shutting_down {
            log::info!("shutting down: the companion command ended");
            self.forward(Signal::SIGTERM);
        }
    }

    fn on_daemon_exit(&mut self, status: WaitStatus) -> Option<i32> {
        let path = crate::state::StateDir::new(self.state_dir).exit_status_path();
        let chosen = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok());
        let _ = std::fs::remove_file(&path);
        if let Some(code) = chosen {
            log::info!("daemon exited on purpose: exit {code}");
            // Nothing respawns it now.
            self.shutting_down = true;
            if self.companion_pid.is_some() {
                log::info!(
                    "waiting up to {} for the companion command",
                    crate::fmt::duration(COMPANION_GRACE)
                );
                self.signal_companion(Signal::SIGTERM);
                self.companion_kill_at = Some(Instant::now() + COMPANION_GRACE);
                self.daemon_done = Some(code);
                return None;
            }
            return Some(final_status(code, self.companion_status));
        }
        log::error!("daemon died ({status:?}); its tasks keep running");
        self.on_crash().err()
    }

    /// Schedule a respawn, or give up (`Err(1)`) past the intensity limit.
    fn on_crash(&mut self) -> Result<(), i32> {
        let now = Instant::now();
        self.crashes.push(now);
        self.crashes
            .retain(|&t| now.saturating_duration_since(t) < CRASH_WINDOW);
        match respawn_delay(&self.crashes, now) {
            Some(delay) => {
                log::info!(
                    "respawning the daemon in {}",
                    crate::fmt::duration_precise(delay)
                );
                self.respawn_at = Some(now + delay);
                Ok(())
            }
            None => {
                log::error!(
                    "daemon crashed {} times within {}: giving up",
                    self.crashes.len(),
                    crate::fmt::duration(CRASH_WINDOW)
                );
                Err(1)
            }
        }
    }

    fn forward(&mut self, signal: Signal) {
        if matches!(signal, Signal::SIGTERM | Signal::SIGINT) {
            self.shutting_down = true;
        }
        match self.daemon {
            Some(pid) => {
                if let Err(e) = kill(pid, signal) {
                    log::warn!("forwarding {signal} to the daemon: {e}");
                }
            }
            None if self.shutting_down => {
                // No daemon right now: start one at once; it shuts down after reconciling.
                self.respawn_at = Some(Instant::now());
            }
            None => {}
        }
    }
}

/// On v2 in a cgroup that is not the root (a container's cgroup namespace), move into
/// `<cgroup>/keel-init` before anything is spawned, so that the daemon may enable controllers
/// in the cgroup init started in. The daemon and the companion are born in the leaf, and the
/// daemon takes the leaf's parent for its base.
fn enter_cgroup_leaf() {
    let layout = match crate::cgroup::detect("keel") {
        Ok(layout) => layout,
        // No usable cgroups: the daemon says why in `keel status`.
        Err(_) => return,
    };
    let pid = std::process::id() as i32;
    match crate::cgroup::enter_init_leaf(&crate::cgroup::RealFs, &layout, pid) {
        Ok(Some(leaf)) => log::info!("moved into the cgroup {}", leaf.display()),
        Ok(None) => {}
        Err(e) => log::warn!("{e}: the daemon may be unable to enable cgroup controllers"),
    }
}

fn mount_proc_if_missing() {
    if Path::new("/proc/self").exists() {
        return;
    }
    let _ = std::fs::create_dir_all("/proc");
    if let Err(e) = nix::mount::mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        nix::mount::MsFlags::MS_NOSUID
            | nix::mount::MsFlags::MS_NODEV
            | nix::mount::MsFlags::MS_NOEXEC,
        None::<&str>,
    ) {
        log::error!("cannot mount /proc: {e}");
    }
}

/// Container engines mount `/sys/fs/cgroup` read-only in a container that is not privileged
/// (with a private cgroup namespace on cgroup v2, it is the container's own subtree): keel's
/// tree could not be created, and no task would start. PID 1 holding CAP_SYS_ADMIN may make
/// its own mount writable again (a per-mount flag: the filesystem and every other mount of
/// it are untouched).
fn make_cgroups_writable() {
    use nix::mount::MsFlags;
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    for (path, options) in crate::cgroup::read_only_cgroup_mounts(&mountinfo) {
        let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND;
        for option in &options {
            flags |= match option.as_str() {
                "nosuid" => MsFlags::MS_NOSUID,
                "nodev" => MsFlags::MS_NODEV,
                "noexec" => MsFlags::MS_NOEXEC,
                "noatime" => MsFlags::MS_NOATIME,
                "nodiratime" => MsFlags::MS_NODIRATIME,
                "relatime" => MsFlags::MS_RELATIME,
                _ => MsFlags::empty(),
            };
        }
        match nix::mount::mount(None::<&str>, &path, None::<&str>, flags, None::<&str>) {
            Ok(()) => log::info!(
                "{} was mounted read-only (by the container engine): remounted read-write for keel's cgroups",
                path.display()
            ),
            Err(e) => log::warn!(
                "{} is mounted read-only and cannot be made writable ({e}): give the container CAP_SYS_ADMIN and an unconfined AppArmor profile, or Podman's --security-opt unmask=/sys/fs/cgroup",
                path.display()
            ),
        }
    }
}

/// A container on a hybrid host gets the v1 controllers from its engine and no cgroup2 (crun
/// and runc's default there): keel needs cgroup2 for `cgroup.kill`, `cgroup.events` and PSI,
/// and no task could start. PID 1 mounts one beside the v1 hierarchies, in the container's
/// cgroup namespace (its own subtree, when the engine gave it one), as it mounts `/proc` as a
/// machine's PID 1.
fn mount_cgroup2_if_missing() {
    use nix::mount::MsFlags;
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let Some(at) = crate::cgroup::missing_cgroup2_mount_point(&mountinfo) else {
        return;
    };
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let made = match std::fs::create_dir(&at) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => crate::sys::mount::mount_fs("cgroup2", &at, "cgroup2", flags, None),
    };
    match made {
        Ok(()) => log::info!(
            "no cgroup2 hierarchy in this container (a hybrid host's engine mounts the v1 controllers only): mounted one at {}",
            at.display()
        ),
        Err(e) => log::warn!(
            "no cgroup2 hierarchy in this container, and none can be mounted at {} ({e}): no task can start; give the container CAP_SYS_ADMIN, or mount cgroup2 there (`mount -t cgroup2 none {}`)",
            at.display(),
            at.display()
        ),
    }
}

#[cfg(test)]
mod tests;
