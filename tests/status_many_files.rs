//! 500,000 files in a checkout and `keel status` (issue 18's red team: the disk-use walk behind
//! `keel status` blocked the loop 5.1 s). The walk is a job in a worker: `keel status` is
//! answered at once (with the figures it has), `keel health` answers throughout the walk, and
//! the walk's figure appears once it is done. The daemon's state directory is on a tmpfs the
//! test mounts (creating a file on this host's root filesystem costs ~1 ms: 500,000 would take
//! minutes), and the files are made directly in the task's checkout, in its upper layer, by
//! threads of the test.

mod checkout_support;
mod common;
mod jobs_support;
use common::wait::wait_for;
use common::*;
use jobs_support::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const FILES: usize = 500_000;
/// Of which these have content (the rest are empty: a page each on a tmpfs would be 2 GiB).
const FULL_FILES: usize = 1_000;
const FULL_FILE_BYTES: usize = 4096;
const PER_DIR: usize = 1_000;
const THREADS: usize = 4;

/// A daemon whose state directory is a tmpfs of the test's: the daemon is shut down first
/// (field order), then the tmpfs unmounted.
struct Fixture {
    d: Daemon,
    _tmpfs: Tmpfs,
}

struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path) -> Tmpfs {
        use nix::mount::{mount, MsFlags};
        std::fs::create_dir_all(at).unwrap();
        mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0700,size=4g,nr_inodes=2m"),
        )
        .unwrap_or_else(|e| panic!("mounting a tmpfs at {}: {e}", at.display()));
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        use nix::mount::{umount2, MntFlags};
        // Detached: whatever still holds it (a test that failed mid-way) lets go when it ends.
        if let Err(e) = umount2(&self.0, MntFlags::MNT_DETACH) {
            eprintln!("cannot unmount {}: {e}", self.0.display());
        }
        // The scratch directory it was mounted in, if the fixture's own cleanup came first
        // (it could not remove a mount point).
        let _ = std::fs::remove_dir(&self.0);
        if let Some(scratch) = self.0.parent() {
            let _ = std::fs::remove_dir_all(scratch);
        }
    }
}

/// Make `files` files under `root` (`PER_DIR` a directory), the first `FULL_FILES` with
/// `FULL_FILE_BYTES` each, in `THREADS` threads.
fn make_files(root: &Path, files: usize) {
    let dirs = files.div_ceil(PER_DIR);
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let root = root.to_path_buf();
            std::thread::spawn(move || {
                let content = vec![b'x'; FULL_FILE_BYTES];
                for d in (t..dirs).step_by(THREADS) {
                    let dir = root.join(format!("d{d:04}"));
                    std::fs::create_dir_all(&dir).unwrap();
                    for i in d * PER_DIR..((d + 1) * PER_DIR).min(files) {
                        let path = dir.join(format!("f{i:07}"));
                        if i < FULL_FILES {
                            std::fs::write(&path, &content).unwrap();
                        } else {
                            std::fs::File::create(&path).unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

#[test]
fn status_is_served_and_health_answers_while_500000_files_are_walked() {
    if !checkout_support::ready("status: many files") {
        return;
    }
    let mut d = Daemon::prepare("status-many");
    let tmpfs = Tmpfs::mount(&d.state());
    d.spawn();
    let fixture = Fixture { d, _tmpfs: tmpfs };
    let d = &fixture.d;
    let repo = many_files_repo(&d.scratch.dir, 10);
    let unit = format!(
        r#"Unit(command: ["/bin/sh", "-c", "exec sleep 600"], repo: Some(Repo(path: {:?}, base: "main")), restart: Never)"#,
        repo.display().to_string()
    );
    d.write_unit("many", &unit);
    // No `keel status` until the files are there (its first one starts the walk): the
    // checkout is watched on disk.
    let checkout = d.task_dir("many").join("checkout");
    let layer = wait_for(Duration::from_secs(60), "the checkout in place", || {
        ["upper", "files"]
            .into_iter()
            .map(|name| checkout.join(name))
            .find(|dir| checkout.join("checkout.ron").exists() && dir.is_dir())
    });
    let many = layer.join("many");
    make_files(&many, FILES);
    let made = std::fs::read_dir(&many)
        .unwrap()
        .flatten()
        .map(|d| std::fs::read_dir(d.path()).unwrap().count())
        .sum::<usize>();
    assert_eq!(made, FILES);
    let daemon_pid = d.child.as_ref().unwrap().id().to_string();
    // Each probe answered within 1 s (as tests/jobs.rs's during a base build): the walk takes
    // seconds, so one in the loop would be a miss.
    let probe = HealthProbe::start(d, Duration::from_millis(50));
    // Served at once, with what it knows (the walk has only started).
    let out = d.keel(&["status"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(stdout_of(&out).contains("many"), "{}", stdout_of(&out));
    let written = (FULL_FILES * FULL_FILE_BYTES) as u64;
    let bytes = wait_for(Duration::from_secs(300), "the disk-use figure", || {
        d.task("many")
            .and_then(|t| t["checkout_bytes"].as_u64())
            .filter(|b| *b >= written)
    });
    let (times, misses) = probe.finish();
    eprintln!(
        "walk: {} probes, slowest {:?}",
        times.len(),
        times.iter().max()
    );
    assert_eq!(misses, 0, "keel health went unanswered {misses} times");
    assert!(!times.is_empty());
    // Plausible: at least the bytes written, and not absurdly more (a tmpfs page per empty
    // file would be 2 GiB; the directories and the git directory are small).
    assert!(bytes < 1 << 30, "{bytes} bytes for {written} written");
    // The walk ran in a worker, not in the daemon: its memory did not grow with the files.
    let peak = peak_rss_kib(&daemon_pid);
    assert!(peak < 256 << 10, "the daemon's peak RSS was {peak} KiB");
    let task = d.task("many").unwrap();
    assert_eq!(task["state"], "running", "{task}");
}
