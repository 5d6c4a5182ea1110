//! The judgement of a daemon's cgroup at start, from fixtures: no kernel.

use super::*;
use crate::cgroup::{parse_layout, CgroupError, Layout, Mode};
use std::path::PathBuf;

const USER: u32 = 1000;

fn v2_layout(base: &str) -> Layout {
    Layout {
        mode: Mode::V2,
        v2_base: PathBuf::from(base),
        v2_base_cgroup: PathBuf::from(base.trim_start_matches("/sys/fs/cgroup")),
        v1: Vec::new(),
        adopted: false,
        daemon_stays_in: None,
    }
}

/// What systemd's `Delegate=yes` gives a user service: the directory and its files are the
/// user's, and the parent enabled the controllers.
fn delegated(base: &str, controllers: &str) -> BaseAccess {
    BaseAccess {
        base: PathBuf::from(base),
        controllers: Some(format!("{controllers}\n")),
        unwritable: Vec::new(),
    }
}

const SERVICE: &str =
    "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/keel.service";

#[test]
fn a_delegated_cgroup_with_the_controllers_is_accepted() {
    let layout = v2_layout(SERVICE);
    let access = delegated(SERVICE, "cpuset cpu io memory pids");
    assert_eq!(judge(USER, Ok(&layout), Some(&access)), Ok(()));
}

#[test]
fn root_is_never_judged() {
    let layout = v2_layout("/sys/fs/cgroup");
    let access = BaseAccess {
        base: PathBuf::from("/sys/fs/cgroup"),
        controllers: None,
        unwritable: vec![PathBuf::from("/sys/fs/cgroup")],
    };
    assert_eq!(judge(0, Ok(&layout), Some(&access)), Ok(()));
    assert_eq!(judge(0, Err(&CgroupError::NoV2Mount), None), Ok(()));
}

#[test]
fn a_cgroup_the_user_may_not_write_is_refused_naming_delegation() {
    let base = "/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope";
    let layout = v2_layout(base);
    let access = BaseAccess {
        base: PathBuf::from(base),
        controllers: Some("cpu memory pids\n".into()),
        unwritable: vec![
            PathBuf::from(base),
            PathBuf::from(format!("{base}/cgroup.procs")),
        ],
    };
    let refusal = judge(USER, Ok(&layout), Some(&access)).unwrap_err();
    assert!(
        matches!(refusal, Refusal::NotDelegated { uid: USER, .. }),
        "{refusal:?}"
    );
    let message = refusal.to_string();
    for needle in [
        "uid 1000",
        "session-3.scope, which is not delegated",
        "session-3.scope/cgroup.procs",
        "systemd-run --user -p Delegate=yes --scope keel daemon",
        "Delegate=yes` in the [Service]",
        "loginctl enable-linger",
    ] {
        assert!(message.contains(needle), "{needle:?} not in {message}");
    }
}

#[test]
fn one_unwritable_file_is_enough_to_refuse() {
    let layout = v2_layout(SERVICE);
    let mut access = delegated(SERVICE, "cpu memory pids");
    access.unwritable = vec![PathBuf::from(format!("{SERVICE}/cgroup.subtree_control"))];
    let refusal = judge(USER, Ok(&layout), Some(&access)).unwrap_err();
    assert!(
        refusal.to_string().contains("cgroup.subtree_control"),
        "{refusal}"
    );
}

#[test]
fn missing_controllers_are_named_with_the_drop_in_that_adds_them() {
    // systemd before 252 delegated only memory and pids to user@.service.
    let layout = v2_layout(SERVICE);
    let access = delegated(SERVICE, "memory pids");
    let refusal = judge(USER, Ok(&layout), Some(&access)).unwrap_err();
    assert_eq!(
        refusal,
        Refusal::ControllersMissing {
            uid: USER,
            base: PathBuf::from(SERVICE),
            missing: vec!["cpu"],
        }
    );
    let message = refusal.to_string();
    assert!(message.contains("without the cpu controller "), "{message}");
    assert!(
        message.contains("user@.service.d/delegate.conf"),
        "{message}"
    );
    assert!(message.contains("Delegate=cpu memory pids"), "{message}");

    // A word that merely contains a controller's name does not count; an unreadable file
    // lists none.
    let access = delegated(SERVICE, "cpuset hugetlb");
    let Err(Refusal::ControllersMissing { missing, .. }) = judge(USER, Ok(&layout), Some(&access))
    else {
        panic!("accepted without controllers");
    };
    assert_eq!(missing, ["cpu", "memory", "pids"]);
    let mut access = delegated(SERVICE, "");
    access.controllers = None;
    assert!(judge(USER, Ok(&layout), Some(&access)).is_err());
}

/// This project's development host: v1 controllers and a cgroup2 mount without them.
#[test]
fn a_hybrid_host_is_refused_naming_cgroup_v2() {
    let mountinfo = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    let cgroup = "9:pids:/\n6:memory:/\n3:cpu:/\n0::/\n";
    let layout = parse_layout(mountinfo, cgroup, "keel").unwrap();
    assert_eq!(layout.mode, Mode::Hybrid);
    // Even a writable unified cgroup does not help: it has no controllers.
    let access = delegated("/sys/fs/cgroup/unified", "");
    let refusal = judge(USER, Ok(&layout), Some(&access)).unwrap_err();
    assert_eq!(refusal, Refusal::Hybrid { uid: USER });
    let message = refusal.to_string();
    assert!(
        message.contains("systemd.unified_cgroup_hierarchy=1"),
        "{message}"
    );
    assert!(message.contains("Delegate=yes"), "{message}");
}

#[test]
fn no_cgroup2_mount_is_refused_with_the_detection_error() {
    let refusal = judge(USER, Err(&CgroupError::NoV2Mount), None).unwrap_err();
    assert!(matches!(refusal, Refusal::NoLayout { uid: USER, .. }));
    let message = refusal.to_string();
    assert!(
        message.contains(&CgroupError::NoV2Mount.to_string()),
        "{message}"
    );
    assert!(message.contains("Delegate=yes"), "{message}");
}

#[test]
fn without_an_observation_the_base_counts_as_not_delegated() {
    let layout = v2_layout(SERVICE);
    let refusal = judge(USER, Ok(&layout), None).unwrap_err();
    assert!(
        matches!(refusal, Refusal::NotDelegated { .. }),
        "{refusal:?}"
    );
}

/// A user service named like its tree without `DelegateSubgroup=` (systemd < 254): root would
/// make the tree at the hierarchy's root, a user may not — refused, naming what to do instead.
#[test]
fn a_user_service_without_its_supervisor_subgroup_is_refused_naming_a_scope() {
    let text = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/keel.service\n";
    let mountinfo =
        "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n";
    let layout = parse_layout(mountinfo, text, "keel.service").unwrap();
    assert_eq!(layout.daemon_stays_in, Some(PathBuf::from(SERVICE)));
    let access = delegated(SERVICE, "cpu memory pids");
    let refusal = judge(USER, Ok(&layout), Some(&access)).unwrap_err();
    let message = refusal.to_string();
    assert!(message.contains(SERVICE), "{message}");
    assert!(message.contains("DelegateSubgroup="), "{message}");
    assert!(
        message.contains("systemd-run --user -p Delegate=yes --scope"),
        "{message}"
    );
    // Root in the same place is not judged here.
    assert_eq!(judge(0, Ok(&layout), Some(&access)), Ok(()));
}
