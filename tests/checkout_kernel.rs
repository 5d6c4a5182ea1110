//! Per-task checkouts for real: a generated repository, checkouts made by `keel::checkout`,
//! each mounted as its sandbox mounts it (overlay at the work directory, the task's git
//! directory on `.git`) in a private mount namespace of a child shell (`unshare -m`), with
//! the real `git` run inside; and once in the whole sandbox built by keel's own mount plan
//! and kernel mounter (under `unshare --pid --fork`). The namespaces die with their
//! processes; the scratch directory is removed at the end, failed or not.
//!
//! Needs root (mounts). `cargo test --test checkout_kernel -- --ignored --nocapture` also
//! runs the 10,000-file measurement.

mod checkout_support;
mod common;

use checkout_support::*;

use keel::checkout::{self, CheckoutError, Harvest, PrepareOptions, Prepared};
use keel::sandbox::mounts::{build, list_host_root, KernelMounter, SandboxLayout};
use keel::sandbox::spec::CheckoutFiles;
use keel::state::StateDir;
use keel::unit::Repo;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

#[test]
fn bad_repository_specs_are_refused_with_what_to_fix() {
    if !ready("bad_repository_specs_are_refused_with_what_to_fix") {
        return;
    }
    let setup = Setup::new("bad", 6, 2);
    let check = |repo: Repo| checkout::validate(&repo, "u").unwrap_err().to_string();
    let missing = setup.scratch.0.join("nowhere");
    let message = check(repo_spec(&missing));
    assert!(
        message.contains("does not exist: fix repo.path"),
        "{message}"
    );
    let plain = setup.scratch.0.join("home");
    let message = check(repo_spec(&plain));
    assert!(message.contains("is not a git repository"), "{message}");
    let message = check(Repo {
        base: "no-such-branch".into(),
        ..repo_spec(&setup.main)
    });
    assert!(
        message.contains("base \"no-such-branch\" is not a commit of"),
        "{message}"
    );
    git(&setup.main, &["branch", "keel/u", "main~1"]);
    let message = check(repo_spec(&setup.main));
    assert!(
        message.contains("branch keel/u already exists in"),
        "{message}"
    );
    assert!(message.contains("git branch -D keel/u"), "{message}");
    let message = check(Repo {
        branch: Some("bad..name".into()),
        ..repo_spec(&setup.main)
    });
    assert!(message.contains("cannot be a git branch name"), "{message}");
    // The branch at the base itself is fine; and prepare refuses what validate refuses,
    // leaving nothing behind.
    git(&setup.main, &["branch", "-f", "keel/u", "main"]);
    checkout::validate(&repo_spec(&setup.main), "u").unwrap();
    let err = checkout::prepare(
        &setup.dirs,
        "v",
        &Repo {
            base: "nope".into(),
            ..repo_spec(&setup.main)
        },
        &PrepareOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, CheckoutError::BaseNotFound { .. }));
    assert!(!checkout::checkout_dir(&setup.dirs, "v").exists());
    assert!(!git(&setup.main, &["for-each-ref", "refs/keel"]).contains("refs/keel/base/v"));
}

