use super::*;
use crate::state::scratch_dir as scratch;
use std::fs;

#[test]
fn second_lock_names_the_holder() {
    let dir = scratch("lock");
    let path = dir.join("lock");
    let _held = InstanceLock::acquire(&path).unwrap();
    // flock locks belong to the open file description: a second open in the same process
    // conflicts just as another process would.
    match InstanceLock::acquire(&path) {
        Err(StateError::Locked { holder, .. }) => {
            assert_eq!(holder, Some(std::process::id() as i32))
        }
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("second lock acquired"),
    }
    drop(_held);
    InstanceLock::acquire(&path).unwrap();
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_attempt_lock_is_held_while_its_file_is_open() {
    let run = scratch("attempt");
    assert!(!attempt_lock_held(&run), "no lock file yet");
    let lock = take_attempt_lock(&run).unwrap().expect("free");
    assert!(attempt_lock_held(&run));
    assert!(take_attempt_lock(&run).unwrap().is_none(), "taken twice");
    drop(lock);
    assert!(!attempt_lock_held(&run));
    assert!(take_attempt_lock(&run).unwrap().is_some());
    fs::remove_dir_all(&run).unwrap();
}
