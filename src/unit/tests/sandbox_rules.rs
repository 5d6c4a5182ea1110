//! What `sandbox` may not ask for: writable paths that give the agent the host, capabilities
//! that reach past the sandbox.

use crate::unit::sandbox_rules::{refused_capability, relation, writable_problem, Relation};
use crate::unit::test_support::*;
use crate::unit::*;

#[test]
fn relation_compares_components() {
    let rel = |a: &str, b: &str| relation(Path::new(a), Path::new(b));
    assert_eq!(rel("/var/lib", "/var/lib/"), Some(Relation::Same));
    assert_eq!(rel("/var//lib/.", "/var/lib"), Some(Relation::Same));
    assert_eq!(rel("/var", "/var/lib"), Some(Relation::Covers));
    assert_eq!(rel("/", "/etc"), Some(Relation::Covers));
    assert_eq!(rel("/etc/keel", "/etc"), Some(Relation::Inside));
    // Not a prefix of the name: a component.
    assert_eq!(rel("/usr-local-thing", "/usr"), None);
    assert_eq!(rel("/etcetera", "/etc"), None);
    assert_eq!(rel("/srv/a", "/srv/b"), None);
}

#[test]
fn writable_paths_that_give_the_host_away_are_refused() {
    for (path, needle) in [
        ("/", "is the root directory"),
        ("//", "is the root directory"),
        ("/etc", "is the host's system directory /etc"),
        ("/etc/keel", "lies inside the host's system directory /etc"),
        (
            "/usr/local/src",
            "lies inside the host's system directory /usr",
        ),
        ("/usr/", "is the host's system directory /usr"),
        ("/lib64", "system directory /lib64"),
        (
            "/root/.ssh",
            "lies inside the host's system directory /root",
        ),
        ("/dev/sda", "system directory /dev"),
        ("/proc/sys", "system directory /proc"),
        ("/sys/fs/cgroup", "system directory /sys"),
        ("/boot", "system directory /boot"),
        ("/var", "is /var, which the whole host shares"),
        ("/var/lib", "is /var/lib, which the whole host shares"),
        ("/var/lib/dpkg/info", "system directory /var/lib/dpkg"),
        ("/var/lib/docker", "system directory /var/lib/docker"),
        ("/var/spool/cron/crontabs", "system directory /var/spool"),
        ("/var/spool/at", "system directory /var/spool"),
        ("/var/run/docker.sock", "system directory /var/run"),
        ("/run/docker.sock", "system directory /run"),
        ("/run/user/1000", "system directory /run"),
        ("/run/systemd/private", "system directory /run"),
        ("/run/libvirt", "system directory /run"),
        ("/run/myapp", "system directory /run"),
        ("/run", "system directory /run"),
        ("/var/lib/sudo/ts", "system directory /var/lib/sudo"),
        ("/var/lib/kubelet/pods", "system directory /var/lib/kubelet"),
        ("/tmp", "is /tmp, which the whole host shares"),
        ("/var/tmp/", "is /var/tmp"),
        ("/home", "is /home, which the whole host shares"),
        ("/srv", "is /srv"),
        ("/home/me/proj/.git", "lies in a git directory (.git)"),
        ("/srv/app/.git/hooks", "lies in a git directory (.git)"),
    ] {
        let problem = writable_problem(path, None).unwrap_or_else(|| panic!("{path} accepted"));
        assert!(problem.contains(needle), "{path}: {problem}");
        assert!(
            problem.contains("share") || problem.contains("list only"),
            "{path}: says what to do instead: {problem}"
        );
    }
}

#[test]
fn writable_paths_of_ones_own_are_accepted() {
    for path in [
        "/usr-local-thing",
        "/var/lib/app",
        "/var/lib/myapp/cache",
        "/var/log/myapp",
        "/var/tmp/build",
        "/home/me/proj",
        "/home/me/proj/src",
        "/tmp/x",
        "/srv/agent-data",
        "/data",
        "/opt/tool/cache",
        "/etcetera",
        "/srv/app.gitignored",
        "/srv/repos/app-git",
    ] {
        assert_eq!(writable_problem(path, None), None, "{path}");
    }
}

#[test]
fn the_tasks_main_repository_is_not_writable() {
    let repo = Some("/srv/repos/app");
    for path in ["/srv/repos/app", "/srv/repos", "/srv/repos/app/"] {
        let problem = writable_problem(path, repo).unwrap_or_else(|| panic!("{path} accepted"));
        assert!(
            problem.contains("main repository /srv/repos/app"),
            "{problem}"
        );
    }
    let problem = writable_problem("/srv/repos/app/.git/config", repo).unwrap();
    assert!(problem.contains("git directory"), "{problem}");
    // Its build output, or a sibling, is the unit's own business.
    assert_eq!(writable_problem("/srv/repos/app/target", repo), None);
    assert_eq!(writable_problem("/srv/repos/application", repo), None);
}

