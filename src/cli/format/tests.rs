use super::*;

#[test]
fn colours_only_when_asked_or_on_a_terminal_without_no_color() {
    let set = Some(std::ffi::OsStr::new("1"));
    let empty = Some(std::ffi::OsStr::new(""));
    assert!(use_colour("auto", true, None));
    assert!(
        use_colour("auto", true, empty),
        "an empty NO_COLOR is unset"
    );
    assert!(!use_colour("auto", true, set));
    assert!(!use_colour("auto", false, None));
    assert!(use_colour("always", false, set));
    assert!(!use_colour("never", true, None));
    assert_eq!(paint("failed", Tone::Bad, false), "failed");
    assert_eq!(paint("failed", Tone::Bad, true), "\x1b[1;31mfailed\x1b[0m");
}

#[test]
fn long_messages_wrap_at_spaces_and_stay_whole() {
    let text = "cgroups unavailable: cannot create /sys/fs/cgroup/keel (Permission denied)";
    let lines = wrap(text, 30);
    assert_eq!(
        lines,
        [
            "cgroups unavailable: cannot",
            "  create /sys/fs/cgroup/keel",
            "  (Permission denied)"
        ]
    );
    assert_eq!(wrap("short", 30), ["short"]);
    let long = wrap(&"x".repeat(25), 10);
    assert!(long.iter().all(|l| l.chars().count() <= 10), "{long:?}");
    assert_eq!(long.concat().replace(' ', ""), "x".repeat(25));
}

#[test]
fn a_coloured_line_is_cut_on_what_shows() {
    let line = format!("ab {} cd", paint("running", Tone::Good, true));
    assert_eq!(fit_visible(&line, 100), line);
    let cut = fit_visible(&line, 6);
    assert_eq!(strip_ansi(&cut), "ab ru…");
    assert!(cut.ends_with("\x1b[0m"), "{cut:?}");
    assert_eq!(fit_visible("abcdef", 4), fit("abcdef", 4));
}

#[test]
fn a_long_text_is_cut_with_an_ellipsis() {
    assert_eq!(fit("abcdef", 4), "abc…");
    assert_eq!(fit("abc", 4), "abc");
}

#[test]
fn json_keeps_its_value_and_loses_what_acts_on_a_terminal() {
    let value = serde_json::json!({
        "progress": "a\x1b]0;x\x07b\u{9b}c\x7fd\u{202e}e\u{e0041}f Grüße 👩‍💻",
        "plain": ["ok", 1],
    });
    let written = serde_json::to_string_pretty(&value).unwrap();
    // serde_json escapes C0 itself, and writes DEL, C1 and format characters raw.
    assert!(written.contains("\\u001b]0;x\\u0007b"), "{written}");
    assert!(
        written.contains('\u{202e}') && written.contains('\u{9b}'),
        "{written}"
    );
    let escaped = json_escaped(&written);
    assert!(
        escaped
            .chars()
            .all(|c| matches!(c, '\n' | ' ') || !crate::fmt::is_hidden_or_active(c)),
        "{escaped}"
    );
    assert!(
        escaped.contains("\\u009bc\\u007fd\\u202ee\\udb40\\udc41f Grüße 👩‍💻"),
        "{escaped}"
    );
    let back: serde_json::Value = serde_json::from_str(&escaped).unwrap();
    assert_eq!(back, value);
    assert!(matches!(
        json_escaped("{\"a\": \"ok\"}"),
        std::borrow::Cow::Borrowed(_)
    ));
}
