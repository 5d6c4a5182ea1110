//! Start latency of a sandboxed task, against a baseline, interleaved in one run. Each row
//! starts the same agent (examples/exec_stamp.rs), which prints the CLOCK_MONOTONIC instant it
//! began to run; each row is timed twice: start → agent running (the figure: what a
//! user waits for), and start → reaped (everything, the supervisor's own bookkeeping after
//! the agent's exit included).
//!
//! (a) bare fork+exec: fork(2), execve(2) of the agent, its output read, waitpid(2) — the
//!     issue's baseline;
//! (a') posix_spawn (std's Command: a vfork-style clone + exec + wait), the cheapest way a
//!     program starts another here, for reference;
//! (b) keel's sandboxed start, as a daemon with a task running does it: clone3(CLONE_PIDFD)
//!     of the shim from the daemon's image into a PID namespace of the task's user namespace
//!     (or a spare shim made for it), which forks the agent's child before
//!     it execs `keel shim` itself; the child copies the sandbox template (setns + unshare),
//!     mounts the attempt's own parts, drops privileges, installs seccomp and execs;
//! (g) (b) with the whole mount plan built for the attempt (no template: a daemon's first
//!     start after an idle spell builds the template, which costs about this, then (b));
//! (f) (b) with the task's cgroup, as the daemon starts an attempt: the cgroup created with its
//!     limits, the shim spawned into it (CLONE_INTO_CGROUP), the v1 controllers joined (hybrid
//!     hosts), and after the reap the cgroup killed and removed;
//! (c) `bwrap` with the equivalent flags (read-only `/`, a bind, `--proc`, `--dev`,
//!     `--unshare-pid`);
//! (d) `unshare -mpf --mount-proc`;
//! (e) keel's shim alone: (b) without the sandbox and the cgroup.
//!
//! `cargo run --release --example spawn_bench -- [ROUNDS]` (as root; build the `keel` binary
//! and the `exec_stamp` example first). The state directory is on tmpfs (/dev/shm) so that the
//! figures are the sandbox's, not the disk's fsyncs.
//!
//! `KEEL_BENCH_ROWS=a,b,f` runs only those rows (tags without parentheses: `a'`, `b''`…),
//! still interleaved; `KEEL_BENCH_NO_USERNS=1` gives the sandboxed rows no user namespace, as
//! a daemon with `user_namespaces: Off` starts them (the VM's: benches/vm/start-latency).

// A benchmark: its baseline is a bare fork and exec, unsafe by its nature; each block's
// comment says why it is sound.
#![allow(unsafe_code)]

use keel::daemon::{attempt_spec, spawn_shim_program, AttemptContext};
use keel::sandbox::templates::SandboxTemplates;
use keel::state::StateDir;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// One row's samples: start → agent running, start → reaped.
#[derive(Default)]
struct Row {
    running: Vec<Duration>,
    reaped: Vec<Duration>,
}

