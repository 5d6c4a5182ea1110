//! Checkout creation for a generated repository, in one run: keel's per-task checkout (after
//! the shared base tree exists, and the base's own one-off cost) against `git worktree add` of
//! the same repository, and the disk a fresh checkout uses of its own.
//!
//! `cargo run --release --example checkout_bench -- [FILES] [ROUNDS] [DIR]` (as root: keel
//! tries the overlay for real). DIR (default: a directory in /var/tmp) is where the repository,
//! the state directory and the worktrees live — one filesystem, as in production.

use keel::checkout::{self, PrepareOptions};
use keel::state::StateDir;
use keel::unit::Repo;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let files: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let rounds: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(5);
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(format!(
                "/var/tmp/keel-checkout-bench-{}",
                std::process::id()
            ))
        });
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).expect("scratch directory");
    git(&repo, &["init", "-q", "-b", "main"]);
    for i in 0..files {
        let file = repo.join(format!("d{}/f{i}.txt", i % 100));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, format!("file {i}\n")).unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(
        &repo,
        &[
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.com",
            "commit",
            "-q",
            "-m",
            "files",
        ],
    );
    let dirs = StateDir::new(dir.join("state"));
    dirs.create().expect("state dir");
    let spec = Repo {
        path: repo.display().to_string(),
        base: "main".into(),
        branch: None,
    };
    let options = PrepareOptions::default();
    let t = Instant::now();
    let first = checkout::prepare(&dirs, "first", &spec, &options).expect("checkout");
    let base_time = t.elapsed();
    assert!(first.base_built);

    let (mut keel, mut worktree) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let unit = format!("t{round}");
        // Each starts with nothing dirty on the filesystem: neither pays for the other's
        // writes (a sync of any kind would flush the previous worktree's 10,000 files).
        nix::unistd::sync();
        let t = Instant::now();
        let prepared = checkout::prepare(&dirs, &unit, &spec, &options).expect("checkout");
        keel.push(t.elapsed());
        assert!(!prepared.base_built, "the base is shared");
        let path = dir.join(format!("wt{round}"));
        nix::unistd::sync();
        let t = Instant::now();
        git(
            &repo,
            &[
                "worktree",
                "add",
                "-q",
                &path.display().to_string(),
                "-b",
                &format!("wt{round}"),
            ],
        );
        worktree.push(t.elapsed());
    }
    let own = checkout::disk_usage(&dirs, "t0").expect("disk use");
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (k, w) = (median(&mut keel), median(&mut worktree));
    println!("checkout of a {files}-file repository, {rounds} rounds interleaved (median):");
    println!("  git worktree add               {:9.1} ms", ms(w));
    println!(
        "  keel, per task (base shared)   {:9.1} ms   ({:.0}x faster)",
        ms(k),
        w.as_secs_f64() / k.as_secs_f64()
    );
    println!(
        "  keel, the base tree (once per base commit) {:.1} ms",
        ms(base_time)
    );
    println!(
        "  a fresh checkout's own disk    {:9} KiB (the shared base: {} KiB)",
        own.own_bytes / 1024,
        own.base_bytes / 1024
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
