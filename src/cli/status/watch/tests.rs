use super::*;

#[test]
fn a_frame_redraws_in_place_within_the_screen() {
    let body = "line one that is long\nline two\nline three\n";
    let frame = compose("header", body, Some((10, 12)));
    assert!(frame.starts_with("\x1b[H"), "{frame:?}");
    assert!(frame.ends_with("\x1b[J"), "{frame:?}");
    let lines: Vec<&str> = frame.trim_end_matches("\x1b[J").lines().collect();
    assert_eq!(lines.len(), 4, "{frame:?}");
    assert_eq!(lines[1], "line one th…\x1b[K");
    // Too tall: the last row stays free and the frame says what is hidden.
    let tall: String = (0..30).map(|i| format!("row {i}\n")).collect();
    let frame = compose("header", &tall, Some((5, 80)));
    let lines: Vec<&str> = frame.trim_end_matches("\x1b[J").lines().collect();
    assert_eq!(lines.len(), 4, "{frame:?}");
    assert!(lines[3].starts_with("… 28 more lines"), "{frame:?}");
}

#[test]
fn into_a_pipe_frames_follow_each_other() {
    let frame = compose("header", "a\nb\n", None);
    assert_eq!(frame, "header\na\nb\n\n");
    assert!(!frame.contains('\x1b'));
}
