//! `keel start` (queue a finished, stopped or backing-off task again, its restart count
//! cleared) and `keel restart` (stop the attempt, then start again at once).

use super::{not_persisted, unknown_unit};
use crate::daemon::record::{Intent, TaskState};
use crate::daemon::stopping::{stop, Stop};
use crate::daemon::store::transition;
use crate::daemon::Daemon;
use crate::protocol::Response;

impl Daemon {
    pub(super) fn start_request(&mut self, unit: &str) -> Response {
        let Some(task) = self.tasks.get_mut(unit) else {
            return unknown_unit(unit, &self.units);
        };
        if task.unit.is_none() {
            return Response::Error {
                message: format!("{unit}: its unit file is gone or invalid (see keel status)"),
            };
        }
        match task.record.state {
            TaskState::Succeeded | TaskState::Failed | TaskState::Stopped | TaskState::Backoff => {
                task.record.restarts.clear();
                task.record.consecutive_failures = 0;
                task.record.backoff_until_ms = None;
                task.record.reason = None;
                task.record.blocked = None;
                // `max_total_runtime` counts from here.
                task.record.ran_before_ms = 0;
                transition(
                    task,
                    TaskState::Queued,
                    "started by request",
                    &mut self.store,
                );
                self.store.queue_changed = true;
                Response::Ok {
                    message: format!("{unit}: queued"),
                }
            }
            // A start the host refused (or deferred): tried again now, its backoff over.
            TaskState::Queued if task.start_retry_at.is_some() => {
                task.start_retry_at = None;
                task.start_deferrals = 0;
                task.blocked_retries = 0;
                self.store.queue_changed = true;
                Response::Ok {
                    message: format!("{unit}: its start is tried again now"),
                }
            }
            TaskState::Stopping => {
                // A start during a stop: start again once it has stopped (unless removed).
                let timers = &mut self.events.timers;
                if let Stop::NotPersisted = stop(task, Intent::Restart, &mut self.store, timers) {
                    return not_persisted(unit, &self.store.dirs.root);
                }
                Response::Ok {
                    message: format!("{unit}: starts again once stopped"),
                }
            }
            state => Response::Ok {
                message: format!("{unit}: already {state}"),
            },
        }
    }

    pub(super) fn restart_request(&mut self, unit: &str) -> Response {
        let Some(task) = self.tasks.get_mut(unit) else {
            return unknown_unit(unit, &self.units);
        };
        // A restart never removes the task: only `Done`.
        let timers = &mut self.events.timers;
        if let Stop::NotPersisted = stop(task, Intent::Restart, &mut self.store, timers) {
            return not_persisted(unit, &self.store.dirs.root);
        }
        Response::Ok {
            message: format!("{unit}: restarting"),
        }
    }
}
