//! The coalescer: first at once, then at most one per window carrying its count; counts add
//! up; keys are independent and forgotten once quiet.

use super::*;

const W: Duration = Duration::from_secs(20);

fn key(unit: &str, event: &'static str) -> Key {
    Key {
        hook: 0,
        unit: unit.to_string(),
        event,
    }
}

fn at(base: Instant, ms: u64) -> Instant {
    base + Duration::from_millis(ms)
}

#[test]
fn the_first_goes_at_once() {
    let mut c = Coalescer::default();
    let now = Instant::now();
    let send = c.offer(key("a", "failed"), 1, W, now).expect("sent");
    assert_eq!((send.event, send.count), (1, 1));
    assert_eq!(c.next_due(), None, "nothing held");
}

#[test]
fn those_within_the_window_are_held_and_the_latest_goes_at_its_end() {
    let mut c = Coalescer::default();
    let t0 = Instant::now();
    assert!(c.offer(key("a", "failed"), 1, W, t0).is_some());
    assert!(c.offer(key("a", "failed"), 2, W, at(t0, 10)).is_none());
    assert!(c.offer(key("a", "failed"), 3, W, at(t0, 19_999)).is_none());
    assert_eq!(c.next_due(), Some(t0 + W));
    assert!(
        c.due(at(t0, 19_999)).is_empty(),
        "not before its window ends"
    );
    let sends = c.due(t0 + W);
    assert_eq!(
        sends,
        vec![Send {
            key: key("a", "failed"),
            event: 3,
            count: 2
        }]
    );
    assert_eq!(c.next_due(), None);
    // The flush opened a window of its own.
    assert!(c.offer(key("a", "failed"), 4, W, t0 + W + W / 2).is_none());
    assert_eq!(c.next_due(), Some(t0 + W + W));
}

#[test]
fn an_event_after_the_window_takes_what_was_held_if_due_did_not_run() {
    let mut c = Coalescer::default();
    let t0 = Instant::now();
    c.offer(key("a", "failed"), 1, W, t0);
    c.offer(key("a", "failed"), 2, W, at(t0, 1));
    c.offer(key("a", "failed"), 3, W, at(t0, 2));
    let send = c
        .offer(key("a", "failed"), 4, W, t0 + W)
        .expect("window over");
    assert_eq!((send.event, send.count), (4, 3));
    assert!(c.due(t0 + W + W).is_empty(), "nothing counted twice");
}

#[test]
fn a_hundred_in_a_second_are_two_sends_that_add_up() {
    let mut c = Coalescer::default();
    let t0 = Instant::now();
    let mut sends: Vec<Send<u32>> = Vec::new();
    for i in 0..100u32 {
        sends.extend(c.offer(key("a", "failed"), i, W, at(t0, u64::from(i) * 10)));
        sends.extend(c.due(at(t0, u64::from(i) * 10)));
    }
    let due = c.next_due().expect("held");
    sends.extend(c.due(due));
    assert_eq!(sends.len(), 2, "{sends:?}");
    assert_eq!(sends.iter().map(|s| s.count).sum::<u64>(), 100);
    assert_eq!(sends[1].event, 99, "the latest is what goes");
}

#[test]
fn keys_are_independent() {
    let mut c = Coalescer::default();
    let t0 = Instant::now();
    assert!(c.offer(key("a", "failed"), 0, W, t0).is_some());
    assert!(
        c.offer(key("b", "failed"), 0, W, t0).is_some(),
        "another unit"
    );
    assert!(
        c.offer(key("a", "stalled"), 0, W, t0).is_some(),
        "another event"
    );
    let other_hook = Key {
        hook: 1,
        ..key("a", "failed")
    };
    assert!(c.offer(other_hook, 0, W, t0).is_some(), "another hook");
    assert!(c.offer(key("a", "failed"), 1, W, t0).is_none());
}

#[test]
fn a_key_is_forgotten_once_its_window_passes_quietly() {
    let mut c = Coalescer::default();
    let t0 = Instant::now();
    c.offer(key("a", "failed"), 0, W, t0);
    c.offer(key("b", "failed"), 0, W, t0);
    assert_eq!(c.len(), 2);
    assert!(c.due(at(t0, 19_000)).is_empty());
    assert_eq!(c.len(), 2, "still in their window");
    assert!(c.due(t0 + W).is_empty());
    assert_eq!(c.len(), 0, "nothing held, window over: forgotten");
    assert!(c.offer(key("a", "failed"), 1, W, t0 + W).is_some());
}

#[test]
fn each_key_keeps_its_own_window() {
    let mut c = Coalescer::default();
    let t0 = Instant::now();
    let short = Duration::from_secs(1);
    c.offer(key("a", "failed"), 0, short, t0);
    c.offer(key("a", "failed"), 1, short, at(t0, 10));
    c.offer(key("b", "failed"), 0, W, t0);
    c.offer(key("b", "failed"), 1, W, at(t0, 10));
    assert_eq!(c.next_due(), Some(t0 + short));
    let sends = c.due(t0 + short);
    assert_eq!(sends.len(), 1);
    assert_eq!(sends[0].key.unit, "a");
    assert_eq!(c.next_due(), Some(t0 + W));
}

/// A deterministic pseudo-random stream of events on a few keys, with `due` run at random
/// instants: every event is counted exactly once, and sends of a key are a window apart.
#[test]
fn counts_always_add_up_and_sends_are_a_window_apart() {
    let keys = [
        key("a", "failed"),
        key("a", "stalled"),
        key("b", "failed"),
        key("c", "exited"),
    ];
    for seed in 1..=50u64 {
        let mut rng = seed;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut c = Coalescer::default();
        let t0 = Instant::now();
        let mut now = t0;
        let mut offered = [0u64; 4];
        let mut sends: Vec<(Instant, Send<u64>)> = Vec::new();
        for step in 0..2000u64 {
            now += Duration::from_millis(next() % 500);
            let which = (next() % 4) as usize;
            offered[which] += 1;
            if let Some(send) = c.offer(keys[which].clone(), step, W, now) {
                sends.push((now, send));
            }
            if next() % 7 == 0 {
                sends.extend(c.due(now).into_iter().map(|s| (now, s)));
            }
        }
        while let Some(due) = c.next_due() {
            sends.extend(c.due(due).into_iter().map(|s| (due, s)));
        }
        for (i, k) in keys.iter().enumerate() {
            let of_key: Vec<&(Instant, Send<u64>)> =
                sends.iter().filter(|(_, s)| &s.key == k).collect();
            let counted: u64 = of_key.iter().map(|(_, s)| s.count).sum();
            assert_eq!(counted, offered[i], "seed {seed}, {k:?}");
            assert!(of_key.iter().all(|(_, s)| s.count > 0));
            for pair in of_key.windows(2) {
                assert!(pair[1].0 >= pair[0].0 + W, "seed {seed}, {k:?}: too soon");
            }
        }
    }
}
