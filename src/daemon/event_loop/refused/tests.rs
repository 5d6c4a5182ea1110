use super::*;

#[test]
fn a_refused_watch_is_retried_sooner_first_then_every_30s() {
    let delays: Vec<u64> = (1..=7).map(|n| retry_delay(n).as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
    assert_eq!(retry_delay(u32::MAX), RETRY_MAX);
    // A failure count of 0 (never refused) is treated as the first.
    assert_eq!(retry_delay(0), Duration::from_secs(1));
}

#[test]
fn a_fallback_is_due_for_a_retry_only_at_its_time_and_backs_off() {
    let t0 = Instant::now();
    let mut fallback = Fallback::new("epoll: No space left on device".into(), t0);
    assert!(!fallback.retry_due(t0));
    assert!(!fallback.retry_due(t0 + Duration::from_millis(999)));
    assert!(fallback.retry_due(t0 + Duration::from_secs(1)));
    let t1 = t0 + Duration::from_secs(1);
    fallback.refused_again("epoll: Too many open files".into(), t1);
    assert_eq!(fallback.failures, 2);
    assert!(!fallback.retry_due(t1 + Duration::from_millis(1999)));
    assert!(fallback.retry_due(t1 + Duration::from_secs(2)));
    assert_eq!(
        note("shim exit", &fallback),
        "shim exit: polled every 1s (epoll: Too many open files)"
    );
}

#[test]
fn a_refusal_is_said_in_the_kernels_words() {
    let e = std::io::Error::from_raw_os_error(libc::ENOSPC);
    assert_eq!(refusal("epoll", &e), "epoll: No space left on device");
    let other = std::io::Error::other("cannot");
    assert_eq!(refusal("inotify", &other), "inotify: cannot");
}