fn main() {
    keel::logger::init("bench");
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let scratch = PathBuf::from(format!("/dev/shm/keel-bench-{}", std::process::id()));
    let dirs = StateDir::new(scratch.join("state"));
    dirs.create().expect("state dir");
    dirs.create_task_dirs("bench").expect("task dirs");
    // The binaries built beside this example (target/…/release/{keel,examples/exec_stamp}).
    let examples = std::env::current_exe()
        .expect("own path")
        .parent()
        .expect("examples dir")
        .to_path_buf();
    let keel_bin = examples.parent().expect("target dir").join("keel");
    let built_stamp = examples.join("exec_stamp");
    assert!(keel_bin.exists(), "build keel first: cargo build --release");
    assert!(
        built_stamp.exists(),
        "build the agent first: cargo build --release --example exec_stamp"
    );
    // Where every sandbox sees it: the task's sandbox has /work, /tmp and /dev of its own.
    let stamp_dir = PathBuf::from(format!("/var/tmp/keel-bench-{}", std::process::id()));
    std::fs::create_dir_all(&stamp_dir).expect("/var/tmp");
    let stamp = stamp_dir.join("exec_stamp");
    std::fs::copy(&built_stamp, &stamp).expect("copy the agent");
    let unit = keel::unit::parse_unit(
        Path::new("bench.ron"),
        &format!("Unit(command: [{:?}], restart: Never)", stamp.display()),
    )
    .expect("unit");
    let work = dirs.work_dir("bench");
    let output_log = dirs.run_dir("bench").join("output.log");
    // The rows asked for (all by default), by tag: "a", "b'", "f"…
    let only = std::env::var("KEEL_BENCH_ROWS").ok();
    let want = |tag: &str| {
        only.as_deref()
            .is_none_or(|list| list.split(',').any(|t| t.trim() == tag))
    };
    assert!(
        want("a"),
        "row (a) is every ratio's baseline: KEEL_BENCH_ROWS must name it"
    );
    let no_userns_asked = std::env::var_os("KEEL_BENCH_NO_USERNS").is_some_and(|v| v == "1");
    let have_bwrap = want("c") && Command::new("bwrap").arg("--version").output().is_ok();

    let [mut bare, mut spawned, mut keel, mut cold, mut keel_cgroup, mut bwrap, mut unshare, mut shim_only, mut full, mut no_userns, mut keel_cgroup_clone] =
        std::array::from_fn(|_| Row::default());
    let stamp_c = std::ffi::CString::new(stamp.as_os_str().as_encoded_bytes()).expect("no NUL");
    let mut templates = SandboxTemplates::new(scratch.join("state/templates"));
    // keel's cgroup tree, as the daemon sets it up (this process moves into its leaf).
    let tree_name = format!("keel-bench-{}", std::process::id());
    let tree = keel::cgroup::detect(&tree_name)
        .and_then(|layout| keel::cgroup::Tree::setup(layout, &tree_name))
        .expect("cgroup tree (run as root)");
    let slice = tree.task("bench").expect("task cgroup");
    let limits = keel::cgroup::Limits {
        cpu_request: unit.resources.cpu,
        cpu_limit: unit.resources.cpu_limit,
        memory_request: unit.resources.memory.0,
        memory_limit: unit.resources.memory_limit_bytes(),
        pids: unit.resources.pids,
    };
    let piped = |command: &mut Command| {
        let out = command.stdout(Stdio::piped()).output().unwrap();
        assert!(out.status.success(), "{command:?} failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let work_arg = work.display().to_string();
    for round in 0..rounds {
        if want("a") {
            bare.time(|| fork_exec(&stamp_c));
        }
        if want("a'") {
            spawned.time(|| piped(&mut Command::new(&stamp)));
        }
        let generation = round as u64 + 1;
        let ctx = AttemptContext {
            unit_name: "bench",
            attempt: 1,
            generation,
            last_exit: None,
            last_progress: None,
            network_lists: &Default::default(),
        };
        let mut spec = attempt_spec(&dirs, &unit, &ctx);
        // As the daemon gives it: the task's block of host ids (its user namespace's).
        let with_userns = |spec: &mut keel::sandbox::spec::AttemptSpec| {
            if let Some(sandbox) = spec.sandbox.as_mut() {
                sandbox.id_block = Some(keel::sandbox::spec::IdBlock {
                    first: 1_879_048_192,
                    count: 65_536,
                });
            }
        };
        if !no_userns_asked {
            with_userns(&mut spec);
        }
        // (b'') without it: what the user namespace costs.
        let no_userns_spec = attempt_spec(&dirs, &unit, &ctx);
        if want("b''") {
            spare_ready(&mut templates, &keel_bin, &no_userns_spec);
            no_userns.time(|| {
                run_shim(
                    &no_userns_spec,
                    &keel_bin,
                    &dirs,
                    None,
                    Some(&mut templates),
                    &output_log,
                )
            });
        }
        // The sandboxed start on templates, without the cgroup: (b) and (b').
        let templated = |templates: &mut SandboxTemplates| {
            run_shim(&spec, &keel_bin, &dirs, None, Some(templates), &output_log)
        };
        // As a daemon with a task running has it: a spare made after its last start.
        if want("b") {
            spare_ready(&mut templates, &keel_bin, &spec);
            keel.time(|| templated(&mut templates));
        }
        // The spare was taken: this start finds none, as one right after another would.
        if want("b'") {
            cold.time(|| templated(&mut templates));
        }
        if want("g") {
            full.time(|| run_shim(&spec, &keel_bin, &dirs, None, None, &output_log));
        }
        // (f') (f) with no spare (asked for by name only: KEEL_BENCH_ROWS): the daemon's start on
        // a pure v2 host without `favordynmods`, where it makes none and clones the shim
        // straight into the cgroup (CLONE_INTO_CGROUP) — a spare would migrate into it. Before
        // (f): right after a migration the next one does not wait for a grace period.
        let no_spare_cgroup = only.is_some() && want("f'");
        keel_cgroup_clone.time_if(no_spare_cgroup, || {
            assert!(templates.spare().is_none(), "(b) took the spare");
            slice.create(&limits).expect("create the task cgroup");
            let dir = slice.open_v2_dir().expect("open the task cgroup");
            spec.cgroup_v1_procs = slice.v1_procs_files();
            let out = run_shim(
                &spec,
                &keel_bin,
                &dirs,
                Some(dir.as_fd()),
                Some(&mut templates),
                &output_log,
            );
            slice.kill().expect("cgroup.kill");
            slice
                .remove_blocking(Duration::from_secs(5))
                .expect("remove the task cgroup");
            out
        });
        if want("f") {
            spare_ready(&mut templates, &keel_bin, &spec);
        }
        keel_cgroup.time_if(want("f"), || {
            slice.create(&limits).expect("create the task cgroup");
            let dir = slice.open_v2_dir().expect("open the task cgroup");
            spec.cgroup_v1_procs = slice.v1_procs_files();
            let templates = Some(&mut templates);
            let out = run_shim(
                &spec,
                &keel_bin,
                &dirs,
                Some(dir.as_fd()),
                templates,
                &output_log,
            );
            slice.kill().expect("cgroup.kill");
            slice
                .remove_blocking(Duration::from_secs(5))
                .expect("remove the task cgroup");
            out
        });
        // (e) the same shim with its sandbox off: what the shim itself costs.
        let mut bare_spec = attempt_spec(&dirs, &unit, &ctx);
        bare_spec.sandbox = None;
        if want("e") {
            shim_only.time(|| run_shim(&bare_spec, &keel_bin, &dirs, None, None, &output_log));
        }
        if have_bwrap {
            let args = [
                "--ro-bind",
                "/",
                "/",
                "--bind",
                &work_arg,
                "/work",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "--unshare-pid",
            ];
            bwrap.time(|| piped(Command::new("bwrap").args(args).arg(&stamp)));
        }
        unshare.time_if(want("d"), || {
            piped(
                Command::new("unshare")
                    .args(["-mpf", "--mount-proc"])
                    .arg(&stamp),
            )
        });
    }
    let rows = [
        ("(a) fork+exec (baseline)", &bare),
        ("(a') posix_spawn (std's Command)", &spawned),
        ("(b) keel sandboxed start", &keel),
        ("(b') (b) with no spare shim ready", &cold),
        ("(b'') (b) without a user namespace", &no_userns),
        ("(c) bwrap --ro-bind / / --bind --proc --dev", &bwrap),
        ("(d) unshare -mpf --mount-proc", &unshare),
        ("(e) keel's shim, sandbox off", &shim_only),
        ("(f) keel sandboxed start + its cgroup", &keel_cgroup),
        ("(g) keel sandboxed start, no template", &full),
        ("(f') (f), no spare: CLONE_INTO_CGROUP", &keel_cgroup_clone),
    ];
    assert!(
        rows.iter().all(|(name, _)| name.len() <= 44),
        "row names fit the column"
    );
    for (title, pick) in [
        ("start → agent running", 0),
        ("start → reaped (all bookkeeping included)", 1),
    ] {
        println!("{title}, {rounds} rounds interleaved (ms):");
        println!("{:<44} {:>8} {:>8} {:>8}", "", "median", "p99", "ratio");
        let samples = |row: &Row| -> Vec<Duration> {
            let mut v = if pick == 0 {
                row.running.clone()
            } else {
                row.reaped.clone()
            };
            v.sort();
            v
        };
        let base = median(&samples(rows[0].1));
        for (name, row) in &rows {
            let v = samples(row);
            if v.is_empty() {
                // bwrap or unshare missing; (f') runs only when named in KEEL_BENCH_ROWS.
                if only.is_none() && !name.starts_with("(f')") {
                    println!("{name:<44} not installed");
                }
                continue;
            }
            let m = median(&v);
            println!(
                "{name:<44} {:>8.2} {:>8.2} {:>7.2}x",
                ms(m),
                ms(p99(&v)),
                m.as_secs_f64() / base.as_secs_f64()
            );
        }
        // By name: the rows' order may change.
        let row = |tag: &str| {
            rows.iter()
                .find(|(name, _)| name.starts_with(tag))
                .expect("a row of that tag")
                .1
        };
        let (spawn, b, k) = (
            samples(row("(a')")),
            samples(row("(c)")),
            samples(row("(b)")),
        );
        if !k.is_empty() && !spawn.is_empty() {
            println!(
                "keel vs posix_spawn: {:.2}x",
                median(&k).as_secs_f64() / median(&spawn).as_secs_f64()
            );
        }
        if !b.is_empty() && !k.is_empty() {
            println!(
                "keel vs bwrap: {:.1}x faster\n",
                median(&b).as_secs_f64() / median(&k).as_secs_f64()
            );
        }
    }
    assert_eq!(
        templates.len(),
        usize::from(["b''", "b", "b'", "f", "f'"].iter().any(|t| want(t))),
        "one template for every start of (b) and (f)"
    );
    drop(templates);
    if let Err(e) = tree.teardown() {
        eprintln!("cgroup teardown: {e}");
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_dir_all(&stamp_dir);
}

impl Row {
    /// [`Row::time`] when the row was asked for.
    fn time_if(&mut self, wanted: bool, start: impl FnOnce() -> String) {
        if wanted {
            self.time(start);
        }
    }

    /// Run one start: `start` returns what the agent printed (its start instant).
    fn time(&mut self, start: impl FnOnce() -> String) {
        let t0 = monotonic_ns();
        let printed = start();
        let t1 = monotonic_ns();
        let agent: u128 = printed
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("the agent printed no start time: {printed:?}"));
        assert!(t0 <= agent && agent <= t1, "clock mismatch");
        self.running.push(nanos(agent - t0));
        self.reaped.push(nanos(t1 - t0));
    }
}

/// (a): fork(2) this process, execve(2) the agent with its stdout on a pipe, read the pipe to
/// its end, reap the child. Returns what the agent printed.
fn fork_exec(program: &std::ffi::CStr) -> String {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    // Close-on-exec: the agent gets the write end as its stdout only (dup2 clears the flag).
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let argv = [program.as_ptr(), std::ptr::null()];
    // SAFETY: this benchmark is single-threaded; the child only calls dup2, execv and _exit
    // (async-signal-safe) on memory built before the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: as above.
        unsafe {
            libc::dup2(write_end.as_raw_fd(), 1);
            libc::execv(program.as_ptr(), argv.as_ptr());
            libc::_exit(127);
        }
    }
    drop(write_end);
    let mut out = String::new();
    std::fs::File::from(read_end)
        .read_to_string(&mut out)
        .expect("read the agent's output");
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).expect("waitpid");
    assert_eq!(
        status,
        nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 0)
    );
    out
}

