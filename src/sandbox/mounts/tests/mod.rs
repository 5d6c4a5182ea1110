//! The plan, checked against a recording double: order, confinement to the new root, and the
//! error each failing step turns into.

use super::*;
use std::path::{Path, PathBuf};

pub(super) const ROOT: &str = "/var/lib/keel/tasks/demo/run/root";

pub(super) fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

pub(super) fn dir(name: &str) -> RootEntry {
    RootEntry {
        name: name.into(),
        kind: RootEntryKind::Dir,
    }
}

fn link(name: &str, target: &str) -> RootEntry {
    RootEntry {
        name: name.into(),
        kind: RootEntryKind::Symlink(p(target)),
    }
}

/// A merged-/usr host, listed in no particular order.
pub(super) fn host() -> Vec<RootEntry> {
    let mut entries = vec![link("bin", "usr/bin"), link("lib", "usr/lib")];
    for name in [
        "usr", "etc", "home", "root", "var", "tmp", "proc", "dev", "sys", "run",
    ] {
        entries.push(dir(name));
    }
    entries
}

pub(super) fn layout() -> SandboxLayout {
    SandboxLayout {
        new_root: p(ROOT),
        work_source: p("/var/lib/keel/tasks/demo/work"),
        checkout: None,
        workdir: p("/work"),
        progress_file: p("/var/lib/keel/tasks/demo/run/progress"),
        checkpoint_source: p("/var/lib/keel/tasks/demo/checkpoint"),
        home: p("/root"),
        home_owner: None,
        tmp_size: 512 << 20,
        home_size: 256 << 20,
        hidden: vec![p("/var/lib/keel")],
        writable: vec![],
        readonly: vec![],
        in_user_namespace: false,
        own_network: false,
        resolver_file: None,
        ca_bundle: None,
        veiled: vec![],
    }
}

pub(super) fn printed(ops: &[MountOp]) -> Vec<String> {
    ops.iter()
        .map(|op| op.to_string().replace(ROOT, "<root>"))
        .collect()
}

pub(super) fn index_of(ops: &[MountOp], wanted: impl Fn(&MountOp) -> bool) -> usize {
    ops.iter()
        .position(wanted)
        .unwrap_or_else(|| panic!("not in the plan:\n{}", printed(ops).join("\n")))
}

pub(super) fn pivot_index(ops: &[MountOp]) -> usize {
    index_of(ops, |op| matches!(op, MountOp::PivotRoot { .. }))
}

#[test]
fn in_a_user_namespace_sys_is_bound_whole_and_its_cgroup_tree_hidden() {
    let in_userns = SandboxLayout {
        in_user_namespace: true,
        ..layout()
    };
    let ops = printed(&plan(&in_userns, &host()));
    let sys = ops
        .iter()
        .position(|op| op == "rbind         /sys -> <root>/sys");
    let sys = sys.unwrap_or_else(|| panic!("/sys not bound whole:\n{}", ops.join("\n")));
    assert_eq!(ops[sys + 1], "hide          <root>/sys/fs/cgroup");
    assert!(!ops
        .iter()
        .any(|op| op == "bind          /sys -> <root>/sys"));
    // As root, /sys alone, and nothing hidden under it.
    let root = printed(&plan(&layout(), &host()));
    assert!(root
        .iter()
        .any(|op| op == "bind          /sys -> <root>/sys"));
    assert!(!root.iter().any(|op| op.contains("sys/fs/cgroup")));
}

