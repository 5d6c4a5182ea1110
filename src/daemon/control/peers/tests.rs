//! The decision of who may talk to the control socket, without a kernel.

use super::*;

const HOST_USER: NsId = NsId {
    dev: 4,
    ino: 4026531837,
};
const HOST_PID: NsId = NsId {
    dev: 4,
    ino: 4026531836,
};
const OTHER: NsId = NsId {
    dev: 4,
    ino: 4026532999,
};

fn daemon() -> Identity {
    Identity {
        uid: 0,
        namespaces: Namespaces {
            user: HOST_USER,
            pid: HOST_PID,
        },
        cgroup: Some("/keel/supervisor".into()),
        proc_is_own: true,
        accept_outside: false,
        started_in: None,
        host_uid: None,
    }
}

fn client(cgroup: &str) -> PeerFacts {
    PeerFacts {
        pid: 4242,
        uid: 0,
        namespaces: Ok(Namespaces {
            user: HOST_USER,
            pid: HOST_PID,
        }),
        cgroups: Ok(format!(
            "12:pids:/user.slice\n1:name=systemd:/user.slice\n0::{cgroup}\n"
        )),
        pid_levels: Some(1),
        alive_after_read: Some(true),
    }
}

/// keel's layout: trees `/keel` and `/srv/keel-0123` hold `supervisor/`; `/other` does not.
fn probe(tree: &str) -> Option<bool> {
    match tree {
        "/keel" | "/srv/keel-0123" | "/keel/tasks/nested/inner" => Some(true),
        t if t.contains("..") => None,
        _ => Some(false),
    }
}

fn verdict(own: &Identity, peer: &PeerFacts) -> Result<(), String> {
    judge(own, peer, &probe).map_err(|r| r.to_string())
}

#[test]
fn a_root_shell_of_the_host_is_accepted() {
    assert_eq!(
        verdict(&daemon(), &client("/user.slice/session-1.scope")),
        Ok(())
    );
}

#[test]
fn the_daemons_own_uid_is_accepted_and_another_is_refused() {
    let own = Identity {
        uid: 1000,
        ..daemon()
    };
    let mut peer = client("/user.slice");
    peer.uid = 1000;
    assert_eq!(verdict(&own, &peer), Ok(()));
    peer.uid = 1001;
    let why = verdict(&own, &peer).unwrap_err();
    assert!(why.contains("uid 1001 may not control"), "{why}");
}

#[test]
fn another_user_namespace_is_refused() {
    let mut peer = client("/user.slice");
    peer.namespaces = Ok(Namespaces {
        user: OTHER,
        pid: HOST_PID,
    });
    let why = verdict(&daemon(), &peer).unwrap_err();
    assert!(
        why.starts_with("refused: the client is in user namespace [4026532999]"),
        "{why}"
    );
}

#[test]
fn a_rootless_daemon_lets_in_the_namespace_it_was_started_in_and_no_other() {
    // The daemon made its own user namespace (OTHER) from the host's, where its user's
    // shell is; a second one (a task's of another keel) stays out.
    let own = Identity {
        namespaces: Namespaces {
            user: OTHER,
            pid: HOST_PID,
        },
        started_in: Some(HOST_USER),
        host_uid: Some(1000),
        ..daemon()
    };
    assert_eq!(verdict(&own, &client("/user.slice")), Ok(()));
    // Another user, or the host's root: unmapped here, the overflow uid.
    let mut stranger = client("/user.slice");
    stranger.uid = 65534;
    let why = verdict(&own, &stranger).unwrap_err();
    assert!(
        why.contains("another user than uid 1000") && why.contains("su"),
        "{why}"
    );
    let mut inside = client("/user.slice");
    inside.namespaces = Ok(Namespaces {
        user: OTHER,
        pid: HOST_PID,
    });
    assert_eq!(verdict(&own, &inside), Ok(()));
    let mut third = client("/user.slice");
    third.namespaces = Ok(Namespaces {
        user: NsId {
            dev: 4,
            ino: 4026533111,
        },
        pid: HOST_PID,
    });
    let why = verdict(&own, &third).unwrap_err();
    assert!(why.contains("user namespace [4026533111]"), "{why}");
    // Its own tasks share its user namespace but not its PID namespace.
    inside.namespaces = Ok(Namespaces {
        user: OTHER,
        pid: NsId {
            dev: 4,
            ino: 4026533222,
        },
    });
    assert!(verdict(&own, &inside).is_err());

    // The kernel lets it read no namespace of its user's shell (another user namespace):
    // in its own PID namespace, the shell is let in; a level below (a sandbox), refused.
    let mut shell = client("/user.slice");
    shell.namespaces = Err("Permission denied (os error 13)".into());
    assert_eq!(verdict(&own, &shell), Ok(()));
    shell.pid_levels = Some(2);
    let why = verdict(&own, &shell).unwrap_err();
    assert!(why.contains("not in the daemon's PID namespace"), "{why}");
    shell.pid_levels = None;
    assert!(verdict(&own, &shell).is_err());
    // Inside a keel tree all the same: refused by its cgroup.
    let mut agent = client("/keel/tasks/t");
    agent.namespaces = Err("Permission denied (os error 13)".into());
    assert!(verdict(&own, &agent).is_err());
    // A root daemon never lets an unreadable client in.
    shell.pid_levels = Some(1);
    assert!(verdict(&daemon(), &shell).is_err());
}

