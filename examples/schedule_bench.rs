//! One scheduling round (`keel::daemon::queue::decide`) with a long queue, against a baseline
//! in the same run: sorting the same queue into the scheduler's order, the least any round
//! does. Cases, each with TASKS queued tasks and 100 running:
//!
//! - `full`: nothing fits (a long queue behind a busy machine, the common case): every task
//!   waits on its requests;
//! - `pressure`: every request fits but CPU pressure is above its threshold: every task waits
//!   on pressure (the first rule a fitting task meets);
//! - `mixed`: random priorities and requests, room for a few dozen: starts, waits on
//!   resources and on `max_running`, a starved task holding the line;
//! - `all start`: room for everyone: TASKS starts in one round.
//!
//! Then the daemon's reading of the pressure figures for a round (three PSI files, parsed):
//! `/proc/pressure/*`, the same files as keel's `tasks/*.pressure` in size and format.
//!
//! `cargo run --release --example schedule_bench -- [TASKS] [ROUNDS]` (no root needed).

use keel::config::pressure::PressureThresholds;
use keel::config::Capacity;
use keel::daemon::queue::{decide, Pressure, PressureCheck, QueuedTask, Reservation};
use std::time::Instant;

const G: u64 = 1 << 30;

/// SplitMix64: the same queue every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn queue(tasks: usize, rng: &mut Rng) -> Vec<QueuedTask> {
    (0..tasks)
        .map(|n| {
            let submitted_ms = 1_000_000 + rng.below(1_000_000);
            QueuedTask {
                unit: format!("agent-{n:05}"),
                priority: rng.below(5) as i32 - 2,
                submitted_ms,
                queued_since_ms: submitted_ms,
                reservation: Reservation {
                    cpu_millis: 250 * (1 + rng.below(8)),
                    memory: (G / 2) * (1 + rng.below(8)),
                },
            }
        })
        .collect()
}

/// Median and maximum of `rounds` runs of `f`, in milliseconds.
fn time<T>(rounds: usize, mut f: impl FnMut() -> T) -> (f64, f64) {
    let mut ms: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(f());
            start.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    (ms[ms.len() / 2], ms[ms.len() - 1])
}

fn main() {
    let mut args = std::env::args().skip(1);
    let tasks: usize = args.next().map_or(10_000, |a| a.parse().expect("TASKS"));
    let rounds: usize = args.next().map_or(200, |a| a.parse().expect("ROUNDS"));
    let mut rng = Rng(0x6b65_656c);
    let queued = queue(tasks, &mut rng);
    let running: Vec<Reservation> = (0..100)
        .map(|_| Reservation {
            cpu_millis: 250,
            memory: G / 2,
        })
        .collect();
    let now_ms = 3_000_000;
    let limit_ms = 600_000;
    let capacity = |cpus: u64, memory_g: u64, max_running: Option<usize>| Capacity {
        cpu_millis: cpus * 1000,
        memory: memory_g * G,
        max_running,
    };
    let calm = PressureCheck {
        figures: Pressure {
            cpu: Some(500),
            memory: Some(0),
            io: Some(100),
        },
        thresholds: Some(PressureThresholds::default()),
        since_last_start_ms: None,
    };
    let pressed = PressureCheck {
        figures: Pressure {
            cpu: Some(6312),
            ..calm.figures
        },
        ..calm
    };

    let baseline = time(rounds, || {
        let mut sorted: Vec<&QueuedTask> = queued.iter().collect();
        sorted.sort_unstable_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(a.submitted_ms.cmp(&b.submitted_ms))
                .then_with(|| a.unit.cmp(&b.unit))
        });
        sorted.len()
    });
    println!(
        "one scheduling round, {tasks} queued tasks, 100 running ({rounds} rounds; median, max):"
    );
    println!(
        "  baseline: sort the queue          {:7.3} ms  {:7.3} ms",
        baseline.0, baseline.1
    );
    // 25 CPUs, all held by the 100 running: nothing fits.
    let full = capacity(25, 1000, None);
    // Room for every request: only the pressure holds them.
    let roomy = capacity(1_000_000, 1_000_000, None);
    // Room for a few dozen, a count limit, the oldest starved.
    let mut mixed_queue = queued.clone();
    mixed_queue[0].queued_since_ms = 0;
    mixed_queue[0].reservation.cpu_millis = 60_000;
    let mixed = capacity(64, 128, Some(150));
    let cases: [(&str, &[QueuedTask], Capacity, &PressureCheck); 4] = [
        ("full: every task waits         ", &queued, full, &calm),
        ("pressure: every task waits     ", &queued, roomy, &pressed),
        (
            "mixed                          ",
            &mixed_queue,
            mixed,
            &calm,
        ),
        ("all start                      ", &queued, roomy, &calm),
    ];
    let mut worst: f64 = 0.0;
    for (name, queue, cap, pressure) in cases {
        let decision = decide(queue, &running, 0, &cap, now_ms, limit_ms, pressure);
        let (started, waiting) = (decision.start.len(), decision.waiting.len());
        let (median, max) = time(rounds, || {
            decide(queue, &running, 0, &cap, now_ms, limit_ms, pressure)
        });
        worst = worst.max(median);
        println!(
            "  {name} {median:7.3} ms  {max:7.3} ms  ({started} start, {waiting} wait; {:.1}x the sort)",
            median / baseline.0
        );
    }
    let goal = if worst < 1.0 { "met" } else { "MISSED" };
    println!("  slowest median {worst:.3} ms (goal < 1 ms: {goal})");

    let files = [
        "/proc/pressure/cpu",
        "/proc/pressure/memory",
        "/proc/pressure/io",
    ];
    if files.iter().all(|f| std::path::Path::new(f).exists()) {
        let (median, max) = time(rounds, || {
            files
                .iter()
                .filter_map(|f| std::fs::read_to_string(f).ok())
                .filter_map(|text| keel::cgroup::parse_some_avg10(&text))
                .count()
        });
        println!("  reading the three pressure files  {median:7.3} ms  {max:7.3} ms");
    } else {
        println!("  reading the pressure files: no /proc/pressure on this kernel");
    }
}
