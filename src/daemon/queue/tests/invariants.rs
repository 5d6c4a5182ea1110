//! Invariants of the scheduler over many random queues, pressure included: every decision
//! is checked against a walk of the queue in order.

use super::*;

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
    let mut seen = [0usize; 7];
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
        // Figures around the thresholds (some unread), thresholds sometimes Off.
        let mut figure = || (rng.below(5) > 0).then(|| 500 * rng.below(12) as u32);
        let figures = Pressure {
            cpu: figure(),
            memory: figure(),
            io: figure(),
        };
        let pressure = PressureCheck {
            figures,
            thresholds: (rng.below(4) > 0).then(|| PressureThresholds {
                cpu: 4000,
                memory: 1000 + 2000 * rng.below(3) as u32,
                io: 4000,
                // Pacing off now and then; windows of whole seconds, as the clock below.
                settle_ms: 1000 * rng.below(10),
            }),
            since_last_start_ms: (rng.below(4) > 0).then(|| 1000 * rng.below(8)),
        };
        // Some of the running tasks are paused by keel: they hold no max_running slot.
        let slotless = rng.below(running.len() as u64 + 1) as usize;
        let decision = super::super::decide(
            &queued, &running, slotless, &capacity, now, limit, &pressure,
        );
        seen[0] += decision.start.len();
        for (_, reason) in &decision.waiting {
            seen[match reason {
                WaitReason::Resources { .. } => 1,
                WaitReason::NeverFits(_) => 2,
                WaitReason::MaxRunning { .. } => 3,
                WaitReason::Behind { .. } => 4,
                WaitReason::Pressure(_) => 5,
                WaitReason::Pacing { .. } => 6,
                WaitReason::Start(_) | WaitReason::Held { .. } => {
                    panic!("decide never gives the daemon's own reasons: {reason:?}")
                }
            }] += 1;
        }
        let round = (&capacity, now, limit, &pressure);
        check(&queued, (&running, slotless), round, &decision)
            .unwrap_or_else(|e| panic!("case {case}: {e}\n{queued:?}\n{running:?} ({slotless} slotless)\n{capacity:?}\nlimit {limit}\n{pressure:?}\n{decision:?}"));
    }
    assert!(
        seen.iter().all(|n| *n > 250),
        "start, resources, never fits, max_running, behind, pressure, pacing: {seen:?}"
    );
}

/// Every property a decision must have, checked against a walk of the queue in order.
fn check(
    queued: &[QueuedTask],
    (running, slotless): (&[Reservation], usize),
    (capacity, now, limit, pressure): (&Capacity, u64, u64, &PressureCheck),
    decision: &Decision,
) -> Result<(), String> {
    let over = pressure.over();
    let near = pressure.near();
    let settle = pressure.thresholds.map_or(0, |t| t.settle_ms);
    // Pacing off: nothing is near.
    if !near.is_empty() && settle == 0 {
        return Err(format!("near {near:?} with pacing off"));
    }
    let slots_held = running.len() - slotless;
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
        .filter(|t| decision.start.contains(&t.unit.as_str()))
        .collect();
    let names = |tasks: &[&QueuedTask]| tasks.iter().map(|t| t.unit.clone()).collect::<Vec<_>>();
    if names(&started) != decision.start {
        return Err("start is not in queue order".into());
    }
    let waiting: Vec<String> = decision
        .waiting
        .iter()
        .map(|(u, _)| u.to_string())
        .collect();
    let rest: Vec<&QueuedTask> = sorted
        .iter()
        .copied()
        .filter(|t| !decision.start.contains(&t.unit.as_str()))
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
        if started.len() > max.saturating_sub(slots_held) {
            return Err("max_running exceeded".into());
        }
    }
    // Walk the order: every start is allowed, every wait is justified, and nothing behind a
    // starved blocked task starts.
    let (mut free_cpu, mut free_mem) = (left_cpu as u64, left_mem as u64);
    let mut count = slots_held;
    let mut starved: Option<&str> = None;
    let mut since = pressure.since_last_start_ms;
    for task in &sorted {
        let reason = decision.waiting.iter().find(|(u, _)| *u == task.unit);
        let reason = reason.map(|(_, reason)| reason);
        let r = task.reservation;
        let fits = r.cpu_millis <= free_cpu && r.memory <= free_mem;
        let full = capacity.max_running.is_some_and(|max| count >= max);
        let too_big = never_fits(&r, capacity).is_some();
        // Pressure holds a task back only while something of keel's runs.
        let pressed = !over.is_empty() && count > 0;
        // Near a threshold, one start per settle window (while something runs).
        let paced = !near.is_empty() && count > 0 && since.is_some_and(|s| s < settle);
        match reason {
            None => {
                if let Some(holder) = starved {
                    return Err(format!("{} started behind starved {holder}", task.unit));
                }
                if !fits || full || too_big {
                    return Err(format!("{} started without room", task.unit));
                }
                if pressed {
                    return Err(format!("{} started under pressure", task.unit));
                }
                if paced {
                    return Err(format!("{} started inside the settle window", task.unit));
                }
                since = Some(0);
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
                if !too_big && !full && starved == Some(&**unit) => {}
            Some(WaitReason::Pressure(named))
                if fits && pressed && !full && !too_big && starved.is_none() =>
            {
                if **named != *over {
                    return Err(format!("{}: wrong pressure figures", task.unit));
                }
            }
            Some(WaitReason::Pacing {
                since_ms,
                settle_ms,
                near: named,
            }) if fits && paced && !pressed && !full && !too_big && starved.is_none() => {
                if (Some(*since_ms), *settle_ms, &**named) != (since, settle, &near[..]) {
                    return Err(format!("{}: wrong pacing figures", task.unit));
                }
            }
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
