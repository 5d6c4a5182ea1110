//! `sandbox::privileges::apply` on the real kernel.
//!
//! Each case runs in a child process — this test binary re-run with `--exact privilege_child`
//! and `KEEL_PRIV_CHILD=<case>` — so the test process itself never loses a privilege. The child
//! applies the plan, checks its own thread's status, then execs `/bin/sh` to print
//! `/proc/self/status` *after* execve, which is what the agent would see. Namespaces the child
//! creates (network, mount) die with it: nothing on the host changes.

use keel::sandbox::privileges::{apply, plan};
use keel::sys::caps::current_caps;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::Command;

const CHILD_TEST: &str = "privilege_child";
const CHILD_VAR: &str = "KEEL_PRIV_CHILD";
const NET_BIND_SERVICE: u64 = 1 << 10;
const STATUS_FIELDS: &str = r#"grep -E "^(Cap|NoNewPrivs|Groups|Uid|Gid)" /proc/self/status"#;

/// Capabilities (number, name) the cases need keel's process to hold.
const NEEDED: [(u32, &str); 6] = [
    (6, "CAP_SETGID"),
    (7, "CAP_SETUID"),
    (8, "CAP_SETPCAP"),
    (10, "CAP_NET_BIND_SERVICE"),
    (12, "CAP_NET_ADMIN"),
    (21, "CAP_SYS_ADMIN"),
];

/// Root with the capabilities above; else a failure under `CI=true` or
/// `KEEL_REQUIRE_PRIVILEGED=1`, and a skip with a note elsewhere.
fn privileged(test: &str) -> bool {
    let effective = current_caps()
        .map(|(effective, _, _)| effective)
        .unwrap_or(0);
    let mut missing: Vec<&str> = NEEDED
        .iter()
        .filter(|(cap, _)| effective & (1 << cap) == 0)
        .map(|(_, name)| *name)
        .collect();
    if !nix::unistd::geteuid().is_root() {
        missing.insert(0, "uid 0");
    }
    if missing.is_empty() {
        return true;
    }
    let required = std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("KEEL_REQUIRE_PRIVILEGED").is_ok_and(|v| v == "1");
    let missing = missing.join(", ");
    if required {
        panic!(
            "{test}: needs root with {missing} (run the tests as root); CI=true or \
             KEEL_REQUIRE_PRIVILEGED=1 forbids skipping"
        );
    }
    eprintln!("{test}: skipped: needs root with {missing}");
    false
}

/// What the child printed: `/proc/self/status` fields after execve, plus `key=value` lines.
struct Report {
    status: BTreeMap<String, String>,
    lines: Vec<String>,
}

impl Report {
    fn cap(&self, name: &str) -> u64 {
        let text = self
            .status
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing from the child's status"));
        u64::from_str_radix(text, 16).unwrap()
    }
    fn field(&self, name: &str) -> &str {
        self.status
            .get(name)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("{name} missing from the child's status"))
    }
    fn values(&self, key: &str) -> Vec<&str> {
        let prefix = format!("{key}=");
        self.lines
            .iter()
            .filter_map(|line| line.strip_prefix(&prefix))
            .collect()
    }
}

fn run_child(case: &str) -> Report {
    let exe = std::env::current_exe().unwrap();
    let output = Command::new(exe)
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, case)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "child {case:?} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let mut status = BTreeMap::new();
    let mut lines = Vec::new();
    for line in stdout.lines() {
        match line.split_once(":\t") {
            Some((key, value)) if !key.contains(' ') => {
                status.insert(key.to_string(), value.trim().to_string());
            }
            _ => lines.push(line.to_string()),
        }
    }
    // "Groups:" with no group has nothing after the tab; keep it.
    if stdout.lines().any(|line| line.trim_end() == "Groups:") {
        status.insert("Groups".into(), String::new());
    }
    Report { status, lines }
}

fn assert_all_caps(report: &Report, expected: u64) {
    for name in ["CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"] {
        assert_eq!(report.cap(name), expected, "{name}");
    }
}

#[test]
fn default_plan_leaves_no_capability_after_exec() {
    if !privileged("default_plan_leaves_no_capability_after_exec") {
        return;
    }
    let report = run_child("default");
    assert_all_caps(&report, 0);
    assert_eq!(report.field("NoNewPrivs"), "1");
    assert_eq!(report.field("Uid"), "0\t0\t0\t0");
}

