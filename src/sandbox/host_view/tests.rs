//! The host's view is read again exactly when something it depends on changed: checked on
//! the real kernel's inotify, in a scratch directory.

use super::*;

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("keel-hostview-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The directories on the way to a scratch directory (/tmp) are shared with whatever else runs:
/// their changes are changes, and the view rightly reads again. `steady` waits until two reads
/// in a row kept what was read (at most 5 s); it returns the count of full reads then, and fails
/// if the view never keeps anything.
fn steady(view: &mut HostView, layout: &SandboxLayout, root: &[RootEntry]) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        view.state(layout, root, &Default::default());
        let before = view.computed();
        view.state(layout, root, &Default::default());
        if view.computed() == before {
            return before;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "every read was a full one: nothing is kept"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// After `change`, the next read is a full one (and `steady` again after).
fn read_again_after(
    view: &mut HostView,
    layout: &SandboxLayout,
    root: &[RootEntry],
    change: impl FnOnce(),
) -> HostState {
    let before = steady(view, layout, root);
    change();
    let state = view.state(layout, root, &Default::default());
    assert!(view.computed() > before, "the change went unseen");
    state
}

fn layout(hidden: Vec<PathBuf>, writable: Vec<PathBuf>) -> SandboxLayout {
    SandboxLayout {
        new_root: "/nonexistent/root".into(),
        work_source: "/nonexistent/work".into(),
        checkout: None,
        workdir: "/work".into(),
        progress_file: "/nonexistent/progress".into(),
        checkpoint_source: "/nonexistent/checkpoint".into(),
        home: "/root".into(),
        home_owner: None,
        tmp_size: 1 << 20,
        home_size: 1 << 20,
        hidden,
        writable,
        readonly: Vec::new(),
        in_user_namespace: false,
        own_network: false,
        resolver_file: None,
        ca_bundle: None,
        veiled: vec![],
    }
}

#[test]
fn the_state_is_read_again_after_a_change_on_the_way_and_only_then() {
    let scratch = Scratch::new("change");
    std::fs::create_dir_all(scratch.path("a/b")).unwrap();
    std::fs::create_dir_all(scratch.path("w")).unwrap();
    let secret = scratch.path("a/b/secret");
    let layout = layout(vec![secret.clone()], vec![scratch.path("w")]);
    let mut view = HostView::new();
    let root = view.root().unwrap();

    let first = view.state(&layout, &root, &Default::default());
    steady(&mut view, &layout, &root);
    assert!(first.text.contains(&format!("{} absent", secret.display())));

    // A hidden path created after the first read: its key must change.
    let created = read_again_after(&mut view, &layout, &root, || {
        std::fs::write(&secret, b"x").unwrap()
    });
    assert_ne!(created.hash, first.hash);
    assert!(!created.text.contains("secret absent"), "{}", created.text);

    // The hidden file replaced by rename (as passwd(1) replaces /etc/shadow): a new inode.
    let replaced = read_again_after(&mut view, &layout, &root, || {
        std::fs::write(scratch.path("a/b/.secret.new"), b"y").unwrap();
        std::fs::rename(scratch.path("a/b/.secret.new"), &secret).unwrap();
    });
    assert_ne!(replaced.hash, created.hash);

    // A directory on the way replaced; then the new one is the one watched.
    read_again_after(&mut view, &layout, &root, || {
        std::fs::rename(scratch.path("a/b"), scratch.path("a/old")).unwrap();
        std::fs::create_dir(scratch.path("a/b")).unwrap();
    });
    read_again_after(&mut view, &layout, &root, || {
        std::fs::write(&secret, b"z").unwrap()
    });

    // A writable directory deleted and made again.
    read_again_after(&mut view, &layout, &root, || {
        std::fs::remove_dir(scratch.path("w")).unwrap();
        std::fs::create_dir(scratch.path("w")).unwrap();
    });

    // Changes off the way (in the old directory, inside the writable one) do not count: some
    // round of them leaves the view as it was (another's change on the way may hit one).
    let kept = (0..20).any(|round| {
        let before = steady(&mut view, &layout, &root);
        std::fs::write(scratch.path(&format!("a/old/unrelated{round}")), b"").unwrap();
        std::fs::create_dir(scratch.path(&format!("w/inside{round}"))).unwrap();
        view.state(&layout, &root, &Default::default());
        view.computed() == before
    });
    assert!(kept, "changes off the way made the view read again");
}

#[test]
fn a_missing_directory_on_the_way_is_seen_when_it_appears() {
    let scratch = Scratch::new("missing");
    let deep = scratch.path("m/n/o");
    let layout = layout(vec![deep.clone()], Vec::new());
    let mut view = HostView::new();
    let root = view.root().unwrap();
    read_again_after(&mut view, &layout, &root, || {
        std::fs::create_dir(scratch.path("m")).unwrap()
    });
    read_again_after(&mut view, &layout, &root, || {
        std::fs::create_dir(scratch.path("m/n")).unwrap()
    });
    let made = read_again_after(&mut view, &layout, &root, || {
        std::fs::create_dir(&deep).unwrap()
    });
    assert!(!made.text.contains("absent"), "{}", made.text);
}

#[test]
fn a_symlink_on_the_way_is_never_trusted() {
    let scratch = Scratch::new("symlink");
    std::fs::create_dir(scratch.path("real")).unwrap();
    std::os::unix::fs::symlink(scratch.path("real"), scratch.path("link")).unwrap();
    let layout = layout(vec![scratch.path("link/secret")], Vec::new());
    let mut view = HostView::new();
    let root = view.root().unwrap();
    view.state(&layout, &root, &Default::default());
    view.state(&layout, &root, &Default::default());
    assert_eq!(
        view.computed(),
        2,
        "what a symlink points to may change unwatched"
    );
}

#[test]
fn a_symlink_at_the_end_is_never_trusted() {
    // Hiding or binding a symlink follows it: its target may be replaced where no watch sees.
    let scratch = Scratch::new("symlink-end");
    std::fs::write(scratch.path("target"), b"").unwrap();
    std::os::unix::fs::symlink(scratch.path("target"), scratch.path("link")).unwrap();
    let layout = layout(vec![scratch.path("link")], Vec::new());
    let mut view = HostView::new();
    let root = view.root().unwrap();
    let first = view.state(&layout, &root, &Default::default());
    view.state(&layout, &root, &Default::default());
    assert_eq!(view.computed(), 2);
    // And the key follows the target: replaced by rename, the state differs.
    std::fs::write(scratch.path("target.new"), b"").unwrap();
    std::fs::rename(scratch.path("target.new"), scratch.path("target")).unwrap();
    assert_ne!(
        view.state(&layout, &root, &Default::default()).hash,
        first.hash
    );
}

#[test]
fn a_path_on_a_filesystem_inotify_cannot_follow_is_read_every_time() {
    // procfs changes without events (so do NFS, FUSE, sysfs): never cached.
    let layout = layout(vec!["/proc/sys/kernel/hostname".into()], Vec::new());
    let mut view = HostView::new();
    let root = view.root().unwrap();
    view.state(&layout, &root, &Default::default());
    view.state(&layout, &root, &Default::default());
    assert_eq!(view.computed(), 2);
}

#[test]
fn clearing_forgets_what_was_read() {
    let scratch = Scratch::new("clear");
    let layout = layout(vec![scratch.path("x")], Vec::new());
    let mut view = HostView::new();
    let root = view.root().unwrap();
    let before = steady(&mut view, &layout, &root);
    view.clear();
    view.state(&layout, &root, &Default::default());
    assert!(view.computed() > before);
    // And it watches again after the clear.
    read_again_after(&mut view, &layout, &root, || {
        std::fs::write(scratch.path("x"), b"").unwrap()
    });
}

#[test]
fn the_root_listing_is_the_hosts() {
    let mut view = HostView::new();
    let cached = view.root().unwrap();
    assert_eq!(view.root().unwrap(), cached);
    assert_eq!(cached, list_host_root().unwrap());
}
