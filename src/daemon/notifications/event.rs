//! What a hook is told (pure): the event as one JSON line on its stdin, and the same fields
//! in `KEEL_EVENT_*` variables (docs/notifications.md).

use crate::config::notify::EventKind;
use crate::state::Event;
use std::path::Path;

/// A journal event's detail is cut to this many bytes for the hook (the whole is in the
/// journal): the line stays far below a pipe's capacity, so its write never waits.
pub(crate) const MAX_DETAIL: usize = 2048;

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
    if detail.len() <= MAX_DETAIL {
        return detail.to_string();
    }
    let mut end = MAX_DETAIL;
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &detail[..end])
}

/// The event as one line of JSON, newline-terminated.
pub(crate) fn json_line(told: &Told, origin: &Origin) -> String {
    let e = told.event;
    let value = serde_json::json!({
        "unit": e.unit,
        "event": told.kind.name(),
        "journal_event": e.event,
        "attempt": e.attempt,
        "generation": e.generation,
        "detail": cut_detail(&e.detail),
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

/// Variables of the daemon's environment a hook does not inherit: systemd's (they are the
/// daemon's), and any `KEEL_EVENT_*` (the hook's own are set).
pub(crate) fn not_inherited(name: &str) -> bool {
    const SYSTEMD: [&str; 7] = [
        "NOTIFY_SOCKET",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
        "INVOCATION_ID",
    ];
    SYSTEMD.contains(&name) || name.starts_with("KEEL_EVENT_")
}

#[cfg(test)]
mod tests;
