use super::*;
use crate::daemon::record::{Ending, TaskRecord};

const MAX: Ms = 8 * 3_600_000;

#[test]
fn an_attempt_that_never_paused_has_its_budget_less_what_it_ran() {
    assert_eq!(judge(MAX, 1_000, 0, None, 1_000), Budget::Left(MAX));
    assert_eq!(
        judge(MAX, 1_000, 0, None, 61_000),
        Budget::Left(MAX - 60_000)
    );
    assert_eq!(judge(MAX, 1_000, 0, None, 1_000 + MAX - 1), Budget::Left(1));
}

#[test]
fn the_budget_is_spent_at_its_deadline_and_after() {
    assert_eq!(
        judge(MAX, 1_000, 0, None, 1_000 + MAX),
        Budget::Spent { ran: MAX }
    );
    assert_eq!(
        judge(MAX, 1_000, 0, None, 2_000 + MAX),
        Budget::Spent { ran: MAX + 1_000 }
    );
}

#[test]
fn frozen_time_is_not_counted() {
    // Started at 0, ran 2 s, frozen 10 s, ran 1 s: 3 s of a 5 s budget.
    assert_eq!(judge(5_000, 0, 10_000, None, 13_000), Budget::Left(2_000));
    assert_eq!(
        judge(5_000, 0, 10_000, None, 15_000),
        Budget::Spent { ran: 5_000 }
    );
    assert_eq!(ran_for(0, 10_000, None, 13_000), 3_000);
}

#[test]
fn a_paused_attempt_never_runs_out_while_it_is_frozen() {
    // Frozen at 4 s of a 5 s budget; an hour later it still has 1 s.
    assert_eq!(judge(5_000, 0, 0, Some(4_000), 3_604_000), Budget::Paused);
    assert_eq!(ran_for(0, 0, Some(4_000), 3_604_000), 4_000);
    // Even frozen past a budget that an unpaused clock would have spent.
    assert_eq!(judge(5_000, 0, 0, Some(4_000), 9_000), Budget::Paused);
    // Resumed: the frozen hour joins `paused_before`.
    assert_eq!(
        judge(5_000, 0, 3_600_000, None, 3_604_000),
        Budget::Left(1_000)
    );
}

#[test]
fn a_clock_that_reads_before_the_start_counts_nothing() {
    assert_eq!(judge(5_000, 10_000, 0, None, 9_000), Budget::Left(5_000));
    assert_eq!(ran_for(10_000, 50_000, Some(20_000), 9_000), 0);
    // More frozen time than elapsed (a clock disagreement after an adoption): nothing ran.
    assert_eq!(judge(5_000, 0, 99_000, None, 10_000), Budget::Left(5_000));
}

fn ending(ended_ms: Option<u64>) -> Ending {
    Ending {
        ended_ms,
        ..Ending::lost("its shim vanished")
    }
}

#[test]
fn a_timed_out_attempt_settles_as_timeout_with_its_reason() {
    let mut record = TaskRecord::new("t", 0);
    record.timeout = Some("ran 2.0s (max_runtime 2.0s)".into());
    record.stop_started_ms = Some(5_000);
    let mut end = Ending {
        note: None,
        ..ending(Some(5_100))
    };
    let why = take_timeout(&mut record, &mut end);
    assert_eq!(why.as_deref(), Some("ran 2.0s (max_runtime 2.0s)"));
    assert_eq!(end.exit, LastExit::Timeout);
    assert_eq!(end.note.as_deref(), Some("ran 2.0s (max_runtime 2.0s)"));
    assert_eq!(record.timeout, None, "taken once");
    assert!(!LastExit::Timeout.success(), "a failure for the policy");
    assert_eq!(LastExit::Timeout.to_string(), "timeout");
}

#[test]
fn an_agent_that_ended_before_the_stop_keeps_its_own_exit() {
    let mut record = TaskRecord::new("t", 0);
    record.timeout = Some("ran 2.0s".into());
    record.stop_started_ms = Some(5_000);
    let mut end = ending(Some(4_900));
    assert_eq!(take_timeout(&mut record, &mut end), None);
    assert_eq!(end.exit, LastExit::Lost);
    // Without a timeout, nothing changes.
    let mut end = ending(Some(9_000));
    assert_eq!(take_timeout(&mut record, &mut end), None);
    assert_eq!(end.exit, LastExit::Lost);
}
