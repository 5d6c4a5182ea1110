//! Start latency of a sandboxed task, against a baseline, interleaved in one run:
//!
//! (a) bare fork+exec of `/bin/true` (std's Command: clone + exec + wait);
//! (b) keel's sandboxed start: clone3(CLONE_PIDFD|CLONE_NEWPID) of `keel shim`, which builds
//!     the mount namespace, drops privileges and execs `/bin/true`, then writes its exit
//!     record — spawn through reap; what bwrap (c) and unshare (d) do, and more;
//! (f) (b) with the task's cgroup, as the daemon starts an attempt: the cgroup created with its
//!     limits, the shim spawned into it (CLONE_INTO_CGROUP), the v1 controllers joined (hybrid
//!     hosts), and after the reap the cgroup killed and removed;
//! (c) `bwrap` with the equivalent flags (read-only `/`, a bind, `--proc`, `--dev`,
//!     `--unshare-pid`);
//! (d) `unshare -mpf --mount-proc`;
//! (e) keel's shim alone: (b) without the sandbox and the cgroup — what the shim costs.
//!
//! `cargo run --release --example spawn_bench -- [ROUNDS]` (as root). The state directory is
//! on tmpfs (/dev/shm) so that the figures are the sandbox's, not the disk's fsyncs.

use keel::daemon::{attempt_spec, spawn_shim_program, AttemptContext};
use keel::state::StateDir;
use std::os::fd::AsFd;
use std::process::Command;
use std::time::{Duration, Instant};

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let scratch = std::path::PathBuf::from(format!("/dev/shm/keel-bench-{}", std::process::id()));
    let dirs = StateDir::new(scratch.join("state"));
    dirs.create().expect("state dir");
    dirs.create_task_dirs("bench").expect("task dirs");
    let unit = keel::unit::parse_unit(
        std::path::Path::new("bench.ron"),
        r#"Unit(command: ["/bin/true"], restart: Never)"#,
    )
    .expect("unit");
    let work = dirs.work_dir("bench");
    let have_bwrap = Command::new("bwrap").arg("--version").output().is_ok();
    // The keel binary built beside this example (target/…/release/keel).
    let keel_bin = std::env::current_exe()
        .expect("own path")
        .parent()
        .and_then(|examples| examples.parent())
        .expect("target dir")
        .join("keel");
    assert!(keel_bin.exists(), "build keel first: cargo build --release");

    let mut bare = Vec::new();
    let mut keel = Vec::new();
    let mut keel_cgroup = Vec::new();
    let mut bwrap = Vec::new();
    let mut unshare = Vec::new();
    let mut shim_only = Vec::new();
    // keel's cgroup tree, as the daemon sets it up (this process moves into its leaf).
    let tree_name = format!("keel-bench-{}", std::process::id());
    let tree = keel::cgroup::detect(&tree_name)
        .and_then(|layout| keel::cgroup::Tree::setup(layout, &tree_name))
        .expect("cgroup tree (run as root)");
    let slice = tree.task("bench").expect("task cgroup");
    let limits = keel::cgroup::Limits {
        cpu_cores: unit.resources.cpu,
        memory_bytes: unit.resources.memory.0,
        pids: unit.resources.pids,
    };
    for round in 0..rounds {
        bare.push(time(|| {
            assert!(Command::new("/bin/true").status().unwrap().success());
        }));
        let generation = round as u64 + 1;
        let ctx = AttemptContext {
            unit_name: "bench",
            attempt: 1,
            generation,
            last_exit: None,
            last_progress: None,
        };
        let mut spec = attempt_spec(&dirs, &unit, &ctx);
        keel.push(time(|| run_shim(&spec, &keel_bin, &dirs, None)));
        keel_cgroup.push(time(|| {
            slice.create(&limits).expect("create the task cgroup");
            let dir = slice.open_v2_dir().expect("open the task cgroup");
            spec.cgroup_v1_procs = slice.v1_procs_files();
            run_shim(&spec, &keel_bin, &dirs, Some(dir.as_fd()));
            slice.kill().expect("cgroup.kill");
            slice
                .remove_blocking(Duration::from_secs(5))
                .expect("remove the task cgroup");
        }));
        // (e) the same shim with its sandbox off: what the shim itself costs (exec of keel,
        // spec, records, fork of the agent), apart from the namespaces and mounts.
        let mut bare_spec = attempt_spec(&dirs, &unit, &ctx);
        bare_spec.sandbox = None;
        shim_only.push(time(|| run_shim(&bare_spec, &keel_bin, &dirs, None)));
        if have_bwrap {
            bwrap.push(time(|| {
                let ok = Command::new("bwrap")
                    .args(["--ro-bind", "/", "/", "--bind"])
                    .arg(&work)
                    .arg("/work")
                    .args([
                        "--proc",
                        "/proc",
                        "--dev",
                        "/dev",
                        "--unshare-pid",
                        "/bin/true",
                    ])
                    .status()
                    .unwrap()
                    .success();
                assert!(ok);
            }));
        }
        unshare.push(time(|| {
            assert!(Command::new("unshare")
                .args(["-mpf", "--mount-proc", "/bin/true"])
                .status()
                .unwrap()
                .success());
        }));
    }
    let base = median(&mut bare.clone());
    println!("start → exit of /bin/true, {rounds} rounds interleaved (ms):");
    println!("{:<44} {:>8} {:>8} {:>8}", "", "median", "p99", "ratio");
    for (name, samples) in [
        ("(a) fork+exec (baseline)", &mut bare),
        ("(b) keel sandboxed start", &mut keel),
        ("(c) bwrap --ro-bind / / --bind --proc --dev", &mut bwrap),
        ("(d) unshare -mpf --mount-proc", &mut unshare),
        ("(e) keel's shim, sandbox off (part of b)", &mut shim_only),
        ("(f) keel sandboxed start + its cgroup", &mut keel_cgroup),
    ] {
        if samples.is_empty() {
            println!("{name:<44} not installed");
            continue;
        }
        let m = median(samples);
        println!(
            "{name:<44} {:>8.2} {:>8.2} {:>7.2}x",
            ms(m),
            ms(p99(samples)),
            m.as_secs_f64() / base.as_secs_f64()
        );
    }
    if !bwrap.is_empty() {
        println!(
            "keel vs bwrap: {:.1}x faster",
            median(&mut bwrap).as_secs_f64() / median(&mut keel).as_secs_f64()
        );
    }
    if let Err(e) = tree.teardown() {
        eprintln!("cgroup teardown: {e}");
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Spawn the shim as the daemon does and wait for it: spawn through reap.
fn run_shim(
    spec: &keel::sandbox::spec::AttemptSpec,
    keel_bin: &std::path::Path,
    dirs: &StateDir,
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
) {
    let (pid, _pidfd) = spawn_shim_program(spec, keel_bin, cgroup).expect("spawn shim");
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
    if status != nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 0) {
        let log =
            std::fs::read_to_string(dirs.run_dir("bench").join("shim.log")).unwrap_or_default();
        panic!("shim failed ({status:?}):\n{log}");
    }
}

fn time(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn p99(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[(samples.len() * 99 / 100).min(samples.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
