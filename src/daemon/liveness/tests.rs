use super::*;

#[test]
fn wall_times_map_onto_the_monotonic_clock_and_back() {
    assert_eq!(mono_of_wall(9_000, 500_000, 10_000), 499_000);
    assert_eq!(wall_of_mono(499_000, 500_000, 10_000), 9_000);
    assert_eq!(wall_of_mono(501_000, 500_000, 10_000), 11_000);
    // A file time in the future (a skewed clock) is taken as now.
    assert_eq!(mono_of_wall(11_000, 500_000, 10_000), 500_000);
    // Before the monotonic clock began: its start.
    assert_eq!(mono_of_wall(0, 500, 10_000), 0);
}

#[test]
fn the_fingerprint_sees_a_change_of_content_not_a_rewrite() {
    let dir = std::env::temp_dir().join(format!("keel-fp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("progress");
    std::fs::write(&file, "step 1\n").unwrap();
    let first = fingerprint(&file);
    std::fs::write(&file, "step 1\n").unwrap();
    assert_eq!(fingerprint(&file), first);
    std::fs::write(&file, "step 2\n").unwrap();
    assert_ne!(fingerprint(&file), first);
    // Appending changes the length even when the tail is the same.
    let long = "x".repeat(5000);
    std::fs::write(&file, &long).unwrap();
    let before = fingerprint(&file);
    std::fs::write(&file, format!("y{long}")).unwrap();
    assert_ne!(fingerprint(&file), before);
    assert_eq!(fingerprint(&dir.join("missing")), None);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn output_time_ignores_earlier_attempts_and_reads_the_rotated_log() {
    let dir = std::env::temp_dir().join(format!("keel-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert_eq!(output_time(&dir, 0), None);
    std::fs::write(dir.join("output.log.1"), "old\n").unwrap();
    let written = output_time(&dir, 0).expect("the rotated log counts");
    assert!(
        output_time(&dir, written + 1).is_none(),
        "before the attempt"
    );
    std::fs::write(dir.join("output.log"), "new\n").unwrap();
    assert!(output_time(&dir, 0).unwrap() >= written);
    let _ = std::fs::remove_dir_all(&dir);
}
