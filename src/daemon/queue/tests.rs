//! Tests of the scheduler: the rules one by one, then invariants over many random queues.

use super::*;

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

fn reason_of<'a>(decision: &'a Decision, unit: &str) -> &'a WaitReason {
    &decision
        .waiting
        .iter()
        .find(|(u, _)| u == unit)
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
            matches!(reason_of(&decision, unit), WaitReason::Behind { unit, .. } if unit == "big")
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
    assert!(matches!(reason_of(&decision, "c"), WaitReason::Behind { unit, .. } if unit == "b"));
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
        ..Resources::default()
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
    assert_eq!(of(1.5), res(1500, 2 * G));
    assert_eq!(of(0.3).cpu_millis, 300);
    assert_eq!(of(0.0001).cpu_millis, 1, "a positive share is never free");
    assert_eq!(of(0.0).cpu_millis, 0);
    assert_eq!(of(f64::NAN).cpu_millis, 0);
    assert_eq!(of(1e300).cpu_millis, u64::MAX);
    assert_eq!(Reservation::of(&Resources::default()), res(CPU, 2 * G));
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
            for unit in &decision.start {
                if unit == "big" {
                    return Some(now);
                }
                let at = queued.iter().position(|t| &t.unit == unit).unwrap();
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

/// splitmix64: a deterministic pseudo-random sequence, good enough to vary test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn invariants_hold_over_random_queues() {
    let mut rng = Rng(0x6b65_656c);
    // How often each outcome occurs: the generator must exercise them all.
    let mut seen = [0usize; 5];
    for case in 0..5000 {
        let capacity = Capacity {
            cpu_millis: 100 * (1 + rng.below(40)),
            memory: (1 + rng.below(16)) * G,
            max_running: (rng.below(3) > 0).then(|| 1 + rng.below(6) as usize),
        };
        let mut running = Vec::new();
        for _ in 0..rng.below(4) {
            running.push(res(100 * rng.below(20), G / 4 * rng.below(16)));
        }
        let now = 100 * MIN;
        let limit = rng.below(40) * MIN;
        let queued: Vec<QueuedTask> = (0..rng.below(12))
            .map(|n| {
                let submitted_ms = rng.below(100) * MIN;
                QueuedTask {
                    unit: format!("u{n}"),
                    priority: rng.below(4) as i32 - 2,
                    submitted_ms,
                    // Whole minutes, as the limit: waits equal to it are common.
                    queued_since_ms: submitted_ms + MIN * rng.below((now - submitted_ms) / MIN + 1),
                    reservation: res(100 * rng.below(30), G / 4 * rng.below(40)),
                }
            })
            .collect();
        let decision = decide(&queued, &running, &capacity, now, limit);
        seen[0] += decision.start.len();
        for (_, reason) in &decision.waiting {
            seen[match reason {
                WaitReason::Resources { .. } => 1,
                WaitReason::NeverFits(_) => 2,
                WaitReason::MaxRunning { .. } => 3,
                WaitReason::Behind { .. } => 4,
            }] += 1;
        }
        check(&queued, &running, &capacity, now, limit, &decision)
            .unwrap_or_else(|e| panic!("case {case}: {e}\n{queued:?}\n{running:?}\n{capacity:?}\nlimit {limit}\n{decision:?}"));
    }
    assert!(
        seen.iter().all(|n| *n > 500),
        "start, resources, never fits, max_running, behind: {seen:?}"
    );
}

