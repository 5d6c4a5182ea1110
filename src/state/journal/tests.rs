use super::*;
use crate::state::scratch_dir as scratch;
use std::fs;

#[test]
fn rfc3339_known_dates() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
    assert_eq!(rfc3339(1_796_015_523_456), "2026-11-30T05:12:03.456Z");
}

#[test]
fn a_torn_last_line_is_ended_before_the_next_event() {
    let dir = scratch("torn");
    let path = dir.join("events.jsonl");
    fs::write(&path, "{\"time\":\"x\",\"ts_").unwrap();
    let mut journal = Journal::open(&path).unwrap();
    journal
        .append(&Event {
            time: rfc3339(1),
            ts_ms: 1,
            unit: "a".into(),
            attempt: 1,
            generation: 1,
            event: "running".into(),
            detail: String::new(),
        })
        .unwrap();
    journal.sync().unwrap();
    let text = fs::read_to_string(&path).unwrap();
    let last = text.lines().last().unwrap();
    assert_eq!(
        serde_json::from_str::<Event>(last).unwrap().event,
        "running"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn journal_lines_parse_back() {
    let dir = scratch("journal");
    let path = dir.join("events.jsonl");
    let mut journal = Journal::open(&path).unwrap();
    for n in 0..3 {
        journal
            .append(&Event {
                time: rfc3339(n),
                ts_ms: n,
                unit: "a".into(),
                attempt: n as u32,
                generation: n,
                event: "running".into(),
                detail: String::new(),
            })
            .unwrap();
    }
    let text = fs::read_to_string(&path).unwrap();
    let events: Vec<Event> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 3);
    assert_eq!(events[2].attempt, 2);
    fs::remove_dir_all(&dir).unwrap();
}
