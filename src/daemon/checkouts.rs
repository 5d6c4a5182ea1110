//! The daemon's side of per-task checkouts (DESIGN, "Checkouts"): created or reused before
//! each attempt, harvested after each, removed only when nothing would be lost. The git work
//! itself is [`crate::checkout`], and it runs in workers (the jobs subsystem, `jobs/`): here
//! are the jobs submitted and what is done with their results.

use super::jobs::{Finished, JobError, Owner, Pending, Then};
use super::store::Store;
use super::Daemon;
use crate::protocol::Response;
use crate::unit::Unit;
use crate::worker::protocol::{Job, JobResult, PreparedCheckout};
use std::time::{Duration, Instant};

/// How long `keel status` shows a checkout's disk use and kept branches before a job
/// measures them again.
const DISK_USE_TTL: Duration = Duration::from_secs(60);

/// Journal what the preparation job made of a checkout.
pub(crate) fn journal_prepared(
    store: &mut Store,
    unit: &str,
    (attempt, generation): (u32, u64),
    repo: &str,
    prepared: &PreparedCheckout,
) {
    if !prepared.created {
        return;
    }
    let how = match &prepared.full_reason {
        Some(why) => format!("full checkout ({why})"),
        None => "overlay over the shared base".to_string(),
    };
    let detail = format!(
        "branch {} at {} from {repo}; {how}",
        prepared.branch,
        short(&prepared.base_commit),
    );
    log::info!("{unit}: checkout created: {detail}");
    store.event(unit, attempt, generation, "checkout-created", &detail);
}

impl Daemon {
    /// A harvest job for `unit`'s checkout (`reply`: the `keel harvest` client to answer).
    pub(crate) fn submit_harvest(&mut self, unit: String, attempt: u32, reply: Option<mio::Token>) {
        let generation = self.tasks.get(&unit).map_or(0, |t| t.record.generation);
        let job = Job::Harvest {
            unit: unit.clone(),
            attempt,
            limits: self.settings.config.harvest_limits,
        };
        let pending = Pending {
            generation,
            job,
            then: Then::Harvest { reply },
        };
        self.jobs.submit(Owner::Task(unit), pending);
    }

    /// A harvest job has ended: journal it, answer its client, refresh the kept branches.
    pub(crate) fn on_harvest_done(&mut self, finished: Finished, reply: Option<mio::Token>) {
        let Owner::Task(unit) = &finished.owner else {
            return;
        };
        let Job::Harvest { attempt, .. } = finished.pending.job else {
            return;
        };
        let generation = finished.pending.generation;
        let response = match finished.outcome {
            Ok(JobResult::Harvested { detail }) => {
                let took = crate::fmt::duration_precise(finished.took);
                log::info!("{unit}: harvest ({took}): {detail}");
                self.store
                    .event(unit, attempt, generation, "harvest", &detail);
                Response::Ok {
                    message: format!("{unit}: {detail}"),
                }
            }
            Ok(other) => Response::Error {
                message: format!("{unit}: the harvest job answered {other:?}"),
            },
            Err(e) => {
                log::warn!("{unit}: harvest failed: {e}");
                self.store
                    .event(unit, attempt, generation, "harvest-failed", &e.to_string());
                Response::Error {
                    message: e.to_string(),
                }
            }
        };
        if let Some(task) = self.tasks.get_mut(unit) {
            // The kept branches may have changed: measured again now.
            task.disk_use_asked = None;
            let unit = unit.clone();
            self.refresh_disk_use(Some(&unit));
        }
        if let Some(token) = reply {
            self.respond(token, &response);
        }
        // The harvest after an attempt: its outcome is recorded now.
        let ending = self
            .tasks
            .get_mut(unit)
            .filter(|t| t.record.generation == generation)
            .and_then(|t| t.settling.take());
        if let Some(ending) = ending {
            let unit = unit.clone();
            self.record_ending(&unit, ending);
        }
    }

    /// For `keel status`: a job measures the checkouts' disk use and kept branches of the
    /// tasks whose figures are older than [`DISK_USE_TTL`] (never in the loop: a walk of
    /// 500,000 files takes seconds). The last figures known are shown meanwhile.
    pub(crate) fn refresh_disk_use(&mut self, only: Option<&str>) {
        let now = Instant::now();
        let due: Vec<String> = self
            .tasks
            .values()
            .filter(|t| only.is_none_or(|u| u == t.name))
            .filter(|t| {
                t.unit.as_ref().is_some_and(|u| u.repo.is_some()) || t.checkout_bytes.is_some()
            })
            .filter(|t| {
                t.disk_use_asked
                    .is_none_or(|at| now.duration_since(at) >= DISK_USE_TTL)
            })
            .map(|t| t.name.clone())
            .collect();
        for unit in due {
            let owner = Owner::Task(unit.clone());
            if self
                .jobs
                .has(&owner, |p| matches!(p.job, Job::DiskUse { .. }))
            {
                continue;
            }
            let mut work = false;
            if let Some(task) = self.tasks.get_mut(&unit) {
                task.disk_use_asked = Some(now);
                // Its files are looked at only while no attempt can mount them: no shim, and
                // a start's preparation (then queued behind this job) not begun.
                work = task.shim.is_none()
                    && task.preparing.is_none()
                    && task.record.state != crate::daemon::record::TaskState::Starting;
            }
            let pending = Pending {
                generation: 0,
                job: Job::DiskUse { unit, work },
                then: Then::DiskUse,
            };
            self.jobs.submit(owner, pending);
        }
    }

    /// A disk-use job has ended: keep its figures for `keel status`.
    pub(crate) fn on_disk_use_done(&mut self, finished: Finished) {
        let Owner::Task(unit) = &finished.owner else {
            return;
        };
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        match finished.outcome {
            Ok(JobResult::DiskUse {
                bytes,
                kept_branches,
                work,
            }) => {
                task.checkout_bytes = bytes;
                task.kept_branches = kept_branches;
                // A running task's work is not measured: the last stopped one's is kept.
                if work.is_some() || bytes.is_none() {
                    task.work = work;
                }
            }
            Ok(_) => {}
            Err(JobError::Deadline(why)) | Err(JobError::Worker(why)) => {
                log::warn!("{unit}: {why}")
            }
            Err(JobError::Failed(failure)) => log::warn!("{unit}: {}", failure.message),
        }
    }
}

/// The uid and gid the agent runs as (`sandbox.user`), who must own its checkout's files.
pub(crate) fn agent_owner(unit: &Unit) -> Result<Option<(u32, u32)>, String> {
    let Some(user) = unit.sandbox.user.as_deref() else {
        return Ok(None);
    };
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    crate::sandbox::privileges::plan(&[], Some(user), false, &passwd, &group)
        .map(|plan| plan.user)
        .map_err(|e| e.to_string())
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}
