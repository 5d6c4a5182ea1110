//! Which job runs next (pure, kernel-free): one FIFO per owner (a task, or the daemon for its
//! own jobs such as `keel prune`), at most one running job per owner, at most `workers` in
//! all; among the owners that may run, the job submitted first goes first. The daemon's own
//! jobs run alone (`keel prune` removes base trees a task's job could be using). So a task's jobs
//! run one at a time, in order: the next attempt's checkout preparation after the previous
//! attempt's harvest.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Who a job is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Owner {
    Task(String),
    Daemon,
}

/// A job's number, in submission order.
pub(crate) type JobId = u64;

/// The queues and what runs, of jobs `J`.
#[derive(Debug)]
pub(crate) struct JobQueue<J> {
    queued: BTreeMap<Owner, VecDeque<(JobId, J)>>,
    running: BTreeSet<Owner>,
    next_id: JobId,
}

impl<J> Default for JobQueue<J> {
    fn default() -> Self {
        JobQueue {
            queued: BTreeMap::new(),
            running: BTreeSet::new(),
            next_id: 1,
        }
    }
}

impl<J> JobQueue<J> {
    /// Queue `job` behind `owner`'s others; its id.
    pub fn submit(&mut self, owner: Owner, job: J) -> JobId {
        let id = self.next_id;
        self.next_id += 1;
        self.queued.entry(owner).or_default().push_back((id, job));
        id
    }

    /// The next job to start, with at most `workers` running at once: it is
    /// taken off its queue and its owner counts as running until [`JobQueue::finished`].
    pub fn next(&mut self, workers: usize) -> Option<(JobId, Owner, J)> {
        if self.running.len() >= workers || self.running.contains(&Owner::Daemon) {
            return None;
        }
        let owner = self
            .queued
            .iter()
            .filter(|(owner, jobs)| !self.running.contains(*owner) && !jobs.is_empty())
            .min_by_key(|(_, jobs)| jobs.front().map(|(id, _)| *id))
            .map(|(owner, _)| owner.clone())?;
        if owner == Owner::Daemon && !self.running.is_empty() {
            // The daemon's jobs (`keel prune`: it removes bases others may be building) run
            // alone: the running ones finish first, and nothing submitted after it starts.
            return None;
        }
        let jobs = self.queued.get_mut(&owner)?;
        let (id, job) = jobs.pop_front()?;
        if jobs.is_empty() {
            self.queued.remove(&owner);
        }
        self.running.insert(owner.clone());
        Some((id, owner, job))
    }

    /// `owner`'s running job has ended: its next may start.
    pub fn finished(&mut self, owner: &Owner) {
        self.running.remove(owner);
    }

    /// Take every queued (not running) job for which `unwanted` says so.
    pub fn drain_unwanted(&mut self, mut unwanted: impl FnMut(&Owner, &J) -> bool) -> Vec<J> {
        let mut taken = Vec::new();
        for (owner, jobs) in self.queued.iter_mut() {
            let (drop, keep): (VecDeque<_>, VecDeque<_>) =
                jobs.drain(..).partition(|(_, job)| unwanted(owner, job));
            *jobs = keep;
            taken.extend(drop.into_iter().map(|(_, job)| job));
        }
        self.queued.retain(|_, jobs| !jobs.is_empty());
        taken
    }

    /// Queued jobs, in no particular order.
    pub fn queued(&self) -> impl Iterator<Item = (&Owner, &J)> {
        self.queued
            .iter()
            .flat_map(|(owner, jobs)| jobs.iter().map(move |(_, job)| (owner, job)))
    }

    #[cfg(test)]
    pub fn is_idle(&self) -> bool {
        self.queued.is_empty() && self.running.is_empty()
    }
}

/// Whether a job's result still applies to its task: one submitted for an older generation
/// (an attempt that has since ended, been stopped or removed) is dropped.
pub(crate) fn applies(job_generation: u64, task_generation: Option<u64>) -> bool {
    task_generation == Some(job_generation)
}

#[cfg(test)]
mod tests;
