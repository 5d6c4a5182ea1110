//! Human-readable figures, for everyone who writes them (messages, logs, the command line):
//! durations, sizes, CPU shares, signal names; and text someone else wrote made safe to show
//! ([`printable`]). A leaf: it imports nothing of keel's.
//!
//! The unit file's own spelling of durations and sizes (`"1h30m"`, `"512M"`, exact and parsed
//! back) is the unit format's, in `crate::unit`.

use std::borrow::Cow;
use std::time::Duration;

/// `"3s"`, `"4m"`, `"2h"`, `"3d"`: the largest whole unit (for tables and messages).
pub fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 {
        if d < Duration::from_secs(1) && !d.is_zero() {
            return format!("{}ms", d.as_millis());
        }
        format!("{secs}s")
    } else if secs < 3600 {
        format!("{}m", secs / 60)
    } else if secs < 86_400 {
        format!("{}h", secs / 3600)
    } else {
        format!("{}d", secs / 86_400)
    }
}

/// `"1.5s"`, `"250ms"`, `"5m0s"`: precise enough for backoff delays and timeouts.
pub fn duration_precise(d: Duration) -> String {
    let millis = d.as_millis();
    if millis < 1000 {
        format!("{millis}ms")
    } else if millis < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}m{}s", millis / 60_000, (millis % 60_000) / 1000)
    }
}

/// Time since a wall-clock instant, `"12s ago"`; `"-"` when unknown.
pub fn ago(ts_ms: Option<u64>, now_ms: u64) -> String {
    match ts_ms {
        Some(ts) => format!(
            "{} ago",
            duration(Duration::from_millis(now_ms.saturating_sub(ts)))
        ),
        None => "-".to_string(),
    }
}

/// Millicores as cores with at most two decimals, trailing zeros trimmed: 1500 → "1.5".
pub fn format_cpu(millis: u64, round_up: bool) -> String {
    let hundredths = if round_up {
        millis.div_ceil(10)
    } else {
        millis / 10
    };
    let (whole, frac) = (hundredths / 100, hundredths % 100);
    match frac {
        0 => whole.to_string(),
        _ if frac % 10 == 0 => format!("{whole}.{}", frac / 10),
        _ => format!("{whole}.{frac:02}"),
    }
}

/// Bytes in the largest unit of the unit-file format (K, M, G, T) that keeps a whole part,
/// with at most one decimal: 1288490188 → "1.2G"; below 1K, bytes as a bare number.
pub fn format_bytes(bytes: u64, round_up: bool) -> String {
    const UNITS: [(&str, u32); 4] = [("T", 40), ("G", 30), ("M", 20), ("K", 10)];
    let Some(at) = UNITS.iter().position(|(_, shift)| bytes >> shift > 0) else {
        return bytes.to_string();
    };
    let tenths = |shift: u32| {
        let (scaled, unit) = (u128::from(bytes) * 10, 1u128 << shift);
        if round_up {
            scaled.div_ceil(unit)
        } else {
            scaled / unit
        }
    };
    let (mut name, mut value) = (UNITS[at].0, tenths(UNITS[at].1));
    // Rounding up can reach 1024 of a unit: show the next one ("1G", not "1024M").
    if at > 0 && value >= 10240 {
        (name, value) = (UNITS[at - 1].0, tenths(UNITS[at - 1].1));
    }
    match value % 10 {
        0 => format!("{}{name}", value / 10),
        decimal => format!("{}.{decimal}{name}", value / 10),
    }
}

/// A wait for a person: "45s", "12m", "3h20m", "2d5h" (rounded down).
pub fn format_waited(ms: u64) -> String {
    let secs = ms / 1000;
    let pair = |big: u64, big_unit: &str, small: u64, small_unit: &str| match small {
        0 => format!("{big}{big_unit}"),
        _ => format!("{big}{big_unit}{small}{small_unit}"),
    };
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86400 => pair(secs / 3600, "h", secs % 3600 / 60, "m"),
        _ => pair(secs / 86400, "d", secs % 86400 / 3600, "h"),
    }
}

/// Signal name for display (`SIGTERM`), or `SIG<n>` when unknown.
pub fn signal_name(number: i32) -> String {
    match nix::sys::signal::Signal::try_from(number) {
        Ok(signal) => signal.as_str().to_string(),
        Err(_) => format!("SIG{number}"),
    }
}

/// `text` as it may be shown on a terminal: every character that would act on the terminal
/// or hide instead of showing is written as a visible escape, everything else is unchanged
/// (non-ASCII letters, emoji, a backslash). Escaped: the C0 controls and DEL (`\e` for ESC,
/// `\n`, `\r`, `\t`, else `\x07`), the C1 controls (`\u{9b}`), and the invisible format
/// characters — bidi embeddings, overrides, isolates and marks (U+202A–U+202E, U+2066–U+2069,
/// U+200E, U+200F, U+061C), zero-width spaces, the word joiner and invisible operators, the
/// BOM, the soft hyphen, line and paragraph separators, tags (`\u{202e}`). The joiners U+200C
/// and U+200D stay: Persian, Indic scripts and emoji need them, and they move nothing.
///
/// Each escape is printable ASCII, one column a character: widths counted in characters stay
/// right for the escaped text.
pub fn printable(text: &str) -> Cow<'_, str> {
    printable_keeping(text, &[])
}

/// [`printable`], leaving the characters of `keep` as they are (a log's newlines and tabs).
pub fn printable_keeping<'a>(text: &'a str, keep: &[char]) -> Cow<'a, str> {
    let hides = |c: char| is_hidden_or_active(c) && !keep.contains(&c);
    let Some(first) = text.find(hides) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        if hides(c) {
            push_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`printable_keeping`] for bytes that may not be UTF-8 (a log): each byte that is not part
/// of a character is written `\xNN`.
pub fn printable_bytes(bytes: &[u8], keep: &[char]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(&printable_keeping(chunk.valid(), keep));
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
    out
}

/// Whether `c` acts on a terminal (a control) or hides (an invisible format character): what
/// [`printable`] escapes.
pub fn is_hidden_or_active(c: char) -> bool {
    matches!(
        c,
        '\0'..='\x1f'
            | '\x7f'..='\u{9f}'
            | '\u{ad}'
            | '\u{61c}'
            | '\u{180e}'
            | '\u{200b}'
            | '\u{200e}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e007f}'
    )
}

fn push_escape(out: &mut String, c: char) {
    use std::fmt::Write;
    let _ = match c {
        '\x1b' => write!(out, "\\e"),
        '\n' => write!(out, "\\n"),
        '\r' => write!(out, "\\r"),
        '\t' => write!(out, "\\t"),
        '\0'..='\x7f' => write!(out, "\\x{:02x}", c as u32),
        _ => write!(out, "\\u{{{:x}}}", c as u32),
    };
}

#[cfg(test)]
mod tests;