#[test]
fn overlay_checkouts_commit_harvest_resume_and_stay_apart() {
    if !ready("overlay_checkouts_commit_harvest_resume_and_stay_apart") {
        return;
    }
    let setup = Setup::new("overlay", 60, 3);
    let options = PrepareOptions::default();
    let started = Instant::now();
    let a = setup.prepare("a", &options);
    let first = started.elapsed();
    let started = Instant::now();
    let b = setup.prepare("b", &options);
    let second = started.elapsed();
    eprintln!("60 files: first checkout (with its base) {first:?}, second {second:?}");
    assert!(
        a.created && a.base_built && a.full_reason.is_none(),
        "{a:?}"
    );
    assert!(b.created && !b.base_built, "{b:?}");
    assert_eq!(a.branch, "keel/a");

    // A fresh checkout is clean at once, on its branch, with the history.
    let out = setup.run(
        "a",
        &a,
        "git status --porcelain; git rev-parse --abbrev-ref HEAD; git log --oneline | wc -l",
    );
    assert_eq!(out, "keel/a\n3");

    // Commits in A, a directory of the base renamed (overlayfs redirect_dir), harvested.
    setup.run(
        "a",
        &a,
        "echo new > new.txt && git add new.txt && git commit -q -m 'a: new file' && \
         git mv d1 d1-renamed && git commit -q -m 'a: rename' && git status --porcelain",
    );
    let tip = setup.run("a", &a, "git rev-parse HEAD");
    let harvest = checkout::harvest(&setup.dirs, "a", 1).unwrap();
    assert!(
        matches!(
            harvest,
            Harvest::Updated {
                from: None,
                commits: 2,
                ..
            }
        ),
        "{harvest}"
    );
    assert_eq!(git(&setup.main, &["rev-parse", "keel/a"]), tip);
    assert_eq!(git(&setup.main, &["show", "keel/a:new.txt"]), "new");
    git(&setup.main, &["fsck", "--strict", "--no-dangling"]);
    let again = checkout::harvest(&setup.dirs, "a", 1).unwrap();
    assert!(matches!(again, Harvest::UpToDate { .. }), "{again}");

    // Destructive git inside A changes nothing in main, nor in B.
    let main_before = snapshot(&setup.main.join(".git"));
    let b_git = b.mounts.git_dir.clone();
    let b_before = (
        snapshot(&b_git),
        setup.run("b", &b, "git status --porcelain; ls | wc -l"),
    );
    setup.run(
        "a",
        &a,
        "git branch -D main 2>/dev/null || true; git update-ref refs/heads/main HEAD~1; \
         git gc -q --prune=now; git worktree prune; git reflog expire --expire=now --all; \
         git status --porcelain; git log --oneline | wc -l",
    );
    assert_eq!(snapshot(&setup.main.join(".git")), main_before);
    let b_after = (
        snapshot(&b_git),
        setup.run("b", &b, "git status --porcelain; ls | wc -l"),
    );
    assert_eq!(b_after, b_before);
    assert_eq!(setup.run("a", &a, "git log --oneline | wc -l"), "5");

    // A git directory pointed at another repository (here B's) by its agent is put back
    // before keel reads it: the harvest brings A's branch, not B's.
    let a_git = a.mounts.git_dir.clone();
    std::fs::write(a_git.join("commondir"), b_git.display().to_string()).unwrap();
    std::fs::write(a_git.join("objects/info/alternates"), "/nowhere/objects\n").unwrap();
    let again = checkout::harvest(&setup.dirs, "a", 1).unwrap();
    assert!(matches!(again, Harvest::UpToDate { .. }), "{again}");
    assert!(!a_git.join("commondir").exists());
    assert_eq!(setup.run("a", &a, "git rev-parse HEAD"), tip);

    // Resume: uncommitted work in B survives unmount, a restart's prepare, and remount.
    setup.run("b", &b, "echo wip > wip.txt; echo changed >> d2/f2.txt");
    let again = setup.prepare("b", &options);
    assert!(!again.created);
    assert_eq!(again.mounts, b.mounts);
    let status = setup.run("b", &again, "git status --porcelain");
    assert_eq!(status, "M d2/f2.txt\n?? wip.txt");

    // Dirty: kept, with the reason; the state says why.
    let state = checkout::state(&setup.dirs, "b").unwrap();
    assert!(
        !state.clean() && state.harvested() && state.overlay,
        "{state:?}"
    );
    assert_eq!(state.changes, ["d2/f2.txt", "wip.txt"]);
    let err = checkout::remove(&setup.dirs, "b", 1, false).unwrap_err();
    assert!(
        err.to_string()
            .contains("2 uncommitted changes (d2/f2.txt, wip.txt)"),
        "{err}"
    );
    assert!(checkout::exists(&setup.dirs, "b"));

    // Committed with main's objects read-only (as in the sandbox), harvested: removable.
    let objects = setup.main.join(".git/objects");
    ok(setup.try_run(
        "b",
        &b,
        &[&objects],
        "git add -A && git commit -q -m 'b: work' && git status --porcelain",
    ));
    let state = checkout::state(&setup.dirs, "b").unwrap();
    assert!(state.clean() && !state.harvested(), "{state:?}");
    assert_eq!(state.unharvested, ["keel/b"]);
    let removed = checkout::remove(&setup.dirs, "b", 1, false).unwrap();
    assert!(removed.harvest.as_ref().is_some_and(Harvest::harvested));
    assert!(
        removed.freed_bytes > 0 && !removed.base_removed,
        "{removed:?}"
    );
    assert!(!checkout::exists(&setup.dirs, "b"));
    git(&setup.main, &["cat-file", "-e", "keel/b:wip.txt"]);

    // The main branch moved elsewhere meanwhile: not a fast-forward, kept aside.
    let base = git(&setup.main, &["rev-parse", "main"]);
    let tree = format!("{base}^{{tree}}");
    let other = git(
        &setup.main,
        &["commit-tree", &tree, "-p", &base, "-m", "elsewhere"],
    );
    git(&setup.main, &["update-ref", "refs/heads/keel/a", &other]);
    setup.run(
        "a",
        &a,
        "echo more >> new.txt && git commit -q -am 'a: more'",
    );
    let kept = checkout::harvest(&setup.dirs, "a", 2).unwrap();
    let Harvest::Kept { kept_as, .. } = &kept else {
        panic!("{kept}");
    };
    assert_eq!(kept_as, "keel/a@2");
    assert_eq!(git(&setup.main, &["rev-parse", "keel/a"]), other);
    assert!(kept.to_string().contains("nothing was forced"), "{kept}");

    // A is clean and everything of it is in main (its `main` ref too): removed, with the
    // base it was the last user of, and the pin.
    let disk = checkout::disk_usage(&setup.dirs, "a").unwrap();
    assert!(disk.base_bytes > 0 && disk.own_bytes > 0, "{disk:?}");
    let removed = checkout::remove(&setup.dirs, "a", 2, false).unwrap();
    assert!(removed.base_removed, "{removed:?}");
    assert!(removed.freed_bytes >= disk.own_bytes + disk.base_bytes / 2);
    assert_eq!(git(&setup.main, &["for-each-ref", "refs/keel"]), "");
    let bases = std::fs::read_dir(checkout::bases_dir(&setup.dirs)).unwrap();
    assert_eq!(bases.count(), 0);
}

