//! Sandboxes built on templates (src/sandbox/templates.rs): the same mount table as the
//! full plan, templates that follow the host, per-task binds kept private.

mod common;
use common::sandbox::*;
use common::*;
use std::sync::Mutex;
use std::time::Duration;

/// Held by each test here for its whole run: two of them mount on the host, and every
/// sandbox's mount table — which the first compares between two daemons — shows the host's.
static HOST_MOUNTS: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    HOST_MOUNTS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn a_sandbox_on_a_template_is_the_sandbox_built_in_full() {
    if !require_root("a_sandbox_on_a_template_is_the_sandbox_built_in_full") {
        return;
    }
    let _host = one_at_a_time();
    let templated = Daemon::start("sb-tpl");
    let mut full = Daemon::prepare("sb-full");
    full.env
        .push(("KEEL_NO_SANDBOX_TEMPLATES".into(), "1".into()));
    full.spawn();
    let network = r#"sandbox: Sandbox(network: None)"#;
    // Both shapes: the host's network (an explicit opt-in) and a network of the task's own.
    let host = r#"sandbox: Sandbox(network: Host)"#;
    for (unit, extra) in [("plain", host), ("isolated", network)] {
        let a = mount_table(&templated, unit, extra);
        let b = mount_table(&full, unit, extra);
        assert!(a.len() > 20, "{a:#?}");
        assert_eq!(a, b, "{unit}: template vs full plan");
    }
    assert!(
        templated.daemon_log().contains("sandbox template"),
        "the templated daemon built none:\n{}",
        templated.daemon_log()
    );
    assert!(!full.daemon_log().contains("sandbox template"));
    // Nothing runs now: no template pins the host's mounts, none is left on disk.
    assert!(
        !templated.state().join("templates").exists(),
        "templates kept while idle"
    );
}

#[test]
fn a_template_follows_changes_on_the_host() {
    if !require_root("a_template_follows_changes_on_the_host") {
        return;
    }
    let _host = one_at_a_time();
    let d = Daemon::start("sb-tpl-host");
    // A running task keeps the templates (they go when nothing runs).
    d.write_unit(
        "keep",
        r#"Unit(command: ["/bin/sh", "-c", "exec sleep 60"], restart: Never)"#,
    );
    d.wait_state("keep", "running", Duration::from_secs(10));
    // Outside /tmp: a path there would lie in the sandbox's own /tmp, and take the full plan.
    let host = HostDir::new("tpl-host");
    let secret = host.0.join("secret");
    let cache = host.0.join("cache");
    std::fs::write(&secret, "OLDSECRET\n").unwrap();
    std::fs::create_dir(&cache).unwrap();
    let extra = format!(
        "sandbox: Sandbox(writable: [{:?}], hidden: [{:?}])",
        cache.display().to_string(),
        secret.display().to_string()
    );
    let script = |name: &str| {
        format!(
            "cat {s} 2>&1; echo; touch {c}/{name} && echo wrote-{name}",
            s = secret.display(),
            c = cache.display()
        )
    };
    let builds = || d.daemon_log().matches("sandbox template").count();
    for name in ["a", "a2"] {
        let (task, out) = run_agent(&d, name, &script(name), &extra);
        assert_eq!(task["state"], "succeeded", "{out}");
        assert!(
            !out.contains("SECRET"),
            "{name} read the hidden file: {out}"
        );
        assert!(out.contains(&format!("wrote-{name}")), "{out}");
    }
    // One template for "keep", one shared by "a" and "a2".
    assert_eq!(builds(), 2, "{}", d.daemon_log());
    // The host changes under the template: the hidden file replaced by rename (which detaches
    // a bind on it everywhere), the writable directory deleted and made again.
    let staged = host.0.join("secret.new");
    std::fs::write(&staged, "NEWSECRET\n").unwrap();
    std::fs::rename(&staged, &secret).unwrap();
    std::fs::remove_dir_all(&cache).unwrap();
    std::fs::create_dir(&cache).unwrap();
    let (task, out) = run_agent(&d, "b", &script("b"), &extra);
    assert_eq!(task["state"], "succeeded", "{out}");
    assert!(!out.contains("SECRET"), "b read the hidden file: {out}");
    assert!(out.contains("wrote-b"), "{out}");
    assert!(
        cache.join("b").exists(),
        "b's write reached the new directory"
    );
    assert_eq!(builds(), 3, "a new template for the changed host");
    // A mount made on the host after that template: the daemon learns of it from the kernel
    // (mountinfo's POLLPRI, not a read at every start) and the next sandbox shows it.
    let mnt = host.0.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let _unmount = mount_tmpfs(&mnt);
    std::fs::write(mnt.join("note"), "MOUNTED-LATER\n").unwrap();
    let (task, out) = run_agent(&d, "c", &format!("cat {}/note", mnt.display()), &extra);
    assert_eq!(task["state"], "succeeded", "{out}");
    assert!(
        out.contains("MOUNTED-LATER"),
        "c did not see the new mount: {out}"
    );
    assert_eq!(builds(), 4, "a new template for the new mount");
    // A hidden path in a directory that is mounted over after a start, then created in the new
    // filesystem: the watch on the directory was on the inode now covered, so the mount must
    // renew the watches, or the creation goes unseen and the next sandbox shows the file.
    // An agent that reads `path`, which its unit hides: what it printed.
    let read_hidden = |name: &str, path: &std::path::Path| {
        let extra = format!(
            "sandbox: Sandbox(hidden: [{:?}])",
            path.display().to_string()
        );
        let (task, out) = run_agent(
            &d,
            name,
            &format!("cat {} 2>&1; echo", path.display()),
            &extra,
        );
        assert_eq!(task["state"], "succeeded", "{out}");
        out
    };
    let under = host.0.join("under");
    std::fs::create_dir(&under).unwrap();
    let covered_secret = under.join("secret");
    read_hidden("d", &covered_secret);
    let _unmount_under = mount_tmpfs(&under);
    read_hidden("e", &covered_secret);
    std::fs::write(&covered_secret, "COVEREDSECRET\n").unwrap();
    let out = read_hidden("f", &covered_secret);
    assert!(
        !out.contains("COVEREDSECRET"),
        "f read a hidden file created under a new mount: {out}"
    );
    // A hidden symlink: hiding follows it, so its target replaced by rename must be hidden
    // too (a Kubernetes projected volume swaps its `..data` link this way).
    let target = host.0.join("token");
    let link = host.0.join("token-link");
    std::fs::write(&target, "OLDTOKEN\n").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = read_hidden("g", &link);
    assert!(!out.contains("TOKEN"), "g read the hidden target: {out}");
    let staged = host.0.join("token.new");
    std::fs::write(&staged, "NEWTOKEN\n").unwrap();
    std::fs::rename(&staged, &target).unwrap();
    let out = read_hidden("h", &link);
    assert!(
        !out.contains("TOKEN"),
        "h read the replaced target of a hidden symlink: {out}"
    );
    d.keel(&["stop", "keep"]);
}