#[test]
fn a_granted_capability_survives_exec_as_root() {
    if !privileged("a_granted_capability_survives_exec_as_root") {
        return;
    }
    let report = run_child("root-net-bind");
    assert_eq!(report.cap("CapEff"), NET_BIND_SERVICE);
    assert_eq!(report.cap("CapBnd"), NET_BIND_SERVICE);
    assert_eq!(report.cap("CapPrm"), NET_BIND_SERVICE);
    assert_eq!(report.cap("CapInh"), NET_BIND_SERVICE);
    assert_eq!(report.field("NoNewPrivs"), "1");
}

#[test]
fn sandbox_user_drops_root_groups_and_capabilities() {
    if !privileged("sandbox_user_drops_root_groups_and_capabilities") {
        return;
    }
    let report = run_child("nobody");
    assert_eq!(report.field("Uid"), "65534\t65534\t65534\t65534");
    assert_eq!(report.field("Gid"), "65534\t65534\t65534\t65534");
    assert_eq!(report.field("Groups"), "");
    assert_all_caps(&report, 0);
    assert_eq!(report.field("NoNewPrivs"), "1");
}

#[test]
fn a_granted_capability_survives_exec_as_another_user() {
    if !privileged("a_granted_capability_survives_exec_as_another_user") {
        return;
    }
    let report = run_child("nobody-net-bind");
    assert_eq!(report.field("Uid"), "65534\t65534\t65534\t65534");
    assert_eq!(report.field("Groups"), "");
    // Only the ambient set carries it across execve for a non-root uid.
    assert_all_caps(&report, NET_BIND_SERVICE);
    assert_eq!(report.field("NoNewPrivs"), "1");
}

#[test]
fn network_none_shows_only_loopback_and_it_is_up() {
    if !privileged("network_none_shows_only_loopback_and_it_is_up") {
        return;
    }
    let report = run_child("network-none");
    assert_all_caps(&report, 0);
    // /proc/net/dev lists the reading process's network namespace: only lo.
    assert_eq!(report.values("netdev"), ["lo"], "{:?}", report.lines);
    let sysfs = report.values("sysnet");
    if !sysfs.is_empty() {
        assert_eq!(sysfs, ["lo"]);
        let flags = report.values("loflags");
        let flags = i64::from_str_radix(flags[0].trim_start_matches("0x"), 16).unwrap();
        assert_eq!(flags & 1, 1, "lo is not IFF_UP: {flags:#x}");
    }
    let links = report.values("iplink");
    if !links.is_empty() {
        assert_eq!(links.len(), 1, "{links:?}");
        assert!(links[0].contains(" lo: "), "{links:?}");
        assert!(
            links[0].contains(",UP") || links[0].contains("<UP"),
            "{links:?}"
        );
    }
    assert!(
        !sysfs.is_empty() || !links.is_empty(),
        "neither sysfs nor `ip` could show lo's flags: {:?}",
        report.lines
    );
}

#[test]
fn remount_of_root_is_refused_after_apply() {
    if !privileged("remount_of_root_is_refused_after_apply") {
        return;
    }
    let report = run_child("remount");
    assert_eq!(report.values("remount"), ["EPERM"], "{:?}", report.lines);
}

#[test]
fn a_capability_keel_lacks_is_refused_before_anything_changes() {
    if !privileged("a_capability_keel_lacks_is_refused_before_anything_changes") {
        return;
    }
    let report = run_child("not-held");
    let errors = report.values("error");
    assert_eq!(errors.len(), 1, "{:?}", report.lines);
    assert!(
        errors[0].contains("which keel itself does not hold"),
        "{errors:?}"
    );
    assert_eq!(report.values("unchanged"), ["yes"]);
}

