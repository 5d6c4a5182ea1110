use crate::unit::*;

// ------------------------------------------------------------------------------------------
// Scalars.

#[test]
fn durations() {
    let ms = Duration::from_millis;
    for (text, want) in [
        ("250ms", ms(250)),
        ("90s", ms(90_000)),
        ("5m", ms(300_000)),
        ("2min", ms(120_000)),
        ("1h", ms(3_600_000)),
        ("1d", ms(86_400_000)),
        ("1.5s", ms(1_500)),
        ("0.5ms", Duration::from_micros(500)),
        ("1h30m", ms(5_400_000)),
        ("1m 30s", ms(90_000)),
        (" 10s ", ms(10_000)),
        ("5 s", ms(5_000)),
        ("0", Duration::ZERO),
        ("0s", Duration::ZERO),
    ] {
        assert_eq!(parse_duration(text), Ok(want), "{text:?}");
    }
    for (text, needle) in [
        ("", "is empty"),
        ("5", "has no unit"),
        ("5x", "unknown unit \"x\": use ms, s, m, h or d"),
        ("5 minutes", "unknown unit \"minutes\""),
        ("-5s", "is negative"),
        ("s", "does not start with a number"),
        ("1.2.3s", "malformed number \"1.2.3\""),
        ("1h30", "has no unit"),
        ("99999999999999d", "too large"),
    ] {
        let error = parse_duration(text).expect_err(text);
        assert!(error.contains(needle), "{text:?}: {error}");
    }
}

#[test]
fn durations_format_and_round_trip() {
    for (d, text) in [
        (Duration::ZERO, "0s"),
        (Duration::from_millis(250), "250ms"),
        (Duration::from_micros(1500), "1.5ms"),
        (Duration::from_secs(90), "90s"),
        (Duration::from_secs(300), "5m"),
        (Duration::from_secs(3600), "1h"),
        (Duration::from_secs(2 * 86_400), "2d"),
    ] {
        assert_eq!(format_duration(d), text);
        assert_eq!(parse_duration(text), Ok(d));
    }
}

#[test]
fn sizes() {
    for (text, want) in [
        ("4096", 4096),
        ("100K", 100 << 10),
        ("100k", 100 << 10),
        ("512M", 512 << 20),
        ("512m", 512 << 20),
        ("4G", 4 << 30),
        ("4GiB", 4 << 30),
        ("4GB", 4 << 30),
        ("1.5G", 3 << 29),
        ("1T", 1 << 40),
        ("8 M", 8 << 20),
    ] {
        assert_eq!(parse_size(text), Ok(want), "{text:?}");
    }
    for (text, needle) in [
        ("", "is empty"),
        ("-512M", "is negative"),
        ("lots", "does not start with a number"),
        ("4Q", "unknown unit \"Q\""),
        ("1.2.3G", "malformed number"),
        ("99999999999T", "too large"),
    ] {
        let error = parse_size(text).expect_err(text);
        assert!(error.contains(needle), "{text:?}: {error}");
    }
    assert_eq!(format_size(512 << 20), "512M");
    assert_eq!(format_size(1536 << 10), "1536K");
    assert_eq!(format_size(1000), "1000");
    assert_eq!(format_size(0), "0");
}

#[test]
fn signals() {
    assert_eq!(parse_signal("SIGTERM"), Ok(libc::SIGTERM));
    assert_eq!(parse_signal("TERM"), Ok(libc::SIGTERM));
    assert_eq!(parse_signal("sigint"), Ok(libc::SIGINT));
    assert_eq!(parse_signal("HUP"), Ok(libc::SIGHUP));
    assert_eq!(parse_signal("SIGUSR2"), Ok(libc::SIGUSR2));
    assert_eq!(parse_signal("KILL"), Ok(libc::SIGKILL));
    assert!(parse_signal("SIGTREM")
        .unwrap_err()
        .contains("did you mean \"SIGTERM\"?"));
    assert!(parse_signal("15")
        .unwrap_err()
        .contains("unknown signal \"15\""));
    assert!(parse_signal("").is_err());
    assert!(parse_signal("SIG").is_err());
}

#[test]
fn capabilities() {
    assert_eq!(parse_capability("CAP_CHOWN"), Ok(0));
    assert_eq!(parse_capability("CAP_NET_ADMIN"), Ok(12));
    assert_eq!(parse_capability("net_admin"), Ok(12));
    assert_eq!(parse_capability("SYS_ADMIN"), Ok(21));
    assert_eq!(parse_capability("CAP_CHECKPOINT_RESTORE"), Ok(40));
    let error = parse_capability("CAP_NET_ADMN").unwrap_err();
    assert!(error.contains("did you mean \"CAP_NET_ADMIN\"?"), "{error}");
    assert!(parse_capability("CAP_EVERYTHING").is_err());
}

#[test]
fn names() {
    for name in ["a", "0", "fix-tests", "agent_2", "v1.2", &"a".repeat(63)] {
        assert_eq!(validate_name(name), Ok(()), "{name:?}");
    }
    for (name, needle) in [
        ("", "is empty"),
        ("Fix", "uppercase letter 'F'"),
        ("my unit", "contains a space"),
        (".hidden", "starts with '.'"),
        ("-x", "starts with '-'"),
        ("_x", "starts with '_'"),
        ("a/b", "contains '/'"),
        ("é", "contains 'é'"),
        (&"a".repeat(64), "64 characters long"),
    ] {
        let error = validate_name(name).expect_err(name);
        assert!(error.contains(needle), "{name:?}: {error}");
        assert!(error.contains("[a-z0-9][a-z0-9._-]{0,62}"), "{error}");
    }
    assert_eq!(
        unit_name_of(Path::new("units/fix-tests.ron")).as_deref(),
        Some("fix-tests")
    );
    assert_eq!(unit_name_of(Path::new("fix.yaml")), None);
    assert_eq!(unit_name_of(Path::new("fix.ron.bak")), None);
    assert_eq!(unit_name_of(Path::new("units/.ron")), None);
}