#[test]
fn full_checkouts_work_the_same_and_force_still_harvests() {
    if !ready("full_checkouts_work_the_same_and_force_still_harvests") {
        return;
    }
    let setup = Setup::new("full", 30, 2);
    // A leftover of a builder that died (pid 999999999 is never alive) goes away.
    let leftover = setup.dirs.task_dir("c").join(".checkout.tmp.999999999.0");
    std::fs::create_dir_all(leftover.join("git")).unwrap();
    let full = PrepareOptions {
        full: true,
        ..Default::default()
    };
    let c = setup.prepare("c", &full);
    assert!(!leftover.exists());
    assert!(c.full_reason.as_deref() == Some("a full checkout was asked for"));
    assert!(matches!(c.mounts.files, CheckoutFiles::Bind(_)));
    assert_eq!(setup.run("c", &c, "git status --porcelain"), "");
    setup.run(
        "c",
        &c,
        "echo x > x.txt && git add x.txt && git commit -q -m x && echo y > y.txt",
    );
    let err = checkout::remove(&setup.dirs, "c", 1, false).unwrap_err();
    assert!(
        err.to_string().contains("1 uncommitted change (y.txt)"),
        "{err}"
    );
    // Refused, but harvested on the way.
    git(&setup.main, &["cat-file", "-e", "keel/c:x.txt"]);
    // The unit added again while its checkout exists: fine, the checkout is reused (though
    // its branch in main is past the base now), unless it names another repository.
    let spec = repo_spec(&setup.main);
    assert_eq!(checkout::check(&setup.dirs, "c", &spec).unwrap(), None);
    let elsewhere = repo_spec(&setup.scratch.0.join("other"));
    let err = checkout::check(&setup.dirs, "c", &elsewhere).unwrap_err();
    assert!(
        err.to_string().contains("its checkout was made from"),
        "{err}"
    );
    let removed = checkout::remove(&setup.dirs, "c", 1, true).unwrap();
    assert!(removed.freed_bytes > 0 && !removed.base_removed);
    assert!(!checkout::exists(&setup.dirs, "c"));
    // A new unit of the same name on a branch left at another commit: refused at add.
    let err = checkout::validate(&repo_spec(&setup.main), "c").unwrap_err();
    assert!(matches!(err, CheckoutError::BranchExists { .. }), "{err}");
}

