//! The exact writes of each backend, through the recording double: setup, limits, kill, removal,
//! teardown; and that none of them leaves keel's subtree.

use crate::cgroup::testing::{Op, RecordingFs};
use crate::cgroup::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

pub(super) fn v2_layout() -> Layout {
    Layout {
        mode: Mode::V2,
        v2_base: p("/cg/svc"),
        v2_base_cgroup: p("/svc"),
        v1: Vec::new(),
        adopted: false,
        daemon_stays_in: None,
    }
}

pub(super) fn hybrid_layout() -> Layout {
    Layout {
        mode: Mode::Hybrid,
        v2_base: p("/u"),
        v2_base_cgroup: p("/"),
        v1: vec![
            (V1Controller::Cpu, p("/v1/cpu,cpuacct/b")),
            (V1Controller::Cpuacct, p("/v1/cpu,cpuacct/b")),
            (V1Controller::Memory, p("/v1/memory/b")),
            (V1Controller::Pids, p("/v1/pids")),
        ],
        adopted: false,
        daemon_stays_in: None,
    }
}

pub(super) fn w(path: &str, value: &str) -> (String, String) {
    (path.to_string(), value.to_string())
}

pub(super) fn setup(fs: &Arc<RecordingFs>, layout: Layout) -> Tree {
    Tree::setup_with(fs.clone(), layout, "keel", 42).unwrap()
}

const LIMITS: Limits = Limits {
    cpu_request: 0.25,
    cpu_limit: Some(0.5),
    memory_request: 512 << 20,
    memory_limit: 1 << 30,
    pids: 64,
};

#[test]
fn v2_setup_moves_in_before_enabling_controllers_top_down() {
    let fs = RecordingFs::new();
    setup(&fs, v2_layout());
    let ops = fs.ops();
    assert_eq!(
        ops[..4],
        [
            Op::Mkdir(p("/cg/svc/keel")),
            Op::Mkdir(p("/cg/svc/keel/supervisor")),
            Op::Mkdir(p("/cg/svc/keel/tasks")),
            Op::Write(p("/cg/svc/keel/supervisor/cgroup.procs"), "42".into()),
        ]
    );
    let mut expected = vec![w("/cg/svc/keel/supervisor/cgroup.procs", "42")];
    for dir in ["/cg/svc", "/cg/svc/keel", "/cg/svc/keel/tasks"] {
        for c in ["+cpu", "+memory", "+pids"] {
            expected.push(w(&format!("{dir}/cgroup.subtree_control"), c));
        }
    }
    assert_eq!(fs.writes(), expected);
}

#[test]
fn v2_setup_skips_controllers_already_enabled() {
    let fs = RecordingFs::new();
    fs.file("/cg/svc/cgroup.subtree_control", "cpu memory\n");
    fs.dir("/cg/svc/keel");
    let tree = setup(&fs, v2_layout());
    let base_writes: Vec<_> = fs
        .writes()
        .into_iter()
        .filter(|(path, _)| path == "/cg/svc/cgroup.subtree_control")
        .collect();
    assert_eq!(
        base_writes,
        vec![w("/cg/svc/cgroup.subtree_control", "+pids")]
    );

    // Teardown gives back only what this tree enabled in the base.
    fs.clear_ops();
    tree.teardown().unwrap();
    assert_eq!(
        fs.writes(),
        vec![
            w("/cg/svc/keel/cgroup.subtree_control", "-pids"),
            w("/cg/svc/keel/cgroup.subtree_control", "-memory"),
            w("/cg/svc/keel/cgroup.subtree_control", "-cpu"),
            w("/cg/svc/cgroup.subtree_control", "-pids"),
            w("/cg/svc/cgroup.procs", "42"),
        ]
    );
}

#[test]
fn v2_setup_with_other_processes_in_the_base() {
    let fs = RecordingFs::new();
    fs.fail("/cg/svc/cgroup.subtree_control", libc::EBUSY);
    let err = Tree::setup_with(fs.clone(), v2_layout(), "keel", 42).unwrap_err();
    assert!(
        matches!(
            err,
            CgroupError::EnableController {
                controller: "cpu",
                ..
            }
        ),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("/cg/svc/cgroup.subtree_control"),
        "{message}"
    );
    assert!(message.contains("run keel in its own cgroup"), "{message}");
}