/// Make the spare shim a daemon makes after a start of the task of `spec` (for its user
/// namespace, which owns the spare's PID namespace), and wait until it has copied its
/// template.
fn spare_ready(
    templates: &mut SandboxTemplates,
    keel_bin: &Path,
    spec: &keel::sandbox::spec::AttemptSpec,
) {
    templates.replenish_spare(keel_bin, None, task_userns(spec));
    // None with KEEL_NO_SPARE=1: (b) is then (b').
    let Some(spare) = templates.spare() else {
        return;
    };
    // Before the first start there is no template to copy.
    if spare.copying() {
        let word = spare.wait_ready(Duration::from_secs(5));
        assert_eq!(word.as_deref(), Some("ready"), "the spare's copy");
    }
}

/// Spawn the shim as the daemon does and wait for it: spawn through reap. Returns the output
/// log's last line (the agent's start instant).
fn run_shim(
    spec: &keel::sandbox::spec::AttemptSpec,
    keel_bin: &Path,
    dirs: &StateDir,
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
    templates: Option<&mut SandboxTemplates>,
    output_log: &Path,
) -> String {
    let userns = task_userns(spec);
    // With a user namespace, the attempt's network namespace is the daemon's to make, owned
    // by it (`keel::network::task_namespace::make`: `lo` up), before the shim: timed, as the
    // daemon's start pays it. (Without one the shim makes its own, as before.)
    let netns = userns.map(|userns| {
        keel::network::task_namespace::make(None, Some(userns))
            .expect("the task's network namespace")
            .0
    });
    let namespaces = keel::daemon::spawn::TaskNamespaces {
        userns,
        netns: netns.as_ref().map(|ns| ns.as_fd()),
    };
    let (pid, _pidfd) = spawn_shim_program(spec, keel_bin, cgroup, None, templates, namespaces)
        .expect("spawn shim");
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
    if status != nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 0) {
        let log =
            std::fs::read_to_string(dirs.run_dir("bench").join("shim.log")).unwrap_or_default();
        panic!("shim failed ({status:?}):\n{log}");
    }
    std::fs::read_to_string(output_log).unwrap_or_default()
}

/// The task's user namespace, as the daemon holds it: made once for the task (`None`: a spec
/// without a block of host ids).
fn task_userns(
    spec: &keel::sandbox::spec::AttemptSpec,
) -> Option<std::os::fd::BorrowedFd<'static>> {
    static USERNS: std::sync::OnceLock<std::os::fd::OwnedFd> = std::sync::OnceLock::new();
    spec.sandbox.as_ref().and_then(|s| s.id_block).map(|block| {
        USERNS
            .get_or_init(|| {
                keel::sys::userns::create(block.first, block.count).expect("a user namespace")
            })
            .as_fd()
    })
}

fn monotonic_ns() -> u128 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("clock");
    now.tv_sec() as u128 * 1_000_000_000 + now.tv_nsec() as u128
}

fn nanos(n: u128) -> Duration {
    Duration::from_nanos(n as u64)
}

fn median(sorted: &[Duration]) -> Duration {
    sorted[sorted.len() / 2]
}

fn p99(sorted: &[Duration]) -> Duration {
    sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
