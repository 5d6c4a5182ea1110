//! Chaos: 20 tasks (sleeping, heartbeating, crash-looping, finishing) while the daemon is
//! SIGKILLed 50 times at random moments and once at each crash point (`KEEL_CRASH_AT`),
//! restarted each time. Checked: each crash point reached (the daemon dies of SIGKILL there,
//! saying so), never two live attempts of a task (sampled from the processes during the run,
//! and from the journal after), every task accounted for, the long-running ones never
//! restarted, every finished task's exit code, every state file parses, and nothing of keel's
//! left behind after the final shutdown.
//!
//! The moments are drawn from a xorshift generator seeded from the clock; the seed is printed
//! (and `KEEL_CHAOS_SEED=<n>` replays it).

mod common;
use common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: enough to spread the kills; no crate needed.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const KILLS: usize = 50;
const CRASH_POINTS: [&str; 4] = [
    "after-decide",
    "after-persist-starting",
    "after-spawn",
    "mid-write",
];

/// Per unit, the shims alive at one instant: `keel shim --spec <state>/tasks/<unit>/run/…`
/// processes whose parent is not one too (a shim's child between its fork and its exec still
/// shows the shim's command line).
fn live_shims(state: &str) -> HashMap<String, Vec<i32>> {
    let mut procs = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        // A spare shim (`keel shim --spare STATE`) is no task's until it takes a start, and
        // then execs `keel shim --spec …`.
        if args.get(1).map(String::as_str) != Some("shim")
            || args.get(2).map(String::as_str) == Some("--spare")
        {
            continue;
        }
        let Some(spec) = args.iter().find(|a| a.starts_with(state)) else {
            continue;
        };
        let rest = &spec[state.len()..];
        let Some(unit) = rest.trim_start_matches("/tasks/").split('/').next() else {
            continue;
        };
        let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                let after = s[s.rfind(')')? + 1..].to_string();
                after.split_whitespace().nth(1)?.parse::<i32>().ok()
            })
            .unwrap_or(0);
        procs.insert(pid, (unit.to_string(), ppid));
    }
    let mut by_unit: HashMap<String, Vec<i32>> = HashMap::new();
    for (pid, (unit, ppid)) in &procs {
        if !procs.contains_key(ppid) {
            by_unit.entry(unit.clone()).or_default().push(*pid);
        }
    }
    by_unit
}

fn units(d: &Daemon) -> Vec<(String, Option<i32>)> {
    let mut expected = Vec::new();
    for i in 0..6 {
        d.write_unit(
            &format!("sleep{i}"),
            r#"Unit(command: ["sleep", "600"], restart: Never, resources: Resources(cpu: 0.1, memory: "64M"))"#,
        );
        expected.push((format!("sleep{i}"), None));
    }
    for i in 0..5 {
        d.write_unit(
            &format!("beat{i}"),
            r#"Unit(command: ["/bin/sh", "-c", "while :; do echo beat > $KEEL_PROGRESS; sleep 0.2; done"], restart: Never,
                resources: Resources(cpu: 0.1, memory: "64M"))"#,
        );
        expected.push((format!("beat{i}"), None));
    }
    for i in 0..4 {
        d.write_unit(
            &format!("loop{i}"),
            r#"Unit(command: ["/bin/sh", "-c", "sleep 0.3; exit 3"], restart: OnFailure,
                backoff: Backoff(initial: "100ms", max: "400ms"),
                restart_limit: RestartLimit(count: 100000, within: "1h"),
                resources: Resources(cpu: 0.1, memory: "64M"))"#,
        );
        expected.push((format!("loop{i}"), None));
    }
    for i in 0..5 {
        // Finishing within the chaos, with a code of their own.
        let code = [0, 7, 0, 42, 1][i];
        let secs = 4 + 5 * i;
        d.write_unit(
            &format!("fin{i}"),
            &format!(
                r#"Unit(command: ["/bin/sh", "-c", "sleep {secs}; exit {code}"], restart: Never,
                   resources: Resources(cpu: 0.1, memory: "64M"))"#
            ),
        );
        expected.push((format!("fin{i}"), Some(code)));
    }
    expected
}

