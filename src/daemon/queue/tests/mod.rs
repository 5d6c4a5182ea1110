//! Tests of the scheduler: the rules one by one, then invariants over many random queues
//! (`invariants.rs`, pressure included); the pressure rules one by one are in `pressure.rs`.

use super::*;

mod invariants;
mod pacing;
mod pressure;

const CPU: u64 = 1000;
const G: u64 = 1 << 30;
const MIN: u64 = 60_000;
const LIMIT: u64 = 10 * MIN;

fn task(unit: &str, priority: i32, submitted_ms: u64, cpu_millis: u64, memory: u64) -> QueuedTask {
    QueuedTask {
        unit: unit.into(),
        priority,
        submitted_ms,
        queued_since_ms: submitted_ms,
        reservation: Reservation { cpu_millis, memory },
    }
}

/// A 1-CPU, 1G task queued at `at`.
fn small(unit: &str, at: u64) -> QueuedTask {
    task(unit, 0, at, CPU, G)
}

fn cap(cpus: u64, memory_g: u64, max_running: Option<usize>) -> Capacity {
    Capacity {
        cpu_millis: cpus * CPU,
        memory: memory_g * G,
        max_running,
    }
}

fn res(cpu_millis: u64, memory: u64) -> Reservation {
    Reservation { cpu_millis, memory }
}

/// A round without pressure figures (the rules of requests alone); the pressure rules call
/// `super::decide` with theirs.
fn decide<'a>(
    queued: &'a [QueuedTask],
    running: &[Reservation],
    capacity: &Capacity,
    now_ms: u64,
    starvation_limit_ms: u64,
) -> Decision<'a> {
    super::decide(
        queued,
        running,
        0,
        capacity,
        now_ms,
        starvation_limit_ms,
        &PressureCheck::default(),
    )
}

fn reason_of<'a>(decision: &'a Decision, unit: &str) -> &'a WaitReason {
    &decision
        .waiting
        .iter()
        .find(|(u, _)| *u == unit)
        .unwrap_or_else(|| panic!("{unit} is not waiting: {decision:?}"))
        .1
}

#[test]
fn priority_then_submission_then_name() {
    let queued = [
        small("late", 20),
        small("early", 10),
        task("urgent", 5, 30, CPU, G),
        task("low", -1, 0, CPU, G),
        small("b-tie", 15),
        small("a-tie", 15),
    ];
    let decision = decide(&queued, &[], &cap(64, 64, None), 100, LIMIT);
    assert_eq!(
        decision.start,
        ["urgent", "early", "a-tie", "b-tie", "late", "low"]
    );
    assert!(decision.waiting.is_empty());
}

#[test]
fn two_cpus_three_one_cpu_tasks_two_start_then_the_third() {
    let queued = [small("a", 1), small("b", 2), small("c", 3)];
    let decision = decide(&queued, &[], &cap(2, 64, None), 10, LIMIT);
    assert_eq!(decision.start, ["a", "b"]);
    let reason = reason_of(&decision, "c");
    assert_eq!(
        *reason,
        WaitReason::Resources {
            cpu: Some(Short {
                needs: CPU,
                free: 0
            }),
            memory: None
        }
    );
    assert_eq!(reason.to_string(), "needs 1 CPU, 0 free");

    // `a` and `b` run; nothing more fits. `a` ends: `c` starts.
    let running = [res(CPU, G), res(CPU, G)];
    assert!(decide(&queued[2..], &running, &cap(2, 64, None), 20, LIMIT)
        .start
        .is_empty());
    let decision = decide(&queued[2..], &running[1..], &cap(2, 64, None), 30, LIMIT);
    assert_eq!(decision.start, ["c"]);
    assert!(decision.waiting.is_empty());
}

#[test]
fn fractional_cpu_shows_what_is_free() {
    let queued = [task("big", 0, 1, 4 * CPU, G)];
    let decision = decide(&queued, &[res(2500, G)], &cap(4, 64, None), 10, LIMIT);
    assert_eq!(
        reason_of(&decision, "big").to_string(),
        "needs 4 CPU, 1.5 free"
    );
}

