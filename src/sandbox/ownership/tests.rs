use super::*;
use std::os::unix::fs::MetadataExt;

/// Root (CAP_CHOWN) here; without it, a skip — a failure under CI or KEEL_REQUIRE_PRIVILEGED.
fn have_chown() -> bool {
    let root = nix::unistd::geteuid().is_root();
    assert!(
        root || (std::env::var_os("CI").is_none()
            && std::env::var_os("KEEL_REQUIRE_PRIVILEGED").is_none()),
        "needs root (CAP_CHOWN)"
    );
    root
}

fn owner(path: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(path).unwrap();
    (m.uid(), m.gid())
}

/// A layer made without a user namespace (root's, a `sandbox.user`'s file) moves into the
/// block at the same offsets; a second call changes nothing; the root goes last.
#[test]
fn a_layer_moves_into_the_block_once() {
    if !have_chown() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("keel-ownership-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let root = dir.join("upper");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/main.rs"), "fn main() {}").unwrap();
    std::fs::write(root.join("mine"), "").unwrap();
    std::os::unix::fs::lchown(root.join("mine"), Some(1000), Some(1000)).unwrap();
    std::os::unix::fs::symlink("src/main.rs", root.join("link")).unwrap();
    let block = IdBlock {
        first: 1_879_048_192,
        count: 65536,
    };
    let changed = give_tree_to(&root, block).unwrap();
    assert_eq!(changed, 5, "root, src, main.rs, mine, link");
    assert_eq!(owner(&root), (block.first, block.first));
    assert_eq!(owner(&root.join("src/main.rs")), (block.first, block.first));
    assert_eq!(
        owner(&root.join("mine")),
        (block.first + 1000, block.first + 1000)
    );
    assert_eq!(owner(&root.join("link")), (block.first, block.first));
    assert_eq!(give_tree_to(&root, block).unwrap(), 0);
    // Another block: from the one the root shows.
    let next = IdBlock {
        first: block.first + 65536,
        count: 65536,
    };
    assert_eq!(give_tree_to(&root, next).unwrap(), 5);
    assert_eq!(
        owner(&root.join("mine")),
        (next.first + 1000, next.first + 1000)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A layer whose top is a `sandbox.user`'s (1000: the checkout gives it to that user) moves
/// once; at the next start its top is in the block and nothing moves again.
#[test]
fn a_users_layer_moves_once() {
    if !have_chown() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("keel-ownership-user-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let root = dir.join("upper");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("mine"), "").unwrap();
    for path in [&root, &root.join("mine")] {
        std::os::unix::fs::lchown(path, Some(1000), Some(1000)).unwrap();
    }
    let block = IdBlock {
        first: 1_879_048_192,
        count: 65536,
    };
    assert_eq!(give_tree_to(&root, block).unwrap(), 2);
    assert_eq!(
        owner(&root.join("mine")),
        (block.first + 1000, block.first + 1000)
    );
    assert_eq!(give_tree_to(&root, block).unwrap(), 0, "moved again");
    assert_eq!(
        owner(&root.join("mine")),
        (block.first + 1000, block.first + 1000)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
