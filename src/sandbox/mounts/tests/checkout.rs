//! The plan of a task with a git checkout, against the recording double: the overlay (or the
//! full checkout) at `workdir`, the git directory on `<workdir>/.git`, the main repository's
//! objects read-only at their own path.

use crate::sandbox::mounts::tests::{dir, host, index_of, layout, p, pivot_index, printed, ROOT};
use crate::sandbox::mounts::*;

const TASK: &str = "/var/lib/keel/tasks/demo/checkout";
const LOWER: &str = "/var/lib/keel/bases/0123456789abcdef-c0ffee/tree";

pub(super) fn overlay() -> CheckoutFiles {
    CheckoutFiles::Overlay {
        lower: p(LOWER),
        upper: p(&format!("{TASK}/upper")),
        work: p(&format!("{TASK}/ovl-work")),
    }
}

pub(super) fn with_checkout(files: CheckoutFiles, objects: &str) -> SandboxLayout {
    SandboxLayout {
        checkout: Some(CheckoutMounts {
            files,
            git_dir: p(&format!("{TASK}/git")),
            objects: vec![p(objects)],
            repositories: vec![],
        }),
        ..layout()
    }
}

pub(super) fn hosted() -> Vec<RootEntry> {
    let mut entries = host();
    entries.push(dir("srv"));
    entries
}

#[test]
fn an_overlay_checkout_is_mounted_at_workdir_with_its_git_dir_on_dot_git() {
    let layout = with_checkout(overlay(), "/srv/app/.git/objects");
    let ops = printed(&plan(&layout, &hosted()));
    let at = |s: &str| {
        ops.iter()
            .position(|o| o == s)
            .unwrap_or_else(|| panic!("{s} not in\n{}", ops.join("\n")))
    };
    let mkdir = at("mkdir         <root>/work 0755");
    let overlay = at(&format!(
        "overlay       <root>/work lower={LOWER} upper={TASK}/upper work={TASK}/ovl-work"
    ));
    let git = at(&format!("bind          {TASK}/git -> <root>/work/.git"));
    // /srv is bound from the host: the objects' mountpoint exists there, none is made.
    let objects = at("rbind         /srv/app/.git/objects -> <root>/srv/app/.git/objects");
    let pivot = at("pivot-root    <root> (old root detached)");
    assert!(mkdir < overlay && overlay < git && git < objects && objects < pivot);
    assert!(!ops
        .iter()
        .any(|o| o.starts_with("mkdir         <root>/work/")));
    assert!(!ops
        .iter()
        .any(|o| o.starts_with("mountpoint    <root>/srv")));
    // The checkout and its git directory stay writable; the objects do not.
    let writable = [
        "setattr       /work -rdonly",
        "setattr       /work/.git -rdonly",
    ];
    for line in writable {
        assert!(at(line) > pivot);
    }
    assert!(!ops.iter().any(|o| o.starts_with("setattr       /srv")));
    // Nothing of the state directory's content is hidden inside the checkout: it is the
    // task's own. The state directory itself is, where the host's /var shows it.
    let hides: Vec<&String> = ops.iter().filter(|o| o.starts_with("hide")).collect();
    assert_eq!(hides, ["hide          <root>/var/lib/keel"]);
}

#[test]
fn a_full_checkout_is_bound_and_objects_in_a_keel_tmpfs_get_a_mountpoint() {
    let files = CheckoutFiles::Bind(p(&format!("{TASK}/files")));
    let layout = with_checkout(files, "/tmp/repos/app/.git/objects");
    let ops = plan(&layout, &host());
    let text = printed(&ops);
    let at = |s: &str| {
        text.iter()
            .position(|o| o == s)
            .unwrap_or_else(|| panic!("{s} not in\n{}", text.join("\n")))
    };
    let files = at(&format!("bind          {TASK}/files -> <root>/work"));
    let git = at(&format!("bind          {TASK}/git -> <root>/work/.git"));
    let tmp = at("tmpfs         <root>/tmp size=512M mode=1777 nosuid,nodev");
    let point = at("mountpoint    <root>/tmp/repos/app/.git/objects (dir or file, like /tmp/repos/app/.git/objects)");
    let objects =
        at("rbind         /tmp/repos/app/.git/objects -> <root>/tmp/repos/app/.git/objects");
    assert!(files < git && tmp < point && point < objects && objects < pivot_index(&ops));
    assert!(!text.iter().any(|o| o.starts_with("overlay")));
}