#[test]
fn typical_host_plan_in_order() {
    let ops = plan(&layout(), &host());
    let expected = [
        "make-private  / (recursive)",
        "tmpfs         <root> size=1M mode=0755 nosuid,nodev,noexec",
        "unbindable    <root>",
        "symlink       <root>/bin -> usr/bin",
        "mkdir         <root>/etc 0755",
        "rbind         /etc -> <root>/etc",
        "mkdir         <root>/home 0755",
        "rbind         /home -> <root>/home",
        "symlink       <root>/lib -> usr/lib",
        "mkdir         <root>/sys 0755",
        "bind          /sys -> <root>/sys",
        "mkdir         <root>/usr 0755",
        "rbind         /usr -> <root>/usr",
        "mkdir         <root>/var 0755",
        "rbind         /var -> <root>/var",
        "mkdir         <root>/dev 0755",
        "mkfile        <root>/dev/null",
        "bind          /dev/null -> <root>/dev/null",
        "mkfile        <root>/dev/zero",
        "bind          /dev/zero -> <root>/dev/zero",
        "mkfile        <root>/dev/full",
        "bind          /dev/full -> <root>/dev/full",
        "mkfile        <root>/dev/random",
        "bind          /dev/random -> <root>/dev/random",
        "mkfile        <root>/dev/urandom",
        "bind          /dev/urandom -> <root>/dev/urandom",
        "mkfile        <root>/dev/tty",
        "bind          /dev/tty -> <root>/dev/tty",
        "mkdir         <root>/dev/pts 0755",
        "devpts        <root>/dev/pts newinstance,ptmxmode=0666,mode=620",
        "mkdir         <root>/dev/shm 0755",
        "tmpfs         <root>/dev/shm size=512M mode=1777 nosuid,nodev,noexec",
        "symlink       <root>/dev/ptmx -> pts/ptmx",
        "symlink       <root>/dev/fd -> /proc/self/fd",
        "symlink       <root>/dev/stdin -> /proc/self/fd/0",
        "symlink       <root>/dev/stdout -> /proc/self/fd/1",
        "symlink       <root>/dev/stderr -> /proc/self/fd/2",
        "mkdir         <root>/proc 0755",
        "proc          <root>/proc",
        "mkdir         <root>/run 0755",
        "mkdir         <root>/run/keel 0755",
        "mkfile        <root>/run/keel/progress",
        "bind          /var/lib/keel/tasks/demo/run/progress -> <root>/run/keel/progress",
        "mkdir         <root>/run/keel/checkpoint 0755",
        "bind          /var/lib/keel/tasks/demo/checkpoint -> <root>/run/keel/checkpoint",
        "mkdir         <root>/tmp 0755",
        "tmpfs         <root>/tmp size=512M mode=1777 nosuid,nodev",
        "mkdir         <root>/root 0755",
        "tmpfs         <root>/root size=256M mode=0700 nosuid,nodev",
        "mkdir         <root>/work 0755",
        "bind          /var/lib/keel/tasks/demo/work -> <root>/work",
        "hide          <root>/var/lib/keel",
        "pivot-root    <root> (old root detached)",
        "setattr -R    / +rdonly|nosuid|nodev",
        "setattr       /dev/null -nodev",
        "setattr       /dev/zero -nodev",
        "setattr       /dev/full -nodev",
        "setattr       /dev/random -nodev",
        "setattr       /dev/urandom -nodev",
        "setattr       /dev/tty -nodev",
        "setattr       /dev/pts -rdonly|nodev",
        "setattr       /dev/shm -rdonly",
        "setattr       /run/keel/progress -rdonly",
        "setattr       /run/keel/checkpoint -rdonly",
        "setattr       /tmp -rdonly",
        "setattr       /root -rdonly",
        "setattr       /work -rdonly",
    ];
    assert_eq!(printed(&ops), expected);
}

#[test]
fn nothing_before_the_pivot_touches_the_host_outside_the_new_root() {
    let mut layout = layout();
    layout.writable = vec![p("/srv/cache"), p("/root/.npm")];
    layout.hidden.push(p("/etc/shadow"));
    for ops in [plan(&layout, &host()), plan(&self::layout(), &host())] {
        let pivot = pivot_index(&ops);
        assert_eq!(ops[0], MountOp::MakeRootPrivate);
        for op in &ops[1..pivot] {
            let target = op.target().expect("every op but the first has a target");
            assert!(target.starts_with(ROOT), "outside the new root: {op}");
        }
        for op in &ops[pivot + 1..] {
            assert!(matches!(
                op,
                MountOp::SetAttr { .. } | MountOp::SetAttrRecursive { .. }
            ));
            assert!(!op.target().unwrap().starts_with(ROOT), "{op}");
        }
    }
}