/// The figures of the design: a 10,000-file repository. `--ignored --nocapture`.
#[test]
#[ignore]
fn measure_ten_thousand_files() {
    if !ready("measure_ten_thousand_files") {
        return;
    }
    let setup = Setup::new("measure", 10_000, 1);
    let options = PrepareOptions::default();
    let t = Instant::now();
    let first = setup.prepare("m1", &options);
    let first_time = t.elapsed();
    let t = Instant::now();
    let second = setup.prepare("m2", &options);
    let second_time = t.elapsed();
    assert!(first.base_built && !second.base_built);
    let t = Instant::now();
    let status = setup.run("m2", &second, "git status --porcelain");
    let status_time = t.elapsed();
    assert_eq!(status, "");
    let disk = checkout::disk_usage(&setup.dirs, "m2").unwrap();
    let t = Instant::now();
    let full = setup.prepare(
        "m3",
        &PrepareOptions {
            full: true,
            ..Default::default()
        },
    );
    let full_time = t.elapsed();
    assert!(full.full_reason.is_some());
    let worktree = setup.scratch.0.join("wt");
    let t = Instant::now();
    git(
        &setup.main,
        &[
            "worktree",
            "add",
            "-q",
            &worktree.display().to_string(),
            "-b",
            "wt",
        ],
    );
    let worktree_time = t.elapsed();
    eprintln!(
        "10,000 files: base + first checkout {first_time:?}; next checkout {second_time:?}; \
         git status in it {status_time:?} (with mount); its own disk {} KiB (base {} KiB); \
         full checkout {full_time:?}; git worktree add {worktree_time:?}",
        disk.own_bytes / 1024,
        disk.base_bytes / 1024
    );
}

#[test]
fn a_checkout_for_a_sandbox_user_is_that_users() {
    if !ready("a_checkout_for_a_sandbox_user_is_that_users") {
        return;
    }
    let setup = Setup::new("owner", 20, 2);
    // The repository is the user's, as it usually is, not keel's (root's).
    let chown = Command::new("chown")
        .args(["-R", "4243:4243"])
        .arg(&setup.main)
        .status()
        .unwrap();
    assert!(chown.success());
    let owner = PrepareOptions {
        owner: Some((4242, 4242)),
        ..Default::default()
    };
    let u = setup.prepare("u", &owner);
    let CheckoutFiles::Overlay { lower, .. } = &u.mounts.files else {
        panic!("{u:?}");
    };
    assert!(lower.display().to_string().ends_with("-u4242.4242/tree"));
    // As that user, without capabilities: clean at once, files writable, commits work.
    let script = "setpriv --reuid 4242 --regid 4242 --clear-groups --inh-caps=-all sh -c \
                  'git status --porcelain && echo more >> d1/f1.txt && \
                   git commit -q -am change && git status --porcelain && id -u'";
    assert_eq!(setup.run("u", &u, script), "4242");
    // Another owner for the same checkout is refused, not silently mixed.
    let err = checkout::prepare(
        &setup.dirs,
        "u",
        &repo_spec(&setup.main),
        &Default::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("belongs to uid 4242, gid 4242"),
        "{err}"
    );
    let removed = checkout::remove(&setup.dirs, "u", 1, false).unwrap();
    assert!(removed.base_removed);
}

const CHILD_ENV: &str = "KEEL_CHECKOUT_SANDBOX_CHILD";

fn sandbox_layout(dirs: &StateDir, unit: &str, prepared: &Prepared) -> SandboxLayout {
    let run = dirs.run_dir(unit);
    SandboxLayout {
        new_root: run.join("root"),
        work_source: dirs.work_dir(unit),
        checkout: Some(prepared.mounts.clone()),
        workdir: PathBuf::from("/work"),
        progress_file: run.join("progress"),
        checkpoint_source: dirs.checkpoint_dir(unit),
        home: PathBuf::from("/root"),
        home_owner: None,
        tmp_size: 64 << 20,
        home_size: 64 << 20,
        hidden: vec![dirs.root.clone()],
        writable: vec![],
        readonly: vec![],
        in_user_namespace: false,
        own_network: false,
        resolver_file: None,
        ca_bundle: None,
        veiled: vec![],
    }
}

