use super::*;

#[test]
fn the_watchdog_pings_at_half_its_period_and_only_for_its_process() {
    let half = Some(Duration::from_millis(200));
    assert_eq!(watchdog_interval(Some("400000"), None, 7), half);
    assert_eq!(watchdog_interval(Some("400000"), Some("7"), 7), half);
    assert_eq!(watchdog_interval(Some("400000"), Some("8"), 7), None);
    assert_eq!(watchdog_interval(Some("400000"), Some("x"), 7), None);
    assert_eq!(watchdog_interval(Some("0"), None, 7), None);
    assert_eq!(watchdog_interval(Some("soon"), None, 7), None);
    assert_eq!(watchdog_interval(None, Some("7"), 7), None);
}

#[test]
fn status_is_sent_only_when_it_changes() {
    let dir = std::env::temp_dir().join(format!("keel-notify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let listener = UnixDatagram::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let mut notifier = Notifier {
        target: Some((UnixDatagram::unbound().unwrap(), Target::Path(path))),
        watchdog: None,
        last_status: None,
    };
    notifier.ready("0 tasks");
    notifier.status("0 tasks");
    notifier.status("1 task: 1 running");
    notifier.watchdog_ping();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while let Ok(n) = listener.recv(&mut buf) {
        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert_eq!(
        got,
        [
            "READY=1\nSTATUS=0 tasks",
            "STATUS=1 task: 1 running",
            "WATCHDOG=1"
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