/// An independent model of what each op lands on: every creation must lie inside a tmpfs
/// the plan mounted, never in a bind of host content.
#[test]
fn files_and_directories_are_created_only_in_keel_tmpfs_layers() {
    let mut layout = layout();
    layout.home = p("/home/agent/h");
    layout.workdir = p("/home/agent/h/src/work");
    layout.writable = vec![p("/home/agent/h/.cache"), p("/srv/data")];
    let mut entries = host();
    entries.push(dir("srv"));
    let ops = plan(&layout, &entries);
    let mut mounts: Vec<(PathBuf, bool)> = Vec::new(); // (target, is keel's tmpfs)
    for op in &ops[..pivot_index(&ops)] {
        let mounted = match op {
            MountOp::Tmpfs { target, .. } => Some((target.clone(), true)),
            MountOp::Bind { target, .. }
            | MountOp::BindRecursive { target, .. }
            | MountOp::Proc { target }
            | MountOp::Devpts { target }
            | MountOp::Hide { target } => Some((target.clone(), false)),
            _ => None,
        };
        if let Some((target, tmpfs)) = mounted {
            mounts.retain(|(at, _)| !at.starts_with(&target));
            mounts.push((target, tmpfs));
            continue;
        }
        let created = match op {
            MountOp::Mkdir { path, .. }
            | MountOp::MkFile { path }
            | MountOp::Mountpoint { path, .. }
            | MountOp::Symlink { link: path, .. } => path,
            _ => continue,
        };
        let parent = created.parent().unwrap();
        let holder = mounts
            .iter()
            .filter(|(at, _)| parent.starts_with(at))
            .max_by_key(|(at, _)| at.components().count())
            .unwrap_or_else(|| panic!("{op}: no mount holds it"));
        assert!(holder.1, "{op}: created in {}", holder.0.display());
    }
    // /home/agent/h lies in the host's /home: it must exist there, it is not created.
    assert!(!printed(&ops).contains(&"mkdir         <root>/home/agent 0755".to_string()));
}

#[test]
fn the_state_dir_is_hidden_after_the_work_is_bound_from_it() {
    let ops = plan(&layout(), &host());
    let work = index_of(
        &ops,
        |op| matches!(op, MountOp::Bind { target, .. } if target == &p(ROOT).join("work")),
    );
    let hide = index_of(&ops, |op| {
        op == &MountOp::Hide {
            target: p(ROOT).join("var/lib/keel"),
        }
    });
    let last_bind = ops
        .iter()
        .rposition(|op| matches!(op, MountOp::Bind { .. } | MountOp::BindRecursive { .. }))
        .unwrap();
    assert!(work < hide && last_bind < hide && hide < pivot_index(&ops));
}

#[test]
fn the_state_dir_under_tmp_or_at_the_top_is_never_bound() {
    let mut layout = layout();
    layout.new_root = p("/tmp/keel/tasks/demo/run/root");
    layout.hidden = vec![p("/tmp/keel")];
    let ops = plan(&layout, &host());
    // The host's /tmp is not in the sandbox at all: a fresh tmpfs is. Nothing to hide.
    assert!(!ops.iter().any(|op| matches!(op, MountOp::Hide { .. })));
    assert!(!printed(&ops)
        .iter()
        .any(|s| s.starts_with("rbind         /tmp")));

    let mut layout = self::layout();
    layout.hidden = vec![p("/keel")];
    let mut entries = host();
    entries.push(dir("keel"));
    let ops = plan(&layout, &entries);
    assert!(!ops.iter().any(|op| matches!(op, MountOp::Hide { .. })));
    assert!(!printed(&ops).iter().any(|s| s.contains("<root>/keel")));
}

#[test]
fn hidden_paths_are_found_through_top_level_symlinks_and_writable_binds() {
    let mut layout = layout();
    layout.hidden = vec![p("/var/lib/keel"), p("/bin/secret"), p("/srv/data/key")];
    layout.writable = vec![p("/srv/data")];
    let mut entries = host();
    entries.push(dir("srv"));
    let ops = printed(&plan(&layout, &entries));
    for wanted in [
        "hide          <root>/usr/bin/secret",
        "hide          <root>/var/lib/keel",
        "hide          <root>/srv/data/key",
    ] {
        assert!(ops.contains(&wanted.to_string()), "{wanted} missing");
    }
}

