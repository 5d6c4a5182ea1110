//! What an agent can leave in its checkout to hurt whoever looks at it (issue 18's red team):
//! a decompression bomb for the harvest — a sparse 2 GiB file committed, 2 MiB of pack —
//! refused on the objects' headers in bounded memory (measured in a child process), the
//! branch kept; and FIFOs, sockets and devices in the files, which keel never opens: the
//! checkout is judged to have changes keel will not read, and only a forced removal takes it,
//! without opening them. An overlay's whiteouts (files of the base deleted) are plain changes.
//!
//! Needs root (mounts) and the git command.

mod checkout_support;
mod common;

use checkout_support::*;

use keel::checkout::{self, CheckoutError, Harvest, HarvestLimits, PrepareOptions};
use keel::state::StateDir;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;
use std::process::Command;

const BOMB_ENV: &str = "KEEL_TEST_BOMB_STATE";

/// Runs only when the parent test sets [`BOMB_ENV`]: the harvest of unit `a`, in a process
/// of its own so that its peak memory is the harvest's.
#[test]
fn bomb_harvest_child() {
    let Ok(state) = std::env::var(BOMB_ENV) else {
        return;
    };
    let dirs = StateDir::new(PathBuf::from(state));
    let before = common::peak_rss_kib("self");
    let outcome = match checkout::harvest(&dirs, "a", 1) {
        Ok(h) => format!("harvested|{h}"),
        Err(e @ CheckoutError::HarvestTooBig { .. }) => format!("refused|{e}"),
        Err(e) => format!("failed|{e}"),
    };
    println!(
        "BOMB-OUT {outcome}|{before}|{}",
        common::peak_rss_kib("self")
    );
}

