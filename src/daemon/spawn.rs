//! Turning a decision to start into a running shim: the attempt's spec, its environment
//! contract, and the clone3 call.

use crate::sandbox::protocol::{shim_argv, shim_env, shim_envp};
use crate::sandbox::spec::{self, AttemptSpec, SandboxSpec};
use crate::sandbox::start::clone::{clone_shim, task_pid_namespace};
use crate::sandbox::start::daemon::{resolve_launch, TemplateCache};
use crate::sandbox::templates::SandboxTemplates;
use crate::state::{attempt_lock_path, take_attempt_lock, StateDir};
use crate::sys::pidns::NamespaceId;
use crate::unit::Unit;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Host paths no agent needs and every agent running as root could otherwise read: password
/// hashes, SSH host keys, TLS private keys, sudo rules, container engines' sockets.
pub const DEFAULT_HIDDEN: [&str; 8] = [
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/sudoers.d",
    "/var/snap",
];

/// Output log size before rotation, and how many rotated files are kept.
pub const LOG_MAX_BYTES: u64 = 16 << 20;
pub const LOG_KEEP: u32 = 3;
/// `run/shim.log` is started afresh (the old one kept as `shim.log.1`) past this size.
const SHIM_LOG_MAX_BYTES: u64 = 1 << 20;

/// What the agent learns about its situation (DESIGN, "What the agent sees").
pub struct AttemptContext<'a> {
    pub unit_name: &'a str,
    pub attempt: u32,
    pub generation: u64,
    pub last_exit: Option<String>,
    pub last_progress: Option<String>,
    /// The named allow-lists of `keel.ron` (`network: Network(lists: ...)`): those the unit's
    /// `sandbox.network: Allow([...])` reaches go into the sandbox's spec.
    pub network_lists: &'a std::collections::BTreeMap<String, Vec<String>>,
}

