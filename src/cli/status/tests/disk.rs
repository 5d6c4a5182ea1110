//! A live attempt's disk use against its budget (`resources.disk`).

use super::{detailed, report};
use crate::cli::status::render;

#[test]
fn a_running_task_shows_its_disk_use_against_its_budget() {
    let mut t = detailed();
    t.disk_bytes = Some(12 << 20);
    t.disk_budget = Some(20 << 30);
    let plain = render(&report(vec![t]), 100_000, false);
    assert!(
        plain
            .lines()
            .any(|l| l == "disk           12M of its 20G budget (0%, resources.disk)"),
        "{plain}"
    );
    // Not measured yet this attempt: no line.
    let plain = render(&report(vec![detailed()]), 100_000, false);
    assert!(!plain.contains("budget"), "{plain}");
}
