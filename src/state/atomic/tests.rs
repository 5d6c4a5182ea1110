use super::*;
use crate::state::scratch_dir as scratch;
use std::fs;

#[test]
fn atomic_write_replaces_whole_and_leaves_no_temp() {
    let dir = scratch("atomic");
    let path = dir.join("state.ron");
    atomic_write(&path, b"old").unwrap();
    atomic_write(&path, b"new contents").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"new contents");
    let names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "temp files left: {names:?}");
    fs::remove_dir_all(&dir).unwrap();
}
