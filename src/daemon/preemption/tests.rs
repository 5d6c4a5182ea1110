use super::*;

impl Room {
    /// Room of `cpu` millicores, no count limit.
    fn cpu(cpu: u64) -> Room {
        Room { cpu, slots: None }
    }
}

fn task(unit: &str, priority: i32, preemptible: bool, since_ms: u64, cpu_millis: u64) -> Candidate {
    Candidate {
        unit: unit.into(),
        priority,
        preemptible,
        since_ms,
        cpu_millis,
    }
}

fn waiter(unit: &str, priority: i32, cpu_short: u64, memory_short: u64) -> Waiter {
    Waiter {
        unit: unit.into(),
        priority,
        cpu_short,
        memory_short,
        needs_slot: false,
        waits_for_host: false,
    }
}

fn paused(actions: &[Action]) -> Vec<&str> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Pause { unit, .. } => Some(unit.as_str()),
            Action::Resume { .. } => None,
        })
        .collect()
}

fn resumed(actions: &[Action]) -> Vec<&str> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Resume { unit, .. } => Some(unit.as_str()),
            Action::Pause { .. } => None,
        })
        .collect()
}

/// One task not preemptible, three below priority 5 (two of one priority, started one after
/// the other), and `equal` at priority 5 with `equal_cpu`.
fn five_running(equal_cpu: u64) -> [Candidate; 5] {
    [
        task("keep", -5, false, 0, 1000),
        task("low-old", -1, true, 10, 500),
        task("low-new", -1, true, 20, 500),
        task("lower", -2, true, 30, 250),
        task("equal", 5, true, 40, equal_cpu),
    ]
}

