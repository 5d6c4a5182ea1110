//! What a task wrote, through the whole rendering: escaped, columns kept.

use super::{detailed, report, task};
use crate::cli::format::strip_ansi;
use crate::cli::status::render;
use crate::cli::status::table::WIDTH;
use crate::fmt::is_hidden_or_active;
use crate::protocol::StatusReport;

/// What an agent writes to $KEEL_PROGRESS to forge the screen: retitle the terminal, clear it,
/// move the cursor up over a line, reverse the text after it.
const FORGED: &str = "working\x1b]0;pwned\x07 \x1b[2J\x1b[1A hidden\u{202e}txt";
const SHOWN: &str = "working\\e]0;pwned\\x07 \\e[2J\\e[1A hidden\\u{202e}txt";

/// No character of `text` acts on a terminal or hides, but the newlines between lines.
fn assert_inert(text: &str) {
    let active: Vec<char> = text
        .chars()
        .filter(|&c| c != '\n' && is_hidden_or_active(c))
        .collect();
    assert!(active.is_empty(), "{active:?} in:\n{text}");
}

/// Only the SGR colours `paint` writes: `ESC [ digits ; m`.
fn assert_only_colours(coloured: &str) {
    for sequence in coloured.split('\x1b').skip(1) {
        let end = sequence.find('m').expect("an SGR sequence ends in m");
        assert!(
            sequence.starts_with('[')
                && sequence[1..end]
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == ';'),
            "not a colour: ESC{sequence:?}"
        );
    }
}

#[test]
fn a_forged_progress_line_shows_escaped_in_the_table_and_keeps_the_columns() {
    let mut forged = task("forger", "running");
    forged.progress = Some(FORGED.into());
    let plain = render(
        &report(vec![forged.clone(), task("honest", "running")]),
        0,
        false,
    );
    assert_inert(&plain);
    // The note is cut at the table's width: the start of the line, escaped.
    assert!(plain.contains(&format!("“{}", &SHOWN[..22])), "{plain}");
    let coloured = render(&report(vec![forged.clone()]), 0, true);
    assert_only_colours(&coloured);
    assert_eq!(
        strip_ansi(&coloured),
        render(&report(vec![forged]), 0, false)
    );
    for line in plain.lines() {
        assert!(line.chars().count() <= WIDTH, "too wide: {line}");
    }
    let row = plain.lines().find(|l| l.starts_with("forger")).unwrap();
    assert_eq!(row.find("running"), Some(19), "{row}");
    // In full, the whole line.
    let mut full = detailed();
    full.progress = Some(FORGED.into());
    let detail = render(&report(vec![full]), 100_000, false);
    assert_inert(&detail);
    assert!(
        detail.contains(&format!("  progress     “{SHOWN}”")),
        "{detail}"
    );
}

/// `report` with `poison` appended to every string in it (every field the protocol has, as
/// JSON sees them).
fn poisoned(report: &StatusReport, poison: &str) -> StatusReport {
    fn walk(value: &mut serde_json::Value, poison: &str) {
        match value {
            serde_json::Value::String(text) => text.push_str(poison),
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| walk(v, poison)),
            serde_json::Value::Object(fields) => fields.values_mut().for_each(|v| walk(v, poison)),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(report).unwrap();
    walk(&mut value, poison);
    serde_json::from_value(value).unwrap()
}

#[test]
fn no_string_of_the_report_reaches_the_terminal_unescaped() {
    let mut full = detailed();
    full.reason = Some("waits".into());
    full.progress = Some("step".into());
    full.last_activity_kind = Some("heartbeat".into());
    full.liveness = Some("running".into());
    full.preparing = Some(crate::protocol::PreparingInfo {
        step: "base tree".into(),
        done: 1,
        total: 2,
    });
    let poison = "\x1b[2J\u{9b}1A\u{202e}\u{2066}\u{200b}\x7f\r\n";
    for tasks in [
        vec![full.clone()],
        vec![full.clone(), task("other", "failed")],
    ] {
        let mut with_detail = report(tasks);
        with_detail.tasks[0].detail.as_mut().unwrap().command =
            Some(vec!["/bin/agent".into(), "x".into()]);
        let bad = poisoned(&with_detail, poison);
        for colour in [false, true] {
            let text = render(&bad, 100_000, colour);
            if colour {
                assert_only_colours(&text);
            } else {
                assert_inert(&text);
            }
        }
        let plain = render(&bad, 100_000, false);
        assert!(plain.contains("\\e[2J\\u{9b}1A\\u{202e}"), "{plain}");
    }
}

#[test]
fn text_without_controls_renders_as_before() {
    let mut t = detailed();
    t.progress = Some("Grüße · 日本語 · step 3".into());
    let r = report(vec![t]);
    assert_eq!(crate::cli::status::printable::escaped(&r), r);
    assert!(render(&r, 100_000, false).contains("“Grüße · 日本語 · step 3”"));
}
