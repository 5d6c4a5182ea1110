//! Unit tests of sandbox templates (`template.rs`): what an attempt mounts itself, keys.

use super::super::tests::{host, layout, p};
use super::*;

const MOUNTS: &str = "22 1 8:1 / / rw - ext4 /dev/vda rw\n";

#[test]
fn an_attempt_on_a_template_mounts_only_its_own_parts() {
    let l = layout();
    let a = attempt_on_template(&l, &host(), MOUNTS).expect("the default shape");
    let fresh: Vec<String> = a.fresh.iter().map(|op| op.to_string()).collect();
    assert_eq!(
        fresh,
        [
            "devpts        /dev/pts newinstance,ptmxmode=0666,mode=620",
            "tmpfs         /dev/shm size=512M mode=1777 nosuid,nodev,noexec",
            "proc          /proc",
            "tmpfs         /tmp size=512M mode=1777 nosuid,nodev",
            "tmpfs         /root size=256M mode=0700 nosuid,nodev",
        ]
    );
    assert_eq!(
        a.binds,
        [
            (l.progress_file.clone(), p("/run/keel/progress")),
            (l.checkpoint_source.clone(), p("/run/keel/checkpoint")),
            (l.work_source.clone(), p("/work")),
        ]
    );
}

#[test]
fn tasks_of_one_shape_share_a_template_and_other_shapes_do_not() {
    let a = layout();
    let mut b = layout();
    b.work_source = p("/var/lib/keel/tasks/other/work");
    b.progress_file = p("/var/lib/keel/tasks/other/run/progress");
    b.checkpoint_source = p("/var/lib/keel/tasks/other/checkpoint");
    b.new_root = p("/var/lib/keel/tasks/other/run/root");
    b.tmp_size = 1 << 30;
    b.home_owner = Some((1000, 1000));
    let key =
        |l: &SandboxLayout, mounts: &str| attempt_on_template(l, &host(), mounts).unwrap().key;
    assert_eq!(key(&a, MOUNTS), key(&b, MOUNTS));
    let mut hidden = layout();
    hidden.hidden.push(p("/etc/secrets"));
    assert_ne!(key(&a, MOUNTS), key(&hidden, MOUNTS));
    // Over the same host (as host_state reads it, the layouts' own paths included): a start
    // of one shape leaves the other's template in date; a new mount dates both.
    let on_host = |l: &SandboxLayout, mounts: &str| {
        attempt_on_template(l, &host(), &host_state(l, &host(), mounts)).unwrap()
    };
    assert_eq!(on_host(&a, MOUNTS).host, on_host(&hidden, MOUNTS).host);
    assert_ne!(on_host(&a, MOUNTS).key, on_host(&hidden, MOUNTS).key);
    let mounted = format!("{MOUNTS}23 22 0:5 / /mnt rw - tmpfs tmpfs rw\n");
    assert_ne!(on_host(&a, MOUNTS).host, on_host(&a, &mounted).host);
    let mut writable = layout();
    writable.writable.push(p("/srv/cache"));
    assert_ne!(key(&a, MOUNTS), key(&writable, MOUNTS));
    // A new mount on the host: a new snapshot.
    let more = format!("{MOUNTS}23 22 0:5 / /mnt rw - tmpfs tmpfs rw\n");
    assert_ne!(key(&a, MOUNTS), key(&a, &more));
}

#[test]
fn shapes_with_per_task_parts_below_the_fresh_mounts_take_the_full_plan() {
    // A writable path inside $HOME needs a mountpoint in the attempt's own tmpfs.
    let mut in_home = layout();
    in_home.writable.push(p("/root/.cache"));
    assert_eq!(attempt_on_template(&in_home, &host(), MOUNTS), None);
    // A hidden path inside the work directory is hidden on the attempt's bind.
    let mut in_work = layout();
    in_work.work_source = p("/srv/work");
    in_work.hidden.push(p("/srv/work/secret"));
    assert_eq!(attempt_on_template(&in_work, &host(), MOUNTS), None);
    // (One inside the hidden state directory is no different: nothing shows it.)
    let mut under_state = layout();
    under_state
        .hidden
        .push(p("/var/lib/keel/tasks/demo/work/secret"));
    assert!(attempt_on_template(&under_state, &host(), MOUNTS).is_some());
    // A workdir inside $HOME is bound inside the attempt's own tmpfs.
    let mut work_in_home = layout();
    work_in_home.workdir = p("/root/src");
    assert_eq!(attempt_on_template(&work_in_home, &host(), MOUNTS), None);
}