#[test]
fn nothing_of_a_checkout_is_made_outside_the_new_root_before_the_pivot() {
    for layout in [
        with_checkout(overlay(), "/srv/app/.git/objects"),
        with_checkout(CheckoutFiles::Bind(p("/x/files")), "/root/app/.git/objects"),
    ] {
        let ops = plan(&layout, &hosted());
        for op in &ops[1..pivot_index(&ops)] {
            let target = op.target().unwrap();
            assert!(target.starts_with(ROOT), "outside the new root: {op}");
        }
    }
}

pub(super) fn refused(layout: &SandboxLayout) -> String {
    let mut mounter = RecordingMounter::new();
    let err = build(layout, &hosted(), &mut mounter).unwrap_err();
    assert!(mounter.ops.is_empty(), "nothing mounted before validation");
    err.to_string()
}

#[test]
fn checkout_layouts_the_kernel_could_not_honour_are_refused_first() {
    let mut bad = with_checkout(overlay(), "/srv/app/.git/objects");
    if let Some(c) = &mut bad.checkout {
        c.files = CheckoutFiles::Overlay {
            lower: p("/state,x/tree"),
            upper: p("/s/upper"),
            work: p("/s/work"),
        };
    }
    assert!(refused(&bad).contains("which overlayfs mount options cannot carry"));
    let bad = with_checkout(overlay(), "/var/lib/keel/repos/app/.git/objects");
    let message = refused(&bad);
    assert!(
        message.contains("the main repository's objects lies inside hidden path /var/lib/keel"),
        "{message}"
    );
    let mut bad = with_checkout(overlay(), "/srv/app/.git/objects");
    bad.workdir = p("/srv/app");
    assert!(refused(&bad).contains("lie inside workdir /srv/app: set workdir"));
    let bad = with_checkout(overlay(), "relative/objects");
    assert!(refused(&bad).contains("must be an absolute path"));
    let mut bad = with_checkout(overlay(), "/srv/app/.git/objects");
    if let Some(c) = &mut bad.checkout {
        c.git_dir = p("git");
    }
    assert!(refused(&bad).contains("the checkout's git directory must be an absolute path"));
}

#[test]
fn a_failing_checkout_mount_names_what_to_do() {
    let layout = with_checkout(overlay(), "/srv/app/.git/objects");
    let ops = plan(&layout, &hosted());
    let fail = |wanted: &dyn Fn(&MountOp) -> bool, errno: i32| {
        let i = index_of(&ops, wanted);
        let mut mounter = RecordingMounter::failing_at(i, errno);
        build(&layout, &hosted(), &mut mounter)
            .unwrap_err()
            .to_string()
    };
    let message = fail(&|op| matches!(op, MountOp::Overlay { .. }), libc::ENODEV);
    assert!(message.starts_with(&format!(
        "cannot mount the task's checkout at /work (an overlay whose upper layer is {TASK}/upper)"
    )));
    assert!(message.contains("modprobe overlay"), "{message}");
    let git =
        |op: &MountOp| matches!(op, MountOp::Bind { target, .. } if target.ends_with("work/.git"));
    let message = fail(&git, libc::ENOENT);
    assert!(message.contains("must hold a .git directory"), "{message}");
    let objects = |op: &MountOp| matches!(op, MountOp::BindRecursive { source, .. } if source.ends_with("objects"));
    let message = fail(&objects, libc::ENOENT);
    assert!(
        message.contains("the repository must stay where it was"),
        "{message}"
    );
}
