//! Reconcile on start: what a restarted daemon does with each recorded task. The decision is a
//! pure function of the record and what was observed of the machine; the daemon acts on it.

use super::record::{ShimIdentity, TaskRecord, TaskState};
use crate::sandbox::spec::ShimRecord;

/// What is known of a recorded task's attempt on this machine now.
#[derive(Clone)]
pub struct Observed {
    pub boot_id: String,
    /// `run/attempt.lock` is held: a shim of this task is alive (it holds the lock from
    /// before its exec to its exit), even one that has not yet written `shim.ron`.
    pub attempt_lock_held: bool,
    /// `run/shim.ron`, if present.
    pub shim_record: Option<ShimRecord>,
    /// The generation `run/exit.ron` is of, if there is one.
    pub exit_record_generation: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing was running: keep the record as it is (queued, final, …).
    Keep,
    /// Backoff: arm the timer again at this wall-clock time.
    ArmBackoff { until_ms: u64 },
    /// The shim is alive: take it back.
    Adopt { shim: ShimIdentity },
    /// A shim is alive but has not said who it is yet: look again shortly.
    WaitForShim,
    /// The attempt ended while nobody watched: settle it from its exit record (or as lost).
    Settle,
    /// The attempt's shim belonged to an earlier boot: the host rebooted under it. It resumes
    /// (queued again, whatever the restart policy: a reboot is not the agent's failure).
    SettleAfterReboot,
    /// The attempt was decided (`starting`) but never began: no shim of it ever ran (none
    /// alive, none that wrote `shim.ron` or an exit record of its generation) — the daemon
    /// died while preparing its checkout, or just before the spawn. It starts again, and the
    /// attempt is not counted.
    StartAgain,
}

/// The identity of the current attempt's shim: the record's, or the one the shim wrote itself
/// (the daemon may have died between spawning the shim and recording its pid).
pub fn current_shim(record: &TaskRecord, observed: &Observed) -> Option<ShimIdentity> {
    if let Some(shim) = &record.shim {
        return Some(shim.clone());
    }
    observed
        .shim_record
        .as_ref()
        .filter(|s| s.generation == record.generation)
        .map(|s| ShimIdentity {
            pid: s.pid,
            start_time: s.start_time,
            boot_id: s.boot_id.clone(),
        })
}

pub fn decide(record: &TaskRecord, observed: &Observed) -> Action {
    if record.state == TaskState::Backoff {
        return Action::ArmBackoff {
            until_ms: record.backoff_until_ms.unwrap_or(0),
        };
    }
    if !record.state.has_attempt() {
        return Action::Keep;
    }
    if !observed.attempt_lock_held {
        let never_began = record.state == TaskState::Starting
            && current_shim(record, observed).is_none()
            && observed.exit_record_generation != Some(record.generation);
        if never_began {
            return Action::StartAgain;
        }
        // No shim of this task is alive: whatever it did is in its exit record, or lost.
        // A shim known to be of another boot was ended by the reboot, not by its agent.
        let rebooted =
            current_shim(record, observed).is_some_and(|s| s.boot_id != observed.boot_id);
        return if rebooted {
            Action::SettleAfterReboot
        } else {
            Action::Settle
        };
    }
    match current_shim(record, observed) {
        Some(shim) if shim.boot_id == observed.boot_id => Action::Adopt { shim },
        _ => Action::WaitForShim,
    }
}

#[cfg(test)]
mod tests;
