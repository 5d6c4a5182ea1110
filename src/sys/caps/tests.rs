use super::*;

#[test]
fn sets_split_and_join_across_the_32_bit_boundary() {
    let set = (1u64 << 40) | (1 << 31) | 1;
    let (low, high) = halves(set);
    assert_eq!(low, (1 << 31) | 1);
    assert_eq!(high, 1 << 8);
    assert_eq!(joined(low, high), set);
}

#[test]
fn capget_matches_proc_status() {
    // Single-threaded view: /proc/thread-self is this test's own thread.
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let field = |name: &str| {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing"));
        u64::from_str_radix(line[name.len()..].trim(), 16).unwrap()
    };
    let (effective, permitted, inheritable) = current_caps().unwrap();
    assert_eq!(effective, field("CapEff:"));
    assert_eq!(permitted, field("CapPrm:"));
    assert_eq!(inheritable, field("CapInh:"));
}

#[test]
fn interface_names_are_checked_before_any_syscall() {
    assert!(ifreq_for("").is_err());
    assert!(ifreq_for("a-name-far-too-long").is_err());
    assert!(ifreq_for("l\0o").is_err());
    let request = ifreq_for("lo").unwrap();
    assert_eq!(request.ifr_name[..3], [b'l' as _, b'o' as _, 0]);
}