/// A small tmpfs mounted on the host at `dir`, unmounted when the guard drops.
fn mount_tmpfs(dir: &std::path::Path) -> Unmount {
    nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=1m"),
    )
    .unwrap();
    Unmount(dir.to_path_buf())
}

#[test]
fn binds_from_a_shared_host_mount_are_private_in_the_sandbox() {
    if !require_root("binds_from_a_shared_host_mount_are_private_in_the_sandbox") {
        return;
    }
    let _host = one_at_a_time();
    // The task's files on a shared mount (systemd makes / shared): a bind of them must not
    // join the host mount's peer group, or host mounts below would appear in the sandbox.
    let mut d = Daemon::prepare("sb-shared");
    let dir = d.scratch.dir.clone();
    use nix::mount::{mount, MsFlags};
    mount(
        Some(&dir),
        &dir,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .unwrap();
    let guard = Unmount(dir.clone());
    mount(
        None::<&str>,
        &dir,
        None::<&str>,
        MsFlags::MS_SHARED,
        None::<&str>,
    )
    .unwrap();
    d.spawn();
    let script = "grep -E ' /(work|run/keel/progress|run/keel/checkpoint) ' /proc/self/mountinfo";
    let (task, out) = run_agent(&d, "shared", script, "");
    assert_eq!(task["state"], "succeeded", "{out}");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(" - ")).collect();
    assert_eq!(lines.len(), 3, "{out}");
    for line in lines {
        let fields: Vec<&str> = line.split(' ').collect();
        let dash = fields.iter().position(|f| *f == "-").unwrap();
        assert!(
            fields[6..dash].is_empty(),
            "a per-task bind propagates: {line}"
        );
    }
    assert!(
        d.daemon_log().contains("sandbox template"),
        "{}",
        d.daemon_log()
    );
    d.shutdown();
    drop(guard);
}
