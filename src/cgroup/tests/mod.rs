//! Detection from mountinfo and /proc/self/cgroup fixtures; limit arithmetic.

use super::*;
use std::path::PathBuf;

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

const PURE_V2_MOUNTINFO: &str = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro
25 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 25 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
27 22 0:5 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
";

/// This project's CI host, as read there (kernel 6.18).
const HYBRID_MOUNTINFO: &str = "\
23 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

const HYBRID_CGROUP: &str = "\
9:name=systemd:/
8:pids:/
7:blkio:/
6:freezer:/
5:devices:/
4:memory:/process_api/8c30c9835dad0574bd069ab94684ba3d
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
";

/// systemd's "hybrid" layout: cpu and cpuacct co-mounted.
const SYSTEMD_HYBRID_MOUNTINFO: &str = "\
30 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
32 30 0:28 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
35 30 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
36 30 0:32 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory
37 30 0:33 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,pids
";

const SYSTEMD_HYBRID_CGROUP: &str = "\
12:pids:/system.slice/keel.service
5:memory:/system.slice/keel.service
4:cpu,cpuacct:/system.slice/keel.service
1:name=systemd:/system.slice/keel.service
0::/system.slice/keel.service
";

#[test]
fn pure_v2_host() {
    let layout =
        parse_layout(PURE_V2_MOUNTINFO, "0::/system.slice/keel.service\n", "keel").unwrap();
    assert_eq!(layout.mode, Mode::V2);
    assert_eq!(
        layout.v2_base,
        p("/sys/fs/cgroup/system.slice/keel.service")
    );
    assert!(layout.v1.is_empty());
    assert!(!layout.adopted);
    assert_eq!(layout.mode.to_string(), "v2");
}

#[test]
fn pure_v2_root_cgroup_is_the_mount_point() {
    let layout = parse_layout(PURE_V2_MOUNTINFO, "0::/\n", "keel").unwrap();
    assert_eq!(layout.v2_base.as_os_str(), "/sys/fs/cgroup");
}

#[test]
fn this_hybrid_host() {
    let layout = parse_layout(HYBRID_MOUNTINFO, HYBRID_CGROUP, "keel").unwrap();
    assert_eq!(layout.mode, Mode::Hybrid);
    assert_eq!(layout.v2_base.as_os_str(), "/sys/fs/cgroup/unified");
    assert_eq!(layout.v2_base_cgroup, p("/"));
    assert_eq!(
        layout.v1,
        vec![
            (V1Controller::Cpu, p("/sys/fs/cgroup/cpu")),
            (V1Controller::Cpuacct, p("/sys/fs/cgroup/cpuacct")),
            (
                V1Controller::Memory,
                p("/sys/fs/cgroup/memory/process_api/8c30c9835dad0574bd069ab94684ba3d")
            ),
            (V1Controller::Pids, p("/sys/fs/cgroup/pids")),
        ]
    );
    assert_eq!(
        layout.mode.to_string(),
        "hybrid (v1 cpu,memory,pids + v2 unified)"
    );
    assert_eq!(layout.bases().len(), 5);
}

#[test]
fn co_mounted_cpu_and_cpuacct_share_a_base() {
    let layout = parse_layout(SYSTEMD_HYBRID_MOUNTINFO, SYSTEMD_HYBRID_CGROUP, "keel").unwrap();
    assert_eq!(layout.mode, Mode::Hybrid);
    let service = "system.slice/keel.service";
    assert_eq!(
        layout.v2_base,
        p(&format!("/sys/fs/cgroup/unified/{service}"))
    );
    let cpu = p(&format!("/sys/fs/cgroup/cpu,cpuacct/{service}"));
    assert_eq!(layout.v1_base(V1Controller::Cpu), Some(cpu.as_path()));
    assert_eq!(layout.v1_base(V1Controller::Cpuacct), Some(cpu.as_path()));
    assert_eq!(layout.v1_bases().len(), 3, "cpu,cpuacct once");
}