/// The spec of one attempt: `resume_command` replaces `command` from attempt 2 on. The agent
/// runs in its sandbox: at `workdir`, with its progress file and checkpoint directory under
/// `/run/keel`, and keel's state directory out of sight.
pub fn attempt_spec(dirs: &StateDir, unit: &Unit, ctx: &AttemptContext<'_>) -> AttemptSpec {
    let run_dir = dirs.run_dir(ctx.unit_name);
    let argv = match (&unit.resume_command, ctx.attempt > 1) {
        (Some(resume), true) => resume.0.clone(),
        _ => unit.command.0.clone(),
    };
    // `network: Allow`: the proxy variables, for the tools that prefer a proxy to the
    // captured connections (the same policy either way); first, so the unit's env wins.
    let mut env: Vec<(String, String)> = match unit.sandbox.network {
        crate::unit::Network::Allow(_) => proxy_env(),
        _ => Vec::new(),
    };
    let secrets = task_secrets(unit);
    // With secrets, TLS to their hosts is keel's: the bundle that trusts its CA, named for
    // every runtime that reads a variable (before the unit's env, which wins).
    if !secrets.is_empty() {
        match crate::secrets::ca_bundle_target() {
            Some(bundle) => env.extend(ca_env(&bundle)),
            None => log::warn!(
                "{}: the host has no CA bundle ({}): TLS to the secrets' hosts will not verify",
                ctx.unit_name,
                crate::secrets::HOST_BUNDLES.join(", ")
            ),
        }
    }
    env.extend(unit.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    // The agent's secret is its placeholder (a name also in `env` is refused by validation).
    env.extend(
        secrets
            .iter()
            .map(|s| (s.name.clone(), s.placeholder.clone())),
    );
    let keel_vars = [
        ("KEEL_UNIT", ctx.unit_name.to_string()),
        ("KEEL_ATTEMPT", ctx.attempt.to_string()),
        (
            "KEEL_RESUMED",
            if ctx.attempt > 1 { "1" } else { "0" }.to_string(),
        ),
        ("KEEL_LAST_EXIT", ctx.last_exit.clone().unwrap_or_default()),
        ("KEEL_PROGRESS", spec::SANDBOX_PROGRESS.to_string()),
        (
            "KEEL_CHECKPOINT_DIR",
            spec::SANDBOX_CHECKPOINT_DIR.to_string(),
        ),
        (
            "KEEL_LAST_PROGRESS",
            ctx.last_progress.clone().unwrap_or_default(),
        ),
    ];
    env.extend(keel_vars.into_iter().map(|(k, v)| (k.to_string(), v)));
    let memory = unit.resources.memory_limit_bytes();
    let mut hidden = vec![dirs.root.clone()];
    // The agent runs as root (without capabilities) unless `sandbox.user` says otherwise, and
    // file modes do not stop root: the host's credential stores are hidden by default.
    hidden.extend(
        DEFAULT_HIDDEN
            .iter()
            .map(std::path::PathBuf::from)
            .filter(|p| std::fs::symlink_metadata(p).is_ok()),
    );
    hidden.extend(unit.sandbox.hidden.iter().map(std::path::PathBuf::from));
    // A secret's file is keel's to read, never the agent's: an agent that is root without a
    // user namespace of its own owns a root-owned 0600 file.
    hidden.extend(secrets.iter().filter_map(|s| match &s.source {
        crate::secrets::SecretSource::File(path) => Some(path.clone()),
        crate::secrets::SecretSource::Env(_) => None,
    }));
    let sandbox = SandboxSpec {
        workdir: unit.workdir.clone().into(),
        work_source: dirs.work_dir(ctx.unit_name),
        // Filled from checkout::prepare when the unit has a repo (wiring: the lead).
        checkout: None,
        new_root: spec::sandbox_root_path(&run_dir),
        progress_file: spec::progress_path(&run_dir),
        checkpoint_source: dirs.checkpoint_dir(ctx.unit_name),
        hidden,
        // Rootless: the agent's 0 is the daemon's user on the host, whose files (SSH keys,
        // cloud credentials, tokens) its permissions no longer keep from the agent: covered,
        // the task's own paths under it (the repository's objects, writable paths) bound back.
        veiled: rootless_home().into_iter().collect(),
        writable: unit.sandbox.writable.iter().map(Into::into).collect(),
        capabilities: unit.sandbox.capabilities.clone(),
        user: unit.sandbox.user.clone(),
        network: match &unit.sandbox.network {
            crate::unit::Network::Host => spec::SandboxNetwork::Host,
            crate::unit::Network::None => spec::SandboxNetwork::None,
            // The entries as written; only the lists they reach (a list `keel.ron` no longer
            // has is the relay's to refuse, with the policy's message).
            crate::unit::Network::Allow(entries) => spec::SandboxNetwork::Allow {
                entries: entries.clone(),
                lists: crate::config::network::lists_reached(entries, ctx.network_lists),
            },
        },
        // tmpfs pages are the task's memory: /tmp may use its whole limit, $HOME half.
        tmp_size: memory,
        home_size: memory / 2,
        // No writable path may reach them (the units directory: added by the caller).
        keel_dirs: spec::KeelDirs {
            state: Some(dirs.root.clone()),
            units: None,
        },
        // The task's block of host ids: given by the caller (`crate::daemon::id_blocks`).
        id_block: None,
        findings: None,
        secrets,
    };
    AttemptSpec {
        unit: ctx.unit_name.to_string(),
        generation: ctx.generation,
        attempt: ctx.attempt,
        argv,
        env,
        cwd: unit.workdir.clone().into(),
        run_dir,
        log_max_bytes: LOG_MAX_BYTES,
        log_keep: LOG_KEEP,
        sandbox: Some(sandbox),
        cgroup_v1_procs: Vec::new(),
    }
}

/// The unit's secrets for one attempt: a fresh placeholder for each (a secret validation
/// refused, with neither source or both, is left out).
pub fn task_secrets(unit: &Unit) -> Vec<crate::secrets::TaskSecret> {
    (unit.secrets.iter())
        .filter_map(|(name, secret)| {
            Some(crate::secrets::TaskSecret {
                name: name.clone(),
                placeholder: crate::secrets::placeholder(),
                source: secret.source()?,
                hosts: secret.normalised_hosts(),
                headers: secret.normalised_headers(),
            })
        })
        .collect()
}

/// Why `unit` cannot start now for a secret of keel's environment (`secret NAME: why`):
/// one that is not set, or not a value a header can carry. Read in the loop: no I/O.
pub fn env_secret_problem(unit: &Unit) -> Option<String> {
    unit.secrets.iter().find_map(|(name, secret)| {
        let source @ crate::secrets::SecretSource::Env(_) = secret.source()? else {
            return None;
        };
        crate::secrets::read_value(&source)
            .err()
            .map(|e| format!("secret {name}: {e}"))
    })
}

/// The variables that name the CA bundle (`bundle`, where the sandbox shows keel's).
pub fn ca_env(bundle: &Path) -> Vec<(String, String)> {
    let bundle = bundle.display().to_string();
    [
        "SSL_CERT_FILE",
        "NODE_EXTRA_CA_CERTS",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
    ]
    .into_iter()
    .map(|name| (name.to_string(), bundle.clone()))
    .collect()
}

/// The proxy variables of a sandbox with `network: Allow`: its relay's HTTP proxy on
/// `198.18.0.1` (`crate::network::relay_protocol::PROXY_PORT`), in both spellings
/// tools read, and what never goes through it (the sandbox's own loopback).
pub fn proxy_env() -> Vec<(String, String)> {
    // The address, not `host.keel.internal`: that name resolves only for a unit with a
    // `host:PORT` entry.
    let proxy = format!(
        "http://{}:{}",
        crate::network::fake::HOST_ADDRESS,
        crate::network::relay_protocol::PROXY_PORT
    );
    let no_proxy = "localhost,127.0.0.1,::1".to_string();
    let mut env = Vec::new();
    for name in ["http_proxy", "https_proxy"] {
        env.push((name.to_string(), proxy.clone()));
        env.push((name.to_uppercase(), proxy.clone()));
    }
    env.push(("no_proxy".to_string(), no_proxy.clone()));
    env.push(("NO_PROXY".to_string(), no_proxy));
    env
}

/// What must exist on the host before the shim builds the sandbox: the empty directory the
/// root is built on, and the progress file it binds (a file bind needs its source).
pub fn prepare_sandbox_sources(run_dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(spec::sandbox_root_path(run_dir))?;
    // 0600: the agent writes it as root, or as `sandbox.user`, to whom the shim gives it.
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(crate::state::PRIVATE_FILE_MODE)
        .open(spec::progress_path(run_dir))
        .map(drop)
}

/// The last non-empty line of the progress file, for `keel status` and `KEEL_LAST_PROGRESS`.
pub fn last_progress_line(run_dir: &Path) -> Option<String> {
    // Only the tail: agents append to this file, and it may grow large.
    use std::io::{Read, Seek, SeekFrom};
    let mut file = File::open(spec::progress_path(run_dir)).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(4096))).ok()?;
    let mut tail = Vec::with_capacity(4096);
    file.take(4096).read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    Some(line.chars().take(200).collect())
}

