//! The jobs subsystem: every operation whose time depends on data outside keel's control
//! (a base tree build, a checkout, a harvest, a removal, `keel prune`, a disk-use walk, the
//! `lstat`s of paths a unit names) runs in a worker process (`keel worker`,
//! [`crate::worker`]), never in the loop. A worker is a child process rather than a thread:
//! libgit2's memory stays out of the daemon (the workers share a cgroup with a memory limit),
//! and a worker that hangs (a FIFO, a dead NFS server) is killed by its pidfd at its deadline.
//!
//! Jobs queue per owner (a task, or the daemon), one running per owner, at most
//! `jobs.workers` in all (`queue.rs`); each carries its task's generation, and a result for
//! an older one is dropped. The loop reads each worker's stdout (`Source::Job`), reaps it,
//! and hands the daemon [`Finished`] jobs; what follows is the daemon's (`Then`).

mod abandon;
pub(crate) mod deadline;
mod dispatch;
mod process;
pub(crate) mod queue;

use super::event_loop::{EventLoop, Source};
use super::slices::WorkersCgroup;
use super::timers::{Timer, Timers};
use crate::config::jobs::Jobs as JobSettings;
use crate::worker::protocol::{
    Job, JobFailure, JobRequest, JobResult, LineBuffer, Progress, WorkerLine,
};
use deadline::{Deadline, Verdict};
use mio::unix::SourceFd;
use mio::{Interest, Token};
use nix::sys::wait::WaitStatus;
use queue::JobQueue;
pub(crate) use queue::{JobId, Owner};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What the daemon does with a job's outcome once it has ended.
#[derive(Debug)]
pub(crate) enum Then {
    /// Go on with the start of the task's attempt of the job's generation.
    Start,
    /// Journal the harvest; answer `reply` (`keel harvest`) when given.
    Harvest { reply: Option<Token> },
    /// `keel rm`: delete the rest of the task's files, then say what became of them.
    Remove,
    /// Answer `keel prune`.
    Prune { reply: Token },
    /// Keep the figures for `keel status`.
    DiskUse,
    /// Judge the task's disk use against its budget (`disk.rs`).
    TaskDiskUse,
    /// Nothing: a deletion's failure is logged by the jobs (the trash is swept at the next
    /// daemon start).
    Nothing,
}

/// A job as submitted.
#[derive(Debug)]
pub(crate) struct Pending {
    /// The generation of the task's attempt it is for (0 for the daemon's own).
    pub generation: u64,
    pub job: Job,
    pub then: Then,
}

/// Why a job produced no result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum JobError {
    /// It ran and failed: the worker's own account.
    Failed(JobFailure),
    /// Killed past its deadline: what it was doing, how long, how far it came.
    Deadline(String),
    /// The worker could not be started, died without a result (the OOM killer, a signal) or
    /// wrote what it should not: the host's problem, not the unit's.
    Worker(String),
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobError::Failed(failure) => f.write_str(&failure.message),
            JobError::Deadline(message) | JobError::Worker(message) => f.write_str(message),
        }
    }
}

/// A job that has ended, for the daemon to act on.
#[derive(Debug)]
pub(crate) struct Finished {
    pub owner: Owner,
    pub pending: Pending,
    pub outcome: Result<JobResult, JobError>,
    pub took: Duration,
}

struct Running {
    owner: Owner,
    pending: Pending,
    pid: i32,
    pidfd: OwnedFd,
    stdout: std::fs::File,
    token: Token,
    lines: LineBuffer,
    started: Instant,
    deadline: Deadline,
    progress: Option<Progress>,
    /// When the counted progress last advanced.
    advanced: Option<Instant>,
    done: Option<Result<JobResult, JobFailure>>,
    /// Why the daemon killed it (deadline, a bad line): its outcome, whatever it wrote.
    killed: Option<JobError>,
    /// When the daemon sent it SIGKILL (for any reason): [`abandon::EXIT_GRACE`] later, a
    /// worker still there is abandoned.
    killed_at: Option<Instant>,
    /// Whether the timer of that grace is set.
    grace_armed: bool,
    /// Nobody wants its result any more (its task was stopped, removed, started again).
    cancelled: bool,
    eof: bool,
    status: Option<WaitStatus>,
    oom_kills_before: Option<u64>,
}