#[test]
fn v2_mount_with_controllers_beside_unrelated_v1_hierarchies() {
    // cpu, memory and pids are not bound to v1: they live on the cgroup2 mount, even though it
    // is at /sys/fs/cgroup/unified and v1 hierarchies exist for other controllers.
    let mountinfo = "\
30 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
32 30 0:28 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
33 30 0:29 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,cpuset
34 30 0:30 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,freezer
";
    let cgroup = "\
3:freezer:/
2:cpuset:/
1:name=systemd:/user.slice/user-1000.slice/session-3.scope
0::/user.slice/user-1000.slice/session-3.scope
";
    let layout = parse_layout(mountinfo, cgroup, "keel").unwrap();
    assert_eq!(layout.mode, Mode::V2);
    assert_eq!(
        layout.v2_base,
        p("/sys/fs/cgroup/unified/user.slice/user-1000.slice/session-3.scope")
    );
    assert!(layout.v1.is_empty());
}

const CONTAINER_MOUNTINFO: &str = "\
1013 1012 0:120 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
1020 1013 0:125 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
1021 1020 0:29 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate
";

#[test]
fn cgroup_namespace_root() {
    // A container with its own cgroup namespace: both files show paths from the namespace's
    // root, which is the mount's root.
    let layout = parse_layout(CONTAINER_MOUNTINFO, "0::/\n", "keel").unwrap();
    assert_eq!(layout.mode, Mode::V2);
    assert_eq!(layout.v2_base.as_os_str(), "/sys/fs/cgroup");
}

#[test]
fn cgroup_namespace_after_moving_into_a_child() {
    let layout = parse_layout(CONTAINER_MOUNTINFO, "0::/init.scope\n", "keel").unwrap();
    assert_eq!(layout.v2_base, p("/sys/fs/cgroup/init.scope"));
    assert_eq!(layout.v2_base_cgroup, p("/init.scope"));
}

#[test]
fn host_namespace_with_a_bound_subtree() {
    // No cgroup namespace; the runtime bound the container's own cgroup at /sys/fs/cgroup: the
    // mount's root is that cgroup.
    let mountinfo =
        "1021 1020 0:29 /docker/abc123 /sys/fs/cgroup rw,relatime - cgroup2 cgroup rw\n";
    let layout = parse_layout(mountinfo, "0::/docker/abc123\n", "keel").unwrap();
    assert_eq!(layout.v2_base.as_os_str(), "/sys/fs/cgroup");
    // As /proc/<pid>/cgroup names it: the mount's root, then the path below the mount point.
    assert_eq!(layout.v2_base_cgroup, p("/docker/abc123"));
    let layout = parse_layout(mountinfo, "0::/docker/abc123/sub\n", "keel").unwrap();
    assert_eq!(layout.v2_base, p("/sys/fs/cgroup/sub"));
    assert_eq!(layout.v2_base_cgroup, p("/docker/abc123/sub"));
    // A process elsewhere in the hierarchy is not under that mount.
    let err = parse_layout(mountinfo, "0::/docker/other\n", "keel").unwrap_err();
    assert!(matches!(err, CgroupError::OutsideMount { .. }), "{err}");
}

#[test]
fn a_path_above_the_namespace_root_is_refused() {
    // A process moved above its cgroup namespace's root shows "/../x": joining that to the
    // mount point would leave the mount.
    let err = parse_layout(CONTAINER_MOUNTINFO, "0::/../sibling\n", "keel").unwrap_err();
    assert!(matches!(err, CgroupError::OutsideMount { .. }), "{err}");
    // A mount made outside our namespace shows its root as "/..".
    let mountinfo = "1021 1020 0:29 /.. /sys/fs/cgroup rw,relatime - cgroup2 cgroup rw\n";
    let err = parse_layout(mountinfo, "0::/\n", "keel").unwrap_err();
    assert!(err.to_string().contains("cgroupns"), "{err}");
}