#[test]
fn a_decompression_bomb_is_refused_on_its_headers_in_bounded_memory() {
    let test = "a_decompression_bomb_is_refused_on_its_headers_in_bounded_memory";
    if !ready(test) {
        return;
    }
    let setup = Setup::new("bomb", 6, 1);
    let a = setup.prepare("a", &PrepareOptions::default());
    // As the red team did: a sparse file, committed (git deflates it to a few MiB).
    setup.run(
        "a",
        &a,
        "truncate -s 2G big.bin && git -c core.compression=1 add big.bin && \
         git commit -q -m bomb",
    );
    let tip = setup.run("a", &a, "git rev-parse HEAD");
    let main_git = setup.main.join(".git");
    let before = snapshot(&main_git);

    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "bomb_harvest_child", "--nocapture"])
        .env(BOMB_ENV, setup.dirs.tasks_dir().parent().unwrap())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("BOMB-OUT "))
        .unwrap_or_else(|| {
            panic!(
                "no outcome: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let fields: Vec<&str> = line.split('|').collect();
    let (kind, message) = (fields[0], fields[1]);
    let (start_kib, peak_kib): (u64, u64) =
        (fields[2].parse().unwrap(), fields[3].parse().unwrap());
    eprintln!("harvest of a 2 GiB sparse file: {message}; peak RSS {peak_kib} KiB (at start {start_kib} KiB)");
    assert_eq!(kind, "refused", "{message}");
    // Packed, it is weighed before the walk (it could be a delta's base) and named by its id,
    // with how to find its commit.
    assert!(
        message.contains("big.bin") || message.contains("--find-object="),
        "{message}"
    );
    for part in ["harvest refused", "2G", "max_object_bytes", "keel.ron"] {
        assert!(message.contains(part), "{part:?} not in: {message}");
    }
    // Inflated, the blob alone would be 2 GiB.
    assert!(peak_kib < 128 * 1024, "peak RSS {peak_kib} KiB");
    assert_eq!(snapshot(&main_git), before, "main changed");
    assert_eq!(
        setup.run("a", &a, "git rev-parse HEAD"),
        tip,
        "the branch moved"
    );

    // Again (a restarted daemon harvests at start): refused the same way, at once.
    let err = harvest_within(&setup.dirs, "a").unwrap_err();
    assert!(
        matches!(&err, CheckoutError::HarvestTooBig { setting: "max_object_bytes", size, .. }
            if *size == 2 << 30),
        "{err}"
    );
    // The total is weighed too: one object within its limit, but more than a pack may hold.
    let limits = HarvestLimits {
        max_object_bytes: 4 << 30,
        max_pack_bytes: 1 << 30,
    };
    let dirs = setup.dirs.clone();
    let err = within(30, move || {
        checkout::harvest_with_limits(&dirs, "a", 1, &limits)
    })
    .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("add up to") && message.contains("max_pack_bytes"),
        "{message}"
    );
    // A removal harvests first: refused too, the checkout kept.
    let dirs = setup.dirs.clone();
    let err = within(30, move || checkout::remove(&dirs, "a", 1, true)).unwrap_err();
    assert!(matches!(err, CheckoutError::HarvestTooBig { .. }), "{err}");
    assert!(checkout::exists(&setup.dirs, "a"));
    assert_eq!(snapshot(&main_git), before, "main changed");

    // The bomb taken out of the branch: the rest comes home as usual.
    setup.run(
        "a",
        &a,
        "git reset -q --hard HEAD~1 && echo fine > fine.txt && git add fine.txt && \
         git commit -q -m fine && git reflog expire --expire=now --all && git gc -q --prune=now",
    );
    let harvest = harvest_within(&setup.dirs, "a").unwrap();
    assert!(
        matches!(harvest, Harvest::Updated { commits: 1, .. }),
        "{harvest}"
    );
    git(&setup.main, &["fsck", "--strict", "--no-dangling"]);
}

/// `checkout::state` of `unit`, at most 30 s (a FIFO opened would block it for ever).
fn state_within(dirs: &StateDir, unit: &str) -> checkout::CheckoutState {
    let (dirs, unit) = (dirs.clone(), unit.to_string());
    within(30, move || checkout::state(&dirs, &unit)).unwrap_or_else(|e| panic!("{e}"))
}

fn remove_within(
    dirs: &StateDir,
    unit: &str,
    force: bool,
) -> Result<checkout::Removed, CheckoutError> {
    let (dirs, unit) = (dirs.clone(), unit.to_string());
    within(30, move || checkout::remove(&dirs, &unit, 1, force))
}

#[test]
fn fifos_sockets_and_devices_in_a_checkout_are_never_opened() {
    if !ready("fifos_sockets_and_devices_in_a_checkout_are_never_opened") {
        return;
    }
    let setup = Setup::new("fifo", 6, 1);
    let options = PrepareOptions::default();

    // An overlay checkout: a FIFO named .gitignore (libgit2's status opens it), another deep
    // down, a socket; and a file of the base deleted (a whiteout in the upper layer).
    let f = setup.prepare("f", &options);
    setup.run(
        "f",
        &f,
        "mkfifo .gitignore && mkdir -p deep/er && mkfifo deep/er/pipe && \
         python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('agent.sock')\" && \
         rm d1/f1.txt",
    );
    let state = state_within(&setup.dirs, "f");
    assert_eq!(state.unread_count, 3, "{state:?}");
    assert_eq!(
        state.unread,
        [
            ".gitignore (a FIFO)",
            "agent.sock (a socket)",
            "deep/er/pipe (a FIFO)"
        ]
    );
    assert!(!state.clean());
    let losses = state.losses().join("; ");
    assert!(
        losses.contains("changes keel will not read: 3 files"),
        "{losses}"
    );
    // `keel rm` and `keel prune` (a removal unforced): refused, promptly, with the reason.
    let err = remove_within(&setup.dirs, "f", false).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, CheckoutError::NotRemovable { .. })
            && message.contains(".gitignore (a FIFO)"),
        "{message}"
    );
    assert!(checkout::exists(&setup.dirs, "f"));
    // Forced: removed, the FIFOs unopened.
    remove_within(&setup.dirs, "f", true).unwrap();
    assert!(!checkout::exists(&setup.dirs, "f"));

    // A whiteout alone is a deletion like any other.
    let w = setup.prepare("w", &options);
    setup.run("w", &w, "rm d1/f1.txt");
    let whiteout = checkout::checkout_dir(&setup.dirs, "w").join("upper/d1/f1.txt");
    let meta = std::fs::symlink_metadata(&whiteout).unwrap();
    assert!(
        meta.file_type().is_char_device() && meta.rdev() == 0,
        "{meta:?}"
    );
    let state = state_within(&setup.dirs, "w");
    assert_eq!(
        (state.unread_count, state.changes.clone()),
        (0, vec!["d1/f1.txt".to_string()])
    );
    let err = remove_within(&setup.dirs, "w", false).unwrap_err();
    assert!(
        err.to_string().contains("1 uncommitted change (d1/f1.txt)"),
        "{err}"
    );

    // A full checkout: its files walked whole, where a 0:0 device is a device.
    let full = PrepareOptions {
        full: true,
        ..Default::default()
    };
    let c = setup.prepare("c", &full);
    let files = checkout::checkout_dir(&setup.dirs, "c").join("files");
    assert_eq!(setup.run("c", &c, "git status --porcelain"), "");
    for (path, kind) in [
        (files.join(".gitignore"), "p"),
        (files.join("d2/null"), "c"),
    ] {
        let mut cmd = Command::new("mknod");
        cmd.arg(&path).arg(kind);
        if kind == "c" {
            cmd.args(["0", "0"]);
        }
        assert!(cmd.status().unwrap().success());
    }
    let state = state_within(&setup.dirs, "c");
    assert_eq!(
        state.unread,
        [".gitignore (a FIFO)", "d2/null (a character device)"],
        "{state:?}"
    );
    assert!(remove_within(&setup.dirs, "c", false).is_err());
    remove_within(&setup.dirs, "c", true).unwrap();
    assert!(!checkout::exists(&setup.dirs, "c"));
}

