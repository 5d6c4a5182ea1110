//! `keel stop` (answered once the attempt has ended) and `keel kill` (a signal to the agent,
//! through its shim).

use super::not_persisted;
use crate::daemon::record::Intent;
use crate::daemon::Daemon;
use crate::protocol::Response;
use mio::Token;

impl Daemon {
    pub(super) fn stop_request(&mut self, token: Token, unit: &str) -> Option<Response> {
        if let Err(e) = self.known(unit) {
            return Some(*e);
        }
        if !self.stop_task(unit, Intent::Stop) {
            return Some(not_persisted(unit, &self.store.dirs.root));
        }
        self.answer_when_ended(token, unit)
    }

    pub(super) fn kill_request(&mut self, unit: &str, signal: i32) -> Response {
        if let Err(e) = self.known(unit) {
            return *e;
        }
        let Some(to_shim) = crate::sandbox::spec::signal_for_shim(signal) else {
            return Response::Error {
                message: format!(
                    "{} cannot be sent to a task: use SIGKILL, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH or SIGCONT",
                    crate::unit::signal_name(signal)
                ),
            };
        };
        if self.signal_task(unit, to_shim) {
            Response::Ok {
                message: format!("{unit}: sent {}", crate::unit::signal_name(signal)),
            }
        } else {
            Response::Error {
                message: format!("{unit}: not running"),
            }
        }
    }
}
