//! A hook's process: cloned from the daemon (no sandbox, no cgroup of its own), a session and
//! so a process group of its own (killed whole at its timeout), the daemon's user or the
//! hook's, the event on a pipe as its stdin, its output appended to `STATE/notify.log`.

use crate::config::notify::{Hook, HookUser};
use std::convert::Infallible;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Where a program without a `/` is looked for when the daemon has no `PATH`.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The exit status of a hook whose program could not be run (as a shell says "not found").
pub(crate) const EXIT_CANNOT_RUN: i32 = 127;
/// The exit status of a hook that could not become its user.
pub(crate) const EXIT_CANNOT_SETUP: i32 = 126;

/// A started hook: its pid (its process group's id) and a pidfd (its kill never hits a
/// recycled pid).
pub(crate) struct Started {
    pub pid: i32,
    pub pidfd: OwnedFd,
}

/// The paths `program` is tried at, in order: itself when it names a path, else each
/// directory of `path`'s (empty entries are the current directory, as for a shell).
pub(crate) fn candidates(program: &str, path: Option<&str>) -> Vec<String> {
    if program.contains('/') {
        return vec![program.to_string()];
    }
    path.unwrap_or(DEFAULT_PATH)
        .split(':')
        .map(|dir| match dir {
            "" => program.to_string(),
            dir => format!("{}/{program}", dir.trim_end_matches('/')),
        })
        .collect()
}

/// What a hook takes of the daemon's environment: where programs are, the locale, the time
/// zone. Nothing else — not the daemon's secrets (`KEEL_SECRET_*`, a provider's key), not its
/// test switches, not systemd's descriptors (docs/notifications.md, "What a hook is given").
const INHERITED: [&str; 4] = ["LANG", "LC_ALL", "LC_MESSAGES", "TZ"];

