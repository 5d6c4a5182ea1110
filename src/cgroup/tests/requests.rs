//! The plan of writes for a unit with requests only (no `cpu_limit`, the default memory
//! limit): weights, no CPU cap, the soft limit at the request.

use super::super::testing::RecordingFs;
use super::super::*;
use super::plan::{hybrid_layout, setup, v2_layout, w};

/// Requests only: the CPU uncapped, the memory limit the default a unit without one gets.
const REQUESTS_ONLY: Limits = Limits {
    cpu_request: 0.25,
    cpu_limit: None,
    memory_request: 512 << 20,
    memory_limit: 4 << 30,
    pids: 1024,
};

#[test]
fn v2_requests_only_weigh_and_do_not_cap() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, v2_layout());
    fs.clear_ops();
    tree.task("agent").unwrap().create(&REQUESTS_ONLY).unwrap();
    let t = "/cg/svc/keel/tasks/agent";
    assert_eq!(
        fs.writes(),
        vec![
            w(&format!("{t}/cpu.weight"), "25"),
            // A reused cgroup's earlier cap is lifted too.
            w(&format!("{t}/cpu.max"), "max 100000"),
            w(&format!("{t}/memory.max"), "4294967296"),
            w(&format!("{t}/memory.high"), "3865470566"),
            w(&format!("{t}/memory.swap.max"), "0"),
            w(&format!("{t}/pids.max"), "1024"),
        ]
    );
}

#[test]
fn hybrid_requests_only_weigh_and_do_not_cap() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, hybrid_layout());
    fs.clear_ops();
    tree.task("agent").unwrap().create(&REQUESTS_ONLY).unwrap();
    let cpu = "/v1/cpu,cpuacct/b/keel/units/agent";
    let mem = "/v1/memory/b/keel/units/agent";
    let writes = fs.writes();
    assert_eq!(
        writes[..3],
        [
            w(&format!("{cpu}/cpu.shares"), "256"),
            w(&format!("{cpu}/cpu.cfs_period_us"), "100000"),
            w(&format!("{cpu}/cpu.cfs_quota_us"), "-1"),
        ]
    );
    assert!(writes.contains(&w(&format!("{mem}/memory.limit_in_bytes"), "4294967296")));
    assert!(writes.contains(&w(
        &format!("{mem}/memory.soft_limit_in_bytes"),
        "536870912"
    )));
}