#[test]
fn no_cgroup2_mount_is_a_clear_error() {
    let mountinfo: String = HYBRID_MOUNTINFO
        .lines()
        .filter(|l| !l.contains("cgroup2"))
        .map(|l| format!("{l}\n"))
        .collect();
    let err = parse_layout(&mountinfo, HYBRID_CGROUP, "keel").unwrap_err();
    assert!(matches!(err, CgroupError::NoV2Mount));
    let message = err.to_string();
    assert!(message.contains("cgroup.kill"), "{message}");
    assert!(message.contains("mount -t cgroup2"), "{message}");
}

#[test]
fn restarted_daemon_in_its_supervisor_leaf() {
    let layout = parse_layout(
        PURE_V2_MOUNTINFO,
        "0::/system.slice/keel.service/keel/supervisor\n",
        "keel",
    )
    .unwrap();
    assert_eq!(
        layout.v2_base,
        p("/sys/fs/cgroup/system.slice/keel.service")
    );
    assert!(layout.adopted);

    // At the mount's root: the base is the mount point itself.
    let layout = parse_layout(PURE_V2_MOUNTINFO, "0::/keel/supervisor\n", "keel").unwrap();
    assert_eq!(layout.v2_base.as_os_str(), "/sys/fs/cgroup");
    assert!(layout.adopted);

    // Another tree's supervisor, or something below ours, is just a cgroup.
    for other in ["0::/other/supervisor\n", "0::/keel/supervisor/x\n"] {
        let layout = parse_layout(PURE_V2_MOUNTINFO, other, "keel").unwrap();
        assert!(!layout.adopted, "{other}");
    }
}

/// systemd < 254 (no `DelegateSubgroup=`) starts every daemon in the service's own cgroup,
/// named like the tree (`--cgroup-name keel.service`): the tree goes to the hierarchy's root,
/// beside systemd's slices, and the daemon stays in its leaf.
#[test]
fn daemon_in_a_service_cgroup_named_like_the_tree_stays_there() {
    let layout = parse_layout(
        PURE_V2_MOUNTINFO,
        "0::/system.slice/keel.service\n",
        "keel.service",
    )
    .unwrap();
    assert_eq!(
        layout.daemon_stays_in,
        Some(p("/sys/fs/cgroup/system.slice/keel.service"))
    );
    assert!(!layout.adopted);
    assert_eq!(layout.v2_base.as_os_str(), "/sys/fs/cgroup");
    assert_eq!(layout.v2_base_cgroup.as_os_str(), "/");

    // systemd >= 254 with DelegateSubgroup=supervisor: the service's cgroup is the tree.
    let layout = parse_layout(
        PURE_V2_MOUNTINFO,
        "0::/system.slice/keel.service/supervisor\n",
        "keel.service",
    )
    .unwrap();
    assert_eq!(layout.daemon_stays_in, None);
    assert!(layout.adopted);
    assert_eq!(layout.v2_base.as_os_str(), "/sys/fs/cgroup/system.slice");

    // Another name, the root itself, or a hybrid host (nothing is enabled in v2 there): as
    // before.
    for (cgroup, name) in [
        ("0::/system.slice/keel.service\n", "keel"),
        ("0::/\n", "keel.service"),
        // keel init's tree `keel` in a cgroup called keel: not a service.
        ("0::/keel\n", "keel"),
    ] {
        let layout = parse_layout(PURE_V2_MOUNTINFO, cgroup, name).unwrap();
        assert_eq!(layout.daemon_stays_in, None, "{cgroup} {name}");
    }
    let layout = parse_layout(
        SYSTEMD_HYBRID_MOUNTINFO,
        SYSTEMD_HYBRID_CGROUP,
        "keel.service",
    )
    .unwrap();
    assert_eq!(layout.daemon_stays_in, None);
}

#[test]
fn restarted_daemon_on_a_hybrid_host() {
    let cgroup = SYSTEMD_HYBRID_CGROUP.replace("keel.service", "keel.service/keel/supervisor");
    let layout = parse_layout(SYSTEMD_HYBRID_MOUNTINFO, &cgroup, "keel").unwrap();
    assert!(layout.adopted);
    let service = "system.slice/keel.service";
    assert_eq!(
        layout.v2_base,
        p(&format!("/sys/fs/cgroup/unified/{service}"))
    );
    assert_eq!(
        layout.v1_base(V1Controller::Memory),
        Some(p(&format!("/sys/fs/cgroup/memory/{service}")).as_path())
    );
}