/// Runs only under `unshare --pid --fork`, when the parent test sets [`CHILD_ENV`]: builds
/// the whole sandbox with the kernel mounter, then runs git in it.
#[test]
fn sandbox_child() {
    let Ok(scratch) = std::env::var(CHILD_ENV) else {
        return;
    };
    let scratch = PathBuf::from(scratch);
    let dirs = StateDir::new(scratch.join("state"));
    let repo = repo_spec(&scratch.join("repo"));
    let prepared = checkout::prepare(&dirs, "s", &repo, &PrepareOptions::default()).unwrap();
    assert!(!prepared.created, "the parent made it");
    let layout = sandbox_layout(&dirs, "s", &prepared);
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).unwrap();
    let host_root = list_host_root().unwrap();
    build(
        &layout,
        &host_root,
        &mut KernelMounter::new(&layout.new_root),
    )
    .unwrap_or_else(|e| panic!("build: {e}"));
    let objects = prepared.mounts.objects[0].display().to_string();
    let script = format!(
        "cd /work && git status --porcelain && echo x > x.txt && git add x.txt && \
         git commit -q -m 'from the sandbox' && git log --oneline | wc -l && \
         (touch {objects}/probe 2>/dev/null && echo objects writable || echo objects read-only) \
         && (ls {objects}/../refs 2>/dev/null || echo main refs unseen)"
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/root")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    println!(
        "SANDBOX-OUT {}|{}",
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .replace('\n', ";"),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

#[test]
fn a_checkout_in_a_real_sandbox() {
    if !ready("a_checkout_in_a_real_sandbox") {
        return;
    }
    // Under /tmp: inside the sandbox /tmp is a fresh tmpfs, so the main repository is out of
    // sight there but for its objects, bound read-only.
    let setup = Setup::new("sandbox", 20, 2);
    let prepared = setup.prepare("s", &PrepareOptions::default());
    let run = setup.dirs.run_dir("s");
    std::fs::create_dir_all(run.join("root")).unwrap();
    std::fs::write(run.join("progress"), "").unwrap();
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sandbox_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &setup.scratch.0)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("SANDBOX-OUT ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(line, "3;objects read-only;main refs unseen|", "{stdout}");
    let harvest = checkout::harvest(&setup.dirs, "s", 1).unwrap();
    assert!(
        matches!(harvest, Harvest::Updated { commits: 1, .. }),
        "{harvest}"
    );
    assert_eq!(git(&setup.main, &["show", "keel/s:x.txt"]), "x");
    assert!(!prepared.mounts.objects[0].join("probe").exists());
}

#[test]
fn a_hostile_git_dir_is_refused_before_libgit2_reads_it() {
    if !ready("a_hostile_git_dir_is_refused_before_libgit2_reads_it") {
        return;
    }
    let setup = Setup::new("hostile", 12, 2);
    let options = PrepareOptions::default();
    let a = setup.prepare("a", &options);
    let b = setup.prepare("b", &options);
    setup.run(
        "a",
        &a,
        "echo a > a.txt && git add a.txt && git commit -q -m a",
    );
    setup.run(
        "b",
        &b,
        "echo b > b.txt && git add b.txt && git commit -q -m b",
    );
    let (a_git, b_git) = (a.mounts.git_dir.clone(), b.mounts.git_dir.clone());
    let main_git = setup.main.join(".git");
    let before = snapshot(&main_git);
    let refused = |what: &str, expected: &str| {
        let err = harvest_within(&setup.dirs, "a").unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(err, CheckoutError::Tampered { .. }) && message.contains(expected),
            "{what}: {message}"
        );
        assert_eq!(snapshot(&main_git), before, "{what}: main changed");
        message
    };

    // A loose ref linked to another task's branch.
    let a_ref = a_git.join("refs/heads/keel/a");
    let saved = a_git.join("saved-ref");
    std::fs::rename(&a_ref, &saved).unwrap();
    std::os::unix::fs::symlink(b_git.join("refs/heads/keel/b"), &a_ref).unwrap();
    let message = refused("symlinked ref", "a symlink");
    assert!(message.contains(&a_ref.display().to_string()), "{message}");
    std::fs::remove_file(&a_ref).unwrap();
    std::fs::rename(&saved, &a_ref).unwrap();

    // An object directory linked to another task's.
    let b_dir = std::fs::read_dir(b_git.join("objects"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.len() == 2 && !a_git.join("objects").join(n).exists())
        .unwrap_or_else(|| "zz".into());
    let linked = a_git.join("objects").join(&b_dir);
    std::os::unix::fs::symlink(b_git.join("objects").join(&b_dir), &linked).unwrap();
    let message = refused("symlinked object directory", "a symlink");
    assert!(message.contains(&linked.display().to_string()), "{message}");
    std::fs::remove_file(&linked).unwrap();

    // A FIFO for a config: refused without opening it, by harvest, state and remove alike.
    let config = a_git.join("config");
    std::fs::rename(&config, a_git.join("config.saved")).unwrap();
    assert!(Command::new("mkfifo")
        .arg(&config)
        .status()
        .unwrap()
        .success());
    refused("FIFO config", "a FIFO");
    let dirs = setup.dirs.clone();
    let err = within(30, move || checkout::state(&dirs, "a")).unwrap_err();
    assert!(err.to_string().contains("a FIFO"), "{err}");
    let dirs = setup.dirs.clone();
    let err = within(30, move || checkout::remove(&dirs, "a", 1, true)).unwrap_err();
    assert!(err.to_string().contains("a FIFO"), "{err}");
    assert!(checkout::exists(&setup.dirs, "a"));
    std::fs::remove_file(&config).unwrap();
    std::fs::rename(a_git.join("config.saved"), &config).unwrap();

    // A configuration that includes another file (a FIFO anywhere, another task's config).
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}[include]\n\tpath = /dev/null\n")).unwrap();
    refused("config include", "includes another file");
    std::fs::write(&config, &text).unwrap();

    // History cut short: a shallow file, grafts.
    let shallow = a_git.join("shallow");
    let tip = setup.run("a", &a, "git rev-parse HEAD");
    std::fs::write(&shallow, format!("{tip}\n")).unwrap();
    let message = refused("shallow", "shallow file");
    assert!(
        message.contains(&shallow.display().to_string()),
        "{message}"
    );
    std::fs::remove_file(&shallow).unwrap();
    let grafts = a_git.join("info/grafts");
    std::fs::create_dir_all(grafts.parent().unwrap()).unwrap();
    std::fs::write(&grafts, format!("{tip}\n")).unwrap();
    refused("grafts", "grafts");
    std::fs::remove_file(&grafts).unwrap();

    // A commit whose parent is nowhere: the walk (made on main's side) fails, main keeps
    // no ref to it and no object of it.
    let broken = setup.run(
        "a",
        &a,
        "tree=$(git rev-parse HEAD^{tree}) && \
         printf 'tree %s\\nparent %s\\nauthor x <x> 1 +0000\\ncommitter x <x> 1 +0000\\n\\nbroken\\n' \
           $tree 1111111111111111111111111111111111111111 > /tmp/c && \
         id=$(git hash-object -t commit -w --literally /tmp/c) && \
         git update-ref refs/heads/keel/a $id && echo $id",
    );
    let err = harvest_within(&setup.dirs, "a").unwrap_err();
    eprintln!("a missing parent: {err}");
    assert_eq!(snapshot(&main_git), before, "missing parent: main changed");
    assert!(
        Command::new("git")
            .args([
                "-C",
                setup.main.to_str().unwrap(),
                "cat-file",
                "-e",
                &broken
            ])
            .status()
            .unwrap()
            .code()
            != Some(0)
    );

    // Put back: harvested, and only A's commits came.
    setup.run("a", &a, &format!("git update-ref refs/heads/keel/a {tip}"));
    let harvest = harvest_within(&setup.dirs, "a").unwrap();
    assert!(
        matches!(harvest, Harvest::Updated { commits: 1, .. }),
        "{harvest}"
    );
    git(&setup.main, &["fsck", "--strict", "--no-dangling"]);
    let b_tip = setup.run("b", &b, "git rev-parse HEAD");
    let missing = Command::new("git")
        .args(["-C", setup.main.to_str().unwrap(), "cat-file", "-e", &b_tip])
        .status()
        .unwrap();
    assert!(!missing.success(), "B's commit came into main");
}