#[test]
fn v2_setup_with_a_controller_not_delegated() {
    let fs = RecordingFs::new();
    fs.fail("/cg/svc/keel/tasks/cgroup.subtree_control", libc::ENOENT);
    let err = Tree::setup_with(fs.clone(), v2_layout(), "keel", 42).unwrap_err();
    assert!(err.to_string().contains("delegate"), "{err}");
}

#[test]
fn hybrid_setup_creates_and_joins_every_hierarchy_and_enables_nothing() {
    let fs = RecordingFs::new();
    setup(&fs, hybrid_layout());
    let mkdirs: Vec<_> = fs
        .ops()
        .into_iter()
        .filter_map(|op| match op {
            Op::Mkdir(path) => Some(path),
            _ => None,
        })
        .collect();
    let mut expected = Vec::new();
    for base in ["/u", "/v1/cpu,cpuacct/b", "/v1/memory/b", "/v1/pids"] {
        let tasks = if base == "/u" {
            "keel/tasks"
        } else {
            "keel/units"
        };
        for dir in ["keel", "keel/supervisor", tasks] {
            expected.push(Path::new(base).join(dir));
        }
    }
    assert_eq!(mkdirs, expected);
    assert_eq!(
        fs.writes(),
        vec![
            w("/u/keel/supervisor/cgroup.procs", "42"),
            w("/v1/cpu,cpuacct/b/keel/supervisor/cgroup.procs", "42"),
            w("/v1/memory/b/keel/supervisor/cgroup.procs", "42"),
            w("/v1/pids/keel/supervisor/cgroup.procs", "42"),
        ]
    );
}

#[test]
fn a_tree_directory_taken_by_a_file_is_an_error() {
    // v1 cgroups have a `tasks` file, hence `units/` there; any such clash is reported.
    let fs = RecordingFs::new();
    fs.fail("/v1/pids/keel/units", libc::EEXIST);
    let err = Tree::setup_with(fs.clone(), hybrid_layout(), "keel", 42).unwrap_err();
    assert!(matches!(err, CgroupError::CreateTree { .. }), "{err}");
}

#[test]
fn v2_task_limits() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, v2_layout());
    fs.clear_ops();
    let task = tree.task("agent").unwrap();
    task.create(&LIMITS).unwrap();
    let t = "/cg/svc/keel/tasks/agent";
    assert_eq!(fs.ops()[0], Op::Mkdir(p(t)));
    assert_eq!(
        fs.writes(),
        vec![
            w(&format!("{t}/cpu.weight"), "25"),
            w(&format!("{t}/cpu.max"), "50000 100000"),
            w(&format!("{t}/memory.max"), "1073741824"),
            w(&format!("{t}/memory.high"), "966367641"),
            w(&format!("{t}/memory.swap.max"), "0"),
            w(&format!("{t}/pids.max"), "64"),
        ]
    );
    assert!(task.v1_procs_files().is_empty());
    assert_eq!(task.v2_path(), Path::new(t));
}

#[test]
fn v2_optional_and_required_limit_files() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, v2_layout());
    let task = tree.task("agent").unwrap();
    // No swap accounting: memory.swap.max is absent, which is fine.
    fs.fail("/cg/svc/keel/tasks/agent/memory.swap.max", libc::ENOENT);
    task.create(&LIMITS).unwrap();

    // No memory controller: memory.max is absent, which is not.
    let fs = RecordingFs::new();
    let tree = setup(&fs, v2_layout());
    fs.fail("/cg/svc/keel/tasks/agent/memory.max", libc::ENOENT);
    let err = tree.task("agent").unwrap().create(&LIMITS).unwrap_err();
    assert!(
        matches!(
            err,
            CgroupError::SetLimit {
                controller: "memory",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("memory controller"), "{err}");
}

#[test]
fn hybrid_task_limits() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, hybrid_layout());
    fs.clear_ops();
    let task = tree.task("agent").unwrap();
    task.create(&LIMITS).unwrap();
    let mkdirs: Vec<_> = fs
        .ops()
        .into_iter()
        .filter(|op| matches!(op, Op::Mkdir(_)))
        .collect();
    assert_eq!(
        mkdirs,
        vec![
            Op::Mkdir(p("/u/keel/tasks/agent")),
            Op::Mkdir(p("/v1/cpu,cpuacct/b/keel/units/agent")),
            Op::Mkdir(p("/v1/memory/b/keel/units/agent")),
            Op::Mkdir(p("/v1/pids/keel/units/agent")),
        ]
    );
    let cpu = "/v1/cpu,cpuacct/b/keel/units/agent";
    let mem = "/v1/memory/b/keel/units/agent";
    assert_eq!(
        fs.writes(),
        vec![
            w(&format!("{cpu}/cpu.shares"), "256"),
            w(&format!("{cpu}/cpu.cfs_period_us"), "100000"),
            w(&format!("{cpu}/cpu.cfs_quota_us"), "50000"),
            w(&format!("{mem}/memory.limit_in_bytes"), "1073741824"),
            w(&format!("{mem}/memory.memsw.limit_in_bytes"), "1073741824"),
            w(&format!("{mem}/memory.swappiness"), "0"),
            w(&format!("{mem}/memory.soft_limit_in_bytes"), "536870912"),
            w("/v1/pids/keel/units/agent/pids.max", "64"),
        ]
    );
    assert_eq!(
        task.v1_procs_files(),
        vec![
            p(&format!("{cpu}/cgroup.procs")),
            p(&format!("{mem}/cgroup.procs")),
            p("/v1/pids/keel/units/agent/cgroup.procs"),
        ]
    );
}

