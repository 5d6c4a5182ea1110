use super::*;
use std::os::fd::AsFd;

#[test]
fn a_file_has_no_window_size() {
    let file = std::fs::File::open("/proc/self/stat").unwrap();
    assert_eq!(window_size(file.as_fd()), None);
}