#[test]
fn a_stash_and_other_refs_are_losses_and_force_keeps_them() {
    if !ready("a_stash_and_other_refs_are_losses_and_force_keeps_them") {
        return;
    }
    let setup = Setup::new("stash", 12, 2);
    let s = setup.prepare("s", &PrepareOptions::default());
    setup.run(
        "s",
        &s,
        "echo one >> d0/f0.txt && git stash -q && echo two >> d1/f1.txt && git stash -q && \
         git checkout -q -b side && echo side > side.txt && git add side.txt && \
         git commit -q -m side && git tag -a -m t t1 && git checkout -q keel/s && \
         git status --porcelain",
    );
    let state = checkout::state(&setup.dirs, "s").unwrap();
    assert!(state.clean(), "{state:?}");
    for loss in ["stash@{0}", "stash@{1}", "side", "refs/tags/t1"] {
        assert!(
            state.unharvested.iter().any(|u| u == loss),
            "{loss}: {state:?}"
        );
    }
    let err = checkout::remove(&setup.dirs, "s", 1, false).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("stash@{0}") && message.contains("side"),
        "{message}"
    );
    assert!(checkout::exists(&setup.dirs, "s"));

    // Forced, with a failing harvest (a shallow file): aborted, nothing removed.
    let shallow = s.mounts.git_dir.join("shallow");
    std::fs::write(&shallow, "0000000000000000000000000000000000000001\n").unwrap();
    let err = checkout::remove(&setup.dirs, "s", 1, true).unwrap_err();
    assert!(err.to_string().contains("shallow"), "{err}");
    assert!(checkout::exists(&setup.dirs, "s"));
    std::fs::remove_file(&shallow).unwrap();

    // Forced: every unharvested ref is kept in main first, then the checkout goes.
    let stash = setup.run("s", &s, "git rev-parse stash@{1}");
    let tag = setup.run("s", &s, "git rev-parse t1");
    setup.run("s", &s, "echo dirty > dirty.txt");
    let removed = checkout::remove(&setup.dirs, "s", 1, true).unwrap();
    assert!(!checkout::exists(&setup.dirs, "s"));
    for kept in [
        "refs/keel/kept/s/stash/0",
        "refs/keel/kept/s/stash/1",
        "refs/keel/kept/s/refs/heads/side",
        "refs/keel/kept/s/refs/tags/t1",
    ] {
        assert!(
            removed.kept.iter().any(|k| k == kept),
            "{kept}: {removed:?}"
        );
    }
    assert_eq!(
        git(&setup.main, &["rev-parse", "refs/keel/kept/s/stash/1"]),
        stash
    );
    assert_eq!(
        git(&setup.main, &["rev-parse", "refs/keel/kept/s/refs/tags/t1"]),
        tag
    );
    git(
        &setup.main,
        &[
            "cat-file",
            "-e",
            "refs/keel/kept/s/refs/heads/side:side.txt",
        ],
    );
    git(&setup.main, &["fsck", "--strict", "--no-dangling"]);
}

