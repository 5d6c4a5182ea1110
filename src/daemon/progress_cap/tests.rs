use super::*;

#[test]
fn a_file_within_the_cap_is_left_alone() {
    assert_eq!(punch_range(1 << 30, PROGRESS_CAP, 4096), None);
    assert_eq!(punch_range(10, 4096, 4096), None);
}

#[test]
fn over_the_cap_the_head_goes_in_whole_blocks_and_the_tail_stays() {
    let len = 10 << 20;
    let end = punch_range(len, len, 4096).unwrap();
    assert_eq!(end % 4096, 0);
    assert!(len - end >= PROGRESS_KEEP && len - end < PROGRESS_KEEP + 4096);
    // A sparse file whose blocks are over the cap but whose length is within the kept
    // tail: nothing to punch.
    assert_eq!(punch_range(PROGRESS_KEEP, PROGRESS_CAP + 1, 4096), None);
    // A block size of 0 (never seen) is taken as 1.
    assert_eq!(punch_range(len, len, 0), Some(len - PROGRESS_KEEP));
}

#[test]
fn a_punched_file_keeps_its_length_and_tail_and_frees_its_head() {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("keel-progress-cap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("progress");
    let mut writer = File::options()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    for i in 0..100_000 {
        writeln!(writer, "step {i}").unwrap();
    }
    writer.sync_all().unwrap();
    let before = std::fs::metadata(&path).unwrap();
    let outcome = cap(&path).unwrap();
    let after = std::fs::metadata(&path).unwrap();
    let text = std::fs::read(&path).unwrap();
    let tail = String::from_utf8_lossy(&text[text.len() - 100..]).to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    match outcome {
        Capped::Punched(end, _) => {
            assert_eq!(after.len(), before.len());
            assert!(
                after.blocks() * 512 <= PROGRESS_KEEP + 2 * after.blksize(),
                "{after:?}"
            );
            assert!(text[..end as usize].iter().all(|&b| b == 0));
            assert!(tail.ends_with("step 99999\n"), "{tail}");
        }
        Capped::Truncated(_) => assert_eq!(after.len(), 0),
        Capped::Within => panic!("{} bytes on disk were left alone", before.blocks() * 512),
    }
    // The writer goes on where it was (O_APPEND: at the end).
    drop(writer);
}