#[test]
fn the_lowest_priority_newest_preemptible_tasks_go_first_until_the_need_is_covered() {
    let running = five_running(4000);
    let actions = decide(
        &running,
        &[],
        &[waiter("urgent", 5, 600, 0)],
        Room::cpu(0),
        None,
        true,
    );
    assert_eq!(paused(&actions), ["lower", "low-new"]);
    match &actions[0] {
        Action::Pause { why, .. } => assert_eq!(why, "preempted for `urgent` (priority 5 > -2)"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn nobody_is_paused_when_it_would_not_make_room_or_memory_is_short() {
    let running = [task("a", 0, true, 0, 500), task("b", 0, false, 0, 4000)];
    let pauses = |w: Waiter| decide(&running, &[], &[w], Room::cpu(0), None, true);
    // All preemptible together free 500 of the 1000 needed.
    assert!(pauses(waiter("w", 1, 1000, 0)).is_empty());
    // Memory is short: a frozen task keeps its pages.
    assert!(pauses(waiter("w", 1, 100, 1 << 30)).is_empty());
    // CPU fits: the waiter waits for something else.
    assert!(pauses(waiter("w", 1, 0, 0)).is_empty());
    // Nothing below its priority.
    assert!(pauses(waiter("w", 0, 100, 0)).is_empty());
}

#[test]
fn memory_pressure_pauses_one_lowest_task_a_round() {
    let running = [
        task("a", 0, true, 0, 500),
        task("b", -1, true, 0, 500),
        task("c", -9, false, 0, 500),
    ];
    let high = MemoryPressure {
        percent: 55.0,
        threshold: 40.0,
    };
    let actions = decide(&running, &[], &[], Room::cpu(0), Some(high), true);
    assert_eq!(paused(&actions), ["b"]);
    match &actions[0] {
        Action::Pause { why, .. } => {
            assert_eq!(why, "memory pressure 55% > 40% (preemptible, priority -1)")
        }
        other => panic!("{other:?}"),
    }
    // Only non-preemptible tasks: nothing to do.
    assert!(decide(&running[2..], &[], &[], Room::cpu(0), Some(high), true).is_empty());
}

#[test]
fn resume_the_highest_first_once_room_returns_and_pressure_has_fallen() {
    let preempted = [
        task("p-low", -1, true, 10, 500),
        task("p-high-late", 3, true, 30, 500),
        task("p-high-early", 3, true, 20, 500),
    ];
    let actions = decide(&[], &preempted, &[], Room::cpu(500), None, true);
    assert_eq!(resumed(&actions), ["p-high-early"]);
    // Not while a task of higher priority waits for capacity.
    assert!(decide(
        &[],
        &preempted,
        &[waiter("w", 4, 100, 0)],
        Room::cpu(500),
        None,
        true
    )
    .is_empty());
    // A waiter of lower priority does not hold it.
    assert_eq!(
        resumed(&decide(
            &[],
            &preempted,
            &[waiter("w", 2, 100, 0)],
            Room::cpu(500),
            None,
            true
        )),
        ["p-high-early"]
    );
    // Not without room for its request.
    assert!(decide(&[], &preempted, &[], Room::cpu(499), None, true).is_empty());
    // Hysteresis: memory pressure under the threshold but not under half of it.
    let p = |percent| MemoryPressure {
        percent,
        threshold: 40.0,
    };
    assert!(decide(&[], &preempted, &[], Room::cpu(500), Some(p(25.0)), true).is_empty());
    assert_eq!(
        resumed(&decide(
            &[],
            &preempted,
            &[],
            Room::cpu(500),
            Some(p(19.0)),
            true
        )),
        ["p-high-early"]
    );
}

#[test]
fn a_pause_round_resumes_nothing() {
    let running = [task("low", -1, true, 0, 1000)];
    let preempted = [task("other", -1, true, 0, 100)];
    let actions = decide(
        &running,
        &preempted,
        &[waiter("w", 1, 500, 0)],
        Room::cpu(5000),
        None,
        true,
    );
    assert_eq!(paused(&actions), ["low"]);
    assert!(resumed(&actions).is_empty());
}

#[test]
fn the_first_waiter_short_of_capacity_is_the_one_served() {
    let running = [task("low", -1, true, 0, 1000)];
    // The first waits for something else (pressure, the line held: nothing short): the
    // next, short of CPU, is served.
    let waiters = [waiter("elsewise", 9, 0, 0), waiter("short", 1, 500, 0)];
    let actions = decide(&running, &[], &waiters, Room::cpu(0), None, true);
    assert_eq!(paused(&actions), ["low"]);
    // A waiter of higher priority keeps a preempted task paused only if CPU (or a slot) is
    // what it lacks and not memory: one short of memory (the frozen task's pages are
    // counted either way), or waiting for something else, would wait the same.
    let preempted = [task("p", 0, true, 0, 100)];
    for other in [
        waiter("elsewise", 9, 0, 0),
        waiter("memory", 9, 100, 1 << 30),
    ] {
        assert_eq!(
            resumed(&decide(
                &[],
                &preempted,
                &[other],
                Room::cpu(5000),
                None,
                true
            )),
            ["p"]
        );
    }
    assert!(decide(
        &[],
        &preempted,
        &[waiter("cpu", 9, 100, 0)],
        Room::cpu(5000),
        None,
        true
    )
    .is_empty());
}

/// A waiter held back by `max_running`, lacking `cpu_short` and `memory_short` besides.
fn slot_waiter(unit: &str, priority: i32, cpu_short: u64, memory_short: u64) -> Waiter {
    Waiter {
        needs_slot: true,
        waits_for_host: false,
        ..waiter(unit, priority, cpu_short, memory_short)
    }
}

#[test]
fn a_waiter_held_by_max_running_pauses_the_lowest_preemptible_task_below_it() {
    let running = five_running(250);
    // A slot is all it lacks: one pause, the lowest priority (not the non-preemptible one,
    // not one of its own priority).
    let actions = decide(
        &running,
        &[],
        &[slot_waiter("urgent", 5, 0, 0)],
        Room::cpu(0),
        None,
        true,
    );
    assert_eq!(paused(&actions), ["lower"]);
    match &actions[0] {
        Action::Pause { why, .. } => assert_eq!(why, "preempted for `urgent` (priority 5 > -2)"),
        other => panic!("{other:?}"),
    }
    // A slot and CPU: as many as cover the CPU too, lowest first.
    let room = Room {
        cpu: 0,
        slots: Some(0),
    };
    let actions = decide(
        &running,
        &[],
        &[slot_waiter("urgent", 5, 600, 0)],
        room,
        None,
        true,
    );
    assert_eq!(paused(&actions), ["lower", "low-new"]);
    // Not when all of them together would not cover the CPU, nor when memory is short, nor
    // when nothing preemptible is below its priority.
    for w in [
        slot_waiter("urgent", 5, 1500, 0),
        slot_waiter("urgent", 5, 0, 1),
        slot_waiter("urgent", -2, 0, 0),
    ] {
        assert!(
            decide(&running, &[], std::slice::from_ref(&w), room, None, true).is_empty(),
            "{w:?}"
        );
    }
    // The first waiter in order is the one served: one of lower priority behind it is not.
    let waiters = [
        slot_waiter("first", -3, 0, 0),
        slot_waiter("second", 5, 0, 0),
    ];
    assert!(decide(&running, &[], &waiters, room, None, true).is_empty());
}

#[test]
fn a_preempted_task_resumes_only_into_a_free_slot() {
    let preempted = [task("p", 0, true, 0, 100)];
    let room = |slots| Room { cpu: 5000, slots };
    // No slot free (the task that took it still runs): it stays paused.
    assert!(decide(&[], &preempted, &[], room(Some(0)), None, true).is_empty());
    // A slot free, or no count limit: resumed.
    for slots in [Some(1), Some(3), None] {
        assert_eq!(
            resumed(&decide(&[], &preempted, &[], room(slots), None, true)),
            ["p"],
            "{slots:?}"
        );
    }
    // A waiter of higher priority that needs a slot keeps it: the resume would take it.
    let higher = slot_waiter("high", 5, 0, 0);
    assert!(decide(&[], &preempted, &[higher], room(Some(1)), None, true).is_empty());
    // ...unless memory is what it lacks too (it would wait the same), or it is of lower
    // priority.
    for other in [
        slot_waiter("high", 5, 0, 1 << 30),
        slot_waiter("lesser", -1, 0, 0),
    ] {
        assert_eq!(
            resumed(&decide(
                &[],
                &preempted,
                &[other],
                room(Some(1)),
                None,
                true
            )),
            ["p"]
        );
    }
}

#[test]
fn a_task_paused_for_a_waiter_that_now_waits_for_pressure_stays_paused() {
    // Round 1 paused "p" for "high" (a slot); round 2: the slot is free, but CPU pressure
    // holds "high" back. Resuming "p" would take the slot again, "high" would be back to
    // waiting for it, "p" paused again: a pause and a resume every look at the pressure.
    let preempted = [task("p", 0, true, 0, 100)];
    let room = Room {
        cpu: 5000,
        slots: Some(1),
    };
    let held = Waiter {
        waits_for_host: true,
        ..waiter("high", 5, 0, 0)
    };
    assert!(decide(
        &[],
        &preempted,
        std::slice::from_ref(&held),
        room,
        None,
        true
    )
    .is_empty());
    // It pauses nobody either: a pause would not start it.
    let running = five_running(250);
    assert!(decide(&running, &[], &[held], Room::cpu(0), None, true).is_empty());
    // A lower-priority waiter for the host does not hold it back.
    let lesser = Waiter {
        waits_for_host: true,
        ..waiter("lesser", -1, 0, 0)
    };
    assert_eq!(
        resumed(&decide(&[], &preempted, &[lesser], room, None, true)),
        ["p"]
    );
}

/// Every combination of small inputs: a pause is only ever of a preemptible running task of
/// lower priority than the waiter served, never in a round that resumes; a resume only of a
/// preempted task, into CPU and a slot that are free.
#[test]
fn pauses_and_resumes_keep_to_their_rules_over_every_small_case() {
    let pool = [
        task("a", -1, true, 10, 500),
        task("b", 0, true, 20, 250),
        task("c", 2, false, 30, 1000),
        task("d", 1, true, 40, 1000),
    ];
    let mut seen = (0usize, 0usize);
    for mask in 0u32..16 {
        let running: Vec<Candidate> = (0..4)
            .filter(|n| mask & (1 << n) != 0)
            .map(|n| pool[n].clone())
            .collect();
        let preempted: Vec<Candidate> = (0..4)
            .filter(|n| mask & (1 << n) == 0 && pool[*n].preemptible)
            .map(|n| Candidate {
                unit: format!("p{n}"),
                ..pool[n].clone()
            })
            .collect();
        for priority in [-2, 0, 1, 3] {
            for (cpu_short, memory_short, needs_slot) in [
                (0, 0, false),
                (0, 0, true),
                (300, 0, false),
                (300, 0, true),
                (1200, 0, true),
                (100, 1, false),
            ] {
                for cpu in [0, 250, 1000] {
                    for slots in [None, Some(0), Some(1)] {
                        let w = Waiter {
                            needs_slot,
                            waits_for_host: false,
                            ..waiter("w", priority, cpu_short, memory_short)
                        };
                        let room = Room { cpu, slots };
                        let actions = decide(
                            &running,
                            &preempted,
                            std::slice::from_ref(&w),
                            room,
                            None,
                            true,
                        );
                        let (p, r) = (paused(&actions), resumed(&actions));
                        assert!(p.is_empty() || r.is_empty(), "{actions:?}");
                        let mut freed = 0;
                        for unit in &p {
                            let c = running.iter().find(|c| c.unit == *unit).unwrap();
                            assert!(c.preemptible && c.priority < priority, "{c:?} for {w:?}");
                            freed += c.cpu_millis;
                        }
                        if !p.is_empty() {
                            seen.0 += 1;
                            assert_eq!(memory_short, 0, "{w:?}");
                            assert!(freed >= cpu_short, "{p:?} free {freed} for {w:?}");
                            assert!(cpu_short > 0 || needs_slot, "{w:?}");
                        } else if cpu_short > 0 || needs_slot {
                            // Nobody paused: none below it, or not enough to cover.
                            let below: u64 = (running.iter())
                                .filter(|c| c.preemptible && c.priority < priority)
                                .map(|c| c.cpu_millis)
                                .sum();
                            let any_below =
                                (running.iter()).any(|c| c.preemptible && c.priority < priority);
                            let could = memory_short == 0 && any_below && below >= cpu_short;
                            assert!(!could, "{running:?} {w:?}: nobody paused");
                        }
                        for unit in &r {
                            seen.1 += 1;
                            let c = preempted.iter().find(|c| c.unit == *unit).unwrap();
                            assert!(c.cpu_millis <= cpu && slots != Some(0), "{c:?} {room:?}");
                            let blocks = w.priority > c.priority
                                && (cpu_short > 0 || needs_slot)
                                && memory_short == 0;
                            assert!(!blocks, "{c:?} resumed past {w:?}");
                        }
                    }
                }
            }
        }
    }
    assert!(seen.0 > 100 && seen.1 > 100, "{seen:?}");
}

#[test]
fn memory_pauses_wait_until_the_figure_can_show_the_last_one() {
    let running = [task("a", 0, true, 0, 500)];
    let preempted = [task("p", 0, true, 0, 100)];
    let high = MemoryPressure {
        percent: 55.0,
        threshold: 40.0,
    };
    // Not allowed yet: no pause, and no resume either (the pressure is still high).
    assert!(decide(
        &running,
        &preempted,
        &[],
        Room::cpu(5000),
        Some(high),
        false
    )
    .is_empty());
    assert_eq!(
        paused(&decide(
            &running,
            &preempted,
            &[],
            Room::cpu(5000),
            Some(high),
            true
        )),
        ["a"]
    );
}
