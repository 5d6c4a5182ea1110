//! The `Containerfile` recipe without a container engine: the image's root is built as a
//! directory the way the Containerfile lays it out (keel where it COPYs it, the VOLUMEs, the
//! `agent` user, a static busybox for the agents' shell), and an "engine" made of `unshare`
//! (new mount, PID, UTS and IPC namespaces) mounts the volumes, /dev, /proc, /sys (its cgroup
//! hierarchies read-only, as engines mount them) and execs the ENTRYPOINT as PID 1 in that
//! root through `capsh`, with exactly the capabilities the Containerfile documents. The test
//! watches from outside through the control socket on the state volume, stops the container
//! with SIGTERM, checks that nothing is left, and starts it again on the same volume.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CONTAINERFILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/Containerfile");

/// What the test takes from the Containerfile.
struct Recipe {
    entrypoint: Vec<String>,
    volumes: Vec<String>,
    /// `--cap-add=` of its run command, as capsh names them (`cap_sys_admin`).
    capabilities: Vec<String>,
}

fn json_array_after(text: &str, instruction: &str) -> Vec<String> {
    let line = text
        .lines()
        .rfind(|l| l.starts_with(instruction))
        .unwrap_or_else(|| panic!("no {instruction} in the Containerfile"));
    serde_json::from_str(line[instruction.len()..].trim()).unwrap()
}

fn recipe() -> Recipe {
    let text = std::fs::read_to_string(CONTAINERFILE).unwrap();
    let cap_add = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("--cap-add="))
        .expect("the Containerfile documents --cap-add=");
    assert!(
        text.contains("--cap-drop=all"),
        "the documented set is the whole set"
    );
    assert!(
        text.contains("useradd --create-home --uid 1000 --user-group agent"),
        "the image's agent user changed: update this test's /etc/passwd"
    );
    Recipe {
        entrypoint: json_array_after(&text, "ENTRYPOINT "),
        volumes: json_array_after(&text, "VOLUME "),
        capabilities: cap_add
            .split(',')
            .map(|c| format!("cap_{}", c.to_lowercase()))
            .collect(),
    }
}

/// The value of `flag` in the ENTRYPOINT.
fn entrypoint_arg(recipe: &Recipe, flag: &str) -> String {
    let at = recipe.entrypoint.iter().position(|a| a == flag).unwrap();
    recipe.entrypoint[at + 1].clone()
}

/// Tools the test needs on the host: a failure under CI, a skip elsewhere.
fn require_tools(test: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .output()
                .unwrap()
                .status
                .success()
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        !privileged_required(),
        "{test}: missing {missing:?} (Debian: busybox-static, libcap2-bin, util-linux; .ci/run installs them)"
    );
    eprintln!("{test}: skipped: missing {missing:?}");
    false
}

fn which(tool: &str) -> PathBuf {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .unwrap();
    PathBuf::from(stdout_of(&out).trim())
}

/// Copy `binary` to `root/at` with the shared libraries it loads (none if static), at the
/// same paths, as an image holds them.
fn install_with_libraries(binary: &Path, root: &Path, at: &str) {
    let target = root.join(at.trim_start_matches('/'));
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::copy(binary, &target).unwrap();
    let ldd = Command::new("ldd").arg(binary).output().unwrap();
    for library in stdout_of(&ldd)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        let inside = root.join(library.trim_start_matches('/'));
        std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
        std::fs::copy(library, &inside).unwrap();
    }
}