/// The queues, the running workers and the settings that bound them.
pub(crate) struct Jobs {
    queue: JobQueue<Pending>,
    running: BTreeMap<JobId, Running>,
    pub settings: JobSettings,
    /// `<keel tree>/workers`, or why there is none (then RLIMIT_AS bounds each worker).
    pub cgroup: Result<WorkersCgroup, String>,
    state_dir: PathBuf,
    finished: Vec<Finished>,
    /// Killed workers that did not exit, by pid, until they are reaped (`abandon.rs`).
    abandoned: BTreeMap<i32, abandon::Abandoned>,
}

impl Jobs {
    pub fn new(
        state_dir: PathBuf,
        settings: JobSettings,
        cgroup: Result<WorkersCgroup, String>,
    ) -> Jobs {
        Jobs {
            queue: JobQueue::default(),
            running: BTreeMap::new(),
            settings,
            cgroup,
            state_dir,
            finished: Vec::new(),
            abandoned: BTreeMap::new(),
        }
    }

    /// `keel.ron` was reloaded: the new bounds apply to the jobs started from now on (and the
    /// workers cgroup's memory limit at once).
    pub fn reconfigure(&mut self, settings: JobSettings) {
        if settings.memory != self.settings.memory {
            if let Ok(cgroup) = &self.cgroup {
                if let Err(e) = cgroup.set_memory(settings.memory) {
                    log::warn!("jobs: {e}");
                }
            }
        }
        self.settings = settings;
    }

    /// Queue a job behind its owner's others.
    pub fn submit(&mut self, owner: Owner, pending: Pending) -> JobId {
        log::debug!("job: {} for {owner:?} queued", pending.job.describe());
        self.queue.submit(owner, pending)
    }

