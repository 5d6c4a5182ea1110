//! The sandbox's mount namespace built by the real kernel, checked from inside.
//!
//! The parent test runs this same test binary under `unshare --pid --fork` (so that a fresh
//! /proc shows a PID namespace of its own), selecting only [`kernel_child`], which unshares
//! the mount namespace, builds the sandbox in-process with `KernelMounter` over a scratch state
//! directory and checks what it sees. Nothing is mounted in the test's own namespace: the
//! child's namespace dies with it.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use keel::sandbox::mounts::{
    build, list_host_root, plan, KernelMounter, MountOp, Mounter, SandboxLayout,
};

const CHILD_ENV: &str = "KEEL_MOUNTS_KERNEL_CHILD";
/// How many sandboxes to build for the timing (`KEEL_MOUNTS_RUNS` to change it).
fn runs() -> usize {
    std::env::var("KEEL_MOUNTS_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
}

fn layout(scratch: &Path) -> SandboxLayout {
    let task = scratch.join("state/tasks/demo");
    SandboxLayout {
        new_root: task.join("run/root"),
        work_source: task.join("work"),
        checkout: None,
        workdir: PathBuf::from("/work"),
        progress_file: task.join("run/progress"),
        checkpoint_source: task.join("checkpoint"),
        home: PathBuf::from("/root"),
        home_owner: None,
        tmp_size: 64 << 20,
        home_size: 64 << 20,
        hidden: vec![
            scratch.join("state"),
            scratch.join("secret-dir"),
            scratch.join("secret-file"),
            // An absolute symlink: followed inside the new root, not on the host.
            scratch.join("secret-link"),
        ],
        // Another: the bind must land where the sandbox will resolve it.
        writable: vec![scratch.join("shared")],
        readonly: vec![read_only_dir(scratch)],
        in_user_namespace: false,
        own_network: false,
        resolver_file: None,
        ca_bundle: None,
        veiled: vec![],
    }
}

/// A host directory under `/tmp`, where the sandbox has a tmpfs of its own: bound read-only
/// into it at the same path.
fn read_only_dir(scratch: &Path) -> PathBuf {
    let name = scratch.file_name().unwrap().to_str().unwrap();
    PathBuf::from(format!("/tmp/{name}-ro"))
}

/// Times each operation of the real mounter (in the order of the plan).
struct Timed {
    inner: KernelMounter,
    times: Vec<Duration>,
}

impl Mounter for Timed {
    fn apply(&mut self, op: &MountOp) -> std::io::Result<()> {
        let started = Instant::now();
        let result = self.inner.apply(op);
        self.times.push(started.elapsed());
        result
    }
}

fn errno_of(result: std::io::Result<impl Sized>) -> Option<i32> {
    result.err().and_then(|e| e.raw_os_error())
}

/// Mount point → (per-mount options, filesystem type), from our own thread's view
/// (`/proc/self` would be the main thread's, still in the old namespace: proc(5),
/// /proc/thread-self).
fn mounts_seen() -> Vec<(String, BTreeSet<String>, String)> {
    let text = fs::read_to_string("/proc/thread-self/mountinfo").unwrap();
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let options = fields[5].split(',').map(str::to_string).collect();
            let separator = fields.iter().position(|f| *f == "-").unwrap();
            (
                fields[4].to_string(),
                options,
                fields[separator + 1].to_string(),
            )
        })
        .collect()
}

fn is_empty_or_unreadable(path: &Path) -> bool {
    match fs::read_dir(path) {
        Ok(mut entries) => entries.next().is_none(),
        Err(_) => true,
    }
}