/// The image's root, laid out as the Containerfile's last stage is.
fn build_root(root: &Path, recipe: &Recipe) {
    install_with_libraries(Path::new(keel_bin()), root, &recipe.entrypoint[0]);
    install_with_libraries(&which("busybox"), root, "/bin/busybox");
    // The engine's last step runs inside the image, after its pivot_root.
    install_with_libraries(&which("capsh"), root, "/sbin/capsh");
    let applets = Command::new("busybox").arg("--list").output().unwrap();
    for applet in stdout_of(&applets).lines() {
        let link = root.join("bin").join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", link).unwrap();
        }
    }
    let etc = root.join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(
        etc.join("passwd"),
        "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(etc.join("group"), "root:x:0:\nagent:x:1000:\n").unwrap();
    for dir in ["proc", "dev", "sys", "tmp", "run", "root", "home/agent"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    for volume in &recipe.volumes {
        std::fs::create_dir_all(root.join(volume.trim_start_matches('/'))).unwrap();
    }
}

/// The engine: the image's root as a mount of its own, the volumes bound into it, /dev with
/// the usual nodes, a fresh /proc, /sys with every cgroup hierarchy read-only, tmpfs /tmp and
/// /run; then, as real engines do, pivot_root(2) into it (not a chroot: a chroot'ed process
/// may not make user namespaces, and keel's tasks need them) and the old root detached; then
/// capsh drops every capability but the documented ones from the bounding set (so the
/// ENTRYPOINT gets only those) and execs the ENTRYPOINT as PID 1.
const ENGINE: &str = r#"set -eu
R=$1; shift
mount --bind "$R" "$R"
while [ "$1" != "--" ]; do mount --bind "$1" "$R$2"; shift 2; done; shift
mount -t tmpfs -o nosuid,mode=0755 dev "$R/dev"
for n in null zero full random urandom tty; do touch "$R/dev/$n"; mount --bind "/dev/$n" "$R/dev/$n"; done
mkdir "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
mount -t tmpfs -o nosuid,nodev shm "$R/dev/shm"
mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
mount --rbind /sys "$R/sys"
# ENGINE_WITHOUT_CGROUP2: as crun and runc do on a hybrid host, the v1 controllers only.
if [ -n "${ENGINE_WITHOUT_CGROUP2:-}" ]; then umount -l "$R/sys/fs/cgroup/unified"; fi
awk -v sys="$R/sys/fs/cgroup/" '{ for (i = 7; i < NF; i++) if ($i == "-") { t = $(i + 1); break } }
    index($5, sys) == 1 && (t == "cgroup" || t == "cgroup2") { print $5 }' /proc/self/mountinfo |
    while read -r m; do mount -o remount,bind,ro "$m"; done
mount -t tmpfs -o nosuid,nodev,mode=1777 tmp "$R/tmp"
mount -t tmpfs -o nosuid,nodev,mode=0755 run "$R/run"
cd "$R"
mkdir -p .engine-old
pivot_root . .engine-old
cd /
umount -l /.engine-old
rmdir /.engine-old
exec /sbin/capsh "$@"
"#;

struct Container {
    unshare: KillOnDrop,
    log: PathBuf,
}

impl Container {
    /// The host pid of PID 1 (the child of `unshare --fork`).
    fn init_pid(&self) -> i32 {
        forked_child(&self.unshare)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM to PID 1, as `podman stop` does; its exit status.
    fn stop(&mut self) -> i32 {
        let init = self.init_pid();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(init),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Some(status) = self.unshare.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "PID 1 did not exit:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

struct Setup {
    scratch: Scratch,
    recipe: Recipe,
    cgroup_name: String,
    /// The engine mounts no cgroup2 (a hybrid host's crun and runc).
    without_cgroup2: bool,
}

impl Setup {
    fn root(&self) -> PathBuf {
        self.scratch.dir.join("root")
    }
    fn state(&self) -> PathBuf {
        self.scratch.dir.join("volumes/state")
    }
    fn units(&self) -> PathBuf {
        self.scratch.dir.join("volumes/units")
    }

    fn run(&self, name: &str) -> Container {
        std::fs::write(self.scratch.dir.join("engine.sh"), ENGINE).unwrap();
        let known = Command::new("capsh")
            .arg(format!("--decode={:#x}", (1u64 << (last_cap() + 1)) - 1))
            .output()
            .unwrap();
        let drop: Vec<String> = stdout_of(&known)
            .trim()
            .rsplit('=')
            .next()
            .unwrap()
            .split(',')
            .filter(|c| !self.recipe.capabilities.contains(&c.to_string()))
            .map(str::to_string)
            .collect();
        let root = self.root();
        let log = self.scratch.dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let mut command = Command::new("unshare");
        command
            // The test drives the daemon from outside the container, through its volume.
            .env("KEEL_ACCEPT_OUTSIDE_CLIENTS", "1")
            .env(
                "ENGINE_WITHOUT_CGROUP2",
                if self.without_cgroup2 { "1" } else { "" },
            )
            .args([
                "--mount",
                "--pid",
                "--uts",
                "--ipc",
                "--fork",
                "--kill-child",
            ])
            .arg("sh")
            .arg(self.scratch.dir.join("engine.sh"))
            .arg(&root)
            .arg(self.state())
            .arg(entrypoint_arg(&self.recipe, "--state"))
            .arg(self.units())
            .arg(entrypoint_arg(&self.recipe, "--units"))
            .arg("--")
            .arg(format!("--drop={}", drop.join(",")))
            .arg(format!("--shell={}", self.recipe.entrypoint[0]))
            .arg("--")
            .args(&self.recipe.entrypoint[1..])
            // The image's tree name, unique here: other tests run beside this one.
            .args(["--cgroup-name", &self.cgroup_name])
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        Container {
            unshare: KillOnDrop(command.spawn().unwrap()),
            log,
        }
    }

    fn keel(&self, args: &[&str]) -> std::process::Output {
        keel_at(&self.state(), args)
    }

    fn task(&self, unit: &str) -> serde_json::Value {
        let out = self.keel(&["status", "--json"]);
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        status["tasks"]
            .as_array()
            .and_then(|tasks| tasks.iter().find(|t| t["unit"] == unit).cloned())
            .unwrap_or_default()
    }
}

fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The effective capabilities of `pid`, as capsh names them.
fn effective_caps(pid: i32) -> Vec<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap()
        .trim();
    let out = Command::new("capsh")
        .arg(format!("--decode=0x{hex}"))
        .output()
        .unwrap();
    let mut caps: Vec<String> = stdout_of(&out)
        .trim()
        .rsplit('=')
        .next()
        .unwrap()
        .split(',')
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect();
    caps.sort();
    caps
}

const AGENT: &str = r#"Unit(
    command: ["/bin/sh", "-c", "echo uid=$(id -u) resumed=${KEEL_RESUMED:-0} attempt=$KEEL_ATTEMPT; awk 'NR > 2 { sub(\":.*\", \"\"); gsub(\" \", \"\"); print \"link \" $0 }' /proc/net/dev; echo ready > $KEEL_PROGRESS; exec sleep 600"],
    sandbox: Sandbox(user: Some("agent"), network: None),
    resources: Resources(cpu: 0.25, memory: "64M", pids: 16),
    stop: Stop(timeout: "10s"),
)"#;

#[test]
fn the_containerfile_recipe_runs_keel_init_as_pid_1_with_the_documented_capabilities() {
    let test = "the_containerfile_recipe_runs_keel_init_as_pid_1_with_the_documented_capabilities";
    if !require_root(test) || !require_tools(test, &["unshare", "capsh", "busybox", "ldd", "awk"]) {
        return;
    }
    let recipe = recipe();
    let scratch = Scratch::new("container");
    let setup = Setup {
        cgroup_name: scratch.cgroup_name(),
        scratch,
        recipe,
        without_cgroup2: false,
    };
    build_root(&setup.root(), &setup.recipe);
    std::fs::create_dir_all(setup.state()).unwrap();
    std::fs::create_dir_all(setup.units()).unwrap();
    std::fs::write(setup.units().join("agent.ron"), AGENT).unwrap();

    let mut container = setup.run("first");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while setup.task("agent")["progress"] != "ready" {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent does not run, seen from outside: {}\nshim.log: {}\ncontainer: {}",
            setup.task("agent"),
            std::fs::read_to_string(setup.state().join("tasks/agent/run/shim.log"))
                .unwrap_or_default(),
            container.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(setup.keel(&["health"]).status.success());
    let task = setup.task("agent");
    assert_eq!(task["state"], "running", "{task}");
    let output = std::fs::read_to_string(setup.state().join("tasks/agent/run/output.log")).unwrap();
    assert!(output.contains("uid=1000 resumed=0 attempt=1"), "{output}");
    let links: Vec<&str> = output.lines().filter(|l| l.starts_with("link ")).collect();
    assert_eq!(
        links,
        ["link lo"],
        "only lo in a network: None task: {output}"
    );
    // PID 1 of its namespace is keel init, and the daemon holds exactly the documented set.
    let init = container.init_pid();
    let cmdline = std::fs::read_to_string(format!("/proc/{init}/cmdline")).unwrap();
    assert!(cmdline.contains("init"), "{cmdline}");
    let nspid = std::fs::read_to_string(format!("/proc/{init}/status")).unwrap();
    assert!(
        nspid
            .lines()
            .any(|l| l.starts_with("NSpid:") && l.ends_with("\t1")),
        "{nspid}"
    );
    let daemon = first_child(init).unwrap();
    let mut documented = setup.recipe.capabilities.clone();
    documented.sort();
    assert_eq!(effective_caps(init), documented);
    assert_eq!(effective_caps(daemon), documented);
    // The engine left /sys/fs/cgroup read-only; keel init made it writable.
    assert!(
        container
            .log()
            .contains("remounted read-write for keel's cgroups"),
        "{}",
        container.log()
    );
    let members = pid_namespace_of(init);

    // `podman stop`: SIGTERM to PID 1, an orderly stop, exit 0.
    assert_eq!(container.stop(), 0, "{}", container.log());
    let log = container.log();
    assert!(log.contains("agent: stopping (SIGTERM"), "{log}");
    // Ended by its stop signal (CAP_KILL reaches an agent of another uid), not by the timeout.
    assert!(
        log.contains("agent: attempt 1 ended: signal:SIGTERM"),
        "{log}"
    );
    assert!(members().is_empty(), "processes left in the container");
    let root = setup.root();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(&*root.to_string_lossy()),
        "mounts left under {}",
        root.display()
    );
    assert!(
        cgroup_tree_dirs(&setup.cgroup_name).is_empty(),
        "cgroups left: {:?}",
        cgroup_tree_dirs(&setup.cgroup_name)
    );

    // A new container on the same state volume (an upgrade, a rescheduled pod) resumes it.
    let mut container = setup.run("second");
    wait_until(Duration::from_secs(20), "the agent resumed", || {
        setup.task("agent")["attempt"] == 2 && setup.task("agent")["state"] == "running"
    });
    wait_until(Duration::from_secs(10), "its first line", || {
        std::fs::read_to_string(setup.state().join("tasks/agent/run/output.log"))
            .unwrap_or_default()
            .contains("uid=1000 resumed=1 attempt=2")
    });
    let members = pid_namespace_of(container.init_pid());
    assert_eq!(container.stop(), 0, "{}", container.log());
    assert!(members().is_empty(), "processes left in the container");
    assert!(cgroup_tree_dirs(&setup.cgroup_name).is_empty());
}

/// A container on a hybrid host whose engine mounts the v1 controllers only (crun's and runc's
/// default there): keel init mounts a cgroup2 hierarchy, says so, and the task starts.
#[test]
fn keel_init_mounts_cgroup2_in_a_container_on_a_hybrid_host_that_has_none() {
    let test = "keel_init_mounts_cgroup2_in_a_container_on_a_hybrid_host_that_has_none";
    if !require_root(test) || !require_tools(test, &["unshare", "capsh", "busybox", "ldd", "awk"]) {
        return;
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let hybrid = mountinfo.contains(" /sys/fs/cgroup/unified ") && mountinfo.contains(" - cgroup ");
    if !hybrid {
        // Pure cgroup v2 (the VM's scenarios): its engines always mount cgroup2.
        eprintln!("{test}: not a hybrid host (no /sys/fs/cgroup/unified): nothing to test here");
        return;
    }
    let scratch = Scratch::new("container-nocg2");
    let setup = Setup {
        cgroup_name: scratch.cgroup_name(),
        scratch,
        recipe: recipe(),
        without_cgroup2: true,
    };
    build_root(&setup.root(), &setup.recipe);
    std::fs::create_dir_all(setup.state()).unwrap();
    std::fs::create_dir_all(setup.units()).unwrap();
    std::fs::write(setup.units().join("agent.ron"), AGENT).unwrap();
    let mut container = setup.run("nocg2");
    wait_until(Duration::from_secs(30), "the agent to run", || {
        setup.task("agent")["progress"] == "ready"
    });
    let log = container.log();
    assert!(
        log.contains("no cgroup2 hierarchy in this container")
            && log.contains("mounted one at /sys/fs/cgroup/unified"),
        "{log}"
    );
    let task = setup.task("agent");
    assert_eq!(task["state"], "running", "{task}");
    assert_eq!(
        task["attempt"], 1,
        "a host-side refusal spent an attempt: {task}"
    );
    let members = pid_namespace_of(container.init_pid());
    assert_eq!(container.stop(), 0, "{}", container.log());
    assert!(members().is_empty(), "processes left in the container");
    assert!(
        cgroup_tree_dirs(&setup.cgroup_name).is_empty(),
        "cgroups left: {:?}",
        cgroup_tree_dirs(&setup.cgroup_name)
    );
}