#[test]
fn memory_bound() {
    let queued = [task("a", 0, 1, 100, 3 * G), task("b", 0, 2, 100, 3 * G)];
    let running = [res(100, 5 * G + G / 4 * 3)]; // 5.75G of 8G: 2.25G free
    let decision = decide(&queued, &running, &cap(8, 8, None), 10, LIMIT);
    assert!(decision.start.is_empty());
    assert_eq!(
        reason_of(&decision, "a").to_string(),
        "needs 3G memory, 2.2G free"
    );
    // Room for one only.
    let decision = decide(&queued, &[], &cap(8, 5, None), 10, LIMIT);
    assert_eq!(decision.start, ["a"]);
    assert_eq!(
        reason_of(&decision, "b").to_string(),
        "needs 3G memory, 2G free"
    );
}

#[test]
fn short_of_both_says_both() {
    let queued = [task("a", 0, 1, 3 * CPU, 4 * G)];
    let decision = decide(&queued, &[res(CPU, G)], &cap(3, 4, None), 10, LIMIT);
    assert_eq!(
        reason_of(&decision, "a").to_string(),
        "needs 3 CPU, 2 free; needs 4G memory, 3G free"
    );
}

#[test]
fn max_running() {
    let queued = [small("a", 1), small("b", 2), small("c", 3)];
    let decision = decide(&queued, &[res(0, 0)], &cap(64, 64, Some(2)), 10, LIMIT);
    assert_eq!(decision.start, ["a"]);
    assert_eq!(
        reason_of(&decision, "b").to_string(),
        "2 of 2 running (max_running)"
    );
    let four = [res(0, 0); 4];
    let decision = decide(&queued, &four, &cap(64, 64, Some(4)), 10, LIMIT);
    assert!(decision.start.is_empty());
    assert_eq!(
        reason_of(&decision, "a").to_string(),
        "4 of 4 running (max_running)"
    );
    // More running than allowed (max_running lowered): nothing starts, no underflow.
    let decision = decide(&queued, &four, &cap(64, 64, Some(1)), 10, LIMIT);
    assert!(decision.start.is_empty());
    assert_eq!(decision.waiting.len(), 3);
}

#[test]
fn small_passes_blocked_large_before_starvation_limit_not_after() {
    let big = task("big", 5, 0, 2 * CPU, G);
    let queued = [big, small("small", 1)];
    let running = [res(CPU, G)];
    // big has waited 9m59.999s: small may pass.
    let decision = decide(&queued, &running, &cap(2, 64, None), LIMIT - 1, LIMIT);
    assert_eq!(decision.start, ["small"]);
    assert_eq!(
        reason_of(&decision, "big").to_string(),
        "needs 2 CPU, 1 free"
    );
    // Exactly at the limit, big holds the line.
    let decision = decide(&queued, &running, &cap(2, 64, None), LIMIT, LIMIT);
    assert!(decision.start.is_empty());
    assert_eq!(
        *reason_of(&decision, "small"),
        WaitReason::Behind {
            unit: "big".into(),
            waited_ms: LIMIT
        }
    );
    let decision = decide(
        &queued,
        &running,
        &cap(2, 64, None),
        12 * MIN + 5_000,
        LIMIT,
    );
    assert_eq!(
        reason_of(&decision, "small").to_string(),
        "behind `big` (waiting 12m, past starvation_limit)"
    );
}

#[test]
fn waited_counts_from_queued_since_not_submission() {
    // Submitted long ago (its place in the order), requeued a minute ago (e.g. after a
    // restart): it has waited a minute, so it does not hold the line.
    let mut big = task("big", 0, 0, 2 * CPU, G);
    big.queued_since_ms = 59 * MIN;
    let queued = [big, small("small", MIN)];
    let decision = decide(&queued, &[res(CPU, G)], &cap(2, 64, None), 60 * MIN, LIMIT);
    assert_eq!(decision.start, ["small"]);
}

