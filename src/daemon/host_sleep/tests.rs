//! Unit tests of the sleep watch: the clocks' difference grows only by the time slept.

use super::*;

fn s(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

#[test]
fn a_sleep_is_the_growth_of_boottime_over_monotonic() {
    let mut watch = SleepWatch::default();
    // The first reading is the baseline (a sleep before the daemon started is not its own).
    assert_eq!(watch.observe(s(105.0), s(100.0)), None);
    // Awake: both advance alike.
    assert_eq!(watch.observe(s(135.0), s(130.0)), None);
    // Slept 60 s: boottime ran ahead.
    assert_eq!(watch.observe(s(200.0), s(135.0)), Some(s(60.0)));
    // Told once.
    assert_eq!(watch.observe(s(201.0), s(136.0)), None);
    // Read apart by a loaded host: under a second is no sleep.
    assert_eq!(watch.observe(s(202.5), s(136.9)), None);
}

#[test]
fn a_wall_time_before_a_sleep_is_younger_by_the_sleep_on_the_monotonic_clock() {
    // Slept from 100 s to 160 s (wall), and from 500 s to 510 s.
    let history = [(160_000, 60_000), (510_000, 10_000)];
    assert_eq!(slept_after(&history, 90_000), 70_000);
    assert_eq!(slept_after(&history, 100_000), 70_000);
    // Written during the sleep cannot be; counted from there anyway.
    assert_eq!(slept_after(&history, 130_000), 40_000);
    assert_eq!(slept_after(&history, 200_000), 10_000);
    assert_eq!(slept_after(&history, 600_000), 0);
    assert_eq!(slept_after(&[], 0), 0);
}

#[test]
fn the_clocks_are_read_as_a_tight_pair_and_the_wake_alarm_waits() {
    let (boottime, monotonic) = read_clocks().expect("both clocks");
    // BOOTTIME is never behind MONOTONIC (read within a millisecond of each other).
    assert!(
        boottime + Duration::from_millis(1) >= monotonic,
        "{boottime:?} < {monotonic:?}"
    );
    let alarm = wake_alarm().expect("a CLOCK_REALTIME timerfd with TFD_TIMER_CANCEL_ON_SET");
    // Set a century ahead: nothing to read until the host resumes or the clock is set.
    assert_eq!(
        alarm.wait().map_err(|e| e as i32),
        Err(nix::errno::Errno::EAGAIN as i32)
    );
    arm(&alarm).expect("set again");
}