#[test]
fn a_task_whose_checkout_was_pruned_goes_on_from_its_harvested_branch() {
    if !ready("a_task_whose_checkout_was_pruned_goes_on_from_its_harvested_branch") {
        return;
    }
    let setup = Setup::new("again", 12, 2);
    let options = PrepareOptions::default();
    let p = setup.prepare("p", &options);
    setup.run(
        "p",
        &p,
        "echo w > w.txt && git add w.txt && git commit -q -m work",
    );
    let tip = setup.run("p", &p, "git rev-parse HEAD");
    let removed = checkout::remove(&setup.dirs, "p", 1, false).unwrap();
    assert!(removed.harvest.as_ref().is_some_and(Harvest::harvested));
    assert_eq!(git(&setup.main, &["rev-parse", "keel/p"]), tip);

    // A new unit of that name is still refused at `keel add`…
    let err = checkout::validate(&repo_spec(&setup.main), "p").unwrap_err();
    assert!(matches!(err, CheckoutError::BranchExists { .. }), "{err}");
    // …but the task itself starts again, from its work.
    let again = setup.prepare("p", &options);
    assert!(again.created);
    assert_eq!(again.base_commit, tip);
    let out = setup.run(
        "p",
        &again,
        "git status --porcelain; git rev-parse HEAD; cat w.txt",
    );
    assert_eq!(out, format!("{tip}\nw"));
    setup.run("p", &again, "echo v >> w.txt && git commit -q -am more");
    let harvest = checkout::harvest(&setup.dirs, "p", 2).unwrap();
    assert!(
        matches!(
            harvest,
            Harvest::Updated {
                from: Some(_),
                commits: 1,
                ..
            }
        ),
        "{harvest}"
    );
    git(&setup.main, &["fsck", "--strict", "--no-dangling"]);
}
