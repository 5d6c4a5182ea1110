use super::*;

const INITRAMFS: &str = "1 1 0:2 / / rw - rootfs rootfs rw,size=113616k,nr_inodes=28404\n\
        2 1 0:20 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n";

// After the rebind the original rootfs is outside this root and not listed.
const REBOUND: &str = "14 1 0:2 / / rw - rootfs rootfs rw\n\
        15 14 0:20 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n";

const CONTAINER: &str = "600 500 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/l\n\
        601 600 0:52 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n\
        602 600 0:53 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755\n\
        603 602 0:54 / /dev/pts rw,nosuid,noexec - devpts devpts rw,gid=5,mode=620\n\
        604 600 0:55 / /sys ro,nosuid,nodev,noexec - sysfs sysfs ro\n\
        605 604 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec - cgroup2 cgroup rw,nsdelegate\n\
        606 602 0:51 / /dev/shm rw,nosuid,nodev,noexec - tmpfs shm rw,size=65536k\n";

fn targets(specs: &[MountSpec]) -> Vec<&str> {
    specs.iter().map(|s| s.target).collect()
}

#[test]
fn a_bare_initramfs_gets_everything_but_the_proc_already_there() {
    assert_eq!(
        targets(&missing_mounts(INITRAMFS)),
        [
            "/sys",
            "/dev",
            "/dev/pts",
            "/dev/shm",
            "/run",
            "/sys/fs/cgroup"
        ]
    );
    let cgroup = missing_mounts(INITRAMFS).pop().unwrap();
    assert_eq!(
        (cgroup.fstype, cgroup.data),
        ("cgroup2", Some("nsdelegate"))
    );
}

#[test]
fn what_is_mounted_already_is_left_alone() {
    assert_eq!(targets(&missing_mounts(CONTAINER)), ["/run"]);
    assert_eq!(missing_mounts(""), MOUNTS.to_vec());
}

#[test]
fn parents_come_before_their_children() {
    let order = targets(&MOUNTS);
    for (i, target) in order.iter().enumerate() {
        for parent in &order[i + 1..] {
            assert!(
                !target.starts_with(&format!("{parent}/")),
                "{parent} must come before {target}"
            );
        }
    }
}

#[test]
fn only_the_initramfs_root_is_rebound_and_only_once() {
    assert!(needs_rebind(INITRAMFS));
    assert!(!needs_rebind(CONTAINER));
    assert!(!needs_rebind(REBOUND));
    // A real root mounted over the initramfs (after a switch_root) is not the initramfs.
    let switched = "1 1 0:2 / / rw - rootfs rootfs rw\n\
            20 1 8:1 / / rw,relatime - ext4 /dev/vda1 rw\n";
    assert!(!needs_rebind(switched));
}

#[test]
fn the_power_off_line_is_stable() {
    assert_eq!(power_off_line(0), "keel init: powering off, status 0");
    assert_eq!(power_off_line(137), "keel init: powering off, status 137");
}