#[test]
fn starved_task_holds_the_line_until_capacity_frees() {
    let queued = [
        task("first", 9, 0, CPU, G), // ahead of the starved one: unaffected
        task("big", 5, 0, 3 * CPU, G),
        small("s1", 1),
        small("s2", 2),
    ];
    let capacity = cap(4, 64, None);
    let now = 30 * MIN;
    // 2 of 4 CPUs in use: first starts (1 left), big (3) does not fit, and holds the line.
    let decision = decide(&queued, &[res(2 * CPU, G)], &capacity, now, LIMIT);
    assert_eq!(decision.start, ["first"]);
    for unit in ["s1", "s2"] {
        assert!(
            matches!(reason_of(&decision, unit), WaitReason::Behind { unit, .. } if &**unit == "big")
        );
    }
    // What runs ends: big starts, and s1 with the CPU left.
    let decision = decide(&queued[1..], &[], &capacity, now + MIN, LIMIT);
    assert_eq!(decision.start, ["big", "s1"]);
    assert_eq!(
        reason_of(&decision, "s2").to_string(),
        "needs 1 CPU, 0 free"
    );
}

#[test]
fn the_first_starved_task_holds_the_line() {
    // a: blocked but not starved; b: blocked and starved; c: would fit.
    let mut a = task("a", 2, 0, 4 * CPU, G);
    a.queued_since_ms = 25 * MIN;
    let queued = [a, task("b", 1, 0, 3 * CPU, G), small("c", 0)];
    let decision = decide(
        &queued,
        &[res(2 * CPU, G)],
        &cap(4, 64, None),
        30 * MIN,
        LIMIT,
    );
    assert!(decision.start.is_empty());
    assert!(matches!(
        reason_of(&decision, "a"),
        WaitReason::Resources { .. }
    ));
    assert!(matches!(reason_of(&decision, "c"), WaitReason::Behind { unit, .. } if &**unit == "b"));
}

#[test]
fn zero_starvation_limit_is_strict_order() {
    let queued = [task("big", 0, 0, 2 * CPU, G), small("small", 1)];
    let decision = decide(&queued, &[res(CPU, G)], &cap(2, 64, None), 0, 0);
    assert!(decision.start.is_empty());
}

#[test]
fn ten_tenths_fit_one_cpu() {
    let tenth = Reservation::of(&Resources {
        cpu: 0.1,
        memory: crate::unit::Size(1 << 20),
        pids: 64,
        // Limits are the kernel's: the reservation is the requests alone.
        cpu_limit: Some(8.0),
        memory_limit: Some(crate::unit::Size(1 << 30)),
        disk: None,
    });
    assert_eq!(tenth.cpu_millis, 100);
    let one = Capacity {
        cpu_millis: cpu_millis(1.0),
        memory: G,
        max_running: None,
    };
    let queued: Vec<QueuedTask> = (0..11)
        .map(|n| QueuedTask {
            unit: format!("t{n:02}"),
            priority: 0,
            submitted_ms: n,
            queued_since_ms: n,
            reservation: tenth,
        })
        .collect();
    let decision = decide(&queued, &[], &one, 100, LIMIT);
    assert_eq!(decision.start.len(), 10);
    assert_eq!(
        reason_of(&decision, "t10").to_string(),
        "needs 0.1 CPU, 0 free"
    );
    // The same, counted as running.
    assert!(decide(&queued[10..], &[tenth; 10], &one, 100, LIMIT)
        .start
        .is_empty());
    assert_eq!(
        decide(&queued[10..], &[tenth; 9], &one, 100, LIMIT).start,
        ["t10"]
    );
}

#[test]
fn reservation_of_resources() {
    let of = |cpu: f64| {
        Reservation::of(&Resources {
            cpu,
            ..Resources::default()
        })
    };
    // The requests, whatever the limits: the default memory request is 512M.
    assert_eq!(of(1.5), res(1500, G / 2));
    let limited = Resources {
        cpu: 0.25,
        cpu_limit: Some(4.0),
        memory_limit: Some(crate::unit::Size(8 * G)),
        ..Resources::default()
    };
    assert_eq!(Reservation::of(&limited), res(250, G / 2));
    assert_eq!(of(0.3).cpu_millis, 300);
    assert_eq!(of(0.0001).cpu_millis, 1, "a positive share is never free");
    assert_eq!(of(0.0).cpu_millis, 0);
    assert_eq!(of(f64::NAN).cpu_millis, 0);
    assert_eq!(of(1e300).cpu_millis, u64::MAX);
    assert_eq!(Reservation::of(&Resources::default()), res(250, G / 2));
}

