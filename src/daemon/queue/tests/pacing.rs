//! Pacing near the thresholds: while a figure is above half its threshold, one start per
//! settle window; a calm machine starts a batch at once; `settle: "0s"` and `pressure: Off`
//! turn it off. And `max_running` slots: a task keel paused holds none.

use super::*;

/// The default thresholds (40% CPU, 10% memory, 40% I/O) and the default 5 s window.
const THRESHOLDS: PressureThresholds = PressureThresholds {
    cpu: 4000,
    memory: 1000,
    io: 4000,
    settle_ms: 5000,
};

fn check(cpu: u32, memory: u32, since_last_start_ms: Option<u64>) -> PressureCheck {
    PressureCheck {
        figures: Pressure {
            cpu: Some(cpu),
            memory: Some(memory),
            io: Some(0),
        },
        thresholds: Some(THRESHOLDS),
        since_last_start_ms,
    }
}

/// Seven quarter-core tasks queued, `running` quarter-core ones running, room for all.
fn round(pressure: &PressureCheck, running: usize) -> (Vec<String>, Vec<(String, WaitReason)>) {
    let queued: Vec<QueuedTask> = (1..8)
        .map(|n| task(&format!("t{n}"), 0, n, 250, G / 2))
        .collect();
    let running = vec![res(250, G / 2); running];
    let decision = super::super::decide(
        &queued,
        &running,
        0,
        &cap(4, 64, None),
        100,
        LIMIT,
        pressure,
    );
    (
        decision.start.iter().map(|u| u.to_string()).collect(),
        (decision.waiting.into_iter())
            .map(|(u, why)| (u.to_string(), why))
            .collect(),
    )
}

#[test]
fn a_calm_machine_starts_a_batch_at_once() {
    // At or under half of every threshold (20% CPU, 5% memory): no pacing, whenever the
    // last start was.
    for since in [None, Some(0), Some(1200), Some(60_000)] {
        for (cpu, memory) in [(0, 0), (2000, 500), (1999, 0)] {
            let (start, waiting) = round(&check(cpu, memory, since), 1);
            assert_eq!(start.len(), 7, "{cpu} {memory} {since:?}: {waiting:?}");
        }
    }
}

#[test]
fn near_a_threshold_one_start_per_settle_window() {
    // 31% CPU, near 40%: the last start 1.2 s ago, inside the 5 s window: nothing starts,
    // and each says why.
    let (start, waiting) = round(&check(3100, 0, Some(1200)), 1);
    assert!(start.is_empty(), "{start:?}");
    assert_eq!(waiting.len(), 7);
    assert_eq!(
        waiting[0].1.to_string(),
        "pacing: last start 1.2s ago (one per 5s), cpu pressure 31% near 40%"
    );
    // The window over (or no start yet): one starts, the rest wait for the next window.
    for since in [Some(5000), Some(90_000), None] {
        let (start, waiting) = round(&check(3100, 0, since), 1);
        assert_eq!(start, ["t1"], "{since:?}");
        assert_eq!(waiting.len(), 6);
        assert_eq!(
            waiting[0].1.to_string(),
            "pacing: last start now (one per 5s), cpu pressure 31% near 40%"
        );
    }
    // Just above half counts; memory too, both named.
    let (start, waiting) = round(&check(2001, 501, Some(0)), 1);
    assert!(start.is_empty());
    assert_eq!(
        waiting[0].1.to_string(),
        "pacing: last start now (one per 5s), cpu pressure 20% near 40%, memory \
         pressure 5% near 10%"
    );
}

#[test]
fn above_a_threshold_pressure_holds_and_pacing_says_nothing() {
    let (start, waiting) = round(&check(4001, 0, Some(60_000)), 1);
    assert!(start.is_empty());
    assert!(
        waiting
            .iter()
            .all(|(_, why)| matches!(why, WaitReason::Pressure(_))),
        "{waiting:?}"
    );
    // One over and another only near: it is the pressure that holds them.
    let (_, waiting) = round(&check(3000, 1100, Some(0)), 1);
    assert_eq!(waiting[0].1.to_string(), "memory pressure 11% > 10%");
}

#[test]
fn with_nothing_running_the_first_starts_and_the_rest_are_paced() {
    // As with pressure: the figure is no task's doing then. Once one runs, the window holds.
    let (start, waiting) = round(&check(3500, 0, Some(100)), 0);
    assert_eq!(start, ["t1"]);
    assert!(
        waiting
            .iter()
            .all(|(_, why)| matches!(why, WaitReason::Pacing { since_ms: 0, .. })),
        "{waiting:?}"
    );
}

#[test]
fn settle_zero_or_pressure_off_turns_pacing_off() {
    let off = PressureCheck {
        thresholds: Some(PressureThresholds {
            settle_ms: 0,
            ..THRESHOLDS
        }),
        ..check(3900, 900, Some(0))
    };
    assert!(off.near().is_empty());
    assert_eq!(round(&off, 1).0.len(), 7);
    let off = PressureCheck {
        thresholds: None,
        ..check(3900, 900, Some(0))
    };
    assert_eq!(round(&off, 1).0.len(), 7);
}

#[test]
fn a_paced_wait_is_one_cause_while_the_same_resources_are_near() {
    let reason = |cpu, memory, since| round(&check(cpu, memory, Some(since)), 1).1[0].1.clone();
    let a = reason(3100, 0, 1200);
    // Another figure, another time since the last start: the same cause (one journal line).
    assert!(a.same_cause(&reason(3800, 100, 3400)));
    // Another resource near, or a wait on pressure: a change of cause.
    assert!(!a.same_cause(&reason(3100, 600, 1200)));
    assert!(!a.same_cause(&reason(4100, 0, 1200)));
}

#[test]
fn a_task_keel_paused_holds_no_max_running_slot() {
    let queued = [small("a", 1), small("b", 2)];
    let running = [res(0, G), res(CPU, G)];
    let capacity = cap(8, 64, Some(2));
    let calm = PressureCheck::default();
    // Both running hold a slot: nothing starts.
    let decision = super::super::decide(&queued, &running, 0, &capacity, 10, LIMIT, &calm);
    assert!(decision.start.is_empty());
    assert_eq!(
        reason_of(&decision, "a").to_string(),
        "2 of 2 running (max_running)"
    );
    // One of them is paused by keel: its slot is free for one.
    let decision = super::super::decide(&queued, &running, 1, &capacity, 10, LIMIT, &calm);
    assert_eq!(decision.start, ["a"]);
    assert_eq!(
        reason_of(&decision, "b").to_string(),
        "2 of 2 running (max_running)"
    );
    // Its memory stays counted all the same.
    let tight = cap(8, 2, Some(2));
    let decision = super::super::decide(&queued, &running, 1, &tight, 10, LIMIT, &calm);
    assert!(decision.start.is_empty());
    assert_eq!(
        reason_of(&decision, "a").to_string(),
        "needs 1G memory, 0 free"
    );
}