#[test]
fn the_template_plan_keeps_mountpoints_and_drops_per_attempt_mounts() {
    let t = template_layout(&layout(), Path::new("/t"));
    let sources = [&t.work_source, &t.progress_file, &t.checkpoint_source];
    let (kept, _, _, _) = split(&plan_steps(&t, &host()), &t.new_root, &sources).unwrap();
    let printed: Vec<String> = kept.iter().map(|(_, op)| op.to_string()).collect();
    for gone in [
        "proc          ",
        "devpts        ",
        "tmpfs         /tmp",
        "bind          /t/",
    ] {
        assert!(
            !printed.iter().any(|l| l.starts_with(gone)),
            "{gone} kept: {printed:#?}"
        );
    }
    for kept in [
        "mkdir         /proc",
        "mkdir         /tmp",
        "mkdir         /work",
        "mkfile        /run/keel/progress",
        "setattr -R    /",
    ] {
        assert!(
            printed.iter().any(|l| l.starts_with(kept)),
            "{kept} missing: {printed:#?}"
        );
    }
    // No setattr aims at a per-attempt mount (it would hit the template's root instead).
    for own in [
        "/tmp",
        "/root",
        "/dev/shm",
        "/dev/pts",
        "/work",
        "/run/keel/progress",
    ] {
        assert!(
            !printed
                .iter()
                .any(|l| l.starts_with("setattr ") && l.split_whitespace().nth(1) == Some(own)),
            "setattr on {own}: {printed:#?}"
        );
    }
}

#[test]
fn a_prepared_copy_serves_attempts_of_its_template_only() {
    let a = attempt_on_template(&layout(), &host(), MOUNTS).unwrap();
    // Another task of the same shape: its own sources and sizes, the same template.
    let mut other = layout();
    other.work_source = p("/var/lib/keel/tasks/other/work");
    other.tmp_size = 1 << 30;
    let b = attempt_on_template(&other, &host(), MOUNTS).unwrap();
    assert!(
        b.can_use_copy_of(&a),
        "same template, same /proc and devpts"
    );
    // The host changed since the copy: its key differs, the copy is not used.
    let changed = format!("{MOUNTS}23 22 0:5 / /mnt rw - tmpfs tmpfs rw\n");
    let c = attempt_on_template(&layout(), &host(), &changed).unwrap();
    assert!(!c.can_use_copy_of(&a));
    // Another shape.
    let mut hidden = layout();
    hidden.hidden.push(p("/etc/secrets"));
    let d = attempt_on_template(&hidden, &host(), MOUNTS).unwrap();
    assert!(!d.can_use_copy_of(&a));
    // What crosses the spare's socket comes back the same.
    let json = serde_json::to_string(&b).unwrap();
    assert_eq!(serde_json::from_str::<AttemptOnTemplate>(&json).unwrap(), b);
}

#[test]
fn a_changed_hidden_file_outdates_its_shapes_template_and_no_other() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("keel-outdates-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret");
    std::fs::write(&secret, "old").unwrap();
    let mut shape = layout();
    shape.hidden.push(secret.clone());
    let mut other = layout();
    other.hidden.push(p("/etc/other-secret"));
    let on_host = |l: &SandboxLayout| {
        attempt_on_template(l, &host(), &host_state(l, &host(), MOUNTS)).unwrap()
    };
    let (before, other_before) = (on_host(&shape), on_host(&other));
    // Replaced by rename, as passwd(1) does: its hide in the old template is gone.
    std::fs::write(dir.join("new"), "new").unwrap();
    std::fs::rename(dir.join("new"), &secret).unwrap();
    let after = on_host(&shape);
    assert!(after.outdates(before.key, before.shape, before.host));
    assert!(!after.outdates(other_before.key, other_before.shape, other_before.host));
    assert!(!after.outdates(after.key, after.shape, after.host));
    // The change time is part of a hidden file's identity: a new file given the old inode
    // number still makes another key (here: a chmod, which changes only the change time).
    std::thread::sleep(std::time::Duration::from_millis(5));
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let later = on_host(&shape);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_ne!(later.key, after.key);
    assert!(later.outdates(after.key, after.shape, after.host));
}

#[test]
fn a_path_a_worker_read_is_given_its_line_and_not_read_again() {
    let mut l = layout();
    let named = p("/nonexistent/keel-test/hidden");
    l.hidden.push(named.clone());
    let read = host_state(&l, &host(), MOUNTS);
    assert!(
        read.contains("/nonexistent/keel-test/hidden absent\n"),
        "{read}"
    );
    assert_eq!(
        path_line(&named, true),
        "/nonexistent/keel-test/hidden absent\n"
    );
    // As a worker read it (a file there then): that line, in its place.
    let line = "/nonexistent/keel-test/hidden 1 2 100000 3.000000004\n".to_string();
    let given = BTreeMap::from([(named, line.clone())]);
    let with = host_state_with(&l, &host(), MOUNTS, &given);
    assert!(with.contains(&line), "{with}");
    assert!(!with.contains("hidden absent"), "{with}");
    assert_eq!(
        with.replace(&line, ""),
        read.replace("/nonexistent/keel-test/hidden absent\n", "")
    );
}
