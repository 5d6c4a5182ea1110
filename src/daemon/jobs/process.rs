//! A worker process: `keel worker` cloned from `/proc/self/exe` into keel's workers cgroup,
//! its request written to its stdin, its stdout a non-blocking pipe the loop reads.

use crate::worker::protocol::JobRequest;
use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// A worker's limit on open files, soft and hard (never above the daemon's original hard
/// limit). A job needs a few dozen descriptors (the repository's packs, an index, one per
/// directory level of a walk); the bound turns a leak, or a repository of thousands of packs,
/// into a clear EMFILE in that job rather than a worker holding what the daemon raised its
/// own limit for (a pidfd per task, a descriptor per client).
const WORKER_NOFILE: u64 = 4096;

fn worker_nofile() -> (u64, u64) {
    use nix::sys::resource::{getrlimit, Resource};
    let hard = super::super::ORIGINAL_NOFILE
        .get()
        .map(|(_, hard)| *hard)
        .or_else(|| {
            getrlimit(Resource::RLIMIT_NOFILE)
                .ok()
                .map(|(_, hard)| hard)
        })
        .unwrap_or(WORKER_NOFILE);
    let limit = hard.min(WORKER_NOFILE);
    (limit, limit)
}

/// A started worker: its pid, its pidfd (to kill it: never a recycled pid), its stdout.
pub(super) struct Started {
    pub pid: i32,
    pub pidfd: OwnedFd,
    pub stdout: File,
}

/// Start a worker for `request` (in the cgroup `cgroup_fd` from its first instruction, when
/// given) and hand it the request.
pub(super) fn spawn(request: &JobRequest, cgroup_fd: Option<RawFd>) -> std::io::Result<Started> {
    use nix::fcntl::OFlag;
    let program = CString::new("/proc/self/exe").expect("no NUL");
    let argv = [
        CString::new("keel").expect("no NUL"),
        CString::new("worker").expect("no NUL"),
    ];
    // The daemon's environment (KEEL_LOG, JOURNAL_STREAM, test hooks): the worker is keel.
    let envp = crate::sys::process::environment_except(&[]);
    let (stdin_read, stdin_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let (stdout_read, stdout_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let spawn = crate::sys::SpawnRequest {
        program: &program,
        argv: &argv,
        envp: &envp,
        stdin: stdin_read.as_raw_fd(),
        stdout: stdout_write.as_raw_fd(),
        stderr: 2,
        extra_flags: 0,
        pid_namespace: None,
        cgroup_fd,
        keep_as_fd3: None,
        keep_fds: &[],
        nofile: Some(worker_nofile()),
        // keel's code runs in the clone before its exec (the daemon's signal handlers must
        // not): signals stay blocked until the worker unblocks them (worker::run).
        signals_blocked: true,
    };
    let (pid, pidfd) = crate::sys::spawn_with_pidfd(&spawn)?;
    drop(stdin_read);
    drop(stdout_write);
    // A few hundred bytes, far below a pipe's buffer: written at once, never waited on. The
    // end is closed after it (the worker reads to EOF). A worker already dead makes this fail
    // (EPIPE): its end is seen on its stdout all the same.
    let mut text = serde_json::to_vec(request).unwrap_or_default();
    text.push(b'\n');
    let mut stdin = File::from(stdin_write);
    set_nonblocking(&stdin)?;
    if let Err(e) = stdin.write_all(&text) {
        log::warn!("worker {pid}: cannot hand it its job: {e}");
    }
    drop(stdin);
    let stdout = File::from(stdout_read);
    set_nonblocking(&stdout)?;
    Ok(Started { pid, pidfd, stdout })
}

fn set_nonblocking(file: &File) -> std::io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_truncate(fcntl(file, FcntlArg::F_GETFL)?);
    fcntl(file, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}
