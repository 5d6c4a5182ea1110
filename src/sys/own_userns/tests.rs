use super::*;

#[test]
fn only_the_identity_of_every_id_is_the_hosts_map() {
    assert!(is_identity_map("         0          0 4294967295\n"));
    assert!(!is_identity_map("         0       1000          1\n"));
    assert!(!is_identity_map("0 1879048192 65536\n"));
    assert!(!is_identity_map(""));
    assert!(!is_identity_map("0 0 4294967295\n1 1 1\n"));
}

#[test]
fn an_id_is_mapped_when_a_line_covers_it() {
    assert!(maps("         0       1000          1\n", 0));
    assert!(!maps("         0       1000          1\n", 1));
    assert!(!maps("         0       1000          1\n", 1000));
    assert!(maps("0 100000 65536\n", 65535));
    assert!(!maps("0 100000 65536\n", 65536));
    assert!(maps("0 1000 1\n1 100000 65536\n", 4242));
    assert!(maps("0 0 4294967295\n", u32::MAX - 1));
    assert!(!maps("", 0));
}