/// The child side: does nothing unless `KEEL_PRIV_CHILD` names a case.
#[test]
fn privilege_child() {
    let Ok(case) = std::env::var(CHILD_VAR) else {
        return;
    };
    // libtest has printed "test privilege_child ... " without a newline: end that line so
    // the report starts on its own.
    println!();
    if case == "not-held" {
        return child_not_held();
    }
    let (capabilities, user): (&[&str], Option<&str>) = match case.as_str() {
        "default" | "network-none" | "remount" => (&[], None),
        "root-net-bind" => (&["CAP_NET_BIND_SERVICE"], None),
        "nobody" => (&[], Some("65534:65534")),
        "nobody-net-bind" => (&["net_bind_service"], Some("65534:65534")),
        other => panic!("unknown case {other:?}"),
    };
    let network_none = case == "network-none";
    let mut script = STATUS_FIELDS.to_string();
    if network_none {
        script.push_str(&enter_network_namespace());
    }
    if case == "remount" {
        // A mount namespace of our own: even a wrongly successful remount changes only it.
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).expect("unshare(CLONE_NEWNS)");
    }

    let capabilities: Vec<String> = capabilities.iter().map(|s| s.to_string()).collect();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    let plan = plan(&capabilities, user, network_none, &passwd, &group).unwrap();
    if let Err(error) = apply(&plan) {
        panic!("apply({plan:?}): {error}");
    }

    // Before execve, on this thread (capabilities are per-thread: /proc/thread-self).
    let keep = plan.keep;
    assert_eq!(current_caps().unwrap(), (keep, keep, keep));
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    assert!(status.contains("NoNewPrivs:\t1\n"), "{status}");
    assert!(
        status.contains(&format!("CapBnd:\t{keep:016x}\n")),
        "{status}"
    );
    assert!(
        status.contains(&format!("CapAmb:\t{keep:016x}\n")),
        "{status}"
    );
    if let Some((uid, gid)) = plan.user {
        assert!(status.contains(&format!("Uid:\t{uid}\t{uid}\t{uid}\t{uid}\n")));
        assert!(status.contains(&format!("Gid:\t{gid}\t{gid}\t{gid}\t{gid}\n")));
    }

    if case == "remount" {
        let result = nix::mount::mount(
            None::<&str>,
            "/",
            None::<&str>,
            nix::mount::MsFlags::MS_REMOUNT | nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        );
        assert_eq!(result, Err(nix::errno::Errno::EPERM));
        println!("remount=EPERM");
        return;
    }

    // Replaces this process: what the shell prints is what an agent would see.
    let error = Command::new("/bin/sh").args(["-c", &script]).exec();
    panic!("exec /bin/sh: {error}");
}

/// A capability none of the cases needs, dropped by the child that holds every one.
const SPARE_CAP: (u32, &str) = (25, "CAP_SYS_TIME");

/// Grant a capability this process does not hold (CAP_SYS_RESOURCE where keel runs): `apply`
/// must refuse it before it changes anything. A process that holds every capability first
/// drops one ([`SPARE_CAP`], from this child only), so the case always runs.
fn child_not_held() {
    let held = current_caps().unwrap();
    let last_cap: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if (0..=last_cap).all(|cap| held.1 & (1u64 << cap) != 0) {
        let keep = !(1u64 << SPARE_CAP.0);
        keel::sys::caps::capset(held.0 & keep, held.1 & keep, held.2 & keep)
            .expect("drop a capability from this child");
        println!("dropped={}", SPARE_CAP.1);
    }
    let before = current_caps().unwrap();
    let status_before = credentials();
    let cap = (0..=last_cap)
        .find(|cap| before.1 & (1u64 << cap) == 0)
        .expect("a capability this child does not hold");
    let plan = keel::sandbox::privileges::PrivilegePlan {
        keep: 1 << cap,
        user: Some((65534, 65534)),
        loopback_up: false,
    };
    let error = apply(&plan).expect_err("apply must refuse a capability keel lacks");
    println!("error={error}");
    let unchanged = current_caps().unwrap() == before && credentials() == status_before;
    println!("unchanged={}", if unchanged { "yes" } else { "no" });
}

/// This thread's credential lines of its status (the rest, memory and switches, keeps moving).
fn credentials() -> Vec<String> {
    std::fs::read_to_string("/proc/thread-self/status")
        .unwrap()
        .lines()
        .filter(|line| {
            ["Cap", "NoNewPrivs", "Groups", "Uid", "Gid"]
                .iter()
                .any(|prefix| line.starts_with(prefix))
        })
        .map(str::to_string)
        .collect()
}

/// Give this thread a network namespace of its own (and a mount namespace with a fresh sysfs,
/// whose /sys/class/net shows the namespace that mounted it); return the shell lines that list
/// its interfaces after execve.
fn enter_network_namespace() -> String {
    use nix::mount::{mount, MsFlags};
    use nix::sched::{unshare, CloneFlags};
    unshare(CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWNS)
        .expect("unshare(CLONE_NEWNET | CLONE_NEWNS)");
    // Only after unshare succeeded: these mounts are in the child's own namespace.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .expect("make / private");
    let mut script = String::from(
        "; sed -n '3,$p' /proc/net/dev | sed 's/:.*//; s/ //g; s/^/netdev=/'\
         ; if command -v ip >/dev/null; then ip -o link | sed 's/^/iplink=/'; fi",
    );
    let sysfs = mount(
        Some("sysfs"),
        "/sys",
        Some("sysfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    );
    match sysfs {
        Ok(()) => script.push_str(
            "; for d in /sys/class/net/*; do echo \"sysnet=${d##*/}\"; done\
             ; echo \"loflags=$(cat /sys/class/net/lo/flags)\"",
        ),
        Err(e) => eprintln!("no fresh sysfs ({e}): checking lo through ip and /proc only"),
    }
    script
}