#[test]
fn hybrid_raising_a_reused_limit_raises_memsw_first() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, hybrid_layout());
    let mem = "/v1/memory/b/keel/units/agent";
    fs.fail_once(format!("{mem}/memory.limit_in_bytes"), libc::EINVAL);
    // Swappiness refused and no memsw file: both optional.
    fs.fail(format!("{mem}/memory.swappiness"), libc::EINVAL);
    fs.fail(format!("{mem}/memory.memsw.limit_in_bytes"), libc::ENOENT);
    fs.clear_ops();
    tree.task("agent").unwrap().create(&LIMITS).unwrap();
    let memory_writes: Vec<_> = fs
        .writes()
        .into_iter()
        .filter(|(path, _)| path.starts_with(mem))
        .map(|(path, _)| path[mem.len() + 1..].to_string())
        .collect();
    assert_eq!(
        memory_writes,
        [
            "memory.limit_in_bytes",
            "memory.memsw.limit_in_bytes",
            "memory.limit_in_bytes",
            "memory.swappiness",
            "memory.soft_limit_in_bytes"
        ]
    );
}

#[test]
fn an_existing_task_cgroup_is_reused_only_when_empty() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, v2_layout());
    let t = "/cg/svc/keel/tasks/agent";
    fs.dir(t);
    fs.file(format!("{t}/cgroup.procs"), "");
    tree.task("agent").unwrap().create(&LIMITS).unwrap();

    fs.file(format!("{t}/cgroup.procs"), "1234\n");
    let err = tree.task("agent").unwrap().create(&LIMITS).unwrap_err();
    assert!(matches!(err, CgroupError::TaskInUse { .. }), "{err}");

    // A name taken by an interface file (no cgroup.procs inside).
    fs.dir("/cg/svc/keel/tasks/cpu.max");
    let err = tree.task("cpu.max").unwrap().create(&LIMITS).unwrap_err();
    assert!(matches!(err, CgroupError::CreateTask { .. }), "{err}");
}

#[test]
fn unit_names_cannot_leave_the_tree() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, v2_layout());
    for bad in ["", ".", "..", "../x", "a/b"] {
        assert!(
            matches!(tree.task(bad), Err(CgroupError::InvalidName { .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn kill_writes_cgroup_kill() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, hybrid_layout());
    fs.clear_ops();
    tree.task("agent").unwrap().kill().unwrap();
    assert_eq!(fs.writes(), vec![w("/u/keel/tasks/agent/cgroup.kill", "1")]);
}

#[test]
fn kill_without_cgroup_kill_freezes_kills_and_thaws() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, v2_layout());
    let t = "/cg/svc/keel/tasks/agent";
    fs.fail(format!("{t}/cgroup.kill"), libc::ENOENT);
    fs.dir(t);
    fs.dir(format!("{t}/sub"));
    fs.file(format!("{t}/cgroup.procs"), "7\n8\n");
    fs.file(format!("{t}/sub/cgroup.procs"), "9\n");
    fs.clear_ops();
    tree.task("agent").unwrap().kill().unwrap();
    assert_eq!(
        fs.ops(),
        vec![
            Op::Write(p(&format!("{t}/cgroup.kill")), "1".into()),
            Op::Write(p(&format!("{t}/cgroup.freeze")), "1".into()),
            Op::Kill(7),
            Op::Kill(8),
            Op::Kill(9),
            Op::Write(p(&format!("{t}/cgroup.freeze")), "0".into()),
        ]
    );
}

#[test]
fn killing_a_removed_cgroup_is_a_no_op() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, v2_layout());
    fs.fail("/cg/svc/keel/tasks/gone/cgroup.kill", libc::ENOENT);
    tree.task("gone").unwrap().kill().unwrap();
}

