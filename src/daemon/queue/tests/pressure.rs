//! The pressure rules one by one: a task whose requests fit waits while keel's tasks are
//! under pressure, says which and how much, and starts once the figures fall.

use super::*;

/// 40% CPU, 10% memory, 40% I/O (the defaults), in hundredths of a percent; pacing off (its
/// rules are in `pacing.rs`).
const THRESHOLDS: PressureThresholds = PressureThresholds {
    cpu: 4000,
    memory: 1000,
    io: 4000,
    settle_ms: 0,
};

fn under(cpu: u32, memory: u32, io: u32) -> PressureCheck {
    PressureCheck {
        figures: Pressure {
            cpu: Some(cpu),
            memory: Some(memory),
            io: Some(io),
        },
        thresholds: Some(THRESHOLDS),
        since_last_start_ms: None,
    }
}

/// A decision with its names copied out of the queue it borrowed.
#[derive(Debug)]
struct Round {
    start: Vec<String>,
    waiting: Vec<(String, WaitReason)>,
}

/// Eight quarter-core tasks, one running: a 2-CPU host with room for all of them.
fn round(pressure: &PressureCheck) -> Round {
    let queued: Vec<QueuedTask> = (1..8)
        .map(|n| task(&format!("t{n}"), 0, n, 250, G / 2))
        .collect();
    let decision = super::super::decide(
        &queued,
        &[res(250, G / 2)],
        0,
        &cap(2, 64, None),
        100,
        LIMIT,
        pressure,
    );
    Round {
        start: decision.start.iter().map(|u| u.to_string()).collect(),
        waiting: (decision.waiting.into_iter())
            .map(|(u, why)| (u.to_string(), why))
            .collect(),
    }
}

#[test]
fn calm_figures_hold_nothing_back() {
    let decision = round(&under(3999, 1000, 0));
    assert_eq!(decision.start.len(), 7, "{decision:?}");
    assert!(decision.waiting.is_empty());
}

#[test]
fn cpu_pressure_above_its_threshold_holds_every_start() {
    let decision = round(&under(6312, 0, 0));
    assert!(decision.start.is_empty(), "{decision:?}");
    assert_eq!(decision.waiting.len(), 7);
    for (_, reason) in &decision.waiting {
        assert_eq!(
            *reason,
            WaitReason::Pressure(
                vec![Over {
                    resource: "cpu",
                    figure: 6312,
                    threshold: 4000
                }]
                .into()
            )
        );
        assert_eq!(reason.to_string(), "cpu pressure 63% > 40%");
    }
}

#[test]
fn at_the_threshold_is_not_above_it() {
    assert_eq!(round(&under(4000, 1000, 4000)).start.len(), 7);
    assert!(round(&under(4001, 0, 0)).start.is_empty());
    assert!(round(&under(0, 1001, 0)).start.is_empty());
    assert!(round(&under(0, 0, 4001)).start.is_empty());
}

#[test]
fn every_resource_above_is_named_in_order() {
    let decision = round(&under(10_000, 2550, 4004));
    let (_, reason) = &decision.waiting[0];
    assert_eq!(
        reason.to_string(),
        "cpu pressure 100% > 40%; memory pressure 25% > 10%; io pressure 40.04% > 40%"
    );
}

#[test]
fn thresholds_with_decimals_read_as_written() {
    let pressure = PressureCheck {
        thresholds: Some(PressureThresholds {
            cpu: 1250,
            ..THRESHOLDS
        }),
        ..under(1251, 0, 0)
    };
    let decision = round(&pressure);
    assert_eq!(
        decision.waiting[0].1.to_string(),
        "cpu pressure 12.51% > 12.5%"
    );
}

#[test]
fn off_or_unread_figures_hold_nothing_back() {
    let off = PressureCheck {
        thresholds: None,
        ..under(10_000, 10_000, 10_000)
    };
    assert_eq!(round(&off).start.len(), 7);
    // A figure that could not be read is no reason to wait; the others still count.
    let mut unread = under(10_000, 10_000, 0);
    unread.figures.cpu = None;
    unread.figures.memory = None;
    assert_eq!(round(&unread).start.len(), 7);
    unread.figures.io = Some(9000);
    assert!(round(&unread).start.is_empty());
}