/// Runs only inside `unshare --pid --fork`, when the parent test sets [`CHILD_ENV`].
#[test]
fn kernel_child() {
    let Ok(scratch) = std::env::var(CHILD_ENV) else {
        return;
    };
    let scratch = PathBuf::from(scratch);
    let layout = layout(&scratch);
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).expect("unshare(CLONE_NEWNS)");

    let started = Instant::now();
    let host_root = list_host_root().unwrap();
    let listed = started.elapsed();
    let ops = plan(&layout, &host_root);
    let planned = started.elapsed();
    let mut mounter = Timed {
        inner: KernelMounter::new(&layout.new_root),
        times: Vec::new(),
    };
    let warm = Instant::now();
    let _ = plan(&layout, &host_root);
    println!("PLAN-AGAIN {} µs", warm.elapsed().as_micros());
    let faults = || {
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD)
            .unwrap()
            .minor_page_faults()
    };
    let faults_before = faults();
    let built = Instant::now();
    build(&layout, &host_root, &mut mounter).unwrap_or_else(|e| panic!("build: {e}"));
    let took = built.elapsed();
    println!("FAULTS {}", faults() - faults_before);
    println!(
        "KEEL_BUILD_MICROS {} (listing / {} µs, plan {} µs, {} ops)",
        took.as_micros(),
        listed.as_micros(),
        (planned - listed).as_micros(),
        ops.len()
    );
    for op in &ops {
        println!("PLAN {op}");
    }
    let mut by_kind: std::collections::BTreeMap<String, (usize, Duration)> = Default::default();
    let mut times: Vec<(Duration, String)> = (mounter.times.iter().copied())
        .zip(ops.iter().map(|op| op.to_string()))
        .collect();
    for (time, op) in &times {
        let kind = op.split("  ").next().unwrap_or(op).trim().to_string();
        let entry = by_kind.entry(kind).or_default();
        entry.0 += 1;
        entry.1 += *time;
    }
    for (kind, (count, time)) in &by_kind {
        println!("KIND {kind:<12} {count:>3} ops {:>6} µs", time.as_micros());
    }
    times.sort_by_key(|t| std::cmp::Reverse(t.0));
    for (time, op) in times.iter().take(5) {
        println!("SLOWEST {:>6} µs  {op}", time.as_micros());
    }

    // The checkout: writable, and on the host (checked by the parent).
    fs::write("/work/hello", "from the sandbox").expect("write /work");
    // The host's files: read-only, the root tmpfs and submounts (bound /home, /sys's tmpfs) too.
    for path in [
        "/etc/keel-probe",
        "/usr/keel-probe",
        "/home/keel-probe",
        "/keel-probe",
    ] {
        assert_eq!(errno_of(fs::write(path, "x")), Some(libc::EROFS), "{path}");
    }
    assert_eq!(
        errno_of(fs::create_dir("/sys/keel-probe")),
        Some(libc::EROFS)
    );
    // /sys comes without its submounts: the host's cgroup tree is not there.
    assert!(
        !Path::new("/sys/fs/cgroup/cgroup.procs").exists()
            && !Path::new("/sys/fs/cgroup/memory").exists(),
        "the host's cgroup tree is visible"
    );
    assert_eq!(
        errno_of(fs::write("/run/keel-probe", "x")),
        Some(libc::EROFS)
    );
    assert!(fs::read_to_string("/etc/hostname").is_ok() || Path::new("/etc").is_dir());
    // Every mount is read-only, nosuid and nodev but those that must not be.
    let writable: BTreeSet<String> = [
        "/work",
        "/tmp",
        "/root",
        "/run/keel/progress",
        "/run/keel/checkpoint",
        "/dev/shm",
        "/dev/pts",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(std::iter::once(
        scratch.join("shared").display().to_string(),
    ))
    .collect();
    let devices = ["null", "zero", "full", "random", "urandom", "tty", "pts"];
    let seen = mounts_seen();
    for (point, options, _) in &seen {
        let rw = writable.contains(point);
        assert_eq!(options.contains("ro"), !rw, "{point}: {options:?}");
        assert!(options.contains("nosuid"), "{point}: {options:?}");
        let device = devices.iter().any(|d| *point == format!("/dev/{d}"));
        assert_eq!(options.contains("nodev"), !device, "{point}: {options:?}");
    }
    let roots: Vec<&str> = seen
        .iter()
        .filter(|(point, _, _)| point == "/")
        .map(|(_, _, fstype)| fstype.as_str())
        .collect();
    assert_eq!(
        roots,
        ["tmpfs"],
        "one root, keel's tmpfs: the host's is detached"
    );
    println!("MOUNTS {}", seen.len());

    // Private, writable /tmp and $HOME: empty, but for the read-only bind made in /tmp.
    let read_only = read_only_dir(&scratch);
    let in_tmp: Vec<PathBuf> = fs::read_dir("/tmp")
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(in_tmp, std::slice::from_ref(&read_only));
    assert_eq!(
        fs::read_to_string(read_only.join("data")).unwrap(),
        "host data"
    );
    assert_eq!(
        errno_of(fs::write(read_only.join("data"), "x")),
        Some(libc::EROFS)
    );
    assert!(
        is_empty_or_unreadable(Path::new("/root")),
        "/root not empty"
    );
    for dir in ["/tmp", "/root"] {
        fs::write(Path::new(dir).join("probe"), "x").unwrap_or_else(|e| panic!("{dir}: {e}"));
    }
    // keel's state, the hidden paths: invisible. The writable path: writable.
    assert!(is_empty_or_unreadable(&scratch.join("state")));
    assert!(is_empty_or_unreadable(&scratch.join("state/tasks")));
    assert!(is_empty_or_unreadable(&scratch.join("secret-dir")));
    let secret = fs::read_to_string(scratch.join("secret-file"));
    assert!(
        secret.map(|s| s.is_empty()).unwrap_or(true),
        "secret-file readable"
    );
    assert!(is_empty_or_unreadable(&scratch.join("secret-dir2")));
    fs::write(scratch.join("shared/from-sandbox"), "shared").expect("writable path");
    // /run/keel.
    fs::write("/run/keel/progress", "step 1\n").expect("progress");
    fs::write("/run/keel/checkpoint/saved", "state").expect("checkpoint");
    // /dev.
    fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .and_then(|mut f| f.write_all(b"discarded"))
        .expect("/dev/null");
    let mut bytes = [1u8; 16];
    fs::File::open("/dev/zero")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("/dev/zero");
    assert_eq!(bytes, [0u8; 16]);
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("/dev/urandom");
    let _pty = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/ptmx")
        .expect("/dev/ptmx");
    assert!(Path::new("/dev/pts/0").exists(), "a pty of our own devpts");
    assert_eq!(
        errno_of(fs::write("/dev/sda", "x")),
        Some(libc::EROFS),
        "no other device"
    );
    // A fresh /proc: only this PID namespace, where we are PID 1.
    assert_eq!(fs::read_link("/proc/self").unwrap(), Path::new("1"));
    let pids: Vec<String> = fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
        .collect();
    assert_eq!(pids, ["1"]);
    assert_eq!(
        errno_of(fs::write("/proc/sys/kernel/hostname", "x")),
        Some(libc::EROFS)
    );
    // Nothing is mounted at a host path: the new root's own path is not in view.
    assert!(!seen.iter().any(|(point, _, _)| point.contains("run/root")));
    println!("CHECKS OK");
}