    /// Start what the queues and the worker cap allow.
    pub fn start_ready(&mut self, events: &mut EventLoop) {
        while let Some((id, owner, pending)) = self.queue.next(self.settings.workers) {
            if let Err(e) = self.start(id, owner.clone(), pending, events) {
                let (pending, why) = *e;
                self.queue.finished(&owner);
                self.finished.push(Finished {
                    owner,
                    pending,
                    outcome: Err(JobError::Worker(why)),
                    took: Duration::ZERO,
                });
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn start(
        &mut self,
        id: JobId,
        owner: Owner,
        pending: Pending,
        events: &mut EventLoop,
    ) -> Result<(), Box<(Pending, String)>> {
        let (cgroup_fd, v1_procs, address_space_limit, oom_kills_before) = match &self.cgroup {
            Ok(cgroup) => (
                Some(cgroup.v2_dir.as_raw_fd()),
                cgroup.v1_procs.clone(),
                None,
                cgroup.oom_kills(),
            ),
            Err(_) => (None, Vec::new(), Some(self.settings.memory), None),
        };
        let request = JobRequest {
            state_dir: self.state_dir.clone(),
            parent: std::process::id() as i32,
            v1_procs,
            address_space_limit,
            job: pending.job.clone(),
        };
        let describe = pending.job.describe();
        let started = match process::spawn(&request, cgroup_fd) {
            Ok(started) => started,
            Err(e) => {
                return Err(Box::new((
                    pending,
                    format!("cannot start a worker for {describe}: {e}"),
                )))
            }
        };
        let fd = started.stdout.as_raw_fd();
        let token = match events.watch(&mut SourceFd(&fd), Interest::READABLE, Source::Job(id)) {
            Ok(token) => token,
            Err(e) => {
                let _ = crate::sys::pidfd_send_signal(&started.pidfd, libc::SIGKILL);
                return Err(Box::new((
                    pending,
                    format!("cannot watch the worker for {describe}: {e}"),
                )));
            }
        };
        let deadline = self.deadline_of(&pending.job);
        let now = Instant::now();
        events.timers.add(
            now + deadline.total.min(deadline.idle.unwrap_or(deadline.total)),
            Timer::JobDeadline { id },
        );
        log::debug!("job {id}: {describe}: worker {}", started.pid);
        self.running.insert(
            id,
            Running {
                owner,
                pending,
                pid: started.pid,
                pidfd: started.pidfd,
                stdout: started.stdout,
                token,
                lines: LineBuffer::default(),
                started: now,
                deadline,
                progress: None,
                advanced: None,
                done: None,
                killed: None,
                killed_at: None,
                grace_armed: false,
                cancelled: false,
                eof: false,
                status: None,
                oom_kills_before,
            },
        );
        Ok(())
    }

    fn deadline_of(&self, job: &Job) -> Deadline {
        match job {
            Job::Prepare { repo: Some(_), .. } => Deadline {
                total: self.settings.preparation_deadline,
                idle: Some(self.settings.preparation_idle),
            },
            _ => Deadline {
                total: self.settings.deadline,
                idle: None,
            },
        }
    }

    /// The worker of job `id` wrote (or closed its stdout).
    pub fn on_readable(&mut self, id: JobId, events: &mut EventLoop) {
        let Some(job) = self.running.get_mut(&id) else {
            return;
        };
        let mut buf = [0u8; 16384];
        // Bounded per event: a worker that writes without end cannot keep the loop.
        for _ in 0..64 {
            match job.stdout.read(&mut buf) {
                Ok(0) => {
                    job.eof = true;
                    break;
                }
                Ok(n) => {
                    for line in job.lines.push(&buf[..n]) {
                        job.take_line(line);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    job.kill(JobError::Worker(format!(
                        "cannot read the worker's output: {e}"
                    )));
                    job.eof = true;
                    break;
                }
            }
        }
        if job.eof && job.status.is_none() {
            job.status = try_reap(job.pid);
        }
        job.arm_grace(id, &mut events.timers);
        self.finish_if_over(id, events);
    }

    /// Whether `pid` is a worker; if so its status is kept (the daemon's reaper took it).
    pub fn on_reaped(&mut self, pid: i32, status: WaitStatus, events: &mut EventLoop) -> bool {
        if let Some(gone) = self.abandoned.remove(&pid) {
            log::info!(
                "worker {pid} of an abandoned job ({}) exited at last, {} after it was abandoned",
                gone.describe,
                crate::fmt::duration_precise(gone.since.elapsed())
            );
            return true;
        }
        let Some((&id, job)) = self.running.iter_mut().find(|(_, j)| j.pid == pid) else {
            return false;
        };
        job.status = Some(status);
        self.finish_if_over(id, events);
        true
    }

    /// The deadline timer of job `id`: kill it if it is past, else look again later; one
    /// killed [`abandon::EXIT_GRACE`] ago and still there is abandoned.
    pub fn on_deadline_due(&mut self, id: JobId, events: &mut EventLoop) {
        let Some(job) = self.running.get_mut(&id) else {
            return;
        };
        if let Some(killed_at) = job.killed_at {
            if Instant::now() >= killed_at + abandon::EXIT_GRACE {
                self.abandon(id, events);
            } else {
                job.arm_grace(id, &mut events.timers);
            }
            return;
        }
        let timers = &mut events.timers;
        match job
            .deadline
            .judge(job.started, job.advanced, Instant::now())
        {
            Verdict::Within { recheck_at } => timers.add(recheck_at, Timer::JobDeadline { id }),
            Verdict::Past(overrun) => {
                let message = overrun_message(&job.pending.job, job.progress.as_ref(), &overrun);
                log::error!("job {id}: {message}: killing worker {}", job.pid);
                job.kill(JobError::Deadline(message));
                job.arm_grace(id, timers);
            }
        }
    }

    /// Drop the queued jobs and kill the running ones that `unwanted` names.
    pub fn cancel(
        &mut self,
        timers: &mut Timers,
        mut unwanted: impl FnMut(&Owner, &Pending) -> bool,
    ) {
        for pending in self.queue.drain_unwanted(&mut unwanted) {
            log::debug!("job: {} dropped: no longer wanted", pending.job.describe());
        }
        for (id, job) in self.running.iter_mut() {
            if !job.cancelled && unwanted(&job.owner, &job.pending) {
                log::info!(
                    "job {id}: {} abandoned: no longer wanted; killing worker {}",
                    job.pending.job.describe(),
                    job.pid
                );
                job.cancelled = true;
                job.signal_kill();
                job.arm_grace(*id, timers);
            }
        }
    }

    /// Jobs that have ended since the last call.
    pub fn take_finished(&mut self) -> Vec<Finished> {
        std::mem::take(&mut self.finished)
    }

    /// The progress of `unit`'s running job, if one is running for it.
    pub fn progress_of(&self, unit: &str) -> Option<Option<&Progress>> {
        self.running
            .values()
            .find(|j| matches!(&j.owner, Owner::Task(u) if u == unit) && !j.cancelled)
            .map(|j| j.progress.as_ref())
    }

    /// Whether a job of `owner` for which `what` holds is queued or running.
    pub fn has(&self, owner: &Owner, what: impl Fn(&Pending) -> bool) -> bool {
        self.running
            .values()
            .any(|j| &j.owner == owner && !j.cancelled && what(&j.pending))
            || self.queue.queued().any(|(o, p)| o == owner && what(p))
    }

    /// Whether any job for which `what` holds is queued or running.
    pub fn any(&self, what: impl Fn(&Pending) -> bool) -> bool {
        self.running
            .values()
            .any(|j| !j.cancelled && what(&j.pending))
            || self.queue.queued().any(|(_, p)| what(p))
    }

    fn finish_if_over(&mut self, id: JobId, events: &mut EventLoop) {
        let over = self
            .running
            .get(&id)
            .is_some_and(|j| j.eof && j.status.is_some());
        if !over {
            return;
        }
        let Some(mut job) = self.running.remove(&id) else {
            return;
        };
        let fd = job.stdout.as_raw_fd();
        events.unwatch(&mut SourceFd(&fd), job.token);
        self.queue.finished(&job.owner);
        let took = job.started.elapsed();
        if job.cancelled {
            log::debug!("job {id}: ended after it was abandoned; nothing done with it");
            return;
        }
        let outcome = match (job.killed.take(), job.done.take()) {
            (Some(why), _) => Err(why),
            (None, Some(Ok(result))) => Ok(result),
            (None, Some(Err(failure))) => Err(JobError::Failed(failure)),
            (None, None) => Err(JobError::Worker(self.death_of(&job))),
        };
        if let Err(e) = &outcome {
            log::warn!(
                "job {id}: {} failed after {}: {e}",
                job.pending.job.describe(),
                crate::fmt::duration_precise(took)
            );
        }
        self.finished.push(Finished {
            owner: job.owner,
            pending: job.pending,
            outcome,
            took,
        });
    }

    /// How a worker that wrote no result ended.
    fn death_of(&self, job: &Running) -> String {
        let what = job.pending.job.describe();
        let oom = match (&self.cgroup, job.oom_kills_before) {
            (Ok(cgroup), Some(before)) => cgroup.oom_kills().is_some_and(|now| now > before),
            _ => false,
        };
        match job.status {
            Some(WaitStatus::Signaled(..)) if oom => format!(
                "{what}: its worker was killed by the OOM killer (keel's workers may use {} in all: jobs.memory in keel.ron)",
                crate::fmt::format_bytes(self.settings.memory, false)
            ),
            Some(WaitStatus::Signaled(_, signal, _)) => {
                format!("{what}: its worker was killed by {}", signal.as_str())
            }
            Some(WaitStatus::Exited(_, code)) => format!(
                "{what}: its worker exited {code} without a result (the daemon's log says why)"
            ),
            _ => format!("{what}: its worker ended without a result"),
        }
    }
}

impl Running {
    fn take_line(&mut self, line: Result<WorkerLine, String>) {
        match line {
            Ok(WorkerLine::Progress(progress)) => {
                let advanced = self
                    .progress
                    .as_ref()
                    .is_none_or(|p| p.step != progress.step || p.done != progress.done);
                // Counted progress starts the idle clock; once it runs, any step moves it too
                // (the index and sync after the last file write: jobs/deadline.rs).
                if advanced && (progress.total > 0 || self.advanced.is_some()) {
                    self.advanced = Some(Instant::now());
                }
                self.progress = Some(progress);
            }
            Ok(WorkerLine::Done(outcome)) if self.done.is_none() => self.done = Some(outcome),
            Ok(WorkerLine::Done(_)) => {
                self.kill(JobError::Worker("the worker wrote two results".to_string()))
            }
            Err(why) => self.kill(JobError::Worker(why)),
        }
    }

    /// Kill the worker, its outcome `why` (the first reason wins).
    fn kill(&mut self, why: JobError) {
        if self.killed.is_none() {
            self.killed = Some(why);
        }
        self.signal_kill();
    }

    /// SIGKILL through its pidfd; the first one starts the grace of [`abandon::EXIT_GRACE`].
    fn signal_kill(&mut self) {
        let _ = crate::sys::pidfd_send_signal(&self.pidfd, libc::SIGKILL);
        self.killed_at.get_or_insert_with(Instant::now);
    }

    /// Once killed: a timer at the end of its grace (once).
    fn arm_grace(&mut self, id: JobId, timers: &mut Timers) {
        if let (Some(killed_at), false) = (self.killed_at, self.grace_armed) {
            timers.add(killed_at + abandon::EXIT_GRACE, Timer::JobDeadline { id });
            self.grace_armed = true;
        }
    }
}

/// The status of worker `pid` if it has exited (`waitpid(WNOHANG)`).
fn try_reap(pid: i32) -> Option<WaitStatus> {
    use nix::sys::wait::{waitpid, WaitPidFlag};
    match waitpid(nix::unistd::Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::StillAlive) => None,
        Ok(status) => Some(status),
        // Reaped already by the daemon's reaper: its status comes through `on_reaped`.
        Err(_) => None,
    }
}

/// "checkout preparation of /repo (base tree) took longer than 10m; 24,600 of 60,000 files
/// written".
pub(crate) fn overrun_message(
    job: &Job,
    progress: Option<&Progress>,
    overrun: &deadline::Overrun,
) -> String {
    let mut message = job.describe();
    if let Some(progress) = progress {
        message.push_str(&format!(" ({})", progress.step));
    }
    // A path check that hangs: the path it was at (the mount that does not answer).
    if let (Job::Prepare { paths, .. }, Some(p)) = (job, progress) {
        let at = (paths.hidden.iter().chain(&paths.writable)).nth(p.done as usize);
        if let Some(path) = at.filter(|_| p.step == "check paths") {
            message.push_str(&format!(" at {}", path.display()));
        }
    }
    message.push(' ');
    message.push_str(&overrun.describe());
    if let Some(p) = progress.filter(|p| p.total > 0) {
        let what = match p.step.as_str() {
            s if s.starts_with("base tree") => "files written",
            "check paths" => "paths checked",
            _ => "done",
        };
        message.push_str(&format!(
            "; {} of {} {what}",
            crate::protocol::thousands(p.done),
            crate::protocol::thousands(p.total)
        ));
    }
    message
}

#[cfg(test)]
mod tests;