#[test]
fn removal_is_busy_until_the_processes_are_gone() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, hybrid_layout());
    let task = tree.task("agent").unwrap();
    task.create(&LIMITS).unwrap();
    fs.fail_once("/u/keel/tasks/agent", libc::EBUSY);
    assert_eq!(task.try_remove().unwrap(), Removal::Busy);
    fs.clear_ops();
    assert_eq!(task.try_remove().unwrap(), Removal::Removed);
    assert_eq!(
        fs.ops(),
        vec![
            Op::Rmdir(p("/u/keel/tasks/agent")),
            Op::Rmdir(p("/v1/cpu,cpuacct/b/keel/units/agent")),
            Op::Rmdir(p("/v1/memory/b/keel/units/agent")),
            Op::Rmdir(p("/v1/pids/keel/units/agent")),
        ]
    );
    // Already gone: still removed.
    assert_eq!(task.try_remove().unwrap(), Removal::Removed);
    // Stuck: remove_blocking gives up with Busy.
    fs.dir("/u/keel/tasks/agent");
    fs.fail("/u/keel/tasks/agent", libc::EBUSY);
    let err = task
        .remove_blocking(std::time::Duration::from_millis(10))
        .unwrap_err();
    assert!(matches!(err, CgroupError::Busy { .. }), "{err}");
}

#[test]
fn v2_stats() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, v2_layout());
    let t = "/cg/svc/keel/tasks/agent";
    fs.file(format!("{t}/cpu.stat"), "usage_usec 1500\nuser_usec 1000\n");
    fs.file(format!("{t}/memory.current"), "4096\n");
    fs.file(format!("{t}/memory.peak"), "8192\n");
    fs.file(format!("{t}/pids.current"), "3\n");
    fs.file(
        format!("{t}/memory.events"),
        "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n",
    );
    fs.file(format!("{t}/cgroup.events"), "populated 1\nfrozen 0\n");
    fs.file(format!("{t}/cgroup.procs"), "10\n11\n");
    let task = tree.task("agent").unwrap();
    assert_eq!(
        task.stats().unwrap(),
        Stats {
            cpu_usage_usec: 1500,
            memory_current: 4096,
            memory_peak: Some(8192),
            pids_current: 3,
            oom_kills: 1,
        }
    );
    assert!(task.populated().unwrap());
    assert_eq!(task.pids().unwrap(), vec![10, 11]);
}

#[test]
fn hybrid_stats() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, hybrid_layout());
    let cpu = "/v1/cpu,cpuacct/b/keel/units/agent";
    let mem = "/v1/memory/b/keel/units/agent";
    fs.file(format!("{cpu}/cpuacct.usage"), "2000000\n");
    fs.file(format!("{mem}/memory.usage_in_bytes"), "4096\n");
    fs.file(format!("{mem}/memory.max_usage_in_bytes"), "8192\n");
    fs.file(
        format!("{mem}/memory.oom_control"),
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
    );
    fs.file("/v1/pids/keel/units/agent/pids.current", "5\n");
    let task = tree.task("agent").unwrap();
    let expected = Stats {
        cpu_usage_usec: 2000,
        memory_current: 4096,
        memory_peak: Some(8192),
        pids_current: 5,
        oom_kills: 2,
    };
    // No unified cpu.stat: cpuacct.usage, in nanoseconds.
    assert_eq!(task.stats().unwrap(), expected);
    fs.file("/u/keel/tasks/agent/cpu.stat", "usage_usec 7\n");
    assert_eq!(task.stats().unwrap().cpu_usage_usec, 7);
}

#[test]
fn tasks_present_lists_every_hierarchy() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, hybrid_layout());
    fs.dir("/u/keel/tasks/b");
    fs.dir("/v1/memory/b/keel/units/a");
    fs.dir("/v1/pids/keel/units/b");
    assert_eq!(tree.tasks_present(), vec!["a", "b"]);
}

