use super::*;

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

#[test]
fn the_lowest_priority_newest_preemptible_tasks_go_first_until_the_need_is_covered() {
    let running = [
        task("keep", -5, false, 0, 1000),
        task("low-old", -1, true, 10, 500),
        task("low-new", -1, true, 20, 500),
        task("lower", -2, true, 30, 250),
        task("equal", 5, true, 40, 4000),
    ];
    let actions = decide(&running, &[], &[waiter("urgent", 5, 600, 0)], 0, None, true);
    assert_eq!(paused(&actions), ["lower", "low-new"]);
    match &actions[0] {
        Action::Pause { why, .. } => assert_eq!(why, "preempted for `urgent` (priority 5 > -2)"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn nobody_is_paused_when_it_would_not_make_room_or_memory_is_short() {
    let running = [task("a", 0, true, 0, 500), task("b", 0, false, 0, 4000)];
    // All preemptible together free 500 of the 1000 needed.
    assert!(decide(&running, &[], &[waiter("w", 1, 1000, 0)], 0, None, true).is_empty());
    // Memory is short: a frozen task keeps its pages.
    assert!(decide(
        &running,
        &[],
        &[waiter("w", 1, 100, 1 << 30)],
        0,
        None,
        true
    )
    .is_empty());
    // CPU fits: the waiter waits for something else.
    assert!(decide(&running, &[], &[waiter("w", 1, 0, 0)], 0, None, true).is_empty());
    // Nothing below its priority.
    assert!(decide(&running, &[], &[waiter("w", 0, 100, 0)], 0, None, true).is_empty());
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
    let actions = decide(&running, &[], &[], 0, Some(high), true);
    assert_eq!(paused(&actions), ["b"]);
    match &actions[0] {
        Action::Pause { why, .. } => {
            assert_eq!(why, "memory pressure 55% > 40% (preemptible, priority -1)")
        }
        other => panic!("{other:?}"),
    }
    // Only non-preemptible tasks: nothing to do.
    assert!(decide(&running[2..], &[], &[], 0, Some(high), true).is_empty());
}

#[test]
fn resume_the_highest_first_once_room_returns_and_pressure_has_fallen() {
    let preempted = [
        task("p-low", -1, true, 10, 500),
        task("p-high-late", 3, true, 30, 500),
        task("p-high-early", 3, true, 20, 500),
    ];
    let actions = decide(&[], &preempted, &[], 500, None, true);
    assert_eq!(resumed(&actions), ["p-high-early"]);
    // Not while a task of higher priority waits for capacity.
    assert!(decide(&[], &preempted, &[waiter("w", 4, 100, 0)], 500, None, true).is_empty());
    // A waiter of lower priority does not hold it.
    assert_eq!(
        resumed(&decide(
            &[],
            &preempted,
            &[waiter("w", 2, 100, 0)],
            500,
            None,
            true
        )),
        ["p-high-early"]
    );
    // Not without room for its request.
    assert!(decide(&[], &preempted, &[], 499, None, true).is_empty());
    // Hysteresis: memory pressure under the threshold but not under half of it.
    let p = |percent| MemoryPressure {
        percent,
        threshold: 40.0,
    };
    assert!(decide(&[], &preempted, &[], 500, Some(p(25.0)), true).is_empty());
    assert_eq!(
        resumed(&decide(&[], &preempted, &[], 500, Some(p(19.0)), true)),
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
        5000,
        None,
        true,
    );
    assert_eq!(paused(&actions), ["low"]);
    assert!(resumed(&actions).is_empty());
}

#[test]
fn the_first_waiter_short_of_capacity_is_the_one_served() {
    let running = [task("low", -1, true, 0, 1000)];
    // The first waits for max_running (nothing short): the next, short of CPU, is served.
    let waiters = [waiter("maxed", 9, 0, 0), waiter("short", 1, 500, 0)];
    let actions = decide(&running, &[], &waiters, 0, None, true);
    assert_eq!(paused(&actions), ["low"]);
    // A waiter of higher priority keeps a preempted task paused only if CPU alone is what
    // it lacks: one waiting for max_running, or short of memory (the frozen task's pages are
    // counted either way), would wait the same.
    let preempted = [task("p", 0, true, 0, 100)];
    for other in [waiter("maxed", 9, 0, 0), waiter("memory", 9, 100, 1 << 30)] {
        assert_eq!(
            resumed(&decide(&[], &preempted, &[other], 5000, None, true)),
            ["p"]
        );
    }
    assert!(decide(
        &[],
        &preempted,
        &[waiter("cpu", 9, 100, 0)],
        5000,
        None,
        true
    )
    .is_empty());
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
    assert!(decide(&running, &preempted, &[], 5000, Some(high), false).is_empty());
    assert_eq!(
        paused(&decide(&running, &preempted, &[], 5000, Some(high), true)),
        ["a"]
    );
}