#[test]
fn with_nothing_running_the_first_starts_whatever_the_pressure() {
    let queued = [small("a", 1), small("b", 2), small("c", 3)];
    let pressure = under(9000, 0, 0);
    let decision = super::super::decide(&queued, &[], 0, &cap(8, 64, None), 10, LIMIT, &pressure);
    assert_eq!(decision.start, ["a"]);
    assert_eq!(
        reason_of(&decision, "b").to_string(),
        "cpu pressure 90% > 40%"
    );
    assert_eq!(reason_of(&decision, "c"), reason_of(&decision, "b"));
}

#[test]
fn requests_that_do_not_fit_say_so_rather_than_pressure() {
    // Each reason is the one that would hold the task back were the other gone: a task
    // that could not start anyway says what it needs, and may hold the line when starved.
    let queued = [task("big", 0, 0, 4 * CPU, G), small("small", 1)];
    let pressure = under(9000, 0, 0);
    let decision = super::super::decide(
        &queued,
        &[res(CPU, G)],
        0,
        &cap(4, 64, None),
        LIMIT,
        LIMIT,
        &pressure,
    );
    assert_eq!(
        reason_of(&decision, "big").to_string(),
        "needs 4 CPU, 3 free"
    );
    assert!(matches!(
        reason_of(&decision, "small"),
        WaitReason::Behind { .. }
    ));
    let decision = super::super::decide(
        &queued,
        &[res(CPU, G)],
        0,
        &cap(4, 64, None),
        0,
        LIMIT,
        &pressure,
    );
    assert_eq!(
        reason_of(&decision, "small").to_string(),
        "cpu pressure 90% > 40%"
    );
    // max_running and never-fits come first, as without pressure.
    let queued = [small("a", 0), task("huge", 0, 1, 64 * CPU, G)];
    let decision = super::super::decide(
        &queued,
        &[res(CPU, G)],
        0,
        &cap(4, 64, Some(1)),
        0,
        LIMIT,
        &pressure,
    );
    assert_eq!(
        reason_of(&decision, "a").to_string(),
        "1 of 1 running (max_running)"
    );
    assert!(matches!(
        reason_of(&decision, "huge"),
        WaitReason::NeverFits(_)
    ));
}

#[test]
fn the_journal_sees_a_pressure_wait_once_while_its_cause_holds() {
    let at = |cpu: u32, io: u32| round(&under(cpu, 0, io)).waiting[0].1.clone();
    // The figure moves at every reading: the same cause.
    assert!(at(6312, 0).same_cause(&at(7100, 0)));
    assert_ne!(at(6312, 0).to_string(), at(7100, 0).to_string());
    // Another resource over, or a different reason: a new cause.
    assert!(!at(6312, 0).same_cause(&at(6312, 5000)));
    let fits = WaitReason::MaxRunning { running: 1, max: 1 };
    assert!(!at(6312, 0).same_cause(&fits));
    assert!(fits.same_cause(&fits.clone()));
    // Other reasons are the same while they are equal...
    let short = |free: u64| WaitReason::Resources {
        cpu: Some(Short { needs: CPU, free }),
        memory: None,
    };
    assert!(short(0).same_cause(&short(0)));
    assert!(!short(0).same_cause(&short(500)));
    // ...and a wait behind a starved task while it reads the same (whole minutes).
    let behind = |unit: &str, waited_ms: u64| WaitReason::Behind {
        unit: unit.into(),
        waited_ms,
    };
    assert!(behind("big", 12 * MIN).same_cause(&behind("big", 12 * MIN + 59_000)));
    assert!(!behind("big", 12 * MIN).same_cause(&behind("big", 13 * MIN)));
    assert!(!behind("big", 12 * MIN).same_cause(&behind("other", 12 * MIN)));
}