#[test]
fn teardown_refuses_while_tasks_remain() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, v2_layout());
    fs.dir("/cg/svc/keel/tasks/agent");
    fs.clear_ops();
    let err = tree.teardown().unwrap_err();
    assert!(matches!(err, CgroupError::TasksRemain { .. }), "{err}");
    assert!(err.to_string().contains("agent"), "{err}");
    assert!(fs.ops().is_empty(), "changed nothing: {:?}", fs.ops());
}

#[test]
fn v2_teardown_disables_bottom_up_then_moves_back_and_removes() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, v2_layout());
    fs.clear_ops();
    tree.teardown().unwrap();
    let mut expected = vec![Op::Rmdir(p("/cg/svc/keel/tasks"))];
    for dir in ["/cg/svc/keel", "/cg/svc"] {
        for c in ["-pids", "-memory", "-cpu"] {
            expected.push(Op::Write(
                p(&format!("{dir}/cgroup.subtree_control")),
                c.into(),
            ));
        }
    }
    expected.extend([
        Op::Write(p("/cg/svc/cgroup.procs"), "42".into()),
        Op::Rmdir(p("/cg/svc/keel/supervisor")),
        Op::Rmdir(p("/cg/svc/keel")),
    ]);
    assert_eq!(fs.ops(), expected);
}

/// A daemon that stays in its service's cgroup (systemd < 254): the tree at the root, the
/// daemon never moved in or out, the root's controllers never disabled again.
#[test]
fn v2_daemon_that_stays_put_is_never_moved() {
    let fs = RecordingFs::new();
    let mut layout = v2_layout();
    layout.v2_base = p("/cg");
    layout.v2_base_cgroup = p("/");
    layout.daemon_stays_in = Some(p("/cg/system.slice/keel.service"));
    let tree = setup(&fs, layout);
    let mut expected = Vec::new();
    for dir in ["/cg", "/cg/keel", "/cg/keel/tasks"] {
        for c in ["+cpu", "+memory", "+pids"] {
            expected.push(w(&format!("{dir}/cgroup.subtree_control"), c));
        }
    }
    assert_eq!(fs.writes(), expected);
    assert!(fs.ops().contains(&Op::Mkdir(p("/cg/keel/supervisor"))));

    fs.clear_ops();
    tree.teardown().unwrap();
    let mut expected = vec![Op::Rmdir(p("/cg/keel/tasks"))];
    for c in ["-pids", "-memory", "-cpu"] {
        expected.push(Op::Write(p("/cg/keel/cgroup.subtree_control"), c.into()));
    }
    expected.extend([
        Op::Rmdir(p("/cg/keel/supervisor")),
        Op::Rmdir(p("/cg/keel")),
    ]);
    assert_eq!(fs.ops(), expected);
}

#[test]
fn adopted_tree_gives_back_the_base_controllers_only_when_alone() {
    for (sibling, expect_disabled) in [(false, true), (true, false)] {
        let fs = RecordingFs::new();
        fs.file("/cg/svc/cgroup.subtree_control", "cpu memory pids");
        fs.dir("/cg/svc");
        if sibling {
            fs.dir("/cg/svc/other");
        }
        let mut layout = v2_layout();
        layout.adopted = true;
        let tree = setup(&fs, layout);
        fs.clear_ops();
        tree.teardown().unwrap();
        let base_disabled = fs
            .writes()
            .iter()
            .any(|(path, _)| path == "/cg/svc/cgroup.subtree_control");
        assert_eq!(base_disabled, expect_disabled, "sibling: {sibling}");
    }
}

/// A daemon respawned by `keel init` starts in init's cgroup (the base), not in `supervisor/`:
/// the tree it finds there is adopted all the same, and gives the base's controllers back at
/// teardown (found on a real v2 kernel: they stayed enabled in the root).
#[test]
fn a_tree_found_from_the_base_is_adopted_too() {
    for (existing, expect_disabled) in [(true, true), (false, false)] {
        let fs = RecordingFs::new();
        fs.file("/cg/svc/cgroup.subtree_control", "cpu memory pids");
        fs.dir("/cg/svc");
        if existing {
            fs.dir("/cg/svc/keel");
            fs.dir("/cg/svc/keel/supervisor");
            fs.dir("/cg/svc/keel/tasks");
        }
        let tree = setup(&fs, v2_layout());
        fs.clear_ops();
        tree.teardown().unwrap();
        let base_disabled: Vec<(String, String)> = fs
            .writes()
            .into_iter()
            .filter(|(path, _)| path == "/cg/svc/cgroup.subtree_control")
            .collect();
        if expect_disabled {
            assert_eq!(
                base_disabled,
                [
                    w("/cg/svc/cgroup.subtree_control", "-pids"),
                    w("/cg/svc/cgroup.subtree_control", "-memory"),
                    w("/cg/svc/cgroup.subtree_control", "-cpu"),
                ]
            );
        } else {
            // Enabled before this tree existed: someone else's.
            assert_eq!(base_disabled, [], "existing: {existing}");
        }
    }
}

