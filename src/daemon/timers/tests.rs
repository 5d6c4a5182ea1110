use super::*;

#[test]
fn fires_in_deadline_order_and_only_when_due() {
    let mut timers = Timers::default();
    let t0 = Instant::now();
    timers.add(t0 + Duration::from_secs(2), Timer::Schedule);
    timers.add(t0 + Duration::from_secs(1), Timer::RescanUnits);
    assert_eq!(timers.timeout(t0), Some(Duration::from_secs(1)));
    assert!(timers.pop_due(t0).is_empty());
    assert_eq!(
        timers.pop_due(t0 + Duration::from_secs(5)),
        vec![Timer::RescanUnits, Timer::Schedule]
    );
    assert_eq!(timers.timeout(t0), None);
}
