//! `keel harvest UNIT` (bring the task's branch home now, between attempts) and `keel prune`
//! (remove the checkouts of finished tasks that are clean and harvested, and unused bases).
//! Both run in a job (a worker process) and are answered once it has ended.

use super::answer_when_job_ends;
use crate::checkout;
use crate::daemon::jobs::{Finished, Owner, Pending, Then};
use crate::daemon::Daemon;
use crate::protocol::Response;
use crate::worker::protocol::{Job, JobResult};
use mio::Token;

impl Daemon {
    /// `keel harvest UNIT`: the same, now — between attempts. While an agent runs it can
    /// rewrite its git directory under the harvest's feet; its attempt's end harvests anyway.
    /// The harvest queues behind the task's other jobs.
    pub(super) fn harvest_request(&mut self, token: Token, unit: &str) -> Option<Response> {
        // The name becomes a path under the state directory: never `..` or a slash.
        if let Err(message) = crate::unit::validate_name(unit) {
            return Some(Response::Error { message });
        }
        if crate::state::attempt_lock_held(&self.store.dirs.run_dir(unit)) {
            return Some(Response::Error {
                message: format!(
                    "{unit}: running; its branch is harvested when the attempt ends (or `keel stop {unit}` first)"
                ),
            });
        }
        if !checkout::exists(&self.store.dirs, unit) {
            return Some(Response::Error {
                message: format!("{unit}: has no checkout (its unit has no repo)"),
            });
        }
        let attempt = self.tasks.get(unit).map_or(0, |t| t.record.attempt);
        self.submit_harvest(unit.to_string(), attempt, Some(token));
        answer_when_job_ends(&mut self.control, token)
    }

    /// `keel prune`: a job removes the checkouts of finished tasks that are clean and
    /// harvested, and the base trees no checkout uses; the answer says what was freed and
    /// what was kept, and why.
    pub(super) fn prune(&mut self, token: Token) -> Option<Response> {
        let finished: Vec<(String, u32)> = self
            .tasks
            .values()
            .filter(|t| t.record.state.is_final())
            .map(|t| (t.name.clone(), t.record.attempt))
            .collect();
        let pending = Pending {
            generation: 0,
            job: Job::Prune {
                finished,
                limits: self.settings.config.harvest_limits,
            },
            then: Then::Prune { reply: token },
        };
        self.jobs.submit(Owner::Daemon, pending);
        answer_when_job_ends(&mut self.control, token)
    }

    /// `keel prune`'s job has ended: journal what it removed, answer its client.
    pub(crate) fn on_prune_done(&mut self, finished: Finished, reply: Token) {
        let response = match finished.outcome {
            Ok(JobResult::Pruned { message, removed }) => {
                for (unit, attempt) in removed {
                    self.store
                        .event(&unit, attempt, 0, "checkout-removed", "keel prune");
                    if let Some(task) = self.tasks.get_mut(&unit) {
                        task.checkout_bytes = None;
                        task.disk_use_asked = None;
                    }
                }
                Response::Ok { message }
            }
            Ok(other) => Response::Error {
                message: format!("keel prune: the job answered {other:?}"),
            },
            Err(e) => Response::Error {
                message: format!("keel prune: {e}"),
            },
        };
        self.respond(reply, &response);
    }

    /// `keel diff` showed the task's work with `fingerprint`: recorded in
    /// `tasks/<unit>/reviewed.ron` (atomically), and the unreviewed mark goes if that is the
    /// work the last job saw.
    pub(super) fn mark_reviewed(
        &mut self,
        unit: &str,
        fingerprint: String,
        head: Option<String>,
    ) -> Response {
        if let Err(e) = self.known(unit) {
            return *e;
        }
        let reviewed = crate::checkout::Reviewed {
            fingerprint: fingerprint.clone(),
            head,
            at_ms: crate::state::now_ms(),
        };
        let path = crate::checkout::reviewed_path(&self.store.dirs, unit);
        if let Err(e) = crate::state::write_ron(&path, &reviewed) {
            return Response::Error {
                message: format!("{unit}: cannot record the review: {e}"),
            };
        }
        if let Some(work) = self.tasks.get_mut(unit).and_then(|t| t.work.as_mut()) {
            work.reviewed = Some(fingerprint);
        }
        Response::Ok {
            message: format!("{unit}: reviewed"),
        }
    }
}
