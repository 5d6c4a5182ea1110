//! Requests about the daemon itself: `keel health` (answered by the loop: the answer is the
//! proof that it runs, systemd.rs), `keel reload` and `keel shutdown`.

use crate::daemon::{Daemon, Shutdown};
use crate::protocol::Response;

impl Daemon {
    /// `loop_age_ms` is how long this round had run before answering.
    pub(super) fn health(&self) -> Response {
        Response::Health {
            pid: std::process::id() as i32,
            loop_age_ms: self.events.last_tick.elapsed().as_millis() as u64,
            tasks: self.tasks.len(),
        }
    }

    pub(super) fn reload(&mut self) -> Response {
        let config = self.reload_config();
        self.scan_units();
        // What the host lacked may be there now (a user, cgroups): blocked starts go again.
        self.retry_waiting_starts();
        match config {
            Ok(()) => Response::Ok {
                message: format!("reloaded {} units", self.tasks.len()),
            },
            Err(message) => Response::Error { message },
        }
    }

    pub(super) fn shutdown_request(&mut self, keep_tasks: bool) -> Response {
        if keep_tasks && self.instance.under_init.is_some() {
            return Response::Error {
                message: "under keel init, --keep-tasks would end PID 1 and with it every task; to restart the daemon alone, kill it: keel init respawns it and the tasks are re-adopted".into(),
            };
        }
        let kind = if keep_tasks {
            Shutdown::KeepTasks
        } else {
            Shutdown::StopTasks { exit_code: 0 }
        };
        self.begin_shutdown(kind);
        Response::Ok {
            message: if keep_tasks {
                "shutting down; tasks keep running".into()
            } else {
                "shutting down; stopping tasks".into()
            },
        }
    }
}