/// The hook's environment: `PATH` (the daemon's, else [`DEFAULT_PATH`]), [`INHERITED`],
/// `HOME`/`USER`/`LOGNAME` (the daemon's, or its user's), the hook's `env`, then `told`
/// (set last: the hook's `env` cannot name `KEEL_*`).
fn environment(hook: &Hook, told: &[(&'static str, String)]) -> Vec<CString> {
    environment_from(hook, told, |name| std::env::var(name).ok())
}

/// [`environment`] with the daemon's variables from `daemon_var` (pure, for the tests).
pub(crate) fn environment_from(
    hook: &Hook,
    told: &[(&'static str, String)],
    daemon_var: impl Fn(&str) -> Option<String>,
) -> Vec<CString> {
    let mut vars: Vec<(String, String)> = Vec::new();
    let path = daemon_var("PATH").unwrap_or_else(|| DEFAULT_PATH.to_string());
    vars.push(("PATH".into(), path));
    for name in INHERITED {
        if let Some(value) = daemon_var(name) {
            vars.push((name.into(), value));
        }
    }
    match &hook.user {
        Some(user) => {
            vars.push(("HOME".into(), user.home.display().to_string()));
            vars.push(("USER".into(), user.name.clone()));
            vars.push(("LOGNAME".into(), user.name.clone()));
        }
        None => {
            for name in ["HOME", "USER", "LOGNAME"] {
                if let Some(value) = daemon_var(name) {
                    vars.push((name.into(), value));
                }
            }
        }
    }
    for (name, value) in &hook.env {
        vars.retain(|(k, _)| k != name);
        vars.push((name.clone(), value.clone()));
    }
    vars.extend(told.iter().map(|(k, v)| (k.to_string(), v.clone())));
    vars.into_iter()
        .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok())
        .collect()
}

/// Start `hook` with `line` on its stdin and `told` in its environment; its stdout and
/// stderr are `output`. Never waits: the clone returns at once, and the line (a few hundred
/// bytes, far below a pipe's capacity) is written to an empty non-blocking pipe.
pub(crate) fn spawn(
    hook: &Hook,
    line: &str,
    told: &[(&'static str, String)],
    output: RawFd,
) -> std::io::Result<Started> {
    use nix::fcntl::OFlag;
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string());
    let program = hook.command.first().ok_or_else(|| invalid("no program"))?;
    let path = (hook.env.get("PATH").cloned()).or_else(|| std::env::var("PATH").ok());
    let paths: Vec<CString> = candidates(program, path.as_deref())
        .into_iter()
        .filter_map(|p| CString::new(p).ok())
        .collect();
    let first = paths.first().ok_or_else(|| invalid("no path to try"))?;
    let argv: Vec<CString> = hook
        .command
        .iter()
        .map(|a| CString::new(a.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| invalid("a NUL in the command"))?;
    let envp = environment(hook, told);
    let (stdin_read, stdin_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let request = crate::sys::SpawnRequest {
        program: first,
        argv: &argv,
        envp: &envp,
        stdin: stdin_read.as_raw_fd(),
        stdout: output,
        stderr: output,
        extra_flags: 0,
        pid_namespace: None,
        cgroup_fd: None,
        keep_as_fd3: None,
        keep_fds: &[],
        nofile: crate::daemon::ORIGINAL_NOFILE.get().copied(),
        signals_blocked: true,
    };
    let cannot_run = format!(
        "keel: notify hook {:?}: cannot run {program}: ",
        hook.describe()
    );
    // The daemon's own user needs no change (and, unprivileged, could not setgroups).
    let user = (hook.user.as_ref()).filter(|u| u.uid != nix::unistd::getuid().as_raw());
    let max_signal = libc::SIGRTMAX();
    // The child: the standard descriptors and a new session (set_up_child), every signal's
    // disposition back to its default (the daemon ignores SIGPIPE: a hook's `curl | jq` must
    // not), the user, every signal unblocked, then each candidate path in turn. Memory is a
    // copy of the single-threaded daemon's: nothing it calls can meet a lock held elsewhere.
    let mut child = || -> Infallible {
        if request.set_up_child().is_err() {
            crate::sys::fds::exit_now(EXIT_CANNOT_SETUP);
        }
        crate::sys::process::reset_signal_dispositions(max_signal, &[0; 8]);
        if let Some(user) = user {
            if let Err(e) = become_user(user) {
                let _ = writeln!(
                    std::io::stderr(),
                    "{cannot_run}cannot become user {}: {e}",
                    user.name
                );
                crate::sys::fds::exit_now(EXIT_CANNOT_SETUP);
            }
        }
        use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow};
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
        let mut error = nix::errno::Errno::ENOENT;
        for path in &paths {
            let Err(e) = nix::unistd::execve(path, &argv, &envp);
            // As execvp(3): a directory that does not have it is passed over; any other
            // failure (EACCES, ENOEXEC) is what is reported if nothing runs.
            if !matches!(e, nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR) {
                error = e;
            }
        }
        let _ = writeln!(std::io::stderr(), "{cannot_run}{}", error.desc());
        crate::sys::fds::exit_now(EXIT_CANNOT_RUN)
    };
    let (pid, pidfd) = crate::sys::clone3_with_pidfd(0, None, None, true, &mut child)?;
    drop(stdin_read);
    let mut stdin = std::fs::File::from(stdin_write);
    let flags = nix::fcntl::fcntl(&stdin, nix::fcntl::FcntlArg::F_GETFL)?;
    nix::fcntl::fcntl(
        &stdin,
        nix::fcntl::FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )?;
    // A hook that has exited already (or closed its stdin) makes this fail with EPIPE: it is
    // judged by its exit all the same.
    if let Err(e) = stdin.write_all(line.as_bytes()) {
        log::debug!("notify hook {pid}: its stdin: {e}");
    }
    Ok(Started { pid, pidfd })
}

/// Groups, then the group, then the user (each call needs the privilege the next drops).
fn become_user(user: &HookUser) -> nix::Result<()> {
    use nix::unistd::{Gid, Uid};
    let groups: Vec<Gid> = user.groups.iter().map(|g| Gid::from_raw(*g)).collect();
    nix::unistd::setgroups(&groups)?;
    nix::unistd::setgid(Gid::from_raw(user.gid))?;
    nix::unistd::setuid(Uid::from_raw(user.uid))
}

/// SIGKILL to the hook's whole process group (its session: what it started and did not move
/// out of it) and to the hook itself through its pidfd. Called only while the hook is not
/// reaped, so the group's id is still its own.
pub(crate) fn kill_group(started: &Started) {
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(started.pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = crate::sys::pidfd_send_signal(&started.pidfd, libc::SIGKILL);
}

#[cfg(test)]
mod tests;
