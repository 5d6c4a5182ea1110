//! `keel stop` (answered once the attempt has ended) and `keel kill` (a signal to the agent,
//! through its shim).

use super::{answer_when_ended, not_persisted, unknown_unit};
use crate::daemon::record::Intent;
use crate::daemon::stopping::{signal_shim, stop, Stop};
use crate::daemon::Daemon;
use crate::protocol::Response;
use mio::Token;

impl Daemon {
    pub(super) fn stop_request(&mut self, token: Token, unit: &str) -> Option<Response> {
        let Some(task) = self.tasks.get_mut(unit) else {
            return Some(unknown_unit(unit, &self.units));
        };
        // A stop never removes the task: only `Done`.
        let stopped = stop(task, Intent::Stop, &mut self.store, &mut self.events.timers);
        if let Stop::NotPersisted = stopped {
            return Some(not_persisted(unit, &self.store.dirs.root));
        }
        let generation = task.record.generation;
        answer_when_ended(&mut self.control, token, unit, generation)
    }

    pub(super) fn kill_request(&mut self, unit: &str, signal: i32) -> Response {
        let Some(task) = self.tasks.get_mut(unit) else {
            return unknown_unit(unit, &self.units);
        };
        if task.record.paused.is_some() && task.shim.is_some() {
            // Its shim is frozen too: the signal would wait for the resume.
            return Response::Error {
                message: format!(
                    "{unit}: paused: its processes are frozen and would see {} only at the \
                     resume; keel resume it first, or keel stop it (which thaws it)",
                    crate::fmt::signal_name(signal)
                ),
            };
        }
        let Some(to_shim) = crate::sandbox::spec::signal_for_shim(signal) else {
            return Response::Error {
                message: format!(
                    "{} cannot be sent to a task: use SIGKILL, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH or SIGCONT",
                    crate::fmt::signal_name(signal)
                ),
            };
        };
        if signal_shim(task, to_shim) {
            Response::Ok {
                message: format!("{unit}: sent {}", crate::fmt::signal_name(signal)),
            }
        } else {
            Response::Error {
                message: format!("{unit}: not running"),
            }
        }
    }
}