/// The namespaces the daemon made for an attempt: the task's user namespace and the
/// attempt's network namespace.
#[derive(Clone, Copy, Default)]
pub struct TaskNamespaces<'a> {
    pub userns: Option<BorrowedFd<'a>>,
    pub netns: Option<BorrowedFd<'a>>,
}

/// Spawn `keel shim --spec …` with a pidfd (its clone writes the spec: see
/// [`crate::sandbox::start::clone::launch_for_exec`]). The shim's own stderr goes to `run/shim.log`, never to the daemon: a
/// shim must outlive the daemon and its pipes.
///
/// `id_claim`: the task's host-wide claim on its block of host ids
/// (`crate::daemon::id_blocks::claims`): the shim keeps a copy of it for as long as it lives.
pub fn spawn_shim(
    spec: &AttemptSpec,
    cgroup: Option<BorrowedFd<'_>>,
    id_claim: Option<BorrowedFd<'_>>,
    templates: Option<&mut SandboxTemplates>,
    namespaces: TaskNamespaces<'_>,
) -> Result<(i32, OwnedFd), SpawnError> {
    // /proc/self/exe: this very binary, even if an upgrade replaced the file on disk.
    spawn_shim_program(
        spec,
        Path::new("/proc/self/exe"),
        cgroup,
        id_claim,
        templates,
        namespaces,
    )
}

