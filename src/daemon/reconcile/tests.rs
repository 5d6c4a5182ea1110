use super::*;

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
fn observed(lock_held: bool) -> Observed {
    Observed {
        boot_id: "boot".into(),
        attempt_lock_held: lock_held,
        shim_record: None,
        exit_record_generation: None,
    }
}

#[test]
fn live_shim_is_adopted() {
    let r = running(3, Some(id(10, "boot")));
    assert_eq!(
        decide(&r, &observed(true)),
        Action::Adopt {
            shim: id(10, "boot")
        }
    );
}

#[test]
fn no_lock_holder_means_the_attempt_is_over() {
    let r = running(3, Some(id(10, "boot")));
    assert_eq!(decide(&r, &observed(false)), Action::Settle);
    let mut stopping = r.clone();
    stopping.state = TaskState::Stopping;
    assert_eq!(decide(&stopping, &observed(false)), Action::Settle);
}

#[test]
fn a_shim_of_an_earlier_boot_is_settled_as_a_reboot() {
    let r = running(3, Some(id(10, "old-boot")));
    assert_eq!(decide(&r, &observed(false)), Action::SettleAfterReboot);
    // Known only from run/shim.ron (the daemon died before recording the pid).
    let mut r = running(3, None);
    r.state = TaskState::Starting;
    let mut o = observed(false);
    o.shim_record = Some(ShimRecord {
        generation: 3,
        pid: 77,
        start_time: 100,
        boot_id: "old-boot".into(),
    });
    assert_eq!(decide(&r, &o), Action::SettleAfterReboot);
    // No shim ever identified itself, nor wrote an exit record: it never began.
    assert_eq!(decide(&r, &observed(false)), Action::StartAgain);
}

#[test]
fn a_recorded_shim_of_another_boot_is_not_adopted() {
    let r = running(3, Some(id(10, "old-boot")));
    assert_eq!(decide(&r, &observed(true)), Action::WaitForShim);
}

#[test]
fn starting_without_recorded_pid_finds_the_shim_record_or_waits_for_it() {
    let mut r = running(4, None);
    r.state = TaskState::Starting;
    let mut o = observed(true);
    // Spawned, but the shim has not written shim.ron yet: never start a second one.
    assert_eq!(decide(&r, &o), Action::WaitForShim);
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
    assert_eq!(decide(&r, &o), Action::WaitForShim);
    // Decided but never spawned (nobody holds the lock, no record of it): started again.
    assert_eq!(decide(&r, &observed(false)), Action::StartAgain);
}

#[test]
fn idle_states_are_kept_and_backoff_rearmed() {
    for state in [
        TaskState::Queued,
        TaskState::Succeeded,
        TaskState::Failed,
        TaskState::Stopped,
    ] {
        let mut r = TaskRecord::new("t", 0);
        r.state = state;
        assert_eq!(decide(&r, &observed(true)), Action::Keep);
    }
    let mut r = TaskRecord::new("t", 0);
    r.state = TaskState::Backoff;
    r.backoff_until_ms = Some(99);
    assert_eq!(
        decide(&r, &observed(false)),
        Action::ArmBackoff { until_ms: 99 }
    );
}

#[test]
fn a_start_that_never_began_starts_again_and_one_that_did_is_settled() {
    let mut starting = running(4, None);
    starting.state = TaskState::Starting;
    assert_eq!(decide(&starting, &observed(false)), Action::StartAgain);
    // Its shim ran and ended (an exit record of its generation): settled as any attempt.
    let ended = Observed {
        exit_record_generation: Some(4),
        ..observed(false)
    };
    assert_eq!(decide(&starting, &ended), Action::Settle);
    // An exit record of an earlier attempt says nothing of this one.
    let older = Observed {
        exit_record_generation: Some(3),
        ..observed(false)
    };
    assert_eq!(decide(&starting, &older), Action::StartAgain);
    // A shim alive: waited for, never started twice.
    assert_eq!(decide(&starting, &observed(true)), Action::WaitForShim);
    // A running attempt without a shim is not a start that never began.
    assert_eq!(decide(&running(4, None), &observed(false)), Action::Settle);
}