#[test]
fn pid_levels_count_the_nspid_line() {
    assert_eq!(pid_levels("Name:\tsh\nNSpid:\t4242\n"), Some(1));
    assert_eq!(pid_levels("NSpid:\t4242\t7\t1\n"), Some(3));
    assert_eq!(pid_levels("Name:\tsh\n"), None);
    assert_eq!(pid_levels("NSpid:\n"), None);
}

#[test]
fn another_pid_namespace_is_refused() {
    let mut peer = client("/user.slice");
    peer.namespaces = Ok(Namespaces {
        user: HOST_USER,
        pid: OTHER,
    });
    let why = verdict(&daemon(), &peer).unwrap_err();
    assert!(why.contains("PID namespace [4026532999]"), "{why}");
}

#[test]
fn unreadable_namespaces_or_cgroup_are_refused() {
    let mut peer = client("/user.slice");
    peer.namespaces = Err("No such file or directory".into());
    let why = verdict(&daemon(), &peer).unwrap_err();
    assert!(why.contains("cannot read the client's namespaces"), "{why}");
    let mut peer = client("/user.slice");
    peer.cgroups = Err("Permission denied".into());
    assert!(verdict(&daemon(), &peer)
        .unwrap_err()
        .contains("cannot read the client's cgroup"));
}

#[test]
fn a_task_of_this_or_any_keel_is_refused() {
    for cgroup in [
        "/keel/tasks/agent",
        "/keel/tasks/agent/nested-by-the-agent",
        "/srv/keel-0123/tasks/build",
    ] {
        let why = verdict(&daemon(), &client(cgroup)).unwrap_err();
        assert_eq!(
            why,
            format!("refused: the client is inside a keel sandbox (cgroup {cgroup})")
        );
    }
}

#[test]
fn a_tasks_directory_that_is_not_a_keel_tree_is_accepted() {
    // No `supervisor/` beside `tasks/`: someone else's layout.
    assert_eq!(verdict(&daemon(), &client("/other/tasks/x")), Ok(()));
    // `tasks` itself, or a tree's supervisor: not inside a task.
    assert_eq!(verdict(&daemon(), &client("/keel/tasks")), Ok(()));
    assert_eq!(verdict(&daemon(), &client("/keel/supervisor")), Ok(()));
}

#[test]
fn a_tree_that_cannot_be_looked_at_counts_as_keels() {
    let why = verdict(&daemon(), &client("/../../keel-x/tasks/agent")).unwrap_err();
    assert!(why.contains("inside a keel sandbox"), "{why}");
}

#[test]
fn a_daemon_inside_a_task_accepts_that_tasks_clients_but_not_its_own_tasks() {
    let own = Identity {
        cgroup: Some("/keel/tasks/nested/inner/supervisor".into()),
        ..daemon()
    };
    assert_eq!(verdict(&own, &client("/keel/tasks/nested")), Ok(()));
    let why = verdict(&own, &client("/keel/tasks/nested/inner/tasks/sub")).unwrap_err();
    assert!(why.contains("inside a keel sandbox"), "{why}");
    assert!(verdict(&own, &client("/keel/tasks/other")).is_err());
}