/// Every property a decision must have, checked against a walk of the queue in order.
fn check(
    queued: &[QueuedTask],
    running: &[Reservation],
    capacity: &Capacity,
    now: u64,
    limit: u64,
    decision: &Decision,
) -> Result<(), String> {
    let mut sorted: Vec<&QueuedTask> = queued.iter().collect();
    sorted.sort_by_key(|t| {
        (
            std::cmp::Reverse(t.priority),
            t.submitted_ms,
            t.unit.clone(),
        )
    });
    // Each queued task is started or waiting, exactly once, both lists in queue order.
    let started: Vec<&QueuedTask> = sorted
        .iter()
        .copied()
        .filter(|t| decision.start.contains(&t.unit))
        .collect();
    let names = |tasks: &[&QueuedTask]| tasks.iter().map(|t| t.unit.clone()).collect::<Vec<_>>();
    if names(&started) != decision.start {
        return Err("start is not in queue order".into());
    }
    let waiting: Vec<String> = decision.waiting.iter().map(|(u, _)| u.clone()).collect();
    let rest: Vec<&QueuedTask> = sorted
        .iter()
        .copied()
        .filter(|t| !decision.start.contains(&t.unit))
        .collect();
    if names(&rest) != waiting {
        return Err("waiting is not the rest, in queue order".into());
    }
    // Started reservations never exceed what the running ones leave, nor the count max_running.
    let sum = |tasks: &mut dyn Iterator<Item = Reservation>| {
        tasks.fold((0u128, 0u128), |(cpu, mem), r| {
            (cpu + u128::from(r.cpu_millis), mem + u128::from(r.memory))
        })
    };
    let (running_cpu, running_mem) = sum(&mut running.iter().copied());
    let (started_cpu, started_mem) = sum(&mut started.iter().map(|t| t.reservation));
    let left_cpu = u128::from(capacity.cpu_millis).saturating_sub(running_cpu);
    let left_mem = u128::from(capacity.memory).saturating_sub(running_mem);
    if started_cpu > left_cpu || started_mem > left_mem {
        return Err("started reservations exceed capacity".into());
    }
    if let Some(max) = capacity.max_running {
        if started.len() > max.saturating_sub(running.len()) {
            return Err("max_running exceeded".into());
        }
    }
    // Walk the order: every start is allowed, every wait is justified, and nothing behind a
    // starved blocked task starts.
    let (mut free_cpu, mut free_mem) = (left_cpu as u64, left_mem as u64);
    let mut count = running.len();
    let mut starved: Option<&str> = None;
    for task in &sorted {
        let reason = decision.waiting.iter().find(|(u, _)| *u == task.unit);
        let reason = reason.map(|(_, reason)| reason);
        let r = task.reservation;
        let fits = r.cpu_millis <= free_cpu && r.memory <= free_mem;
        let full = capacity.max_running.is_some_and(|max| count >= max);
        let too_big = never_fits(&r, capacity).is_some();
        match reason {
            None => {
                if let Some(holder) = starved {
                    return Err(format!("{} started behind starved {holder}", task.unit));
                }
                if !fits || full || too_big {
                    return Err(format!("{} started without room", task.unit));
                }
                free_cpu -= r.cpu_millis;
                free_mem -= r.memory;
                count += 1;
            }
            Some(WaitReason::NeverFits(_)) if too_big => {}
            Some(WaitReason::MaxRunning { running, max }) if full && !too_big => {
                if (*running, Some(*max)) != (count, capacity.max_running) {
                    return Err(format!("{}: wrong counts", task.unit));
                }
            }
            Some(WaitReason::Behind { unit, .. })
                if !too_big && !full && starved == Some(unit.as_str()) => {}
            Some(WaitReason::Resources { cpu, memory })
                if !fits && !full && !too_big && starved.is_none() =>
            {
                let expect =
                    |needs: u64, free: u64| (needs > free).then_some(Short { needs, free });
                if (*cpu, *memory) != (expect(r.cpu_millis, free_cpu), expect(r.memory, free_mem)) {
                    return Err(format!("{}: wrong shortfall", task.unit));
                }
                if now - task.queued_since_ms >= limit {
                    starved = Some(&task.unit);
                }
            }
            Some(other) => return Err(format!("{}: unjustified reason {other:?}", task.unit)),
        }
    }
    Ok(())
}
