//! Workers that do not die. SIGKILL ends a process only when it next returns from the kernel:
//! one in uninterruptible sleep (a read from a dead NFS server, a FUSE daemon that never
//! answers, a frozen cgroup v1) stays, its stdout open, never reaped. Such a worker would hold
//! its owner's queue (one running job per owner) for ever, so [`EXIT_GRACE`] after its kill it
//! is abandoned: its outcome is reported, its slot freed, its stdout dropped from the loop; it
//! is only remembered here until the daemon's reaper (`waitid(P_ALL)` on SIGCHLD) takes it,
//! whenever the kernel lets it go.

use super::{Finished, JobId, Jobs};
use crate::daemon::event_loop::EventLoop;
use mio::unix::SourceFd;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// How long a worker killed by SIGKILL has to exit before it is abandoned. A process that is
/// merely busy dies within milliseconds of a SIGKILL (the kernel delivers it at the next
/// return to user space, or from any interruptible wait); 10 s is far beyond a loaded
/// machine's scheduling delay and still short beside a job's deadline (minutes).
pub(super) const EXIT_GRACE: Duration = Duration::from_secs(10);

/// A killed worker that had not exited after [`EXIT_GRACE`], waiting to be reaped.
pub(super) struct Abandoned {
    /// Its pidfd, closed once it is reaped (the pid stays its own until then).
    pub _pidfd: OwnedFd,
    pub since: Instant,
    /// The job it ran, for the log line of its end.
    pub describe: String,
}

/// Where worker `pid` is held, from `/proc/<pid>/stat` and `/proc/<pid>/wchan`:
/// "state D (uninterruptible sleep) in __refrigerator", or that it could not be read.
pub(super) fn kernel_state(pid: i32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // `pid (comm) S ...`: the state follows the last `)` (comm may hold one).
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map(str::to_string);
    let Some(state) = state else {
        return "its state cannot be read".to_string();
    };
    let meaning = match state.as_str() {
        "D" => "uninterruptible sleep",
        "R" => "running",
        "S" => "sleeping",
        "T" | "t" => "stopped",
        "Z" => "a zombie",
        _ => "other",
    };
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan"))
        .ok()
        .map(|w| w.trim().to_string())
        .filter(|w| !w.is_empty() && w != "0");
    match wchan {
        Some(wchan) => format!("state {state} ({meaning}) in {wchan}"),
        None => format!("state {state} ({meaning})"),
    }
}

/// The outcome of an abandoned job: why it was killed, and that it did not exit.
pub(super) fn outcome(killed: Option<super::JobError>, stuck: &str) -> super::JobError {
    use super::JobError;
    let note = format!("killed, but it did not exit (stuck in the kernel: {stuck})");
    match killed {
        Some(JobError::Deadline(why)) => JobError::Deadline(format!("{why}; {note}")),
        Some(JobError::Worker(why)) => JobError::Worker(format!("{why}; {note}")),
        Some(JobError::Failed(failure)) => JobError::Worker(format!("{}; {note}", failure.message)),
        None => JobError::Worker(format!("its worker was {note}")),
    }
}

impl Jobs {
    /// Job `id`'s worker was killed [`EXIT_GRACE`] ago and has not exited (stuck in
    /// the kernel): decide that it is over (its outcome reported unless nobody wants it),
    /// free its owner's slot and its registration, and keep only its pidfd until it is
    /// reaped.
    pub(super) fn abandon(&mut self, id: JobId, events: &mut EventLoop) {
        let Some(mut job) = self.running.remove(&id) else {
            return;
        };
        let stuck = kernel_state(job.pid);
        let describe = job.pending.job.describe();
        log::error!(
            "job {id}: {describe}: worker {} has not exited {} after its SIGKILL ({stuck}): \
             abandoned, its owner's next job may start; it is reaped whenever it exits",
            job.pid,
            crate::fmt::duration_precise(EXIT_GRACE)
        );
        let fd = job.stdout.as_raw_fd();
        events.unwatch(&mut SourceFd(&fd), job.token);
        self.queue.finished(&job.owner);
        let took = job.started.elapsed();
        let outcome = outcome(job.killed.take(), &stuck);
        self.abandoned.insert(
            job.pid,
            Abandoned {
                _pidfd: job.pidfd,
                since: Instant::now(),
                describe,
            },
        );
        if !job.cancelled {
            self.finished.push(Finished {
                owner: job.owner,
                pending: job.pending,
                outcome: Err(outcome),
                took,
            });
        }
    }
}

#[cfg(test)]
mod tests;