#[test]
fn never_fits_names_the_numbers() {
    let capacity = cap(2, 8, None);
    assert_eq!(never_fits(&res(2 * CPU, 8 * G), &capacity), None);
    assert_eq!(
        never_fits(&res(4 * CPU, G), &capacity).unwrap(),
        "needs 4 CPU but capacity is 2 CPU (keel.ron capacity.cpu)"
    );
    let odd = Capacity {
        cpu_millis: 1999,
        memory: crate::unit::parse_size("7.2G").unwrap(),
        max_running: None,
    };
    assert_eq!(
        never_fits(&res(2001, 16 * G), &odd).unwrap(),
        "needs 2.01 CPU but capacity is 1.99 CPU (keel.ron capacity.cpu); \
         needs 16G memory but capacity is 7.2G (keel.ron capacity.memory)"
    );
}

#[test]
fn a_task_that_can_never_fit_waits_without_holding_the_line() {
    // Capacity lowered (keel.ron edited) after big was queued.
    let queued = [task("big", 5, 0, 8 * CPU, G), small("small", 1)];
    let decision = decide(&queued, &[], &cap(2, 64, Some(0)), 60 * MIN, LIMIT);
    assert_eq!(
        reason_of(&decision, "big").to_string(),
        "needs 8 CPU but capacity is 2 CPU (keel.ron capacity.cpu)"
    );
    let decision = decide(&queued, &[], &cap(2, 64, None), 60 * MIN, LIMIT);
    assert_eq!(decision.start, ["small"]);
}

#[test]
fn over_committed_capacity_leaves_nothing_free() {
    let queued = [small("a", 1), task("free", 0, 2, 0, 0)];
    let running = [res(u64::MAX, u64::MAX), res(u64::MAX, 1)];
    let decision = decide(&queued, &running, &cap(2, 2, None), 10, LIMIT);
    // A task that reserves nothing still starts.
    assert_eq!(decision.start, ["free"]);
    assert_eq!(
        reason_of(&decision, "a").to_string(),
        "needs 1 CPU, 0 free; needs 1G memory, 0 free"
    );
}

/// Without starvation_limit, a stream of small tasks keeps a big one waiting forever; with
/// it, the big one starts once it has waited the limit and what ran has finished.
#[test]
fn starvation_limit_bounds_the_wait_of_a_big_task_among_a_stream_of_small_ones() {
    let simulate = |limit: u64| -> Option<u64> {
        let capacity = cap(2, 64, None);
        // (unit, ends at) of what runs; a 1-CPU task arrives every minute and runs 3 minutes.
        let mut running: Vec<(String, u64, Reservation)> = vec![
            ("r1".into(), MIN, res(CPU, G)),
            ("r2".into(), 2 * MIN, res(CPU, G)),
        ];
        let mut queued = vec![task("big", 0, 0, 2 * CPU, G)];
        for minute in 0..120 {
            let now = minute * MIN;
            running.retain(|(_, ends, _)| *ends > now);
            queued.push(small(&format!("s{minute:03}"), now));
            let held: Vec<Reservation> = running.iter().map(|(_, _, r)| *r).collect();
            let decision = decide(&queued, &held, &capacity, now, limit);
            let started: Vec<String> = decision.start.iter().map(|u| u.to_string()).collect();
            for unit in started {
                if unit == "big" {
                    return Some(now);
                }
                let at = queued.iter().position(|t| t.unit == unit).unwrap();
                let started = queued.remove(at);
                running.push((started.unit, now + 3 * MIN, started.reservation));
            }
        }
        None
    };
    assert_eq!(simulate(u64::MAX), None);
    let started = simulate(LIMIT).expect("big starts");
    assert!((LIMIT..=LIMIT + 3 * MIN).contains(&started), "{started}");
}
