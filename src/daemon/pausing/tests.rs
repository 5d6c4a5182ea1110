use super::*;

#[test]
fn only_a_live_running_or_stalled_attempt_is_paused() {
    assert_eq!(pause_refusal(TaskState::Running, true, false), None);
    assert_eq!(pause_refusal(TaskState::Stalled, true, false), None);
    let refused = |state, live, paused| pause_refusal(state, live, paused).unwrap_or_default();
    assert_eq!(refused(TaskState::Running, true, true), "already paused");
    assert!(refused(TaskState::Running, false, false).contains("not adopted yet"));
    assert!(refused(TaskState::Starting, true, false).starts_with("starting"));
    assert!(refused(TaskState::Stopping, true, false).starts_with("stopping"));
    for state in [
        TaskState::Queued,
        TaskState::Backoff,
        TaskState::Succeeded,
        TaskState::Failed,
        TaskState::Stopped,
    ] {
        let why = refused(state, false, false);
        assert!(
            why.starts_with(state.as_str()) && why.contains("nothing to pause"),
            "{state}: {why}"
        );
    }
}

#[test]
fn a_persons_pause_is_resumed_only_by_a_person() {
    assert!(may_resume(PauseOrigin::Request, PauseOrigin::Request));
    assert!(!may_resume(PauseOrigin::Request, PauseOrigin::Keel));
    assert!(may_resume(PauseOrigin::Keel, PauseOrigin::Keel));
    assert!(may_resume(PauseOrigin::Keel, PauseOrigin::Request));
}

#[test]
fn cgroup_events_say_frozen_only_with_frozen_1() {
    assert!(freezer::events_say_frozen("populated 1\nfrozen 1\n"));
    assert!(!freezer::events_say_frozen("populated 1\nfrozen 0\n"));
    assert!(!freezer::events_say_frozen("populated 1\n"));
    assert!(!freezer::events_say_frozen("frozen_x 1\nfrozen 0"));
    assert!(!freezer::events_say_frozen(""));
}

#[test]
fn a_pause_record_of_an_older_keel_reads_as_a_persons() {
    let pause: Pause = ron::from_str(r#"(since_ms: 5, reason: "keel pause")"#).unwrap();
    assert_eq!(pause.origin, PauseOrigin::Request);
    let record = crate::daemon::record::TaskRecord::new("t", 0);
    let text = ron::to_string(&record).unwrap();
    let back: crate::daemon::record::TaskRecord = ron::from_str(&text).unwrap();
    assert_eq!(back.paused, None);
    assert_eq!(back.paused_ms, 0);
}
