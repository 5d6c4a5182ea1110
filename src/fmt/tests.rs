use super::*;

const G: u64 = 1 << 30;
const MIN: u64 = 60_000;

#[test]
fn durations_read_naturally() {
    assert_eq!(duration(Duration::from_secs(3)), "3s");
    assert_eq!(duration(Duration::from_millis(250)), "250ms");
    assert_eq!(duration(Duration::from_secs(3600)), "1h");
    assert_eq!(duration(Duration::from_secs(300)), "5m");
    assert_eq!(duration_precise(Duration::from_millis(1500)), "1.5s");
    assert_eq!(duration_precise(Duration::from_secs(300)), "5m0s");
    assert_eq!(ago(Some(1000), 13_000), "12s ago");
}

#[test]
fn signals_by_name() {
    assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
    assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
    assert_eq!(signal_name(99), "SIG99");
}

#[test]
fn formats() {
    assert_eq!(format_cpu(4000, true), "4");
    assert_eq!(format_cpu(1500, false), "1.5");
    assert_eq!(format_cpu(1234, false), "1.23");
    assert_eq!(format_cpu(1234, true), "1.24");
    assert_eq!(format_cpu(1999, false), "1.99");
    assert_eq!(format_cpu(1999, true), "2");
    assert_eq!(format_cpu(50, true), "0.05");
    assert_eq!(format_cpu(1, true), "0.01");
    assert_eq!(format_cpu(1, false), "0");
    assert_eq!(format_bytes(3 * G, true), "3G");
    assert_eq!(format_bytes(G + G / 4, false), "1.2G");
    assert_eq!(format_bytes(G + G / 4, true), "1.3G");
    assert_eq!(
        format_bytes(G + G / 5, false),
        "1.1G",
        "rounded down: 1.19999…G"
    );
    assert_eq!(format_bytes(G - 1, true), "1G");
    assert_eq!(format_bytes(G - 1, false), "1023.9M");
    assert_eq!(format_bytes(512 << 20, false), "512M");
    assert_eq!(format_bytes(1536, false), "1.5K");
    assert_eq!(format_bytes(1000, false), "1000");
    assert_eq!(format_bytes(0, false), "0");
    assert_eq!(format_bytes(u64::MAX, true), "16777216T");
    assert_eq!(format_waited(999), "0s");
    assert_eq!(format_waited(45_000), "45s");
    assert_eq!(format_waited(12 * MIN + 59_000), "12m");
    assert_eq!(format_waited(200 * MIN), "3h20m");
    assert_eq!(format_waited(120 * MIN), "2h");
    assert_eq!(format_waited(53 * 60 * MIN), "2d5h");
}
