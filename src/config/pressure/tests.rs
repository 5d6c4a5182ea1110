//! `pressure: Pressure(...)`: defaults, each field, `Off`, and errors at `file:line:col`.

use super::super::{parse_config, resolve, HostCapacity};
use super::*;
use std::path::Path;

fn thresholds(text: &str) -> Option<PressureThresholds> {
    let raw = parse_config(Path::new("keel.ron"), text).unwrap_or_else(|e| panic!("{e}"));
    resolve(&raw, &HostCapacity::new(2, None, 1 << 30, None)).pressure
}

fn error(text: &str) -> String {
    match parse_config(Path::new("keel.ron"), text) {
        Ok(raw) => panic!("parsed, expected an error: {raw:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn defaults_each_field_and_off() {
    let defaults = PressureThresholds {
        cpu: 4000,
        memory: 1000,
        io: 4000,
        settle_ms: 5000,
    };
    assert_eq!(thresholds("Config()"), Some(defaults));
    assert_eq!(thresholds("Config(pressure: Pressure())"), Some(defaults));
    assert_eq!(
        thresholds("Config(pressure: Pressure(cpu: 12.5))"),
        Some(PressureThresholds {
            cpu: 1250,
            ..defaults
        })
    );
    assert_eq!(
        thresholds("Config(pressure: Pressure(cpu: 5.0, memory: 0.01, io: 100.0))"),
        Some(PressureThresholds {
            cpu: 500,
            memory: 1,
            io: 10_000,
            ..defaults
        })
    );
    // Whole numbers read as percentages too.
    assert_eq!(
        thresholds("Config(pressure: Pressure(io: 30))"),
        Some(PressureThresholds {
            io: 3000,
            ..defaults
        })
    );
    assert_eq!(thresholds("Config(pressure: Off)"), None);
}

#[test]
fn a_threshold_is_a_percentage_above_zero() {
    for (text, col, field) in [
        ("Config(pressure: Pressure(cpu: 0.0))", 32, "cpu: 0 "),
        (
            "Config(pressure: Pressure(memory: -5.0))",
            35,
            "memory: -5 ",
        ),
        ("Config(pressure: Pressure(io: 101.0))", 31, "io: 101 "),
        ("Config(pressure: Pressure(io: inf))", 31, "io: inf "),
    ] {
        let e = error(text);
        assert!(
            e.starts_with(&format!(
                "keel.ron:1:{col}: pressure.{field}is not a percentage"
            )),
            "{text}: {e}"
        );
        assert!(e.contains("or pressure: Off"), "{e}");
    }
}

#[test]
fn unknown_fields_and_values_are_named() {
    let e = error("Config(pressure: Pressure(disk: 5.0))");
    assert!(e.contains("disk"), "{e}");
    assert!(e.starts_with("keel.ron:1:"), "{e}");
    let e = error("Config(pressure: On)");
    assert!(e.starts_with("keel.ron:1:18:"), "{e}");
}

#[test]
fn the_settle_window_is_a_duration_and_zero_turns_pacing_off() {
    let defaults = PressureThresholds::default();
    assert_eq!(defaults.settle_ms, DEFAULT_SETTLE_MS);
    let settle = |text: &str| thresholds(text).map(|t| t.settle_ms);
    assert_eq!(settle("Config()"), Some(5000));
    assert_eq!(
        settle(r#"Config(pressure: Pressure(settle: "2.5s"))"#),
        Some(2500)
    );
    assert_eq!(
        settle(r#"Config(pressure: Pressure(settle: "1m"))"#),
        Some(60_000)
    );
    assert_eq!(
        settle(r#"Config(pressure: Pressure(settle: "0s"))"#),
        Some(0)
    );
    // The other fields keep their defaults.
    assert_eq!(
        thresholds(r#"Config(pressure: Pressure(cpu: 30.0, settle: "0s"))"#),
        Some(PressureThresholds {
            cpu: 3000,
            settle_ms: 0,
            ..defaults
        })
    );
    let e = error(r#"Config(pressure: Pressure(settle: "soon"))"#);
    assert!(e.starts_with("keel.ron:1:"), "{e}");
    assert!(e.contains("soon"), "{e}");
    let e = error(r#"Config(pressure: Pressure(settle: 5))"#);
    assert!(e.starts_with("keel.ron:1:"), "{e}");
}