#[test]
fn writable_binds_come_before_the_read_only_setattr_and_are_cleared_after_it() {
    let mut layout = layout();
    layout.writable = vec![p("/srv/cache"), p("/root/.gitconfig")];
    let mut entries = host();
    entries.push(dir("srv"));
    let ops = plan(&layout, &entries);
    let readonly = index_of(&ops, |op| matches!(op, MountOp::SetAttrRecursive { .. }));
    assert!(pivot_index(&ops) < readonly);
    for (host, sandbox) in [
        ("/srv/cache", "/srv/cache"),
        ("/root/.gitconfig", "/root/.gitconfig"),
    ] {
        let bind = index_of(&ops, |op| {
            op == &MountOp::BindRecursive {
                source: p(host),
                target: p(ROOT).join(&sandbox[1..]),
            }
        });
        let clear = index_of(&ops, |op| {
            op == &MountOp::SetAttr {
                target: p(sandbox),
                set: MountAttrs::NONE,
                clear: MountAttrs::RDONLY,
            }
        });
        assert!(bind < readonly && readonly < clear);
    }
    // A writable path inside $HOME's tmpfs gets its mountpoint there, after that tmpfs.
    let home = index_of(
        &ops,
        |op| matches!(op, MountOp::Tmpfs { target, .. } if target == &p(ROOT).join("root")),
    );
    let point = index_of(&ops, |op| matches!(op, MountOp::Mountpoint { .. }));
    assert!(home < point);
}

#[test]
fn home_missing_at_the_top_is_made_in_the_root_tmpfs_and_nested_mounts_go_parents_first() {
    let mut layout = layout();
    layout.home = p("/agent-home");
    layout.workdir = p("/agent-home/work");
    layout.home_owner = Some((1000, 1000));
    let ops = printed(&plan(&layout, &host()));
    let at = |s: &str| {
        ops.iter()
            .position(|o| o == s)
            .unwrap_or_else(|| panic!("{s}"))
    };
    let mkdir = at("mkdir         <root>/agent-home 0755");
    let tmpfs =
        at("tmpfs         <root>/agent-home size=256M mode=0700 nosuid,nodev uid=1000,gid=1000");
    let work = at("bind          /var/lib/keel/tasks/demo/work -> <root>/agent-home/work");
    assert!(mkdir < tmpfs && tmpfs < work);
    // The host's /root, no longer anybody's $HOME, is bound like any directory.
    at("rbind         /root -> <root>/root");
}

#[test]
fn home_behind_a_top_level_symlink_lands_where_the_link_points() {
    let mut layout = layout();
    layout.home = p("/home/x");
    let mut entries: Vec<RootEntry> = host().into_iter().filter(|e| e.name != "home").collect();
    entries.push(link("home", "var/home"));
    let ops = printed(&plan(&layout, &entries));
    assert!(
        ops.contains(&"tmpfs         <root>/var/home/x size=256M mode=0700 nosuid,nodev".into())
    );
    assert!(ops.contains(&"symlink       <root>/home -> var/home".into()));
    assert!(ops.contains(&"setattr       /var/home/x -rdonly".into()));
    assert!(!ops
        .iter()
        .any(|o| o.starts_with("mkdir         <root>/var/home")));
}

fn build_error(layout: &SandboxLayout) -> String {
    let mut mounter = RecordingMounter::new();
    let err = build(layout, &host(), &mut mounter).unwrap_err();
    assert!(mounter.ops.is_empty(), "nothing mounted before validation");
    assert!(matches!(err, SandboxError::Layout { .. }));
    err.to_string()
}

#[test]
fn impossible_layouts_are_refused_before_any_mount() {
    let mut bad = layout();
    bad.writable = vec![p("srv")];
    assert!(build_error(&bad).contains("absolute path"));
    let mut bad = layout();
    bad.writable = vec![p("/var/lib/keel/tasks/other/work")];
    assert!(build_error(&bad).contains("lies inside hidden path /var/lib/keel"));
    let mut bad = layout();
    bad.workdir = p("/proc/work");
    assert!(build_error(&bad).contains("cannot be inside /proc"));
    let mut bad = layout();
    bad.tmp_size = 0;
    assert!(build_error(&bad).contains("greater than 0"));
    let mut bad = layout();
    bad.writable = vec![p("/work")];
    assert!(build_error(&bad).contains("two mounts at the same path"));
    let mut bad = layout();
    bad.hidden.push(p("/"));
    assert!(build_error(&bad).contains("sandbox.hidden cannot be /"));
    let mut bad = layout();
    bad.home = p("/tmp");
    assert!(build_error(&bad).contains("HOME cannot be /tmp"));
}

