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
    record.timeout = Some(TimeoutStop {
        reason: "ran 2.0s (max_runtime 2.0s)".into(),
        for_good: false,
    });
    record.stop_started_ms = Some(5_000);
    let mut end = Ending {
        note: None,
        ..ending(Some(5_100))
    };
    let why = take_timeout(&mut record, &mut end).map(|t| t.reason);
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
    record.timeout = Some(TimeoutStop {
        reason: "ran 2.0s".into(),
        for_good: true,
    });
    record.stop_started_ms = Some(5_000);
    let mut end = ending(Some(4_900));
    assert_eq!(take_timeout(&mut record, &mut end), None);
    assert_eq!(end.exit, LastExit::Lost);
    // Without a timeout, nothing changes.
    let mut end = ending(Some(9_000));
    assert_eq!(take_timeout(&mut record, &mut end), None);
    assert_eq!(end.exit, LastExit::Lost);
}

#[test]
fn the_total_budget_is_what_the_ended_attempts_left() {
    // 5 s in all; 3.5 s spent by ended attempts; this one started at 10 s.
    assert_eq!(
        judge_total(5_000, 3_500, 10_000, 0, None, 10_500),
        Budget::Left(1_000)
    );
    assert_eq!(
        judge_total(5_000, 3_500, 10_000, 0, None, 11_500),
        Budget::Spent { ran: 5_000 }
    );
    // Frozen time is not counted here either.
    assert_eq!(
        judge_total(5_000, 3_500, 10_000, 60_000, None, 71_000),
        Budget::Left(500)
    );
    assert_eq!(
        judge_total(5_000, 3_500, 10_000, 0, Some(10_200), 99_000),
        Budget::Paused
    );
    // Spent before this attempt ran at all (a budget lowered by an edit): spent at once.
    assert_eq!(
        judge_total(5_000, 7_000, 10_000, 0, None, 10_000),
        Budget::Spent { ran: 7_000 }
    );
}

#[test]
fn the_budget_that_runs_out_first_is_the_one_judged() {
    use Which::*;
    let left = Budget::Left;
    let spent = |ran| Budget::Spent { ran };
    assert_eq!(first_to_run_out(None, None), None);
    assert_eq!(
        first_to_run_out(Some(left(5)), None),
        Some((left(5), Attempt))
    );
    assert_eq!(
        first_to_run_out(None, Some(left(7))),
        Some((left(7), Total))
    );
    assert_eq!(
        first_to_run_out(Some(left(5)), Some(left(7))),
        Some((left(5), Attempt))
    );
    assert_eq!(
        first_to_run_out(Some(left(9)), Some(left(7))),
        Some((left(7), Total))
    );
    // Equal: the total's (it ends the task for good).
    assert_eq!(
        first_to_run_out(Some(left(7)), Some(left(7))),
        Some((left(7), Total))
    );
    assert_eq!(
        first_to_run_out(Some(spent(9)), Some(left(7))),
        Some((spent(9), Attempt))
    );
    assert_eq!(
        first_to_run_out(Some(spent(9)), Some(spent(20))),
        Some((spent(20), Total))
    );
    assert_eq!(
        first_to_run_out(Some(Budget::Paused), Some(Budget::Paused)),
        Some((Budget::Paused, Total))
    );
}
