//! Ending the daemon: an orderly shutdown stops every task (they resume at the next start),
//! `--keep-tasks` leaves them to the next daemon. Under `keel init` a decided shutdown is
//! recorded first (`shutdown.ron`), so that a daemon respawned in the middle finishes it.

use super::{Daemon, Instance};
use crate::state::{self, StateDir};
use serde::{Deserialize, Serialize};

/// Why the loop is ending.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Shutdown {
    /// Stop every task (they resume at the next start), then exit with this code.
    StopTasks { exit_code: i32 },
    /// Leave tasks running, to be re-adopted by the next daemon.
    KeepTasks,
}

/// `state_dir/shutdown.ron`: a shutdown decided under `keel init` (an essential unit ended),
/// so that a daemon respawned in the middle of it finishes it with the same exit code.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShutdownMarker {
    pub exit_code: i32,
    /// Which `keel init` this belongs to (a restarted container starts afresh).
    pub init_instance: String,
}

impl Daemon {
    pub(crate) fn begin_shutdown(&mut self, kind: Shutdown) {
        if self.shutdown.is_some() && kind != Shutdown::KeepTasks {
            return;
        }
        self.shutdown = Some(kind);
        self.notifier.stopping();
        if let Shutdown::StopTasks { exit_code } = kind {
            // Decide, persist, act: a daemon respawned mid-shutdown finishes it.
            self.persist_shutdown(exit_code);
            let names = self.tasks.names();
            for name in names {
                self.interrupt_for_shutdown(&name);
            }
        }
    }

    /// `Some(exit code)` once the shutdown in progress has nothing left to wait for.
    pub(super) fn finished_shutdown(&self) -> Option<i32> {
        match self.shutdown? {
            Shutdown::KeepTasks => Some(0),
            Shutdown::StopTasks { exit_code } => {
                // Adopted or not: a live attempt keeps the daemon (and PID 1) alive.
                let busy = self
                    .tasks
                    .values()
                    .any(|t| t.record.state.has_attempt() && !t.left_running);
                // The ended attempts' harvests and `keel rm`'s removals finish first (each
                // has its deadline); a preparation or a disk-use walk is not waited for.
                use super::jobs::Then;
                let harvesting = self
                    .jobs
                    .any(|p| matches!(p.then, Then::Harvest { .. } | Then::Remove));
                (!busy && !harvesting).then_some(exit_code)
            }
        }
    }

    /// Tell `keel init` that this exit is on purpose (absent file = a crash to recover from).
    fn write_exit_status(&self, code: i32) {
        if let Err(e) = crate::state::atomic_write(
            &self.store.dirs.exit_status_path(),
            format!("{code}\n").as_bytes(),
        ) {
            log::error!("cannot record the exit status: {e}");
        }
    }

    /// The loop is over: tear down the cgroups, tell `keel init` the exit is on purpose.
    pub(super) fn exit(&mut self, code: i32) -> i32 {
        self.teardown_slices();
        self.write_exit_status(code);
        let _ = std::fs::remove_file(self.store.dirs.shutdown_marker_path());
        self.store
            .event("", 0, 0, "daemon-stop", &format!("exit {code}"));
        self.store.sync();
        log::info!("daemon stopped (exit {code})");
        let _ = std::fs::remove_file(self.store.dirs.socket_path());
        code
    }

    /// Record a shutdown decided under `keel init`, before acting on it.
    pub(crate) fn persist_shutdown(&mut self, exit_code: i32) {
        record_shutdown(&self.instance, &self.store.dirs, exit_code);
    }

    /// A shutdown recorded by an earlier daemon under this same `keel init`, to be finished.
    pub(crate) fn resume_shutdown(&mut self) {
        let path = self.store.dirs.shutdown_marker_path();
        let marker: Option<ShutdownMarker> = state::read_ron(&path).ok().flatten();
        match (marker, &self.instance.under_init) {
            (Some(marker), Some(instance)) if &marker.init_instance == instance => {
                log::info!(
                    "resuming the shutdown an earlier daemon began (exit {})",
                    marker.exit_code
                );
                self.begin_shutdown(Shutdown::StopTasks {
                    exit_code: marker.exit_code,
                });
            }
            (Some(_), _) => {
                let _ = std::fs::remove_file(&path);
            }
            (None, _) => {}
        }
    }
}

/// Record a shutdown decided under `keel init` (`instance`), before acting on it.
pub(crate) fn record_shutdown(instance: &Instance, dirs: &StateDir, exit_code: i32) {
    let Some(init_instance) = instance.under_init.clone() else {
        return;
    };
    let marker = ShutdownMarker {
        exit_code,
        init_instance,
    };
    if let Err(e) = state::write_ron(&dirs.shutdown_marker_path(), &marker) {
        log::error!("cannot record the shutdown: {e}");
    }
}
