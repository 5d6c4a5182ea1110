//! Disk budgets (issue 22 item 3), on a small tmpfs state directory: what one task writes must
//! not fill the state filesystem.
//! - The progress file is capped: a task appending 96 MiB to it on a 48 MiB state filesystem
//!   finishes its writes (no ENOSPC), the file keeps its length and its last line, and its
//!   blocks on disk end within the cap.

mod common;
use common::wait::{wait_for, PATIENCE};
use common::*;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A tmpfs of `size` over `path`, unmounted (lazily) when dropped, then the scratch directory
/// removed (as `tests/full_disk.rs` does).
struct Tmpfs {
    path: PathBuf,
    scratch: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str, scratch: &Path) -> Tmpfs {
        std::fs::create_dir_all(path).unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some(format!("size={size},mode=0700").as_str()),
        )
        .unwrap_or_else(|e| panic!("mount a tmpfs on {}: {e}", path.display()));
        Tmpfs {
            path: path.to_path_buf(),
            scratch: scratch.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.path, nix::mount::MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// The daemon is dropped (shut down, its shims and cgroups gone) before the tmpfs.
struct Fixture {
    daemon: Daemon,
    _tmpfs: Tmpfs,
}

impl Fixture {
    /// A daemon whose state directory is a tmpfs of `size`, with `config` as its keel.ron
    /// (when given).
    fn start(name: &str, size: &str, config: Option<&str>) -> Fixture {
        let mut daemon = Daemon::prepare(name);
        let tmpfs = Tmpfs::mount(&daemon.state(), size, &daemon.scratch.dir);
        if let Some(config) = config {
            std::fs::write(daemon.state().join("keel.ron"), config).unwrap();
        }
        daemon.spawn();
        Fixture {
            daemon,
            _tmpfs: tmpfs,
        }
    }
}

const MIB: u64 = 1 << 20;
/// `PROGRESS_CAP` (64 KiB) and `PROGRESS_KEEP` (16 KiB) of `src/daemon/progress_cap.rs`.
const PROGRESS_CAP: u64 = 64 << 10;

#[test]
fn a_progress_file_flood_is_capped_and_does_not_fill_the_state_filesystem() {
    if !require_root("progress file cap") {
        return;
    }
    let f = Fixture::start("progress-cap", "48m", None);
    let d = &f.daemon;
    // 96 chunks of 1 MiB of lines ("flooded\\n") appended (`>>`: O_APPEND), each followed by a line, a pause between
    // them (the cap is applied when the daemon reads the file, at most every 250 ms: what is
    // written in between is the slack); then the outcome in /work/result.
    d.write_unit(
        "flood",
        r#"Unit(
            command: ["/bin/sh", "-c", "for i in $(seq 1 96); do yes flooded | head -c 1048576 >> $KEEL_PROGRESS || { echo failed at $i > /work/result; exec sleep 600; }; echo step $i >> $KEEL_PROGRESS; sleep 0.1; done; echo done > /work/result; exec sleep 600"],
            resources: Resources(cpu: 1.0, memory: "256M"),
        )"#,
    );
    d.wait_state("flood", "running", PATIENCE);
    let result = d.task_dir("flood").join("work/result");
    let outcome = wait_for(Duration::from_secs(240), "the flood's outcome", || {
        std::fs::read_to_string(&result).ok()
    });
    assert_eq!(outcome.trim(), "done", "{}", d.daemon_log());
    let progress = d.task_dir("flood").join("run/progress");
    // Its length is what was written; its last line is the last step.
    let meta = std::fs::metadata(&progress).unwrap();
    assert!(meta.len() >= 96 * MIB, "{meta:?}");
    let task = d.task("flood").unwrap();
    assert_eq!(task["progress"], "step 96", "{task}");
    // The last write was read, and the file capped after it.
    let on_disk = wait_for(PATIENCE, "the progress file within its cap", || {
        let blocks = std::fs::metadata(&progress).ok()?.blocks() * 512;
        (blocks <= PROGRESS_CAP).then_some(blocks)
    });
    eprintln!(
        "progress file: {} bytes long, {on_disk} bytes on disk",
        meta.len()
    );
    assert!(d.daemon_log().contains("progress file over 64 KiB on disk"));
}
