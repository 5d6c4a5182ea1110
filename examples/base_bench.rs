//! The base tree's build rate against `git worktree add` of the same commit, in one run: a
//! generated repository of FILES files; each round, on a synced filesystem, keel's first
//! checkout of the commit (which builds the shared base tree: every file written, the index,
//! one syncfs, the `ready` marker) into a new state directory, then `git worktree add` of the
//! same commit (which writes the files and the index and syncs nothing), then a `sync` after
//! it (the cost of the same durability, for reference); and keel's build again through
//! libgit2's checkout, one file at a time (an empty `info/attributes` in the repository sends
//! it there, as any attributes file does, without changing a byte written): what the threads
//! bring. Interleaved; medians.
//!
//! `cargo run --release --example base_bench -- [FILES] [ROUNDS] [DIR]` (as root). DIR
//! (default: a directory in /var/tmp, the root disk) holds the repository, the state
//! directories and the worktrees: one filesystem, as in production.

use keel::checkout::{self, BaseProgress, PrepareOptions};
use keel::state::StateDir;
use keel::unit::Repo;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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
    let rounds: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(3);
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| format!("/var/tmp/keel-base-bench-{}", std::process::id()).into());
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).expect("scratch directory");
    git(&repo, &["init", "-q", "-b", "main"]);
    for i in 0..files {
        // 100 files a directory, a tenth of them executable, as a source tree has.
        let file = repo.join(format!(
            "d{}/e{}/f{i}.txt",
            i % 10,
            (i / 10) % (files / 1000).max(1)
        ));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, format!("file {i}\n").repeat(1 + i % 20)).unwrap();
        if i % 10 == 0 {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    git(&repo, &["add", "-A"]);
    git(
        &repo,
        &[
            "-c",
            "user.name=bench",
            "-c",
            "user.email=b@example.com",
            "commit",
            "-q",
            "-m",
            "f",
        ],
    );
    let spec = Repo {
        path: repo.display().to_string(),
        base: "main".into(),
        branch: None,
    };
    let (mut keel, mut worktree, mut synced) = (Vec::new(), Vec::new(), Vec::new());
    let mut sequential = Vec::new();
    let attributes = repo.join(".git/info/attributes");
    let reports = Arc::new(AtomicU64::new(0));
    for round in 0..rounds {
        let dirs = StateDir::new(dir.join(format!("state{round}")));
        dirs.create().expect("state dir");
        dirs.create_task_dirs("t").expect("task dir");
        let counter = reports.clone();
        let options = PrepareOptions {
            progress: Some(Arc::new(move |_: BaseProgress| {
                counter.fetch_add(1, Ordering::Relaxed);
            })),
            ..Default::default()
        };
        nix::unistd::sync();
        let t = Instant::now();
        let prepared = checkout::prepare(&dirs, "t", &spec, &options).expect("checkout");
        keel.push(t.elapsed());
        assert!(prepared.base_built, "a new state directory builds its base");
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
        nix::unistd::sync();
        synced.push(t.elapsed());
        // Out of the next round's way (and its writeback out of its timing).
        let _ = std::fs::remove_dir_all(dir.join(format!("state{round}")));
        let one = StateDir::new(dir.join(format!("one{round}")));
        one.create().expect("state dir");
        one.create_task_dirs("t").expect("task dir");
        std::fs::write(&attributes, "").expect("info/attributes");
        nix::unistd::sync();
        let t = Instant::now();
        let prepared = checkout::prepare(&one, "t", &spec, &options).expect("checkout");
        sequential.push(t.elapsed());
        assert!(prepared.base_built);
        std::fs::remove_file(&attributes).expect("info/attributes");
        let _ = std::fs::remove_dir_all(dir.join(format!("one{round}")));
        nix::unistd::sync();
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (k, w, s) = (
        median(&mut keel),
        median(&mut worktree),
        median(&mut synced),
    );
    let one = median(&mut sequential);
    let rate = |d: Duration| files as f64 / d.as_secs_f64();
    println!("base tree of a {files}-file commit, {rounds} rounds interleaved (median):");
    println!(
        "  git worktree add               {:9.1} ms  {:8.0} files/s",
        ms(w),
        rate(w)
    );
    println!(
        "  git worktree add, then sync    {:9.1} ms  {:8.0} files/s",
        ms(s),
        rate(s)
    );
    println!(
        "  keel, base tree (synced, ready) {:8.1} ms  {:8.0} files/s  ({:.2}x git worktree add)",
        ms(k),
        rate(k),
        w.as_secs_f64() / k.as_secs_f64()
    );
    println!(
        "  keel, one file at a time (libgit2) {:5.1} ms  {:8.0} files/s  ({:.2}x git worktree add)",
        ms(one),
        rate(one),
        w.as_secs_f64() / one.as_secs_f64()
    );
    println!(
        "  progress reports               {:9.1} a build",
        reports.load(Ordering::Relaxed) as f64 / (2 * rounds) as f64
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
