use super::*;

/// A scratch state directory, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dirs() -> (Scratch, StateDir) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let root = std::env::temp_dir().join(format!("keel-base-lock-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    (Scratch(root.clone()), StateDir::new(root))
}

#[test]
fn a_removal_cannot_lock_a_base_a_preparation_holds_and_can_once_it_is_done() {
    let (_tmp, dirs) = dirs();
    let preparing = lock_shared(&dirs, "k").unwrap();
    let another = lock_shared(&dirs, "k").unwrap();
    assert!(try_lock_exclusive(&dirs, "k").unwrap().is_none());
    drop(preparing);
    assert!(try_lock_exclusive(&dirs, "k").unwrap().is_none());
    drop(another);
    let removing = try_lock_exclusive(&dirs, "k").unwrap().expect("free now");
    assert!(try_lock_exclusive(&dirs, "k").unwrap().is_none());
    drop(removing);
    assert!(
        !locks_dir(&dirs).join("k").exists(),
        "a removal unlinks the lock file"
    );
}

#[test]
fn a_preparation_waiting_on_a_removal_locks_the_new_file_once_it_is_done() {
    let (_tmp, dirs) = dirs();
    let removing = try_lock_exclusive(&dirs, "k").unwrap().unwrap();
    let state = dirs.root.clone();
    let waiter = std::thread::spawn(move || {
        let dirs = StateDir::new(&state);
        let lock = lock_shared(&dirs, "k").unwrap();
        // What it holds is what the path names: a removal cannot take it.
        let held = try_lock_exclusive(&dirs, "k").unwrap().is_none();
        drop(lock);
        held
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    drop(removing);
    assert!(waiter.join().unwrap(), "the waiter held a stale lock file");
}

#[test]
fn sweeping_removes_the_lock_files_of_bases_that_are_gone_unless_held() {
    let (_tmp, dirs) = dirs();
    drop(lock_shared(&dirs, "gone").unwrap());
    let held = lock_shared(&dirs, "held").unwrap();
    sweep(&dirs);
    assert!(!locks_dir(&dirs).join("gone").exists());
    assert!(locks_dir(&dirs).join("held").exists());
    drop(held);
}
