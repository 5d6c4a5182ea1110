use super::*;
use crate::sys::wait::AgentStatus;
use crate::unit::Dur;

fn backoff() -> Backoff {
    Backoff {
        initial: Dur(Duration::from_secs(1)),
        max: Dur(Duration::from_secs(10)),
        factor: 2.0,
        reset_after: Dur(Duration::from_secs(60)),
    }
}
fn limit(count: u32) -> RestartLimit {
    RestartLimit {
        count,
        within: Dur(Duration::from_secs(3600)),
    }
}
const FAIL: LastExit = LastExit::Agent(AgentStatus::Exited(1));
const OK: LastExit = LastExit::Agent(AgentStatus::Exited(0));

fn run(
    restart: RestartPolicy,
    count: u32,
    history: &History,
    exit: LastExit,
    ran: u64,
    now: u64,
) -> (Decision, History) {
    let b = backoff();
    let l = limit(count);
    let policy = Policy {
        restart,
        backoff: &b,
        limit: &l,
    };
    decide(
        &policy,
        history,
        Intent::None,
        exit,
        Duration::from_secs(ran),
        now,
        0.5,
    )
}

#[test]
fn policies_on_success_and_failure() {
    let h = History::default();
    use RestartPolicy::*;
    assert_eq!(run(Never, 5, &h, OK, 1, 0).0, Decision::Succeeded);
    assert!(matches!(
        run(Never, 5, &h, FAIL, 1, 0).0,
        Decision::Failed { .. }
    ));
    assert_eq!(run(OnFailure, 5, &h, OK, 1, 0).0, Decision::Succeeded);
    assert!(matches!(
        run(OnFailure, 5, &h, FAIL, 1, 0).0,
        Decision::Restart { .. }
    ));
    assert!(matches!(
        run(Always, 5, &h, OK, 1, 0).0,
        Decision::Restart { .. }
    ));
    assert!(matches!(
        run(OnFailure, 5, &h, LastExit::Lost, 1, 0).0,
        Decision::Restart { .. }
    ));
    assert!(matches!(
        run(OnFailure, 5, &h, LastExit::Oom, 1, 0).0,
        Decision::Restart { .. }
    ));
}

#[test]
fn delays_grow_by_factor_and_cap_at_max() {
    let mut h = History::default();
    let mut delays = Vec::new();
    for n in 0..8 {
        let (d, next) = run(RestartPolicy::Always, 100, &h, FAIL, 0, n * 1000);
        match d {
            Decision::Restart { delay } => delays.push(delay.as_secs_f64()),
            other => panic!("{other:?}"),
        }
        h = next;
    }
    assert_eq!(delays, vec![1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0, 10.0]);
}

#[test]
fn jitter_spreads_by_ten_percent_and_never_passes_max() {
    let b = backoff();
    assert_eq!(backoff_delay(&b, 1, 0.0).as_secs_f64(), 1.8);
    assert!((backoff_delay(&b, 1, 0.999).as_secs_f64() - 2.2).abs() < 0.01);
    assert_eq!(backoff_delay(&b, 10, 0.999).as_secs_f64(), 10.0);
}

#[test]
fn long_run_resets_backoff() {
    let h = History {
        restarts: vec![],
        consecutive_failures: 4,
    };
    let (d, next) = run(RestartPolicy::Always, 100, &h, FAIL, 59, 0);
    assert_eq!(
        d,
        Decision::Restart {
            delay: Duration::from_secs(10)
        }
    );
    assert_eq!(next.consecutive_failures, 5);
    let (d, next) = run(RestartPolicy::Always, 100, &h, FAIL, 60, 0);
    assert_eq!(
        d,
        Decision::Restart {
            delay: Duration::from_secs(1)
        }
    );
    assert_eq!(next.consecutive_failures, 1);
}

#[test]
fn limit_counts_restarts_within_the_window() {
    let mut h = History::default();
    for n in 0..3 {
        let (d, next) = run(RestartPolicy::Always, 3, &h, FAIL, 0, n);
        assert!(matches!(d, Decision::Restart { .. }), "restart {n}: {d:?}");
        h = next;
    }
    let (d, after) = run(RestartPolicy::Always, 3, &h, FAIL, 0, 10);
    match d {
        Decision::Failed { reason } => {
            assert!(
                reason.contains("restart limit reached: 3 restarts within 1h"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(after.restarts.len(), 3);
    // An hour later the old restarts have left the window.
    let (d, after) = run(RestartPolicy::Always, 3, &h, FAIL, 0, 3_600_000 + 10);
    assert!(matches!(d, Decision::Restart { .. }));
    assert_eq!(after.restarts, vec![3_600_010]);
}

#[test]
fn healthy_runs_do_not_count_against_the_limit() {
    // Restarts after runs longer than reset_after (60 s) never reach the limit of 3.
    let mut h = History::default();
    for n in 0..10 {
        let (d, next) = run(RestartPolicy::Always, 3, &h, OK, 600, n * 600_000);
        assert!(matches!(d, Decision::Restart { .. }), "exit {n}: {d:?}");
        h = next;
    }
    assert_eq!(h.restarts.len(), 1);
}

#[test]
fn intents_override_the_policy() {
    let b = backoff();
    let l = limit(0);
    let policy = Policy {
        restart: RestartPolicy::Always,
        backoff: &b,
        limit: &l,
    };
    let h = History {
        restarts: vec![1, 2],
        consecutive_failures: 2,
    };
    let z = Duration::ZERO;
    assert_eq!(
        decide(&policy, &h, Intent::Stop, FAIL, z, 0, 0.5).0,
        Decision::Stopped
    );
    assert_eq!(
        decide(&policy, &h, Intent::Remove, FAIL, z, 0, 0.5).0,
        Decision::Remove
    );
    let (d, same) = decide(&policy, &h, Intent::Interrupt, OK, z, 0, 0.5);
    assert_eq!(d, Decision::Interrupted);
    assert_eq!(same, h, "an interruption is not a failure");
    let (d, fresh) = decide(&policy, &h, Intent::Restart, FAIL, z, 0, 0.5);
    assert_eq!(d, Decision::Restart { delay: z });
    assert_eq!(fresh, History::default());
}
