//! Reconcile on start: what a restarted daemon does with each recorded task. The decision is a
//! pure function of the record and what was observed of the machine; the daemon acts on it.

use super::record::{LastExit, ShimIdentity, TaskRecord, TaskState};
use crate::sandbox::spec::{ExitRecord, ShimRecord};

/// What is known of a recorded task's attempt on this machine now.
#[derive(Clone)]
pub struct Observed {
    pub boot_id: String,
    /// `run/shim.ron`, if present.
    pub shim_record: Option<ShimRecord>,
    /// `run/exit.ron`, if present.
    pub exit_record: Option<ExitRecord>,
    /// Whether the process named by the chosen identity is alive (pid + start time match).
    pub alive: fn(&ShimIdentity) -> bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing was running: keep the record as it is (queued, final, …).
    Keep,
    /// Backoff: arm the timer again at this wall-clock time.
    ArmBackoff { until_ms: u64 },
    /// The shim is alive: take it back.
    Adopt { shim: ShimIdentity },
    /// The attempt ended while nobody watched: settle it through the restart policy.
    Settle {
        exit: LastExit,
        spawn_error: Option<String>,
    },
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
    if let Some(shim) = current_shim(record, observed) {
        if shim.boot_id == observed.boot_id && (observed.alive)(&shim) {
            return Action::Adopt { shim };
        }
    }
    match &observed.exit_record {
        Some(exit) if exit.generation == record.generation => Action::Settle {
            exit: LastExit::Agent(exit.status),
            spawn_error: exit.spawn_error.clone(),
        },
        _ => Action::Settle {
            exit: LastExit::Lost,
            spawn_error: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::spec::AgentStatus;

    fn running(generation: u64, shim: Option<ShimIdentity>) -> TaskRecord {
        let mut r = TaskRecord::new("t", 0);
        r.state = TaskState::Running;
        r.generation = generation;
        r.shim = shim;
        r
    }
    fn id(pid: i32, boot: &str) -> ShimIdentity {
        ShimIdentity {
            pid,
            start_time: 100,
            boot_id: boot.into(),
        }
    }
    fn observed(alive: fn(&ShimIdentity) -> bool) -> Observed {
        Observed {
            boot_id: "boot".into(),
            shim_record: None,
            exit_record: None,
            alive,
        }
    }
    fn exit(generation: u64, code: i32) -> ExitRecord {
        ExitRecord {
            generation,
            attempt: 1,
            status: AgentStatus::Exited(code),
            agent_pid: 5,
            started_ms: 0,
            ended_ms: 1,
            spawn_error: None,
        }
    }

    #[test]
    fn live_shim_is_adopted() {
        let r = running(3, Some(id(10, "boot")));
        assert_eq!(
            decide(&r, &observed(|_| true)),
            Action::Adopt {
                shim: id(10, "boot")
            }
        );
    }

    #[test]
    fn shim_from_another_boot_is_lost_even_if_pid_matches() {
        let r = running(3, Some(id(10, "old-boot")));
        assert_eq!(
            decide(&r, &observed(|_| true)),
            Action::Settle {
                exit: LastExit::Lost,
                spawn_error: None
            }
        );
    }

    #[test]
    fn dead_shim_settles_from_its_exit_record_of_the_same_generation_only() {
        let r = running(3, Some(id(10, "boot")));
        let mut o = observed(|_| false);
        o.exit_record = Some(exit(3, 42));
        assert_eq!(
            decide(&r, &o),
            Action::Settle {
                exit: LastExit::Agent(AgentStatus::Exited(42)),
                spawn_error: None
            }
        );
        o.exit_record = Some(exit(2, 0));
        assert_eq!(
            decide(&r, &o),
            Action::Settle {
                exit: LastExit::Lost,
                spawn_error: None
            }
        );
    }

    #[test]
    fn starting_without_recorded_pid_finds_the_shim_record() {
        let mut r = running(4, None);
        r.state = TaskState::Starting;
        let mut o = observed(|_| true);
        o.shim_record = Some(ShimRecord {
            generation: 4,
            pid: 77,
            start_time: 100,
            boot_id: "boot".into(),
        });
        assert_eq!(
            decide(&r, &o),
            Action::Adopt {
                shim: id(77, "boot")
            }
        );
        // A shim record of an older attempt is not this attempt's shim.
        o.shim_record.as_mut().unwrap().generation = 3;
        assert_eq!(
            decide(&r, &o),
            Action::Settle {
                exit: LastExit::Lost,
                spawn_error: None
            }
        );
    }

    #[test]
    fn idle_states_are_kept_and_backoff_rearmed() {
        let o = observed(|_| panic!("must not probe"));
        for state in [
            TaskState::Queued,
            TaskState::Succeeded,
            TaskState::Failed,
            TaskState::Stopped,
        ] {
            let mut r = TaskRecord::new("t", 0);
            r.state = state;
            assert_eq!(decide(&r, &o), Action::Keep);
        }
        let mut r = TaskRecord::new("t", 0);
        r.state = TaskState::Backoff;
        r.backoff_until_ms = Some(99);
        assert_eq!(decide(&r, &o), Action::ArmBackoff { until_ms: 99 });
    }
}
