use super::*;

#[test]
fn a_terminal_sees_escapes_and_a_pipe_the_bytes() {
    let written = b"ok\tdone\n\x1b]0;pwned\x07\r\xe2\x80\xae\n";
    let mut raw = Shown::new(false);
    assert_eq!(&*raw.bytes(written), written);
    let mut escaped = Shown::new(true);
    assert_eq!(
        String::from_utf8(escaped.bytes(written).into_owned()).unwrap(),
        "ok\tdone\n\\e]0;pwned\\x07\\r\\u{202e}\n"
    );
}

#[test]
fn a_character_cut_between_reads_is_shown_whole() {
    let mut shown = Shown::new(true);
    let rlo = "\u{202e}".as_bytes();
    let mut seen = shown.bytes(b"a\xe2").into_owned();
    assert_eq!(seen, b"a", "the first byte of U+202E waits");
    seen.extend_from_slice(&shown.bytes(&rlo[1..2]));
    seen.extend_from_slice(&shown.bytes(&[rlo[2], b'b', 0xff]));
    assert_eq!(String::from_utf8(seen).unwrap(), "a\\u{202e}b\\xff");
    // A file rotated mid-character: the cut bytes are shown as they are, escaped.
    assert!(shown.bytes(b"\xe2\x80").is_empty());
    assert_eq!(shown.restart(), b"\\xe2\\x80");
    assert!(shown.restart().is_empty());
}
