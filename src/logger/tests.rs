use super::*;

#[test]
fn journal_lines_carry_the_priority_and_no_time() {
    let t = "2026-01-01T00:00:00.000Z";
    for (journal, level, line) in [
        (true, Level::Error, "<3>daemon error: m\n"),
        (true, Level::Warn, "<4>daemon warning: m\n"),
        (true, Level::Info, "<6>daemon info: m\n"),
        (true, Level::Debug, "<7>daemon debug: m\n"),
        (
            false,
            Level::Info,
            "2026-01-01T00:00:00.000Z daemon info: m\n",
        ),
    ] {
        assert_eq!(format_line(journal, t, "daemon", level, "m"), line);
    }
}

#[test]
fn only_the_named_stream_is_the_journal() {
    // The test's stderr is not a journal stream; a JOURNAL_STREAM naming another file
    // (inherited from a parent whose stderr was the journal) does not make it one.
    let before = std::env::var_os("JOURNAL_STREAM");
    std::env::set_var("JOURNAL_STREAM", "1:1");
    assert!(!stderr_is_journal());
    let stat = nix::sys::stat::fstat(std::io::stderr()).unwrap();
    std::env::set_var("JOURNAL_STREAM", format!("{}:{}", stat.st_dev, stat.st_ino));
    assert!(stderr_is_journal());
    match before {
        Some(v) => std::env::set_var("JOURNAL_STREAM", v),
        None => std::env::remove_var("JOURNAL_STREAM"),
    }
}
