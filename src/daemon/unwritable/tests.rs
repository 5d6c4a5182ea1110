use super::*;

#[test]
fn an_unwritable_state_dir_is_explained() {
    assert!(unwritable_reason(true, 1 << 30, 100).contains("read-only"));
    let full = unwritable_reason(false, 4096, 100);
    assert!(full.starts_with("no space left"), "{full}");
    assert!(full.contains("4096 bytes free"), "{full}");
    assert!(unwritable_reason(false, 1 << 30, 0).contains("no inodes"));
    assert!(unwritable_reason(false, 1 << 30, 100).contains("log"));
    // A directory of this machine is writable: the last answer, not a false "full".
    assert!(why_unwritable(&std::env::temp_dir()).contains("log"));
}