fn mountinfo() -> BTreeSet<String> {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .map(|line| {
            line.split_once(' ')
                .map_or(line, |(_, rest)| rest)
                .to_string()
        })
        .collect()
}

/// Removes the scratch directory, unless something is still mounted in it (a recursive
/// removal would then go through the mount onto the host's files).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let text = self.0.display().to_string();
        if mountinfo().iter().any(|line| line.contains(&text)) {
            eprintln!("{text}: still mounted, left in place");
        } else {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

fn median(mut values: Vec<u128>) -> u128 {
    values.sort();
    values[values.len() / 2]
}

#[test]
fn sandbox_in_a_real_mount_namespace() {
    if !common::require_root("sandbox_in_a_real_mount_namespace") {
        return;
    }
    // Under /var/tmp, so that the state directory lies inside a bound host directory (/var)
    // and must really be covered, not just left out.
    let base = if Path::new("/var/tmp").is_dir() {
        PathBuf::from("/var/tmp")
    } else {
        std::env::temp_dir()
    };
    let guard = Scratch(base.join(format!("keel-mounts-{}", std::process::id())));
    let scratch = guard.0.clone();
    let read_only = Scratch(read_only_dir(&scratch));
    fs::create_dir_all(&read_only.0).unwrap();
    fs::write(read_only.0.join("data"), "host data").unwrap();
    let task = scratch.join("state/tasks/demo");
    for dir in ["work", "checkpoint", "run/root"] {
        fs::create_dir_all(task.join(dir)).unwrap();
    }
    fs::write(task.join("run/progress"), "").unwrap();
    fs::write(task.join("state.ron"), "secret state").unwrap();
    fs::create_dir_all(scratch.join("shared")).unwrap();
    fs::create_dir_all(scratch.join("secret-dir")).unwrap();
    fs::write(scratch.join("secret-dir/key"), "secret").unwrap();
    fs::write(scratch.join("secret-file"), "secret").unwrap();
    fs::create_dir_all(scratch.join("secret-dir2")).unwrap();
    fs::write(scratch.join("secret-dir2/key"), "secret").unwrap();
    std::os::unix::fs::symlink(scratch.join("secret-dir2"), scratch.join("secret-link")).unwrap();
    std::os::unix::fs::symlink(scratch.join("shared"), scratch.join("shared-link")).unwrap();
    let before = mountinfo();

    let exe = std::env::current_exe().unwrap();
    let mut micros = Vec::new();
    for run in 0..runs() {
        let output = Command::new("unshare")
            .args(["--pid", "--fork", "--"])
            .arg(&exe)
            .args(["--exact", "kernel_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &scratch)
            .output()
            .expect("unshare(1) from util-linux");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stdout.contains("CHECKS OK"),
            "sandbox child failed ({}):\n{stdout}\n{stderr}",
            output.status
        );
        if run == 0 {
            println!("{stdout}");
        }
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("KEEL_BUILD_MICROS ").map(|(_, rest)| rest))
            .unwrap();
        micros.push(line.split(' ').next().unwrap().parse::<u128>().unwrap());
    }
    println!(
        "build(): median {} µs, min {} µs, max {} µs over {} runs",
        median(micros.clone()),
        micros.iter().min().unwrap(),
        micros.iter().max().unwrap(),
        micros.len()
    );

    // What the sandbox wrote landed in the task's own directories on the host.
    let read = |p: PathBuf| fs::read_to_string(p).unwrap();
    assert_eq!(read(task.join("work/hello")), "from the sandbox");
    assert_eq!(read(task.join("run/progress")), "step 1\n");
    assert_eq!(read(task.join("checkpoint/saved")), "state");
    assert_eq!(read(scratch.join("shared/from-sandbox")), "shared");

    // Nothing was left mounted in our namespace (other processes of this host may mount
    // things meanwhile: only what involves the scratch directory counts).
    let after = mountinfo();
    let scratch_text = scratch.display().to_string();
    let leaked: Vec<&String> = after
        .difference(&before)
        .filter(|line| line.contains(&scratch_text))
        .collect();
    assert!(leaked.is_empty(), "left mounted: {leaked:?}");
    assert!(!after.iter().any(|line| line.contains(&scratch_text)));
}