#[test]
fn twenty_tasks_survive_fifty_kills_and_every_crash_point() {
    if !require_root("chaos") {
        return;
    }
    let seed = std::env::var("KEEL_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("chaos seed: {seed} (replay with KEEL_CHAOS_SEED={seed})");
    let mut rng = Rng(seed);
    let mut d = Daemon::prepare("chaos");
    // Room for all twenty (each reserves little): the queue is not under test here.
    std::fs::create_dir_all(d.state()).unwrap();
    std::fs::write(
        d.state().join("keel.ron"),
        r#"Config(capacity: Capacity(cpu: 1000.0, memory: "1000G"))"#,
    )
    .unwrap();
    d.spawn();
    let state = d.state().display().to_string();
    let expected = units(&d);
    // Everything started once (the finishers' only attempt is never interrupted before its
    // spawn, so their codes are deterministic).
    for (unit, _) in &expected {
        wait_until(Duration::from_secs(60), "every task started", || {
            d.task(unit).is_some_and(|t| {
                t["attempt"].as_u64().unwrap_or(0) >= 1
                    && (unit.starts_with("loop") || t["pid"].is_i64())
            })
        });
    }
    let long_running: HashMap<String, i64> = expected
        .iter()
        .filter(|(u, _)| u.starts_with("sleep") || u.starts_with("beat"))
        .map(|(u, _)| (u.clone(), d.task(u).unwrap()["pid"].as_i64().unwrap()))
        .collect();

    // The sampler: at every instant, at most one shim per task.
    let stop = Arc::new(AtomicBool::new(false));
    let doubles = Arc::new(Mutex::new(Vec::<String>::new()));
    // (samples, the most tasks seen with a live shim at once: proves the sampler sees them)
    let samples = Arc::new(Mutex::new((0u64, 0usize)));
    let sampler = {
        let (stop, doubles, samples, state) = (
            stop.clone(),
            doubles.clone(),
            samples.clone(),
            state.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let live = live_shims(&state);
                let seen = live.len();
                for (unit, pids) in live {
                    if pids.len() > 1 {
                        doubles.lock().unwrap().push(format!("{unit}: {pids:?}"));
                    }
                }
                let mut s = samples.lock().unwrap();
                *s = (s.0 + 1, s.1.max(seen));
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };

    let started = Instant::now();
    let mut crash_points_hit = Vec::new();
    // The crash points are spread among the random kills.
    let at: Vec<usize> = (0..CRASH_POINTS.len())
        .map(|i| (i * KILLS) / CRASH_POINTS.len() + rng.below(5) as usize)
        .collect();
    for kill in 0..KILLS {
        std::thread::sleep(Duration::from_millis(rng.below(700)));
        d.crash();
        if let Some(p) = at.iter().position(|&k| k == kill) {
            // Two or three starts in, so that it falls among the crash-loopers' starts.
            let point = format!("{}:{}", CRASH_POINTS[p], 1 + rng.below(3));
            // Fails unless the daemon dies of SIGKILL at that point, saying so, in time.
            d.die_at(&point);
            crash_points_hit.push(point);
        }
        d.spawn();
    }
    let chaos_time = started.elapsed();
    // Every crash point was among those the run died at: a guard on the schedule above (die_at
    // already fails unless the daemon dies at the point it was sent to).
    for point in CRASH_POINTS {
        assert!(
            crash_points_hit
                .iter()
                .any(|hit| hit.split(':').next() == Some(point)),
            "{point} never reached: {crash_points_hit:?}; seed {seed}"
        );
    }
    // Let the finishers finish.
    for (unit, code) in &expected {
        if code.is_some() {
            wait_until(Duration::from_secs(60), "finishers done", || {
                d.task(unit)
                    .is_some_and(|t| t["state"] == "succeeded" || t["state"] == "failed")
            });
        }
    }
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let (n_samples, most) = *samples.lock().unwrap();
    let context = format!(
        "seed {seed}; crash points: {crash_points_hit:?}; {n_samples} samples over {chaos_time:?}"
    );
    assert!(
        most >= 11,
        "the sampler saw at most {most} shims; {context}"
    );
    eprintln!("{context}");
    let doubles = doubles.lock().unwrap().clone();
    assert!(doubles.is_empty(), "two live shims: {doubles:?}; {context}");

    // Every task accounted for; the long-running ones never restarted.
    let status = d.status();
    let tasks = status["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), expected.len(), "{status}; {context}");
    for (unit, code) in &expected {
        let task: &Value = tasks.iter().find(|t| t["unit"] == *unit).unwrap();
        match code {
            Some(code) => {
                let want = if *code == 0 { "succeeded" } else { "failed" };
                assert_eq!(task["state"], want, "{task}; {context}");
                assert_eq!(
                    task["last_exit"],
                    format!("exit:{code}"),
                    "{task}; {context}"
                );
                assert_eq!(task["attempt"], 1, "{task}; {context}");
            }
            None if unit.starts_with("loop") => {
                let s = task["state"].as_str().unwrap();
                assert!(
                    ["queued", "starting", "running", "stopping", "backoff"].contains(&s),
                    "{task}; {context}"
                );
            }
            None => {
                assert_eq!(task["state"], "running", "{task}; {context}");
                assert_eq!(task["attempt"], 1, "{task}; {context}");
                assert_eq!(task["pid"].as_i64(), Some(long_running[unit]), "{context}");
            }
        }
    }

    // The journal: per task, attempt g+1 starts only after attempt g's end was seen.
    for (unit, _) in &expected {
        let mut open: Option<u64> = None;
        for e in d.events(Some(unit)) {
            let generation = e["generation"].as_u64().unwrap_or(0);
            match e["event"].as_str().unwrap_or("") {
                "starting" => {
                    assert!(
                        open.is_none(),
                        "{unit}: generation {generation} started while {open:?} had not ended; {context}"
                    );
                    open = Some(generation);
                }
                "exited" if open.is_some_and(|g| g <= generation) => open = None,
                // A start that never began (the daemon died before its shim ran): it ends
                // without an exit.
                "start-abandoned" if open == Some(generation) => open = None,
                _ => {}
            }
        }
    }

    // A plain shutdown stops every task: no shim, no agent, no task cgroup left.
    let tree = d.cgroup_name.clone();
    assert!(d.shutdown().unwrap().success(), "{}", d.daemon_log());
    assert!(live_shims(&state).is_empty());
    let left: Vec<_> = cgroup_tree_dirs(&tree)
        .into_iter()
        .filter(|dir| {
            std::fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty())
                || dir.parent().is_some_and(|p| p.ends_with("tasks"))
        })
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");

    // Every state file parses; no temporary or set-aside file (looked at once the daemon is
    // gone: a live daemon's write in progress has its temporary file).
    for entry in std::fs::read_dir(d.state().join("tasks"))
        .unwrap()
        .flatten()
    {
        for file in std::fs::read_dir(entry.path()).unwrap().flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            assert!(
                !name.contains(".tmp.") && !name.ends_with(".unreadable"),
                "{name}"
            );
        }
        let text = std::fs::read_to_string(entry.path().join("state.ron")).unwrap();
        ron::from_str::<ron::Value>(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
    }
}
