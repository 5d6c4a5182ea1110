use super::*;
use crate::state::scratch_dir;
use crate::state::{create_new_private_dir, create_private_dir};
use std::path::Path;

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn private_dirs_are_0700_whatever_the_umask_allows() {
    let root = scratch_dir("private-dirs");
    let nested = root.join("a/b");
    create_private_dir(&nested).unwrap();
    assert_eq!(mode(&root.join("a")), 0o700);
    assert_eq!(mode(&nested), 0o700);
    // An existing directory is left as it is; a new one must be new.
    fs::set_permissions(&nested, fs::Permissions::from_mode(0o750)).unwrap();
    create_private_dir(&nested).unwrap();
    assert_eq!(mode(&nested), 0o750);
    let fresh = root.join("fresh");
    create_new_private_dir(&fresh).unwrap();
    assert_eq!(mode(&fresh), 0o700);
    assert!(create_new_private_dir(&fresh).is_err());
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn wide_entries_of_an_earlier_installation_are_tightened_and_others_left() {
    let root = scratch_dir("private-tighten");
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    let dirs = StateDir::new(&root);
    for d in ["tasks", "bases", "units", "elsewhere"] {
        fs::create_dir(root.join(d)).unwrap();
        fs::set_permissions(root.join(d), fs::Permissions::from_mode(0o755)).unwrap();
    }
    for f in ["events.jsonl", "lock", "exit-status", "keel.ron"] {
        fs::write(root.join(f), "x").unwrap();
        fs::set_permissions(root.join(f), fs::Permissions::from_mode(0o644)).unwrap();
    }
    // Narrower than private already: not widened.
    fs::set_permissions(root.join("exit-status"), fs::Permissions::from_mode(0o400)).unwrap();
    dirs.tighten_own_entries();
    for d in ["tasks", "bases", "units"] {
        assert_eq!(mode(&root.join(d)), 0o700, "{d}");
    }
    assert_eq!(mode(&root.join("events.jsonl")), 0o600);
    assert_eq!(mode(&root.join("lock")), 0o600);
    assert_eq!(mode(&root.join("exit-status")), 0o400);
    // Not keel's: the operator's configuration, a directory of theirs, the root itself.
    assert_eq!(mode(&root.join("keel.ron")), 0o644);
    assert_eq!(mode(&root.join("elsewhere")), 0o755);
    assert_eq!(mode(&root), 0o755);
    fs::remove_dir_all(&root).unwrap();
}
