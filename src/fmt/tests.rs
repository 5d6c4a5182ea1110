use super::*;

const G: u64 = 1 << 30;
const MIN: u64 = 60_000;

#[test]
fn durations_read_naturally() {
    assert_eq!(duration(Duration::from_secs(3)), "3s");
    assert_eq!(duration(Duration::from_millis(250)), "250ms");
    assert_eq!(duration(Duration::from_secs(3600)), "1h");
    assert_eq!(duration(Duration::from_secs(300)), "5m");
    assert_eq!(duration_precise(Duration::from_millis(1500)), "1.5s");
    assert_eq!(duration_precise(Duration::from_secs(300)), "5m0s");
    assert_eq!(ago(Some(1000), 13_000), "12s ago");
}

#[test]
fn signals_by_name() {
    assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
    assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
    assert_eq!(signal_name(99), "SIG99");
}

#[test]
fn formats() {
    assert_eq!(format_cpu(4000, true), "4");
    assert_eq!(format_cpu(1500, false), "1.5");
    assert_eq!(format_cpu(1234, false), "1.23");
    assert_eq!(format_cpu(1234, true), "1.24");
    assert_eq!(format_cpu(1999, false), "1.99");
    assert_eq!(format_cpu(1999, true), "2");
    assert_eq!(format_cpu(50, true), "0.05");
    assert_eq!(format_cpu(1, true), "0.01");
    assert_eq!(format_cpu(1, false), "0");
    assert_eq!(format_bytes(3 * G, true), "3G");
    assert_eq!(format_bytes(G + G / 4, false), "1.2G");
    assert_eq!(format_bytes(G + G / 4, true), "1.3G");
    assert_eq!(
        format_bytes(G + G / 5, false),
        "1.1G",
        "rounded down: 1.19999…G"
    );
    assert_eq!(format_bytes(G - 1, true), "1G");
    assert_eq!(format_bytes(G - 1, false), "1023.9M");
    assert_eq!(format_bytes(512 << 20, false), "512M");
    assert_eq!(format_bytes(1536, false), "1.5K");
    assert_eq!(format_bytes(1000, false), "1000");
    assert_eq!(format_bytes(0, false), "0");
    assert_eq!(format_bytes(u64::MAX, true), "16777216T");
    assert_eq!(format_waited(999), "0s");
    assert_eq!(format_waited(45_000), "45s");
    assert_eq!(format_waited(12 * MIN + 59_000), "12m");
    assert_eq!(format_waited(200 * MIN), "3h20m");
    assert_eq!(format_waited(120 * MIN), "2h");
    assert_eq!(format_waited(53 * 60 * MIN), "2d5h");
}

#[test]
fn terminal_controls_show_as_escapes() {
    assert_eq!(printable("a\x1b]0;pwned\x07b"), "a\\e]0;pwned\\x07b");
    assert_eq!(printable("\x1b[2J\x1b[1A"), "\\e[2J\\e[1A");
    assert_eq!(
        printable("one\ntwo\rthree\tfour"),
        "one\\ntwo\\rthree\\tfour"
    );
    assert_eq!(printable("\0\x08\x7f"), "\\x00\\x08\\x7f");
    // C1: U+009B is a CSI of its own for some terminals; U+0085 a newline.
    assert_eq!(printable("a\u{9b}2Jb\u{85}"), "a\\u{9b}2Jb\\u{85}");
}

#[test]
fn invisible_and_reordering_characters_show_as_escapes() {
    for (c, shown) in [
        ('\u{202a}', "\\u{202a}"),
        ('\u{202e}', "\\u{202e}"),
        ('\u{2066}', "\\u{2066}"),
        ('\u{2069}', "\\u{2069}"),
        ('\u{200e}', "\\u{200e}"),
        ('\u{200f}', "\\u{200f}"),
        ('\u{61c}', "\\u{61c}"),
        ('\u{200b}', "\\u{200b}"),
        ('\u{2060}', "\\u{2060}"),
        ('\u{feff}', "\\u{feff}"),
        ('\u{ad}', "\\u{ad}"),
        ('\u{2028}', "\\u{2028}"),
        ('\u{e0041}', "\\u{e0041}"),
    ] {
        assert_eq!(printable(&format!("x{c}y")), format!("x{shown}y"), "{c:?}");
    }
}

#[test]
fn ordinary_text_is_unchanged_and_not_copied() {
    for text in [
        "step 3 of 7: tests pass",
        "Grüße, 日本語, עברית, العربية, emoji 👩‍💻 and a path C:\\dir\\x",
        "",
    ] {
        assert!(
            matches!(printable(text), Cow::Borrowed(t) if t == text),
            "{text}"
        );
    }
}

#[test]
fn kept_characters_stay_and_bad_bytes_show_as_hex() {
    assert_eq!(
        printable_keeping("a\tb\nc\x1b[2J\r", &['\n', '\t']),
        "a\tb\nc\\e[2J\\r"
    );
    assert_eq!(
        printable_bytes(b"ok\xff\xfe \xe2\x80\xae!\n", &['\n']),
        "ok\\xff\\xfe \\u{202e}!\n"
    );
}

#[test]
fn escaped_text_is_as_wide_as_its_characters() {
    // Every escape is printable ASCII: one column a character, so a width counted in
    // characters is the width on the screen.
    let escaped = printable("working\x1b]0;pwned\x07 \x1b[2J\x1b[1A hidden\u{202e}txt\u{200b}");
    assert!(
        escaped.chars().all(|c| !is_hidden_or_active(c)),
        "{escaped}"
    );
    assert_eq!(
        escaped,
        "working\\e]0;pwned\\x07 \\e[2J\\e[1A hidden\\u{202e}txt\\u{200b}"
    );
    assert_eq!(escaped.chars().count(), escaped.len());
}