#[test]
fn capabilities_across_uids_and_to_the_host_are_refused() {
    let refused = |name: &str, host: bool| {
        let number = parse_capability(name).unwrap();
        refused_capability(number, host)
    };
    for name in [
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_DAC_READ_SEARCH",
        "CAP_FOWNER",
        "CAP_FSETID",
        "CAP_SETUID",
        "CAP_SETGID",
        "CAP_LINUX_IMMUTABLE",
        "CAP_IPC_OWNER",
        "CAP_SYS_MODULE",
        "CAP_SYS_RAWIO",
        "CAP_SYS_PTRACE",
        "CAP_SYS_ADMIN",
        "CAP_SYS_BOOT",
        "CAP_SYS_NICE",
        "CAP_SYS_RESOURCE",
        "CAP_SYS_TIME",
        "CAP_MKNOD",
        "CAP_LEASE",
        "CAP_AUDIT_CONTROL",
        "CAP_AUDIT_READ",
        "CAP_SETFCAP",
        "CAP_MAC_OVERRIDE",
        "CAP_MAC_ADMIN",
        "CAP_SYSLOG",
        "CAP_PERFMON",
        "CAP_BPF",
    ] {
        for host in [true, false] {
            let message = refused(name, host).unwrap_or_else(|| panic!("{name} granted"));
            assert!(message.contains(name), "{name}: {message}");
            assert!(message.contains("not grantable"), "{message}");
            // What to do instead follows the reason.
            let instead = message.split("not grantable to a sandboxed agent; ").nth(1);
            assert!(instead.is_some_and(|i| i.len() > 10), "{message}");
        }
    }
    for name in ["CAP_NET_ADMIN", "CAP_NET_RAW"] {
        let message = refused(name, true).unwrap_or_else(|| panic!("{name} granted"));
        assert!(message.contains("network: None"), "{message}");
        assert_eq!(refused(name, false), None, "{name} in a network of its own");
    }
    for name in [
        "CAP_NET_BIND_SERVICE",
        "CAP_KILL",
        "CAP_SETPCAP",
        "CAP_IPC_LOCK",
        "CAP_SYS_CHROOT",
        "CAP_AUDIT_WRITE",
        "CAP_CHECKPOINT_RESTORE",
    ] {
        assert_eq!(refused(name, true), None, "{name}");
    }
    let message = refused("CAP_SETUID", true).unwrap();
    assert!(message.contains("user_namespaces: Off"), "{message}");
    assert!(message.contains("sandbox.user"), "{message}");
}

fn problems(text: &str) -> Vec<UnitError> {
    check_unit(Path::new("units/t.ron"), text).expect_err("should be refused")
}

#[test]
fn a_refused_writable_path_is_reported_at_its_entry() {
    let text = "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(writable: [\"/srv/data\", \"/\"]),\n)";
    let errors = problems(text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!((errors[0].line, errors[0].col), (3, 46), "{}", errors[0]);
    assert!(
        errors[0]
            .to_string()
            .starts_with("units/t.ron:3:46: sandbox.writable[1]: is the root directory"),
        "{}",
        errors[0]
    );
}

#[test]
fn every_refused_entry_is_reported() {
    let text = "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(\n        capabilities: [\"CAP_DAC_OVERRIDE\", \"CAP_NET_BIND_SERVICE\", \"setuid\"],\n        writable: [\"/etc/keel\", \"/var/lib/app\", \"/home/me/proj/.git\"],\n    ),\n)";
    let found: Vec<String> = problems(text).iter().map(ToString::to_string).collect();
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(
        found[0].starts_with("units/t.ron:4:24: sandbox.capabilities[0]: CAP_DAC_OVERRIDE"),
        "{found:#?}"
    );
    assert!(
        found[1].starts_with("units/t.ron:4:68: sandbox.capabilities[2]: CAP_SETUID"),
        "{found:#?}"
    );
    assert!(
        found[2].starts_with("units/t.ron:5:20: sandbox.writable[0]: \"/etc/keel\" lies inside"),
        "{found:#?}"
    );
    assert!(
        found[3].starts_with("units/t.ron:5:49: sandbox.writable[2]:"),
        "{found:#?}"
    );
}

#[test]
fn keel_dirs_known_to_the_caller_are_checked_too() {
    let text = "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(writable: [\"/srv/keel/tasks/x/work\", \"/srv\", \"/srv/data\"]),\n)";
    let state = Path::new("/srv/keel");
    let dirs = [("state directory", state)];
    let errors = check_unit_with(Path::new("units/t.ron"), text, |unit| {
        keel_dir_problems(unit, &dirs)
    })
    .expect_err("should be refused");
    let found: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].starts_with("units/t.ron:3:33: sandbox.writable[0]: \"/srv/keel/tasks/x/work\" lies inside keel's state directory /srv/keel"),
        "{found:#?}"
    );
    // "/srv" is refused by the validator already (it covers /srv, shared by the host).
    assert!(found[1].contains("sandbox.writable[1]"), "{found:#?}");
    let unit = parse(
        "Unit(command: [\"agent\"], sandbox: Sandbox(writable: [\"/srv/keel-data\", \"/srv/data\"]))",
    );
    assert!(keel_dir_problems(&unit, &dirs).is_empty());
    let covering =
        parse("Unit(command: [\"agent\"], sandbox: Sandbox(writable: [\"/srv/other\"]))");
    let dirs = [("units directory", Path::new("/srv/other/units"))];
    let problem = &keel_dir_problems(&covering, &dirs)[0];
    assert!(
        problem
            .message
            .contains("covers keel's units directory /srv/other/units"),
        "{problem}"
    );
}
