//! What a hook is told (pure): the event as one JSON line on its stdin, and the same fields
//! in `KEEL_EVENT_*` variables (docs/notifications.md).

use crate::config::notify::EventKind;
use crate::state::Event;
use std::path::Path;

/// A journal event's detail is cut to this many bytes for the hook (the whole is in the
/// journal).
pub(crate) const MAX_DETAIL: usize = 2048;
/// The whole line is at most this long (PIPE_BUF): it fits the smallest pipe the kernel gives
/// (one page, once a user holds too many pipe pages), so its write to the empty pipe is whole
/// and never waits. A detail whose escapes would make it longer is cut further.
pub(crate) const MAX_LINE: usize = 4096;

/// What every event of this daemon shares.
pub(crate) struct Origin<'a> {
    pub host: &'a str,
    pub state_dir: &'a Path,
}

/// A journal event for a hook, standing for `count` events.
pub(crate) struct Told<'a> {
    pub event: &'a Event,
    pub kind: EventKind,
    pub count: u64,
}

/// `detail` cut at [`MAX_DETAIL`] bytes, on a character boundary, marked when cut.
pub(crate) fn cut_detail(detail: &str) -> String {
    cut_at(detail, MAX_DETAIL)
}

/// `detail` cut at `max` bytes, on a character boundary, marked when cut.
fn cut_at(detail: &str, max: usize) -> String {
    if detail.len() <= max {
        return detail.to_string();
    }
    let mut end = max;
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &detail[..end])
}

/// The event as one line of JSON, newline-terminated, at most [`MAX_LINE`] bytes when the
/// rest of it leaves room (its detail cut further, halving, while it is longer).
pub(crate) fn json_line(told: &Told, origin: &Origin) -> String {
    let mut max = MAX_DETAIL;
    loop {
        let line = json_line_cut(told, origin, max);
        if line.len() <= MAX_LINE || max == 0 {
            return line;
        }
        max /= 2;
    }
}

fn json_line_cut(told: &Told, origin: &Origin, max_detail: usize) -> String {
    let e = told.event;
    let value = serde_json::json!({
        "unit": e.unit,
        "event": told.kind.name(),
        "journal_event": e.event,
        "attempt": e.attempt,
        "generation": e.generation,
        "detail": cut_at(&e.detail, max_detail),
        "time": e.time,
        "ts_ms": e.ts_ms,
        "count": told.count,
        "host": origin.host,
        "state_dir": origin.state_dir.display().to_string(),
    });
    format!("{value}\n")
}

/// The `KEEL_EVENT_*` variables, `KEEL_EVENT_JSON` the line without its newline.
pub(crate) fn variables(told: &Told, origin: &Origin) -> Vec<(&'static str, String)> {
    let e = told.event;
    let line = json_line(told, origin);
    vec![
        ("KEEL_EVENT_UNIT", e.unit.clone()),
        ("KEEL_EVENT_NAME", told.kind.name().to_string()),
        ("KEEL_EVENT_JOURNAL", e.event.clone()),
        ("KEEL_EVENT_ATTEMPT", e.attempt.to_string()),
        ("KEEL_EVENT_GENERATION", e.generation.to_string()),
        ("KEEL_EVENT_DETAIL", cut_detail(&e.detail)),
        ("KEEL_EVENT_TIME", e.time.clone()),
        ("KEEL_EVENT_COUNT", told.count.to_string()),
        ("KEEL_EVENT_HOST", origin.host.to_string()),
        (
            "KEEL_EVENT_STATE_DIR",
            origin.state_dir.display().to_string(),
        ),
        ("KEEL_EVENT_JSON", line.trim_end().to_string()),
    ]
}

#[cfg(test)]
mod tests;
