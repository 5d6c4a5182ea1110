use super::*;
use std::sync::atomic::{AtomicU32, Ordering};

struct TempDir(PathBuf);
impl TempDir {
    fn new() -> TempDir {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "keel-logs-test-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn plan_keeps_lines_whole_and_files_under_the_cap() {
    assert_eq!(plan_chunk(0, 0, b"anything"), Step::Write(8));
    assert_eq!(plan_chunk(5, 10, b"abcde"), Step::Write(5));
    assert_eq!(plan_chunk(5, 10, b"ab\ncdef"), Step::Write(3));
    assert_eq!(plan_chunk(5, 10, b"abcdefg"), Step::Rotate);
    assert_eq!(plan_chunk(10, 10, b"a\n"), Step::Rotate);
    assert_eq!(plan_chunk(0, 4, b"abcdefgh"), Step::Write(4));
    assert_eq!(plan_chunk(0, 4, b"a\nbcdefgh"), Step::Write(2));
    assert_eq!(plan_chunk(12, 10, b"x"), Step::Rotate);
}

#[test]
fn rotation_keeps_n_files_in_order_and_under_the_cap() {
    let dir = TempDir::new();
    let mut log = LogWriter::open(&dir.0, 100, 3).unwrap();
    let mut all = Vec::new();
    for i in 0..100 {
        let line = format!("line {i:03} ..........\n"); // 20 bytes
        all.push(line.trim_end().to_string());
        log.write(line.as_bytes());
    }
    let current = output_log_path(&dir.0);
    for n in 1..=3 {
        let size = fs::metadata(rotated_path(&current, n)).unwrap().len();
        assert_eq!(size, 100, "output.log.{n}");
    }
    assert!(!rotated_path(&current, 4).exists());
    assert!(fs::metadata(&current).unwrap().len() <= 100);
    // Oldest to newest: .3, .2, .1, current — a contiguous run of the last lines.
    let joined: String = [3, 2, 1]
        .iter()
        .map(|&n| read(&rotated_path(&current, n)))
        .chain(std::iter::once(read(&current)))
        .collect();
    let lines: Vec<&str> = joined.lines().collect();
    assert_eq!(lines, all[all.len() - lines.len()..]);
    assert_eq!(lines.len(), 20);
    assert_eq!(log.dropped_bytes(), 0);
}

#[test]
fn long_lines_are_cut_and_rejoined_by_tail() {
    let dir = TempDir::new();
    let mut log = LogWriter::open(&dir.0, 10, 5).unwrap();
    log.write(b"0123456789abcdefghij-tail\nlast\n");
    let current = output_log_path(&dir.0);
    assert_eq!(read(&rotated_path(&current, 3)), "0123456789");
    assert_eq!(read(&rotated_path(&current, 2)), "abcdefghij");
    assert_eq!(read(&rotated_path(&current, 1)), "-tail\n");
    assert_eq!(read(&current), "last\n");
    assert_eq!(
        tail_lines(&current, 5),
        ["0123456789abcdefghij-tail", "last"]
    );
}

#[test]
fn keep_zero_truncates_and_reopen_appends() {
    let dir = TempDir::new();
    {
        let mut log = LogWriter::open(&dir.0, 8, 0).unwrap();
        log.write(b"aaaa\n");
        log.write(b"bbbb\n");
    }
    let current = output_log_path(&dir.0);
    assert_eq!(read(&current), "bbbb\n");
    assert!(!rotated_path(&current, 1).exists());
    let mut log = LogWriter::open(&dir.0, 0, 0).unwrap();
    log.write(b"cc\n");
    assert_eq!(read(&current), "bbbb\ncc\n");
}

#[test]
fn open_removes_rotated_files_beyond_keep() {
    let dir = TempDir::new();
    let current = output_log_path(&dir.0);
    for n in 1..=4 {
        fs::write(rotated_path(&current, n), format!("{n}\n")).unwrap();
    }
    let _log = LogWriter::open(&dir.0, 100, 2).unwrap();
    assert!(rotated_path(&current, 2).exists());
    assert!(!rotated_path(&current, 3).exists());
    assert!(!rotated_path(&current, 4).exists());
}

#[test]
fn failed_writes_are_dropped_counted_and_noted() {
    let dir = TempDir::new();
    let current = output_log_path(&dir.0);
    std::os::unix::fs::symlink("/dev/full", &current).unwrap();
    let mut log = LogWriter::open(&dir.0, 0, 1).unwrap();
    log.write(b"lost 1\n");
    log.write(b"lost2\n");
    assert_eq!(log.dropped_bytes(), 13);
    // The disk "has room again".
    fs::remove_file(&current).unwrap();
    log.write(b"kept\n");
    assert_eq!(
        read(&current),
        "[keel: 13 bytes of output dropped: No space left on device]\nkept\n"
    );
    log.write(b"more\n");
    assert_eq!(log.dropped_bytes(), 13);
    assert!(read(&current).ends_with("kept\nmore\n"));
}

#[test]
fn drop_note_starts_on_its_own_line() {
    let dir = TempDir::new();
    let mut log = LogWriter::open(&dir.0, 0, 1).unwrap();
    log.write(b"partial");
    log.pending_drop = 5;
    log.drop_reason = "test".into();
    log.write(b"next\n");
    assert_eq!(
        read(&output_log_path(&dir.0)),
        "partial\n[keel: 5 bytes of output dropped: test]\nnext\n"
    );
}

#[test]
fn tail_reads_across_rotated_files() {
    let dir = TempDir::new();
    let current = output_log_path(&dir.0);
    assert!(tail_lines(&current, 3).is_empty());
    fs::write(rotated_path(&current, 2), "a\nb\n").unwrap();
    fs::write(rotated_path(&current, 1), "c\nd").unwrap();
    fs::write(&current, "e\nf\n").unwrap();
    assert_eq!(tail_lines(&current, 2), ["de", "f"]);
    assert_eq!(tail_lines(&current, 3), ["c", "de", "f"]);
    assert_eq!(tail_lines(&current, 100), ["a", "b", "c", "de", "f"]);
    assert!(tail_lines(&current, 0).is_empty());
}

#[test]
fn tail_of_a_large_file_and_blank_lines() {
    let dir = TempDir::new();
    let current = output_log_path(&dir.0);
    let mut text = String::new();
    for i in 0..50_000 {
        text.push_str(&format!("row {i}\n"));
    }
    text.push_str("\n\nend");
    fs::write(&current, &text).unwrap();
    assert_eq!(tail_lines(&current, 4), ["row 49999", "", "", "end"]);
    assert_eq!(tail_lines(&current, 1), ["end"]);
}
