//! The task's output log by default, end to end: `run/output.log` rotated at 16 MiB with three
//! old files kept (docs/units.md, "What the agent sees"). An agent prints more than four files' worth
//! of numbered lines; what is left is the newest 16 MiB × 3 + the current file, lines whole and
//! in order, the oldest gone.

mod common;
use common::*;
use keel::sandbox::logs::rotated_path;
use keel::sandbox::spec::AttemptSpec;

const MIB: u64 = 1 << 20;
const DEFAULT_MAX_BYTES: u64 = 16 * MIB;
const DEFAULT_KEEP: u32 = 3;

/// Lines of `<n> ` then 1000 `x`: 80 000 of them are about 77 MiB, more than the 64 MiB that
/// the current file and three rotated ones hold.
const LINES: u64 = 80_000;
const PRINTER: &str = r#"Unit(
    command: ["/bin/sh", "-c", "awk 'BEGIN { s = sprintf(\"%1000s\", \"\"); gsub(/ /, \"x\", s); for (i = 1; i <= 80000; i++) print i, s }'"],
    restart: Never,
)"#;

/// The line numbers of `text`, each line checked to be whole.
fn numbers(text: &str, file: &str) -> Vec<u64> {
    text.lines()
        .map(|line| {
            let (n, rest) = line
                .split_once(' ')
                .unwrap_or_else(|| panic!("{file}: a cut line {line:.40?}"));
            assert!(
                rest.len() == 1000 && rest.bytes().all(|b| b == b'x'),
                "{file}: line {n} is not whole"
            );
            n.parse()
                .unwrap_or_else(|_| panic!("{file}: not a numbered line {line:.40?}"))
        })
        .collect()
}

#[test]
fn output_is_rotated_at_16_mib_keeping_three_old_files_by_default() {
    let d = Daemon::start("log-default");
    d.write_unit("printer", PRINTER);
    let task = d.wait_state("printer", "succeeded", wait::PATIENCE);
    assert_eq!(task["last_exit"], "exit:0", "{task}");
    let run = d.task_dir("printer").join("run");

    // What the daemon told the shim.
    let spec_text = std::fs::read_to_string(run.join("attempt.ron")).unwrap();
    let spec: AttemptSpec = ron::from_str(&spec_text).unwrap();
    assert_eq!(spec.log_max_bytes, DEFAULT_MAX_BYTES, "{spec_text}");
    assert_eq!(spec.log_keep, DEFAULT_KEEP, "{spec_text}");

    // What the shim did with it.
    let current = run.join("output.log");
    assert!(
        !rotated_path(&current, DEFAULT_KEEP + 1).exists(),
        "more than {DEFAULT_KEEP} old files"
    );
    // Oldest first. A file is cut after the last whole line that fits, unless the shim read
    // a line in two pieces and the first piece filled the file: then the line continues at
    // the start of the next file. So the files are checked as one stream.
    let mut stream = String::new();
    for n in (1..=DEFAULT_KEEP).rev() {
        let path = rotated_path(&current, n);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let size = text.len() as u64;
        // Within a line of the cap.
        assert!(
            size <= DEFAULT_MAX_BYTES && size > DEFAULT_MAX_BYTES - 1010,
            "output.log.{n}: {size} bytes"
        );
        stream.push_str(&text);
    }
    let text = std::fs::read_to_string(&current).unwrap();
    assert!(
        text.len() as u64 <= DEFAULT_MAX_BYTES,
        "{} bytes",
        text.len()
    );
    stream.push_str(&text);
    // The oldest file's first line may be the tail of one whose head was dropped with the
    // file before it; every other line is whole.
    let first_whole = if stream.as_bytes()[0].is_ascii_digit() {
        0
    } else {
        stream.find('\n').unwrap() + 1
    };
    let all = numbers(&stream[first_whole..], "output.log.3 … output.log");
    // The newest lines, contiguous, up to the last; the oldest file fell off.
    assert_eq!(all.last(), Some(&LINES));
    assert!(all[0] > 1, "the oldest output is gone");
    for pair in all.windows(2) {
        assert_eq!(
            pair[1],
            pair[0] + 1,
            "a gap or a repeat after line {}",
            pair[0]
        );
    }
    // `keel logs` reads across them: two lines more than the current file holds come from
    // output.log.1 (a line split between the two is joined).
    let in_current = text.lines().count() as u64;
    let wanted = in_current + 2;
    let out = d.keel(&["logs", "-n", &wanted.to_string(), "printer"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let tail = numbers(&stdout_of(&out), "keel logs");
    let expected: Vec<u64> = (LINES + 1 - wanted..=LINES).collect();
    assert_eq!(tail, expected, "keel logs -n {wanted}");
}
