use super::*;

#[test]
fn a_start_deferred_again_and_again_waits_longer_up_to_five_minutes() {
    assert_eq!(deferral_delay(0), Duration::from_secs(5));
    assert_eq!(deferral_delay(1), Duration::from_secs(10));
    assert_eq!(deferral_delay(3), Duration::from_secs(40));
    assert_eq!(deferral_delay(6), Duration::from_secs(300));
    assert_eq!(deferral_delay(40), Duration::from_secs(300));
    assert_eq!(deferral_delay(u32::MAX), Duration::from_secs(300));
}
