//! The JSON line and the variables a hook gets.

use super::*;

fn event(detail: &str) -> Event {
    Event {
        time: "2026-12-02T18:00:00.000Z".into(),
        ts_ms: 1_796_234_400_000,
        unit: "agent-1".into(),
        attempt: 3,
        generation: 7,
        event: "failed".into(),
        detail: detail.into(),
    }
}

fn origin() -> Origin<'static> {
    Origin {
        host: "box",
        state_dir: Path::new("/var/lib/keel"),
    }
}

#[test]
fn the_line_is_one_line_of_json_with_every_field() {
    let e = event("restart limit: 6 restarts within 1h\nsecond line");
    let told = Told {
        event: &e,
        kind: EventKind::Failed,
        count: 4,
    };
    let line = json_line(&told, &origin());
    assert!(line.ends_with('\n'));
    assert_eq!(line.matches('\n').count(), 1, "one line: {line}");
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["unit"], "agent-1");
    assert_eq!(v["event"], "Failed");
    assert_eq!(v["journal_event"], "failed");
    assert_eq!(v["attempt"], 3);
    assert_eq!(v["generation"], 7);
    assert_eq!(
        v["detail"],
        "restart limit: 6 restarts within 1h\nsecond line"
    );
    assert_eq!(v["time"], "2026-12-02T18:00:00.000Z");
    assert_eq!(v["count"], 4);
    assert_eq!(v["host"], "box");
    assert_eq!(v["state_dir"], "/var/lib/keel");
}

#[test]
fn the_variables_say_the_same() {
    let e = event("exit 1");
    let told = Told {
        event: &e,
        kind: EventKind::OomKill,
        count: 1,
    };
    let vars: std::collections::BTreeMap<_, _> = variables(&told, &origin()).into_iter().collect();
    assert_eq!(vars["KEEL_EVENT_UNIT"], "agent-1");
    assert_eq!(vars["KEEL_EVENT_NAME"], "OomKill");
    assert_eq!(vars["KEEL_EVENT_JOURNAL"], "failed");
    assert_eq!(vars["KEEL_EVENT_ATTEMPT"], "3");
    assert_eq!(vars["KEEL_EVENT_COUNT"], "1");
    assert_eq!(vars["KEEL_EVENT_DETAIL"], "exit 1");
    assert_eq!(vars["KEEL_EVENT_STATE_DIR"], "/var/lib/keel");
    let json: serde_json::Value = serde_json::from_str(&vars["KEEL_EVENT_JSON"]).unwrap();
    assert_eq!(json["event"], "OomKill");
}

#[test]
fn a_long_detail_is_cut_on_a_character_boundary() {
    let long = "é".repeat(MAX_DETAIL);
    let cut = cut_detail(&long);
    assert!(cut.len() <= MAX_DETAIL + "…".len());
    assert!(cut.ends_with('…'));
    assert_eq!(cut_detail("short"), "short");
    let e = event(&long);
    let told = Told {
        event: &e,
        kind: EventKind::Failed,
        count: 1,
    };
    assert!(json_line(&told, &origin()).len() <= MAX_LINE);
}

#[test]
fn a_detail_of_escapes_is_cut_until_the_line_fits_a_pipe_buffer() {
    // Each control character is six bytes in JSON (\u0001): 2048 of them would be 12 KiB.
    let e = event(&"\u{1}".repeat(MAX_DETAIL));
    let told = Told {
        event: &e,
        kind: EventKind::Failed,
        count: 1,
    };
    let line = json_line(&told, &origin());
    assert!(line.len() <= MAX_LINE, "{} bytes", line.len());
    assert!(line.ends_with('\n'));
    let json: serde_json::Value = serde_json::from_str(&line).unwrap();
    let detail = json["detail"].as_str().unwrap();
    assert!(detail.ends_with('…') && detail.len() > 256, "{detail:?}");
}