/// [`spawn_shim`] with another `keel` binary as the shim (benchmarks link the library into a
/// program of their own).
///
/// `cgroup`: the attempt's v2 cgroup directory; the shim starts in it (`CLONE_INTO_CGROUP`), so
/// the agent and everything it starts are confined from their first instruction.
///
/// `templates`: build the sandbox on a copy of a template of its shape when there is one
/// (or one can be built); `None`: the whole mount plan, every time.
pub fn spawn_shim_program(
    spec: &AttemptSpec,
    keel: &Path,
    cgroup: Option<BorrowedFd<'_>>,
    id_claim: Option<BorrowedFd<'_>>,
    mut templates: Option<&mut SandboxTemplates>,
    namespaces: TaskNamespaces<'_>,
) -> Result<(i32, OwnedFd), SpawnError> {
    let TaskNamespaces { userns, netns } = namespaces;
    let lock = take_attempt_lock(&spec.run_dir)
        .map_err(|e| SpawnError::Open(attempt_lock_path(&spec.run_dir).display().to_string(), e))?
        .ok_or(SpawnError::PreviousShimAlive)?;
    prepare_sandbox_sources(&spec.run_dir)
        .map_err(|e| SpawnError::Open(spec.run_dir.display().to_string(), e))?;
    // The agent's start, resolved here on the host (its user, $HOME, the host's /); the
    // shim's clone forks it before its own exec (crate::sandbox::start::clone).
    let mut launch = resolve_launch(
        spec,
        shim_env(),
        templates
            .as_deref_mut()
            .map(|t| t as &mut dyn TemplateCache),
    )
    .map_err(|e| match e.refused_by_host() {
        true => SpawnError::Refused(e.to_string()),
        false => SpawnError::Launch(e.to_string()),
    })?;
    // The task's user namespace, made by the daemon (`userns`: a descriptor the clone
    // inherits, or the spare is sent); without one, the shim's clone makes it.
    if let (Some(userns), Some(sandbox)) = (userns, launch.sandbox_mut()) {
        if sandbox.id_block().is_some() {
            let held = userns
                .try_clone_to_owned()
                .map_err(|e| SpawnError::Open("the task's user namespace".into(), e))?;
            sandbox.hold_user_namespace(held);
        }
    }
    // The attempt's network namespace (`network: None | Allow`), made by the daemon.
    if let (Some(netns), Some(sandbox)) = (netns, launch.sandbox_mut()) {
        let held = netns
            .try_clone_to_owned()
            .map_err(|e| SpawnError::Open("the task's network namespace".into(), e))?;
        sandbox.hold_network_namespace(held);
    }
    let spec_path = spec::attempt_path(&spec.run_dir);
    // The previous attempt's spec goes before the clone writes this one: a daemon that finds
    // the lock held reads no older attempt's spec for it (recovery.rs).
    match std::fs::remove_file(&spec_path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(SpawnError::Open(spec_path.display().to_string(), e))
        }
        _ => {}
    }
    let devnull = File::open("/dev/null").map_err(|e| SpawnError::Open("/dev/null".into(), e))?;
    let shim_log_path = spec::shim_log_path(&spec.run_dir);
    // The shims' own log is appended to by every attempt: keep one old generation of it.
    if std::fs::metadata(&shim_log_path).is_ok_and(|m| m.len() > SHIM_LOG_MAX_BYTES) {
        let _ = std::fs::rename(&shim_log_path, spec.run_dir.join("shim.log.1"));
    }
    let shim_log = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(crate::state::PRIVATE_FILE_MODE)
        .open(&shim_log_path)
        .map_err(|e| SpawnError::Open(shim_log_path.display().to_string(), e))?;
    // The task's user namespace, when it has one: the owner of its PID namespace.
    let task_userns = launch.sandbox().and_then(|s| s.user_namespace());
    // A spare shim takes the start when there is one made for the task (crate::sandbox::spare):
    // the same work, less of it on the agent's path.
    let spare = match (&spec.sandbox, templates) {
        (Some(_), Some(templates)) => match task_userns.map(NamespaceId::of).transpose() {
            // Only a spare made for this task's user namespace (crate::sandbox::spare).
            Ok(task) => templates.take_spare(task),
            Err(e) => {
                log::warn!("cannot identify the task's user namespace ({e}): no spare shim");
                None
            }
        },
        _ => None,
    };
    if let Some(spare) = spare {
        let pid = spare.pid();
        match spare.assign(
            spec,
            &spec_path,
            &launch,
            lock.as_fd(),
            shim_log.as_fd(),
            cgroup,
            id_claim,
        ) {
            Ok(started) => return Ok(started),
            Err(e) => log::warn!("spare shim {pid} cannot take the start ({e}): starting as usual"),
        }
    }
    let program =
        CString::new(keel.as_os_str().as_encoded_bytes()).map_err(|_| SpawnError::NulInPath)?;
    let argv = shim_argv(&spec_path).map_err(|_| SpawnError::NulInPath)?;
    let envp = shim_envp();
    // Inherited by the clone, which keeps it for the shim (launch_for_exec).
    let id_claim_fd = id_claim.map(|fd| fd.as_raw_fd());
    // The shim is PID 1 of the task's own PID namespace: the agent and everything it starts
    // see only each other, and all of it dies with the shim. Owned by the task's user
    // namespace when it has one (made apart, then cloned into: crate::sys::pidns); else a
    // new one of the host's (CLONE_NEWPID).
    let pid_namespace = match (&spec.sandbox, task_userns) {
        (Some(_), Some(userns)) => task_pid_namespace(userns),
        _ => None,
    };
    let request = crate::sys::SpawnRequest {
        program: &program,
        argv: &argv,
        envp: &envp,
        stdin: devnull.as_raw_fd(),
        stdout: shim_log.as_raw_fd(),
        stderr: shim_log.as_raw_fd(),
        extra_flags: if spec.sandbox.is_some() && pid_namespace.is_none() {
            libc::CLONE_NEWPID as u64
        } else {
            0
        },
        pid_namespace: pid_namespace.as_ref().map(|ns| ns.as_fd()),
        cgroup_fd: cgroup.map(|fd| fd.as_raw_fd()),
        keep_as_fd3: Some(lock.as_raw_fd()),
        keep_fds: &[],
        nofile: super::ORIGINAL_NOFILE.get().copied(),
        // The clone runs keel's code before its exec: always so (crate::sandbox::start::clone).
        signals_blocked: true,
    };
    // The clone writes the spec itself, once the agent has started: off the agent's path
    // (a temporary file and a rename: 0.1 ms on tmpfs, a millisecond or more on a slow
    // disk), and never missing for the shim, which reads it after its exec.
    // Our descriptor of the lock closes when `lock` drops; the shim's copy keeps it held.
    clone_shim(&request, &launch, spec, &spec_path, id_claim_fd).map_err(SpawnError::Clone)
}

