//! The engines `tests/engines.rs` drives — Podman, and Docker through a `dockerd` of the test's
//! own (its data, exec root, socket and cgroup parent in the test's scratch space, no bridge,
//! no iptables rules, the host's forwarding untouched) — and what they are fed without an
//! image registry: a base image built once with `mmdebstrap` (cached in the git-ignored
//! `.vm-cache/engines/`), a static keel (the musl build `scripts/vm-test` makes too) imported
//! as an image holding `/keel`.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Tools (and the Debian package that has each) a test needs: a failure under CI, a skip
/// elsewhere.
pub fn require_tools(test: &str, tools: &[(&str, &str)]) -> bool {
    let missing: Vec<&str> = (tools.iter())
        .filter(|(tool, _)| !has_tool(tool))
        .map(|(_, package)| *package)
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        !privileged_required(),
        "{test}: missing tools: apt-get install --no-install-recommends {} (.ci/run installs them)",
        missing.join(" ")
    );
    eprintln!("{test}: skipped: missing {missing:?}");
    false
}

fn has_tool(tool: &str) -> bool {
    if tool.starts_with('/') {
        return Path::new(tool).exists();
    }
    (Command::new("sh").args(["-c", &format!("command -v {tool}")]))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The musl target and musl-gcc, for the static keel: a failure under CI, a skip elsewhere.
pub fn require_musl(test: &str) -> bool {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .is_ok_and(|o| {
            stdout_of(&o)
                .lines()
                .any(|l| l == "x86_64-unknown-linux-musl")
        });
    if installed && has_tool("musl-gcc") {
        return true;
    }
    assert!(
        !privileged_required(),
        "{test}: the static keel needs `rustup target add x86_64-unknown-linux-musl` and musl-gcc (musl-tools)"
    );
    eprintln!("{test}: skipped: no musl target or musl-gcc");
    false
}

/// `.vm-cache/engines/bookworm-minbase.tar`: `mmdebstrap --variant=minbase bookworm`, made when
/// missing (from Debian's mirrors, ~20 s), kept for the next runs.
pub fn base_tar() -> PathBuf {
    static TAR: OnceLock<PathBuf> = OnceLock::new();
    TAR.get_or_init(|| {
        let dir = Path::new(ROOT).join(".vm-cache/engines");
        let tar = dir.join("bookworm-minbase.tar");
        if tar.exists() {
            return tar;
        }
        std::fs::create_dir_all(&dir).unwrap();
        let partial = dir.join(format!(
            "bookworm-minbase.partial-{}.tar",
            std::process::id()
        ));
        let started = Instant::now();
        let out = Command::new("mmdebstrap")
            .args(["--quiet", "--variant=minbase", "--format=tar", "bookworm"])
            .arg(&partial)
            .output()
            .unwrap();
        if !out.status.success() {
            let _ = std::fs::remove_file(&partial);
            panic!(
                "mmdebstrap --variant=minbase bookworm failed (Debian's mirrors?): {}",
                stderr_of(&out)
            );
        }
        std::fs::rename(&partial, &tar).unwrap();
        eprintln!(
            "engines: built {} in {:?}",
            tar.display(),
            started.elapsed()
        );
        tar
    })
    .clone()
}

/// The static keel (`cargo build --release --target x86_64-unknown-linux-musl`, the command
/// `scripts/vm-test` runs: one build for both).
pub fn static_keel() -> PathBuf {
    static KEEL: OnceLock<PathBuf> = OnceLock::new();
    KEEL.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let started = Instant::now();
        let out = Command::new(cargo)
            .args(["build", "--quiet", "--release"])
            .args(["--target", "x86_64-unknown-linux-musl"])
            .current_dir(ROOT)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the static build failed: {}",
            stderr_of(&out)
        );
        eprintln!(
            "engines: static keel built (or up to date) in {:?}",
            started.elapsed()
        );
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(ROOT).join("target"));
        target.join("x86_64-unknown-linux-musl/release/keel")
    })
    .clone()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Podman,
    Docker,
}

pub struct Engine {
    pub kind: Kind,
    program: PathBuf,
    envs: Vec<(String, String)>,
    /// Docker's daemon, the test's own; stopped (and its directories removed) last.
    _dockerd: Option<Dockerd>,
}

impl Engine {
    pub fn podman() -> Engine {
        Engine {
            kind: Kind::Podman,
            program: "podman".into(),
            envs: Vec::new(),
            _dockerd: None,
        }
    }

    /// Debian's docker.io: its client (/usr/bin/docker: BuildKit built in, where a newer
    /// client without the buildx plugin has only the legacy builder, which builds every stage
    /// and would pull rust:1-bookworm) and a dockerd of the test's own under `scratch`.
    pub fn docker(scratch: &Path) -> Engine {
        let dockerd = Dockerd::start(scratch);
        Engine {
            kind: Kind::Docker,
            program: "/usr/bin/docker".into(),
            envs: vec![
                (
                    "DOCKER_HOST".into(),
                    format!("unix://{}", dockerd.socket.display()),
                ),
                ("DOCKER_BUILDKIT".into(), "1".into()),
            ],
            _dockerd: Some(dockerd),
        }
    }