/// Fail each operation in turn: the right step is named, with what to do.
#[test]
fn a_failure_at_any_op_names_its_step() {
    let mut layout = layout();
    layout.writable = vec![p("/srv/cache")];
    let mut entries = host();
    entries.push(dir("srv"));
    let ops = plan(&layout, &entries);
    for (i, op) in ops.iter().enumerate() {
        let mut mounter = RecordingMounter::failing_at(i, libc::EPERM);
        let err = build(&layout, &entries, &mut mounter).unwrap_err();
        assert_eq!(mounter.ops.len(), i + 1, "stopped at the failing op");
        assert_eq!(err.io_error().unwrap().raw_os_error(), Some(libc::EPERM));
        let target = op.target().map(Path::to_path_buf).unwrap_or_default();
        let ok = match &err {
            SandboxError::PrivateMounts { .. } => i == 0,
            SandboxError::RootTmpfs { path, .. } => *path == p(ROOT) && i < 3,
            SandboxError::HostBind { path, .. } => {
                target == p(ROOT).join(&path.as_os_str().to_str().unwrap()[1..])
            }
            SandboxError::Dev { .. } => target.starts_with(p(ROOT).join("dev")),
            SandboxError::Proc { .. } => target.starts_with(p(ROOT).join("proc")),
            SandboxError::RunKeel { .. } => target.starts_with(p(ROOT).join("run")),
            SandboxError::Tmp { .. } => target.starts_with(p(ROOT).join("tmp")),
            SandboxError::Home { path, .. } => {
                *path == p("/root") && target.starts_with(p(ROOT).join("root"))
            }
            SandboxError::Work { workdir, .. } => {
                *workdir == p("/work") && target.starts_with(p(ROOT).join("work"))
            }
            SandboxError::Writable { path, .. } => *path == p("/srv/cache"),
            // No checkout in this layout (see tests_checkout).
            SandboxError::Overlay { .. }
            | SandboxError::GitDir { .. }
            | SandboxError::Objects { .. }
            | SandboxError::Repository { .. } => false,
            SandboxError::Hidden { path, .. } => *path == p("/var/lib/keel"),
            SandboxError::PivotRoot { .. } => matches!(op, MountOp::PivotRoot { .. }),
            SandboxError::ReadOnly { path, .. } => Some(path.as_path()) == op.target(),
            SandboxError::Layout { .. } => false,
        };
        assert!(ok, "op {i} ({op}) failed as: {err}");
    }
}

#[test]
fn messages_say_what_failed_and_what_to_do() {
    let ops = plan(&layout(), &host());
    let fail = |wanted: &dyn Fn(&MountOp) -> bool, errno: i32| {
        let i = index_of(&ops, wanted);
        let mut mounter = RecordingMounter::failing_at(i, errno);
        build(&layout(), &host(), &mut mounter)
            .unwrap_err()
            .to_string()
    };
    let message = fail(&|op| op == &MountOp::MakeRootPrivate, libc::EPERM);
    assert!(message.starts_with("cannot make mounts private (mount namespaces unavailable?)"));
    assert!(message.ends_with("run keel as root, or with CAP_SYS_ADMIN"));
    // A plain chroot: "/" is no mount point.
    let message = fail(&|op| op == &MountOp::MakeRootPrivate, libc::EINVAL);
    assert!(message.contains("/ is not a mount point"), "{message}");
    assert!(message.ends_with("bind-mount its root onto itself first"));
    let message = fail(
        &|op| matches!(op, MountOp::SetAttrRecursive { .. }),
        libc::ENOSYS,
    );
    assert_eq!(
        message,
        "mount_setattr failed: Linux ≥ 5.12 is required for a read-only sandbox"
    );
    let message = fail(
        &|op| matches!(op, MountOp::Tmpfs { mode: 0o700, .. }),
        libc::ENOENT,
    );
    assert!(message.starts_with("cannot mount a private $HOME at /root: "));
    assert!(message.contains("must exist on the host"));
    let message = fail(&|op| matches!(op, MountOp::PivotRoot { .. }), libc::EINVAL);
    assert!(message.contains("initramfs"));
    let message = fail(&|op| matches!(op, MountOp::Hide { .. }), libc::EACCES);
    assert!(message.starts_with("cannot hide /var/lib/keel"));
    assert!(message.contains("refusing to run"));
}

#[test]
fn attrs_print_as_flags() {
    let all = MountAttrs::RDONLY
        .union(MountAttrs::NOSUID)
        .union(MountAttrs::NODEV);
    assert_eq!(all.to_string(), "rdonly|nosuid|nodev");
    assert_eq!(MountAttrs::NONE.to_string(), "none");
}

