//! Helpers of the jobs tests: a repository of many files made quickly (`git fast-import`),
//! a `keel health` probe on the control socket, and keel's workers cgroup of a daemon.

#![allow(dead_code)]

use super::common::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A repository on `main` with one commit of `files` small files (1,000 a directory).
pub fn many_files_repo(dir: &Path, files: usize) -> PathBuf {
    let repo = dir.join("repo");
    let init = Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .arg(&repo)
        .status()
        .unwrap();
    assert!(init.success());
    let mut import = Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut input = std::io::BufWriter::new(import.stdin.take().unwrap());
        write!(
            input,
            "commit refs/heads/main\ncommitter t <t@example.com> 0 +0000\ndata 4\nbig\n"
        )
        .unwrap();
        for i in 0..files {
            let content = format!("file {i}\n");
            write!(
                input,
                "M 100644 inline d{:04}/f{i:07}.txt\ndata {}\n{content}\n",
                i / 1000,
                content.len()
            )
            .unwrap();
        }
        writeln!(input).unwrap();
    }
    assert!(import.wait().unwrap().success());
    repo
}

/// A unit on `repo` that writes how many files its checkout has to `checkpoint/count`.
pub fn counting_unit(repo: &Path, extra: &str) -> String {
    format!(
        r#"Unit(command: ["/bin/sh", "-c", "find . -type f -not -path './.git/*' | wc -l > /run/keel/checkpoint/count"], repo: Some(Repo(path: {repo:?}, base: "main")), restart: Never, {extra})"#,
        repo = repo.display().to_string()
    )
}

/// A thread asking `keel health` every `every` until stopped: its round trips and misses.
pub struct HealthProbe {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(Vec<Duration>, usize)>>,
}

impl HealthProbe {
    pub fn start(d: &Daemon, every: Duration) -> HealthProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let state = d.state();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut times, mut misses) = (Vec::new(), 0);
            while !flag.load(Ordering::Relaxed) {
                match health_at(&state, Duration::from_secs(1)) {
                    Some(took) => times.push(took),
                    None => misses += 1,
                }
                std::thread::sleep(every);
            }
            (times, misses)
        });
        HealthProbe {
            stop,
            thread: Some(thread),
        }
    }

    /// Stop; the round trips and the misses (no answer within 1 s).
    pub fn finish(mut self) -> (Vec<Duration>, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// One `keel health` on the control socket of the daemon of state directory `state`: its
/// round trip, or `None` without an answer within `within`.
pub fn health_at(state: &Path, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut stream = UnixStream::connect(state.join("keel.sock")).ok()?;
    stream.set_read_timeout(Some(within)).ok()?;
    stream.set_write_timeout(Some(within)).ok()?;
    let request = serde_json::to_string(&keel::protocol::Request::Health).unwrap();
    stream.write_all(format!("{request}\n").as_bytes()).ok()?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).ok()?;
    let took = started.elapsed();
    (line.contains("loop_age_ms") && took <= within).then_some(took)
}

/// The pids in the daemon's workers cgroup (`<tree>/workers`, every hierarchy).
pub fn worker_pids(d: &Daemon) -> Vec<i32> {
    let workers = Path::new(&d.cgroup_name).join("workers");
    let mut pids: Vec<i32> = cgroup_tree_dirs(&d.cgroup_name)
        .into_iter()
        .filter(|dir| dir.ends_with(&workers))
        .flat_map(|dir| {
            std::fs::read_to_string(dir.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    pids.sort();
    pids.dedup();
    pids
}

/// The task's `preparing` object in `keel status --json`, if it is being prepared.
pub fn preparing(d: &Daemon, unit: &str) -> Option<serde_json::Value> {
    d.task(unit)
        .map(|t| t["preparing"].clone())
        .filter(|p| !p.is_null())
}
