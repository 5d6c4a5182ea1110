//! `keel worker`: a child process of the daemon that runs one job (DESIGN, "Jobs"): the git
//! and disk work whose time depends on data outside keel's control (a base tree of 500,000
//! files, a branch to harvest, a checkout to remove, a FIFO an agent left, a path on a dead
//! NFS server). The daemon's loop never waits on it: it reads this process's lines like any
//! other event, and kills it past its deadline.
//!
//! The request is one JSON document on stdin ([`protocol::JobRequest`]); progress and the
//! result are JSON lines on stdout ([`protocol::WorkerLine`]); the log goes to stderr (the
//! daemon's, so the journal's) with the prefix `worker`. The worker dies with the daemon
//! (`PR_SET_PDEATHSIG`): nothing it leaves half-made is trusted by a later daemon (a base tree
//! without its `ready` marker is rebuilt).

mod jobs;
pub mod protocol;
mod quota;

use protocol::{JobFailure, JobRequest, Progress, WorkerLine};
use std::io::{Read, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest request read from stdin (a request is a few hundred bytes).
const MAX_REQUEST_BYTES: u64 = 4 << 20;
/// The workers' CPU `nice` value.
const WORKER_NICE: i32 = 10;
/// Progress lines are written at most this often (a base tree reports every file).
const PROGRESS_INTERVAL: Duration = Duration::from_millis(200);

/// The worker's main: run the job on stdin, write its lines; the exit code is 0 when a
/// `done` line was written (whatever the job's outcome), 1 when not even that.
pub fn run() -> i32 {
    // Cloned with every signal blocked (jobs/process.rs): the default mask from here on.
    let _ = nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    );
    let request = match read_request() {
        Ok(request) => request,
        Err(message) => {
            log::error!("{message}");
            return 1;
        }
    };
    match nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL) {
        Ok(()) if nix::unistd::getppid().as_raw() == request.parent => {}
        Ok(()) => {
            log::error!("the daemon (pid {}) is gone already", request.parent);
            return 1;
        }
        Err(e) => log::warn!("cannot arm PR_SET_PDEATHSIG: {e}"),
    }
    if let Err(e) = crate::cgroup::join_v1(&request.v1_procs) {
        log::error!("cannot join keel's workers cgroup: {e}");
        return write_line(&WorkerLine::Done(Err(JobFailure {
            message: format!("the worker cannot join keel's workers cgroup: {e}"),
            unit_mistake: false,
        })));
    }
    if let Some(limit) = request.address_space_limit {
        use nix::sys::resource::{setrlimit, Resource};
        if let Err(e) = setrlimit(Resource::RLIMIT_AS, limit, limit) {
            log::warn!("cannot limit the worker's address space to {limit} bytes: {e}");
        }
    }
    // Background work: the daemon's loop (and the agents) win the CPU and the disk.
    if let Err(e) = crate::sys::run_in_background(WORKER_NICE) {
        log::warn!("cannot lower the worker's priority: {e}");
    }
    hang_if_asked(request.job.kind());
    hog_if_asked(request.job.kind());
    let reporter = std::sync::Arc::new(Reporter::default());
    let outcome = jobs::run(&request, &reporter);
    write_line(&WorkerLine::Done(outcome))
}

fn read_request() -> Result<JobRequest, String> {
    let mut text = Vec::new();
    std::io::stdin()
        .take(MAX_REQUEST_BYTES)
        .read_to_end(&mut text)
        .map_err(|e| format!("cannot read the job on stdin: {e}"))?;
    serde_json::from_slice(&text).map_err(|e| format!("the job on stdin is not one: {e}"))
}

/// Write one line to stdout, whole (`0`), or say it could not be (`1`: the daemon is gone).
fn write_line(line: &WorkerLine) -> i32 {
    let mut text = line.to_line();
    text.push('\n');
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) => {
            log::error!("cannot write to the daemon: {e}");
            1
        }
    }
}

/// `KEEL_TEST_WORKER_HANG=<kind>` (docs/testing.md): a worker of that job kind hangs before
/// its job, as one stuck on a FIFO or a dead NFS server would, until it is killed; with
/// `KEEL_TEST_WORKER_HANG_WHILE=<path>`, only while that path exists (then it goes on).
fn hang_if_asked(kind: &str) {
    let Some(asked) = std::env::var_os("KEEL_TEST_WORKER_HANG") else {
        return;
    };
    if !asked
        .to_str()
        .is_some_and(|a| a.split(',').any(|k| k == kind))
    {
        return;
    }
    let condition = std::env::var_os("KEEL_TEST_WORKER_HANG_WHILE").map(std::path::PathBuf::from);
    if condition.as_ref().is_some_and(|path| !path.exists()) {
        return;
    }
    log::warn!("KEEL_TEST_WORKER_HANG={kind}: hanging until killed");
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if condition.as_ref().is_some_and(|path| !path.exists()) {
            log::warn!("KEEL_TEST_WORKER_HANG_WHILE: the path is gone; going on");
            return;
        }
    }
}

/// `KEEL_TEST_WORKER_HOG=<kind>` (docs/testing.md): a worker of that job kind takes memory
/// until something stops it (the workers cgroup's limit: the OOM killer), as libgit2 on a
/// decompression bomb would.
fn hog_if_asked(kind: &str) {
    let Some(asked) = std::env::var_os("KEEL_TEST_WORKER_HOG") else {
        return;
    };
    if asked
        .to_str()
        .is_some_and(|a| a.split(',').any(|k| k == kind))
    {
        log::warn!("KEEL_TEST_WORKER_HOG={kind}: taking memory until stopped");
        let mut held: Vec<Vec<u8>> = Vec::new();
        loop {
            held.push(vec![1u8; 8 << 20]);
            if held.len().is_multiple_of(64) {
                log::warn!("KEEL_TEST_WORKER_HOG: {} MiB held", held.len() * 8);
            }
        }
    }
}

/// Writes progress lines, at most one per [`PROGRESS_INTERVAL`] for the same step (a new
/// step is always written).
#[derive(Default)]
pub(crate) struct Reporter {
    last: Mutex<Option<(String, Instant)>>,
}

impl Reporter {
    pub(crate) fn report(&self, step: &str, done: u64, total: u64) {
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        let now = Instant::now();
        let due = match last.as_ref() {
            Some((was, at)) => was != step || now.duration_since(*at) >= PROGRESS_INTERVAL,
            None => true,
        };
        if !due {
            return;
        }
        *last = Some((step.to_string(), now));
        let progress = Progress {
            step: step.to_string(),
            done,
            total,
        };
        write_line(&WorkerLine::Progress(progress));
    }
}
