use super::*;

#[test]
fn statuses_read_as_a_shell_reports_them() {
    let pid = Pid::from_raw(7);
    assert_eq!(status_code(WaitStatus::Exited(pid, 0)), Some(0));
    assert_eq!(status_code(WaitStatus::Exited(pid, 42)), Some(42));
    assert_eq!(
        status_code(WaitStatus::Signaled(pid, Signal::SIGKILL, false)),
        Some(137)
    );
    assert_eq!(status_code(WaitStatus::StillAlive), None);
}

#[test]
fn a_companion_decides_the_status() {
    assert_eq!(final_status(0, None), 0);
    assert_eq!(final_status(3, None), 3);
    // An orderly shutdown after the companion failed reports the failure.
    assert_eq!(final_status(0, Some(1)), 1);
    assert_eq!(final_status(3, Some(0)), 0);
}

#[test]
fn respawn_backs_off_then_gives_up() {
    let now = Instant::now() + Duration::from_secs(1000);
    let at = |ago: u64| now - Duration::from_secs(ago);
    assert_eq!(
        respawn_delay(&[at(0)], now),
        Some(Duration::from_millis(250))
    );
    assert_eq!(
        respawn_delay(&[at(5), at(0)], now),
        Some(Duration::from_millis(500))
    );
    assert_eq!(
        respawn_delay(&[at(9), at(8), at(7), at(0)], now),
        Some(Duration::from_secs(2))
    );
    let many: Vec<Instant> = (0..13).map(at).collect();
    assert_eq!(respawn_delay(&many, now), None);
    let twelve: Vec<Instant> = (0..12).map(at).collect();
    assert_eq!(respawn_delay(&twelve, now), Some(Duration::from_secs(30)));
    // Old crashes leave the window.
    let old: Vec<Instant> = (600..613).map(at).collect();
    assert_eq!(respawn_delay(&old, now), Some(Duration::from_millis(250)));
}