/// The home directory of the host user a rootless daemon stands for (`/etc/passwd`, read as
/// text), unless it is `/` or missing.
fn rootless_home() -> Option<std::path::PathBuf> {
    let (uid, _) = crate::sys::own_userns::host_ids()?;
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let home = home_of(uid, &passwd)?;
    (home != Path::new("/") && home.is_absolute() && home.is_dir()).then_some(home)
}

/// The home field of the first `/etc/passwd` line of `uid`.
pub(crate) fn home_of(uid: u32, passwd: &str) -> Option<std::path::PathBuf> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 7 && fields[2].parse() == Ok(uid)).then(|| fields[5].into())
    })
}

#[derive(Debug)]
pub enum SpawnError {
    Open(String, io::Error),
    NulInPath,
    Clone(io::Error),
    PreviousShimAlive,
    /// The agent's start could not be resolved (an unknown `sandbox.user`, say): the attempt
    /// failed to spawn, for a reason the unit's author can fix.
    Launch(String),
    /// The agent's start could not be resolved for a reason of the host's (a `sandbox.user`
    /// it does not have, a capability keel lacks): the task waits, blocked.
    Refused(String),
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpawnError::Open(path, e) => write!(f, "cannot open {path}: {e}"),
            SpawnError::NulInPath => f.write_str("state directory path contains a NUL byte"),
            SpawnError::Launch(message) | SpawnError::Refused(message) => f.write_str(message),
            SpawnError::PreviousShimAlive => f.write_str(
                "run/attempt.lock is held (by a shim of an earlier attempt, or by `keel diff` looking at the checkout): not starting a second one",
            ),
            SpawnError::Clone(e) if e.raw_os_error() == Some(libc::EPERM) => write!(
                f,
                "cannot create the task's PID namespace (clone3: {e}): run keel as root — namespaces need CAP_SYS_ADMIN"
            ),
            SpawnError::Clone(e) => write!(
                f,
                "clone3 of the shim failed: {e} (out of pids or memory? see pids.max and ulimit -u)"
            ),
        }
    }
}

#[cfg(test)]
mod tests;
