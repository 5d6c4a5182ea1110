use super::spares_pay_off;
use crate::cgroup::Mode;

const V2: &str = "30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";

#[test]
fn spares_are_made_where_joining_a_cgroup_waits_for_nothing_more() {
    // Hybrid: every shim migrates (its v1 joins) anyway.
    assert!(spares_pay_off(Some(Mode::Hybrid), V2));
    // Pure v2: the daemon's clone migrates nothing; a spare would, at a grace period.
    assert!(!spares_pay_off(Some(Mode::V2), V2));
    let fast = V2.replace("memory_recursiveprot", "memory_recursiveprot,favordynmods");
    assert!(spares_pay_off(Some(Mode::V2), &fast));
    // The word elsewhere on the line is not the option.
    let path = V2.replace("/sys/fs/cgroup rw", "/favordynmods rw");
    assert!(!spares_pay_off(Some(Mode::V2), &path));
    assert!(spares_pay_off(None, ""));
}