/// keel init in a container's cgroup namespace (v2, not the root) moves into `keel-init`
/// before anything enables controllers; at the root or on a hybrid host it stays put.
#[test]
fn keel_init_enters_its_leaf_only_below_a_v2_root() {
    let fs = RecordingFs::new();
    fs.dir("/cg/svc");
    fs.file("/cg/svc/cgroup.type", "domain");
    let leaf = enter_init_leaf(fs.as_ref(), &v2_layout(), 1).unwrap();
    assert_eq!(leaf, Some(p("/cg/svc/keel-init")));
    assert_eq!(
        fs.ops(),
        [
            Op::Mkdir(p("/cg/svc/keel-init")),
            Op::Write(p("/cg/svc/keel-init/cgroup.procs"), "1".into()),
        ]
    );
    // The daemon's tree beside the leaf gives the base's controllers back when adopted: the
    // leaf is keel's own.
    fs.clear_ops();
    fs.file("/cg/svc/cgroup.subtree_control", "cpu memory pids");
    let mut layout = v2_layout();
    layout.adopted = true;
    let tree = setup(&fs, layout);
    fs.clear_ops();
    tree.teardown().unwrap();
    assert!(fs
        .writes()
        .contains(&w("/cg/svc/cgroup.subtree_control", "-cpu")));

    for (layout, type_file) in [(v2_layout(), false), (hybrid_layout(), true)] {
        let fs = RecordingFs::new();
        if type_file {
            fs.file("/u/cgroup.type", "domain");
        }
        assert_eq!(enter_init_leaf(fs.as_ref(), &layout, 1).unwrap(), None);
        assert_eq!(fs.ops(), []);
    }
}

#[test]
fn hybrid_teardown() {
    let fs = RecordingFs::new();
    let tree = setup(&fs, hybrid_layout());
    fs.clear_ops();
    tree.teardown().unwrap();
    assert_eq!(
        fs.writes(),
        vec![
            w("/u/cgroup.procs", "42"),
            w("/v1/cpu,cpuacct/b/cgroup.procs", "42"),
            w("/v1/memory/b/cgroup.procs", "42"),
            w("/v1/pids/cgroup.procs", "42"),
        ]
    );
    let rmdirs = fs
        .ops()
        .into_iter()
        .filter(|op| matches!(op, Op::Rmdir(_)))
        .count();
    assert_eq!(
        rmdirs,
        4 * 3,
        "tasks, supervisor and the root in 4 hierarchies"
    );
}

/// Every mutating operation of a whole life cycle stays inside `<base>/keel`, except the moves
/// in and out (`<base>/cgroup.procs`) and v2's `<base>/cgroup.subtree_control`.
#[test]
fn nothing_is_written_outside_the_tree() {
    for layout in [v2_layout(), hybrid_layout()] {
        let fs = RecordingFs::new();
        let bases: Vec<PathBuf> = layout.bases().iter().map(|b| b.to_path_buf()).collect();
        let tree = setup(&fs, layout.clone());
        let task = tree.task("agent").unwrap();
        task.create(&LIMITS).unwrap();
        task.kill().unwrap();
        task.try_remove().unwrap();
        tree.teardown().unwrap();
        for op in fs.ops() {
            let path = match &op {
                Op::Mkdir(path) | Op::Rmdir(path) | Op::Write(path, _) => path.clone(),
                Op::Kill(_) => panic!("no signal expected"),
            };
            let allowed = bases.iter().any(|base| {
                path.starts_with(base.join("keel"))
                    || path == base.join("cgroup.procs")
                    || (layout.mode == Mode::V2 && path == base.join("cgroup.subtree_control"))
            });
            assert!(allowed, "{op:?} leaves the tree");
        }
    }
}