#[test]
fn read_only_paths_are_bound_inside_keel_mounts_and_stay_read_only() {
    let mut layout = layout();
    layout.readonly = vec![p("/run/systemd/resolve")];
    let ops = plan(&layout, &host());
    let text = printed(&ops);
    let at = |s: &str| {
        text.iter()
            .position(|o| o == s)
            .unwrap_or_else(|| panic!("{s}"))
    };
    let keel = at("mkdir         <root>/run/keel 0755");
    let dir = at("mkdir         <root>/run/systemd 0755");
    let point =
        at("mountpoint    <root>/run/systemd/resolve (dir or file, like /run/systemd/resolve)");
    let bind = at("rbind         /run/systemd/resolve -> <root>/run/systemd/resolve");
    assert!(keel < dir && dir < point && point < bind && bind < pivot_index(&ops));
    assert!(!text
        .iter()
        .any(|o| o.starts_with("setattr       /run/systemd")));
}

#[test]
fn every_task_has_its_own_ipc_and_uts_namespaces() {
    use nix::sched::CloneFlags;
    let own = CloneFlags::CLONE_NEWIPC | CloneFlags::CLONE_NEWUTS;
    assert_eq!(task_namespaces(), own);
    // The mount namespace is made apart (copied from a template, or a spare's copy joined);
    // the network one is joined first (made by the daemon).
    assert!(!task_namespaces().intersects(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWNET));
}

#[test]
fn a_sandbox_with_a_network_of_its_own_mounts_a_sysfs_of_it_not_the_hosts() {
    let host = host();
    let mut l = layout();
    let plain = printed(&plan(&l, &host));
    assert!(!plain.iter().any(|o| o.starts_with("sysfs")), "{plain:?}");
    assert!(plain
        .iter()
        .any(|o| o.starts_with("bind") && o.ends_with("/sys")));
    l.own_network = true;
    let own = printed(&plan(&l, &host));
    let host_sys = |o: &String| o.starts_with("bind") && o.ends_with("/sys");
    assert!(!own.iter().any(host_sys), "{own:?}");
    assert!(own.iter().any(|o| o.starts_with("sysfs")), "{own:?}");
}

mod checkout;
mod repository;

#[test]
fn keels_ca_bundle_is_bound_over_the_hosts_bundle() {
    let host = host();
    let mut l = layout();
    l.ca_bundle = Some((
        p("/var/lib/keel/network/ca-bundle.pem"),
        p("/etc/ssl/certs/ca-certificates.crt"),
    ));
    let ops = printed(&plan(&l, &host));
    let binds: Vec<&String> = (ops.iter())
        .filter(|o| {
            o.starts_with("bind")
                && o.contains("/var/lib/keel/network/ca-bundle.pem")
                && o.ends_with("/etc/ssl/certs/ca-certificates.crt")
        })
        .collect();
    assert_eq!(binds.len(), 1, "{ops:#?}");
    // The host's /etc stays what it was otherwise: nothing else of it bound over.
    let without = printed(&plan(&layout(), &host));
    assert_eq!(
        ops.len(),
        without.len() + binds.len(),
        "{ops:#?}\n{without:#?}"
    );
}

#[test]
fn keels_resolv_conf_is_shown_where_the_hosts_really_is_and_the_hosts_resolver_directory_is_not() {
    let host = host();
    let mut l = layout();
    l.own_network = true;
    l.readonly = vec![];
    l.resolver_file = Some((
        p("/var/lib/keel/network/resolv.conf"),
        p("/run/systemd/resolve/stub-resolv.conf"),
    ));
    let ops = printed(&plan(&l, &host));
    let bind = ops
        .iter()
        .position(|o| {
            o.starts_with("bind")
                && o.contains("/var/lib/keel/network/resolv.conf")
                && o.ends_with("/run/systemd/resolve/stub-resolv.conf")
        })
        .unwrap_or_else(|| panic!("no bind of keel's resolv.conf in {ops:#?}"));
    // In keel's own /run (a tmpfs): its place made there, nothing of the host's /run bound.
    assert!(
        ops[..bind]
            .iter()
            .any(|o| o.contains("/run/systemd/resolve")),
        "{ops:#?}"
    );
    assert!(
        !ops.iter()
            .any(|o| o.starts_with("bind") && o.contains("/run/systemd/resolve ")),
        "{ops:#?}"
    );
}