    pub fn name(&self) -> &'static str {
        match self.kind {
            Kind::Podman => "podman",
            Kind::Docker => "docker",
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.program);
        command.args(args).stdin(Stdio::null());
        for (k, v) in &self.envs {
            command.env(k, v);
        }
        command
    }

    pub fn output(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `args`, which must succeed: its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.output(args);
        assert!(
            out.status.success(),
            "{} {args:?} failed: {}{}",
            self.name(),
            stdout_of(&out),
            stderr_of(&out)
        );
        stdout_of(&out)
    }

    /// The engine's version (Docker: the daemon's) and its runtime's.
    pub fn versions(&self) -> String {
        let (format, runtime) = match self.kind {
            Kind::Podman => ("{{.Client.Version}}", "runc"),
            Kind::Docker => ("{{.Server.Version}}", "runc"),
        };
        let version = self.ok(&["version", "--format", format]);
        let runc = Command::new(runtime).arg("--version").output().unwrap();
        format!(
            "{} {}, {}",
            self.name(),
            version.trim(),
            stdout_of(&runc).lines().next().unwrap_or("")
        )
    }

    /// An image's reference: Podman stores a bare name under `localhost/`.
    pub fn image(&self, name: &str, tag: &str) -> String {
        match self.kind {
            Kind::Podman => format!("localhost/{name}:{tag}"),
            Kind::Docker => format!("{name}:{tag}"),
        }
    }

    /// Build flags that are the engine's, not the recipe's: Podman never pulls and keeps the
    /// HEALTHCHECK (an OCI image drops it); BuildKit takes local images first, and its RUN
    /// steps use the host's network (the test's dockerd has no bridge; the runtime stage's
    /// apt-get needs Debian's mirrors).
    pub fn build_flags(&self) -> &'static [&'static str] {
        match self.kind {
            Kind::Podman => &["--pull=never", "--format", "docker"],
            Kind::Docker => &["--network", "host"],
        }
    }

    /// The container's health as the engine reports it.
    pub fn health(&self, container: &str) -> String {
        let out = self.output(&["inspect", "--format", "{{.State.Health.Status}}", container]);
        stdout_of(&out).trim().to_string()
    }
}

/// A dockerd of the test's own: nothing of the host's Docker (if any) is touched, nothing of
/// it outlives the test.
struct Dockerd {
    child: KillOnDrop,
    socket: PathBuf,
    dirs: Vec<PathBuf>,
    cgroup_parent: String,
    log: PathBuf,
}

impl Dockerd {
    fn start(scratch: &Path) -> Dockerd {
        let root = scratch.join("dockerd");
        // containerd's sockets live under the exec root: a short path (sun_path is 108 bytes).
        let exec_root = PathBuf::from(format!("/tmp/keel-dockerd-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let config = root.join("daemon.json");
        std::fs::write(&config, "{}\n").unwrap();
        let socket = root.join("docker.sock");
        let log = root.join("dockerd.log");
        let cgroup_parent = format!("keel-test-dockerd-{}", std::process::id());
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new("dockerd")
            .arg("--config-file")
            .arg(&config)
            .arg("--data-root")
            .arg(root.join("data"))
            .arg("--exec-root")
            .arg(&exec_root)
            .arg("--pidfile")
            .arg(root.join("dockerd.pid"))
            .arg("--host")
            .arg(format!("unix://{}", socket.display()))
            .arg(format!("--cgroup-parent=/{cgroup_parent}"))
            // No docker0 bridge, no iptables rules, net.ipv4.ip_forward left alone: the
            // containers get their own lo only (the recipe's tasks need no more).
            .args(["--bridge=none", "--iptables=false", "--ip-masq=false"])
            .arg("--ip-forward=false")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let mut dockerd = Dockerd {
            child: KillOnDrop(child),
            socket,
            dirs: vec![exec_root, root.join("data")],
            cgroup_parent,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let up = Command::new("/usr/bin/docker")
                .env(
                    "DOCKER_HOST",
                    format!("unix://{}", dockerd.socket.display()),
                )
                .args(["version", "--format", "{{.Server.Version}}"])
                .output()
                .unwrap();
            if up.status.success() {
                break;
            }
            if let Some(status) = dockerd.child.try_wait().unwrap() {
                panic!(
                    "dockerd exited ({status}) before it answered:\n{}",
                    std::fs::read_to_string(&dockerd.log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "dockerd did not answer within 60 s:\n{}",
                std::fs::read_to_string(&dockerd.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        dockerd
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        // SIGTERM: dockerd stops its containerd and unmounts its layers.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        // (A dockerd still alive is killed by KillOnDrop.)
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for dir in &self.dirs {
            let prefix = dir.to_string_lossy().into_owned();
            let mut under: Vec<&str> = (mountinfo.lines())
                .filter_map(|l| l.split(' ').nth(4))
                .filter(|m| m.starts_with(&prefix))
                .collect();
            under.sort_by_key(|m| std::cmp::Reverse(m.len()));
            for mount in under {
                let _ = Command::new("umount").args(["-l", mount]).status();
            }
            let _ = std::fs::remove_dir_all(dir);
        }
        // Its cgroup parent, in every hierarchy, deepest first.
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            remove_tree(&hierarchy.path().join(&self.cgroup_parent));
        }
        remove_tree(&Path::new("/sys/fs/cgroup").join(&self.cgroup_parent));
    }
}

/// A cgroup directory and the ones below it, deepest first (empty cgroups only: rmdir).
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
}

/// What a run made, removed by name when the test ends (or panics): the container, its state
/// volume and the images. Nothing else of the engine's is touched.
pub struct Made<'a> {
    pub engine: &'a Engine,
    pub container: String,
    pub volume: String,
    pub images: Vec<String>,
}

impl Drop for Made<'_> {
    fn drop(&mut self) {
        let e = self.engine;
        let rm: &[&str] = match e.kind {
            Kind::Podman => &["rm", "--force", "--time", "0"],
            Kind::Docker => &["rm", "--force"],
        };
        let _ = e
            .command(&[rm, &[self.container.as_str()]].concat())
            .output();
        let _ = e.output(&["volume", "rm", "--force", &self.volume]);
        for image in self.images.iter().rev() {
            let _ = e.output(&["rmi", "--force", image]);
        }
    }
}