#[test]
fn controllers_split_between_v1_and_v2_are_refused() {
    let mountinfo = "\
31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
36 30 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";
    let err = parse_layout(mountinfo, "4:memory:/\n0::/\n", "keel").unwrap_err();
    match &err {
        CgroupError::MixedControllers { on_v1, on_v2 } => {
            assert_eq!(on_v1, &vec!["memory"]);
            assert_eq!(on_v2, &vec!["cpu", "pids"]);
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("cgroup_no_v1=all"), "{err}");
}

#[test]
fn a_v1_controller_that_is_not_mounted() {
    let mountinfo: String = HYBRID_MOUNTINFO
        .lines()
        .filter(|l| !l.ends_with("rw,pids"))
        .map(|l| format!("{l}\n"))
        .collect();
    let err = parse_layout(&mountinfo, HYBRID_CGROUP, "keel").unwrap_err();
    assert!(
        matches!(err, CgroupError::V1NotMounted { controller: "pids" }),
        "{err}"
    );
    // cpuacct is optional: CPU time comes from the unified cpu.stat.
    let mountinfo: String = HYBRID_MOUNTINFO
        .lines()
        .filter(|l| !l.ends_with("rw,cpuacct"))
        .map(|l| format!("{l}\n"))
        .collect();
    let layout = parse_layout(&mountinfo, HYBRID_CGROUP, "keel").unwrap();
    assert_eq!(layout.v1_base(V1Controller::Cpuacct), None);
}

#[test]
fn escaped_mount_points() {
    let mountinfo = "26 25 0:23 / /srv/my\\040cgroup rw - cgroup2 cgroup2 rw\n";
    let layout = parse_layout(mountinfo, "0::/a b\n", "keel").unwrap();
    assert_eq!(layout.v2_base, p("/srv/my cgroup/a b"));
}

#[test]
fn the_first_matching_mount_wins_and_other_lines_are_ignored() {
    let mountinfo = format!(
        "garbage line\n{PURE_V2_MOUNTINFO}99 22 0:23 / /mnt/again rw - cgroup2 cgroup2 rw\n"
    );
    let layout = parse_layout(&mountinfo, "junk\n0::/a\n", "keel").unwrap();
    assert_eq!(layout.v2_base, p("/sys/fs/cgroup/a"));
}

#[test]
fn tree_names_must_be_one_component() {
    for bad in ["", ".", "..", "a/b", "../x"] {
        let err = parse_layout(PURE_V2_MOUNTINFO, "0::/\n", bad).unwrap_err();
        assert!(matches!(err, CgroupError::InvalidName { .. }), "{bad:?}");
    }
}

fn limits(cpu_limit: f64) -> Limits {
    Limits {
        cpu_request: 0.25,
        cpu_limit: Some(cpu_limit),
        memory_request: 512 << 20,
        memory_limit: 1 << 30,
        pids: 64,
    }
}

fn requesting(cpu_request: f64) -> Limits {
    Limits {
        cpu_request,
        cpu_limit: None,
        ..limits(1.0)
    }
}

#[test]
fn cpu_quota_arithmetic() {
    assert_eq!(limits(0.5).cpu_max(), "50000 100000");
    assert_eq!(limits(2.0).cpu_max(), "200000 100000");
    assert_eq!(limits(2.0).cfs_quota_us(), "200000");
    assert_eq!(limits(1.234567).cpu_quota_us(), Some(123457));
    // Below the kernel's 1 ms minimum: the minimum.
    assert_eq!(limits(0.001).cpu_max(), "1000 100000");
    assert_eq!(limits(0.0).cpu_quota_us(), Some(CPU_MIN_QUOTA_US));
    assert_eq!(limits(f64::NAN).cpu_quota_us(), Some(CPU_MIN_QUOTA_US));
    assert_eq!(limits(0.01).cpu_quota_us(), Some(1000));
    assert_eq!(limits(0.011).cpu_quota_us(), Some(1100));
}

#[test]
fn no_cpu_limit_is_no_quota() {
    let l = requesting(0.25);
    assert_eq!(l.cpu_quota_us(), None);
    assert_eq!(l.cpu_max(), "max 100000");
    assert_eq!(l.cfs_quota_us(), "-1");
}

#[test]
fn cpu_weight_and_shares_follow_the_request() {
    // One core is the kernel's default weight: 100 (v2), 1024 (v1).
    assert_eq!(requesting(1.0).cpu_weight(), 100);
    assert_eq!(requesting(1.0).cpu_shares(), 1024);
    assert_eq!(requesting(0.25).cpu_weight(), 25);
    assert_eq!(requesting(0.25).cpu_shares(), 256);
    assert_eq!(requesting(2.0).cpu_weight(), 200);
    assert_eq!(requesting(2.0).cpu_shares(), 2048);
    // Requests 2:1 weigh 2:1.
    let (a, b) = (requesting(0.5), requesting(0.25));
    assert_eq!(a.cpu_weight(), 2 * b.cpu_weight());
    assert_eq!(a.cpu_shares(), 2 * b.cpu_shares());
    // Within the kernel's ranges, whatever the request.
    assert_eq!(requesting(0.001).cpu_weight(), 1);
    assert_eq!(requesting(0.001).cpu_shares(), 2);
    assert_eq!(requesting(1000.0).cpu_weight(), 10_000);
    assert_eq!(requesting(1000.0).cpu_shares(), 1 << 18);
    assert_eq!(requesting(f64::NAN).cpu_weight(), 1);
    assert_eq!(requesting(f64::INFINITY).cpu_shares(), 1 << 18);
}

#[test]
fn memory_high_is_ninety_percent_of_the_limit() {
    let mut l = limits(1.0);
    l.memory_limit = 1000;
    assert_eq!(l.memory_high(), 900);
    l.memory_limit = 4 << 30;
    assert_eq!(l.memory_high(), 3_865_470_566);
    l.memory_limit = u64::MAX;
    assert_eq!(l.memory_high(), (u64::MAX as u128 * 9 / 10) as u64);
    // The request plays no part in it.
    l.memory_request = 1;
    assert_eq!(l.memory_high(), (u64::MAX as u128 * 9 / 10) as u64);
}

#[test]
fn flat_keyed_files() {
    let events = "low 0\nhigh 3\nmax 7\noom 1\noom_kill 2\noom_group_kill 0\n";
    assert_eq!(keyed_value(events, "oom_kill"), Some(2));
    assert_eq!(keyed_value(events, "oom"), Some(1));
    assert_eq!(keyed_value(events, "missing"), None);
    assert_eq!(keyed_value("populated 1\nfrozen 0\n", "populated"), Some(1));
    assert_eq!(keyed_value("usage_usec x\n", "usage_usec"), None);
}

#[test]
fn error_messages_name_the_path_and_the_fix() {
    let err = CgroupError::EnableController {
        path: p("/sys/fs/cgroup/user.slice/cgroup.subtree_control"),
        controller: "memory",
        source: std::io::Error::from_raw_os_error(libc::EBUSY),
    };
    let message = err.to_string();
    assert!(message.contains("/sys/fs/cgroup/user.slice"), "{message}");
    assert!(message.contains("no internal processes"), "{message}");
    assert!(message.contains("Delegate=yes"), "{message}");
    assert!(err.io_error().is_some());

    let err = CgroupError::SetLimit {
        path: p("/x/tasks/a/pids.max"),
        controller: "pids",
        value: "64".into(),
        source: std::io::Error::from_raw_os_error(libc::ENOENT),
    };
    assert!(
        err.to_string().contains("pids controller is not enabled"),
        "{err}"
    );
}

#[test]
fn cpu_max_of_the_base() {
    assert_eq!(super::parse_cpu_max("max 100000\n"), None);
    assert_eq!(
        super::parse_cpu_max("150000 100000\n"),
        Some((150_000, 100_000))
    );
    assert_eq!(super::parse_cpu_max("50000"), Some((50_000, 100_000)));
    assert_eq!(super::parse_cpu_max(""), None);
}

#[test]
fn read_only_cgroup_mounts_are_found_with_their_other_options() {
    // A container engine's /sys/fs/cgroup (cgroup v2, a private cgroup namespace), read-only.
    let engine = "\
1010 1009 0:29 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
1011 1009 0:5 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
";
    assert_eq!(
        read_only_cgroup_mounts(engine),
        vec![(
            p("/sys/fs/cgroup"),
            vec![
                "nosuid".to_string(),
                "nodev".to_string(),
                "noexec".to_string(),
                "relatime".to_string()
            ]
        )]
    );
    // The superblock's "ro" (after " - ") is not the mount's: a writable mount of a
    // read-only filesystem is not listed, nor is anything but cgroup and cgroup2.
    let writable = "\
1010 1009 0:29 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 ro\n\
1012 1009 0:30 / /sys/fs/cgroup/unified ro,nosuid - tmpfs tmpfs ro\n";
    assert!(read_only_cgroup_mounts(writable).is_empty());
    // Every read-only hierarchy of a hybrid host, v1 included; the writable one is left out.
    let hybrid = HYBRID_MOUNTINFO
        .replace("/sys/fs/cgroup/memory rw,", "/sys/fs/cgroup/memory ro,")
        .replace("/sys/fs/cgroup/unified rw,", "/sys/fs/cgroup/unified ro,");
    let found: Vec<PathBuf> = read_only_cgroup_mounts(&hybrid)
        .into_iter()
        .map(|(path, _)| path)
        .collect();
    assert_eq!(
        found,
        vec![p("/sys/fs/cgroup/memory"), p("/sys/fs/cgroup/unified")]
    );
    assert!(read_only_cgroup_mounts(HYBRID_MOUNTINFO).is_empty());
}

/// A daemon started by keel init in its leaf (`<base>/keel-init`) takes the leaf's parent for
/// its base; it is not an adopted tree.
#[test]
fn a_daemon_in_keel_inits_leaf_uses_the_parent() {
    let layout = parse_layout(PURE_V2_MOUNTINFO, "0::/ctr/keel-init\n", "keel").unwrap();
    assert_eq!(layout.v2_base, p("/sys/fs/cgroup/ctr"));
    assert!(!layout.adopted);
    let layout = parse_layout(PURE_V2_MOUNTINFO, "0::/keel-init\n", "keel-0a1b").unwrap();
    assert_eq!(layout.v2_base, p("/sys/fs/cgroup"));
    // A cgroup below such a leaf is just a cgroup.
    let layout = parse_layout(PURE_V2_MOUNTINFO, "0::/keel-init/x\n", "keel").unwrap();
    assert_eq!(layout.v2_base, p("/sys/fs/cgroup/keel-init/x"));
}

#[test]
fn keel_init_needs_a_leaf_only_on_v2_below_the_root() {
    assert!(init_needs_leaf(Mode::V2, true));
    assert!(!init_needs_leaf(Mode::V2, false), "the root is exempt");
    assert!(!init_needs_leaf(Mode::Hybrid, true), "no controllers on v2");
}

mod plan;
mod pressure;
mod requests;

#[test]
fn a_container_on_a_hybrid_host_without_cgroup2_gets_one_beside_its_v1_hierarchies() {
    // An engine's container on a hybrid host: the v1 controllers, no cgroup2 (crun's and
    // runc's default there).
    let no_unified: String = HYBRID_MOUNTINFO
        .lines()
        .filter(|l| !l.contains(" - cgroup2 "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        super::missing_cgroup2_mount_point(&no_unified),
        Some(p("/sys/fs/cgroup/unified"))
    );
    // A cgroup2 mount anywhere: nothing to do; no cgroup at all: nothing to go by.
    assert_eq!(super::missing_cgroup2_mount_point(HYBRID_MOUNTINFO), None);
    let v2 = "1010 1009 0:29 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
    assert_eq!(super::missing_cgroup2_mount_point(v2), None);
    let none = "1011 1009 0:5 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n";
    assert_eq!(super::missing_cgroup2_mount_point(none), None);
}