#[test]
fn a_client_outside_the_pid_namespace_is_refused_unless_the_host_is_let_in() {
    let mut peer = client("/user.slice");
    peer.pid = 0;
    peer.namespaces = Err("no pid".into());
    peer.cgroups = Err("no pid".into());
    let why = verdict(&daemon(), &peer).unwrap_err();
    assert!(why.contains("outside the daemon's PID namespace"), "{why}");
    assert!(why.contains(ACCEPT_OUTSIDE), "{why}");
    // Let in: judged by its uid alone.
    let open = Identity {
        accept_outside: true,
        ..daemon()
    };
    assert_eq!(verdict(&open, &peer), Ok(()));
    peer.uid = 65534;
    assert!(verdict(&open, &peer).is_err());
}

#[test]
fn a_client_gone_before_it_was_checked_is_refused_and_an_old_kernel_cannot_tell() {
    let mut peer = client("/user.slice");
    peer.alive_after_read = Some(false);
    let why = verdict(&daemon(), &peer).unwrap_err();
    assert!(why.contains("exited before it could be checked"), "{why}");
    peer.alive_after_read = None;
    assert_eq!(verdict(&daemon(), &peer), Ok(()));
}

#[test]
fn a_proc_of_another_pid_namespace_refuses_every_visible_client() {
    let own = Identity {
        proc_is_own: false,
        ..daemon()
    };
    let why = verdict(&own, &client("/user.slice")).unwrap_err();
    assert!(why.contains("/proc is not of its PID namespace"), "{why}");
}

#[test]
fn a_host_without_a_v2_entry_has_no_cgroup_to_judge() {
    let mut peer = client("/");
    peer.cgroups = Ok("4:memory:/keel/units/agent\n".into());
    assert_eq!(verdict(&daemon(), &peer), Ok(()));
}

#[test]
fn task_cgroups_finds_every_tasks_unit_pair() {
    assert_eq!(task_cgroups("/"), Vec::<(String, String)>::new());
    assert_eq!(task_cgroups("/tasks/x"), Vec::<(String, String)>::new());
    assert_eq!(task_cgroups("/keel/tasks"), Vec::<(String, String)>::new());
    assert_eq!(
        task_cgroups("/a/keel/tasks/u/b/tasks/v"),
        vec![
            ("/a/keel".to_string(), "u".to_string()),
            ("/a/keel/tasks/u/b".to_string(), "v".to_string()),
        ]
    );
}

#[test]
fn cgroup_mounts_map_a_cgroup_path_to_its_directory() {
    let mountinfo = "\
25 30 0:23 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
40 30 0:24 /srv /mnt/cg\\040v2 rw - cgroup2 cgroup2 rw
";
    let mounts = CgroupMounts::parse(mountinfo);
    assert_eq!(
        mounts.dir_of("/keel/tasks"),
        Some(PathBuf::from("/sys/fs/cgroup/unified/keel/tasks"))
    );
    assert_eq!(mounts.dir_of("/../keel"), None);
    let only_srv = CgroupMounts::parse(mountinfo.lines().nth(3).unwrap());
    assert_eq!(
        only_srv.dir_of("/srv/keel-0123"),
        Some(PathBuf::from("/mnt/cg v2/keel-0123"))
    );
    assert_eq!(only_srv.dir_of("/keel"), None);
}

#[test]
fn a_refusal_is_logged_once_a_while() {
    let mut log = RefusalLog::default();
    let t0 = Instant::now();
    assert!(log.should_log("a", t0));
    assert!(!log.should_log("a", t0 + Duration::from_secs(1)));
    assert!(log.should_log("b", t0 + Duration::from_secs(1)));
    assert!(log.should_log("a", t0 + REFUSAL_QUIET + Duration::from_secs(1)));
}

#[test]
fn a_flood_of_distinct_refusals_is_capped() {
    let mut log = RefusalLog::default();
    let t0 = Instant::now();
    let logged = (0..100)
        .filter(|i| log.should_log(&format!("user namespace [{i}]"), t0))
        .count();
    assert_eq!(logged, MAX_REFUSALS_LOGGED);
    assert!(log.should_log("later", t0 + REFUSAL_QUIET + Duration::from_secs(1)));
}

#[test]
fn a_daemon_that_is_not_root_accepts_root_without_reading_its_namespaces() {
    let own = Identity {
        uid: 65534,
        ..daemon()
    };
    let mut root = client("/user.slice");
    root.namespaces = Err("Permission denied (os error 13)".into());
    root.cgroups = Err("Permission denied (os error 13)".into());
    assert_eq!(verdict(&own, &root), Ok(()));
    // Its own uid is still checked as before.
    let mut same = client("/user.slice");
    same.uid = 65534;
    same.namespaces = Err("Permission denied (os error 13)".into());
    assert!(verdict(&own, &same).is_err());
}
