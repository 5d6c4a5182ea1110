use super::*;

#[test]
fn a_heartbeat_counts_at_its_write_within_the_instants_it_could_have_been() {
    // Read 250 ms after the write: it counts when it was written, not when it was read.
    assert_eq!(heartbeat_at(Some(10_000), 9_900, 10_250), 10_000);
    // A wall clock stepped back (an mtime "in the future") or forward (an mtime from before
    // the previous read): the nearer bound.
    assert_eq!(heartbeat_at(Some(20_000), 9_900, 10_250), 10_250);
    assert_eq!(heartbeat_at(Some(1_000), 9_900, 10_250), 9_900);
    // No mtime (the file is gone): when it was seen.
    assert_eq!(heartbeat_at(None, 9_900, 10_250), 10_250);
    // A previous read "after" now (never, but never a panic either).
    assert_eq!(heartbeat_at(Some(5), 11_000, 10_250), 10_250);
}
