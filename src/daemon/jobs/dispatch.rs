//! The loop's side of jobs: each round, drop the jobs nobody wants any more, start what the
//! queues allow and act on what has ended; a worker's stdout and deadline are events.

use super::{Finished, JobId, Owner, Then};
use crate::daemon::record::TaskState;
use crate::daemon::Daemon;
use crate::worker::protocol::Job;

impl Daemon {
    /// Once a round: fence, act on ended jobs, start the next.
    pub(crate) fn run_jobs(&mut self) {
        self.fence_jobs();
        // A result may submit the next job (a start that failed harvests): a few passes.
        for _ in 0..4 {
            let finished = self.jobs.take_finished();
            if finished.is_empty() {
                break;
            }
            for job in finished {
                self.on_job_finished(job);
            }
        }
        self.jobs.start_ready(&mut self.events);
        // A worker that could not even be started is finished at once.
        for job in self.jobs.take_finished() {
            self.on_job_finished(job);
        }
    }

    /// A preparation whose start no longer stands (stopped, removed, started again) is
    /// abandoned: its worker is killed, its queued job dropped.
    fn fence_jobs(&mut self) {
        let tasks = &self.tasks;
        self.jobs.cancel(&mut self.events.timers, |owner, pending| {
            let (Owner::Task(unit), Then::Start) = (owner, &pending.then) else {
                return false;
            };
            let current = tasks
                .get(unit)
                .filter(|t| t.record.state == TaskState::Starting && t.preparing.is_some())
                .map(|t| t.record.generation);
            !super::queue::applies(pending.generation, current)
        });
    }

    /// A worker's stdout is readable (a line, or its end).
    pub(crate) fn on_job_event(&mut self, id: u64) {
        self.jobs.on_readable(id as JobId, &mut self.events);
    }

    pub(crate) fn on_job_deadline(&mut self, id: u64) {
        self.jobs.on_deadline_due(id as JobId, &mut self.events);
    }

    fn on_job_finished(&mut self, finished: Finished) {
        match finished.pending.then {
            Then::Start => {
                let Owner::Task(unit) = &finished.owner else {
                    return;
                };
                if let Job::Prepare { .. } = finished.pending.job {
                    let unit = unit.clone();
                    self.finish_start(&unit, finished.pending.generation, finished.outcome);
                }
            }
            Then::Harvest { reply } => self.on_harvest_done(finished, reply),
            Then::Remove => self.on_checkout_removed(finished),
            Then::Prune { reply } => self.on_prune_done(finished, reply),
            Then::DiskUse => self.on_disk_use_done(finished),
            Then::TaskDiskUse => self.on_task_disk_use_done(finished),
            Then::Nothing => {}
        }
    }
}