/// A sparse 2 GiB `config` in the task's git directory (libgit2 and keel read a config whole):
/// refused before it is read, by the harvest and the clean judgement alike.
#[test]
fn a_sparse_file_in_the_git_directory_is_refused_unread() {
    if !ready("a_sparse_file_in_the_git_directory_is_refused_unread") {
        return;
    }
    let setup = Setup::new("sparse-config", 6, 1);
    let a = setup.prepare("a", &PrepareOptions::default());
    setup.run(
        "a",
        &a,
        "echo a > a.txt && git add a.txt && git commit -q -m a",
    );
    let config = a.mounts.git_dir.join("config");
    let saved = std::fs::read(&config).unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&config)
        .unwrap();
    file.set_len(2 << 30).unwrap();
    drop(file);
    let err = harvest_within(&setup.dirs, "a").unwrap_err();
    assert!(
        matches!(err, CheckoutError::Tampered { .. })
            && err.to_string().contains("more than keel reads whole"),
        "{err}"
    );
    let dirs = setup.dirs.clone();
    let err = within(30, move || checkout::state(&dirs, "a")).unwrap_err();
    assert!(
        err.to_string().contains("more than keel reads whole"),
        "{err}"
    );
    std::fs::write(&config, saved).unwrap();
    let harvest = harvest_within(&setup.dirs, "a").unwrap();
    assert!(
        matches!(harvest, Harvest::Updated { commits: 1, .. }),
        "{harvest}"
    );
}

/// After a cold review: what else libgit2 would open of the agent's making — a symlinked
/// `.gitignore` (followed wherever it points), a repository inside the work tree (its git
/// directory), `core.excludesFile` in the task's configuration (any host file) — and an
/// object the branch never names but the walk's whole reads would inflate (a delta's base).
#[test]
fn what_else_libgit2_would_open_or_inflate_is_refused_unread() {
    if !ready("what_else_libgit2_would_open_or_inflate_is_refused_unread") {
        return;
    }
    let setup = Setup::new("unread-more", 6, 1);
    let options = PrepareOptions::default();
    let s = setup.prepare("s", &options);
    setup.run(
        "s",
        &s,
        "ln -s /dev/zero .gitignore && mkdir -p vendor/dep && git init -q vendor/dep",
    );
    let state = state_within(&setup.dirs, "s");
    assert_eq!(
        state.unread,
        [
            ".gitignore (a symlink git would follow)",
            "vendor/dep/.git (a repository keel will not read)"
        ],
        "{state:?}"
    );
    assert!(!state.clean());
    let err = remove_within(&setup.dirs, "s", false).unwrap_err();
    assert!(matches!(err, CheckoutError::NotRemovable { .. }), "{err}");
    assert!(remove_within(&setup.dirs, "s", true).is_ok());

    // core.excludesFile in the task's own configuration: refused before libgit2 reads it.
    let c = setup.prepare("c", &options);
    setup.run("c", &c, "git config core.excludesFile /dev/zero");
    let err = within(30, {
        let dirs = setup.dirs.clone();
        move || checkout::harvest_with_limits(&dirs, "c", 1, &HarvestLimits::default())
    })
    .unwrap_err();
    assert!(err.to_string().contains("core.excludesfile"), "{err}");

    // An object no commit names, packed in the task's repository (where it could be a
    // delta's base), past the limit: weighed on its header before the walk reads anything
    // whole. Loose, it is left alone: a loose object is no delta's base.
    let o = setup.prepare("o", &options);
    setup.run(
        "o",
        &o,
        "head -c 3000000 /dev/urandom > blob && id=$(git hash-object -w blob) && rm blob && \
         echo $id | git pack-objects -q \"$(git rev-parse --git-path objects)/pack/pack\" \
         >/dev/null && git prune-packed && \
         echo small > small.txt && git add small.txt && git commit -q -m small",
    );
    let limits = HarvestLimits {
        max_object_bytes: 1 << 20,
        max_pack_bytes: 1 << 30,
    };
    let dirs = setup.dirs.clone();
    let err = within(30, move || {
        checkout::harvest_with_limits(&dirs, "o", 1, &limits)
    })
    .unwrap_err();
    assert!(
        matches!(
            &err,
            CheckoutError::HarvestTooBig {
                setting: "max_object_bytes",
                ..
            }
        ) && err.to_string().contains("packed in the task's repository"),
        "{err}"
    );
}
