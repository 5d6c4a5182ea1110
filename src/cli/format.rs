//! Text for the terminal: cutting, wrapping, colour, JSON without invisible characters. The
//! figures in it (durations, sizes) are written by `crate::fmt`, and text someone else wrote
//! is made printable by `crate::fmt::printable`.

/// Cut a string to `width` characters, marking the cut with `…`.
pub fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Lines of at most `width` characters, broken at spaces (a longer word is broken where it
/// must); continuation lines are indented by two spaces. For messages that must be read whole.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(8);
    let (mut lines, mut line, mut fresh) = (Vec::new(), String::new(), true);
    for word in text.split(' ') {
        let mut rest: Vec<char> = word.chars().collect();
        loop {
            let used = line.chars().count();
            if used + rest.len() + usize::from(!fresh) <= width {
                if !fresh {
                    line.push(' ');
                }
                line.extend(rest.iter());
                fresh = false;
                break;
            }
            if fresh {
                // A word longer than a line: as much as fits, the rest on the next.
                line.extend(rest.drain(..width - used));
            }
            lines.push(std::mem::replace(&mut line, "  ".into()));
            fresh = true;
        }
    }
    lines.push(line);
    lines
}

/// What a state's colour says: fine, worth a look, needs a person, or nothing going on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Good,
    Warn,
    Bad,
    Quiet,
}

/// `text` in the tone's colour (ANSI SGR) when `colour`, else as is.
pub fn paint(text: &str, tone: Tone, colour: bool) -> String {
    if !colour {
        return text.to_string();
    }
    let code = match tone {
        Tone::Good => "32",
        Tone::Warn => "33",
        Tone::Bad => "1;31",
        Tone::Quiet => "2",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// `--color`: `always`, `never`, or `auto` (colours on a terminal unless `NO_COLOR` is set to
/// something: <https://no-color.org>).
pub fn use_colour(choice: &str, is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    match choice {
        "always" => true,
        "never" => false,
        _ => is_terminal && no_color.is_none_or(|v| v.is_empty()),
    }
}

/// The text without its ANSI escape sequences (CSI: `ESC [ … letter`).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // Skip `[` and the parameters up to the final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// [`fit`] for text that may hold ANSI colours: only visible characters count, and a cut line
/// ends with a reset so that the colour does not leak into the next.
pub fn fit_visible(text: &str, width: usize) -> String {
    if strip_ansi(text).chars().count() <= width {
        return text.to_string();
    }
    let (mut out, mut seen, mut chars) = (String::new(), 0, text.chars());
    let mut coloured = false;
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            out.push(c);
            coloured = true;
            for c in chars.by_ref() {
                out.push(c);
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        if seen + 1 == width {
            break;
        }
        out.push(c);
        seen += 1;
    }
    out.push('…');
    if coloured {
        out.push_str("\x1b[0m");
    }
    out
}

/// JSON text (as serde_json writes it) with the characters [`crate::fmt::printable`] escapes
/// written as `\uXXXX` escapes: the same JSON value, nothing in it that acts on a terminal.
/// serde_json already escapes the C0 controls in strings (outside strings, the only C0
/// characters are whitespace, left as they are); DEL, the C1 controls and the invisible
/// format characters it writes raw.
pub fn json_escaped(json: &str) -> std::borrow::Cow<'_, str> {
    use std::fmt::Write;
    let raw = |c: char| c >= '\x7f' && crate::fmt::is_hidden_or_active(c);
    let Some(first) = json.find(raw) else {
        return json.into();
    };
    let mut out = String::with_capacity(json.len() + 16);
    out.push_str(&json[..first]);
    for c in json[first..].chars() {
        if raw(c) {
            for unit in c.encode_utf16(&mut [0; 2]) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    out.into()
}

#[cfg(test)]
mod tests;
