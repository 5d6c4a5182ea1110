//! The daemon's part of a start: everything the agent's start needs, resolved on the host
//! before any fork ([`Launch`]). The user and `$HOME` (from the texts of `/etc/passwd` and
//! `/etc/group`, never NSS), the task's own directories given to that user, the listing of the
//! host's `/`, the privilege plan and the seccomp filter ([`prepare`], giving the sandbox as
//! [`Prepared`]), a template of the sandbox's shape when the daemon keeps one
//! ([`resolve_launch`]), and the agent's argv, environment and PATH candidates
//! ([`crate::sys::process::ExecPlan`]).
//!
//! Run by the daemon for each start; a shim started on its own (`keel shim --spec`) runs it
//! too, and a spare shim rebuilds the [`Prepared`] the daemon sent it
//! ([`Prepared::from_parts`]). What the children do with it is the next files':
//! [`super::clone`] (the process that becomes the shim) and [`super::agent_child`].

use crate::sandbox::agent::agent_env;
use crate::sandbox::mounts::template::AttemptOnTemplate;
use crate::sandbox::mounts::{self, RootEntry, SandboxLayout};
use crate::sandbox::privileges::{self, PrivilegePlan};
use crate::sandbox::protocol::PreparedParts;
use crate::sandbox::spec::{AttemptSpec, CheckoutFiles, IdBlock, SandboxNetwork, SandboxSpec};
use crate::sys::process::ExecPlan;
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// Everything the agent's start needs, resolved on the host before any fork: its argv,
/// environment and working directory, and its sandbox (user, `$HOME`, the host's `/`).
pub struct Launch {
    pub(super) plan: ExecPlan,
    pub(super) sandbox: Option<Prepared>,
    pub(super) v1_procs: Vec<PathBuf>,
}

impl Launch {
    /// `inherited`: the environment the agent's is made from (the supervisor's own variables
    /// are removed); the sandbox is the whole mount plan (the daemon's starts may be built on a
    /// template: [`resolve_launch`]). Errors say what to fix (an
    /// unknown user, a program path with a NUL).
    pub fn new<I>(spec: &AttemptSpec, inherited: I) -> Result<Launch, ResolveError>
    where
        I: IntoIterator<Item = (OsString, OsString)>,
    {
        let sandbox = match &spec.sandbox {
            Some(sandbox) => Some(prepare(sandbox, crate::sandbox::mounts::list_host_root)?),
            None => None,
        };
        Launch::with_sandbox(spec, inherited, sandbox)
    }

    /// [`Launch::new`] with the sandbox resolved already (a spare shim gets it from the
    /// daemon: [`crate::sandbox::spare`]).
    pub fn with_sandbox<I>(
        spec: &AttemptSpec,
        inherited: I,
        sandbox: Option<Prepared>,
    ) -> Result<Launch, ResolveError>
    where
        I: IntoIterator<Item = (OsString, OsString)>,
    {
        let mut spec_env = spec.env.clone();
        if let Some(sandbox) = &sandbox {
            // Before the unit's variables: a HOME the unit sets itself wins.
            spec_env.insert(0, ("HOME".into(), sandbox.home.display().to_string()));
        }
        let env = agent_env(inherited, &spec_env);
        let plan = ExecPlan::new(&spec.argv, &env, &spec.cwd).map_err(ResolveError::Command)?;
        Ok(Launch {
            plan,
            sandbox,
            v1_procs: spec.cgroup_v1_procs.clone(),
        })
    }
}

impl Launch {
    /// The descriptor of the sandbox template this start uses, if any.
    pub fn template_fd(&self) -> Option<RawFd> {
        self.sandbox.as_ref().and_then(|s| s.template_fd())
    }

    /// The resolved sandbox, if the attempt has one.
    pub fn sandbox(&self) -> Option<&Prepared> {
        self.sandbox.as_ref()
    }

    /// The resolved sandbox, to hand it the task's user namespace.
    pub fn sandbox_mut(&mut self) -> Option<&mut Prepared> {
        self.sandbox.as_mut()
    }
}

/// The daemon's sandbox templates, as a start sees them ([`resolve_launch`]): the daemon's
/// `crate::sandbox::templates::SandboxTemplates`.
pub trait TemplateCache {
    /// The listing of the host's `/` (the templates', kept while `/` does not change).
    fn host_listing(&mut self) -> std::io::Result<Vec<RootEntry>>;
    /// Put `prepared` on a template of its shape when there is one (built now if need be).
    fn put_on_template(&mut self, prepared: &mut Prepared);
}

/// The attempt's start resolved on the host, as [`Launch::new`] does, its sandbox built on a
/// copy of a template of its shape when `templates` has one (or can build one); `None`: the
/// whole mount plan. The daemon's side of a start: `inherited` is the environment the agent's
/// is made from.
pub fn resolve_launch<I>(
    spec: &AttemptSpec,
    inherited: I,
    templates: Option<&mut dyn TemplateCache>,
) -> Result<Launch, ResolveError>
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    let Some(templates) = templates else {
        return Launch::new(spec, inherited);
    };
    let sandbox = match &spec.sandbox {
        Some(sandbox) => {
            let listing = || templates.host_listing();
            let mut prepared = prepare(sandbox, listing)?;
            templates.put_on_template(&mut prepared);
            Some(prepared)
        }
        None => None,
    };
    Launch::with_sandbox(spec, inherited, sandbox)
}

/// The namespace an attempt on a template starts from.
pub(super) enum TemplateNs {
    /// The template itself: the agent's child joins and copies it.
    Template(OwnedFd),
    /// A copy a spare shim made ahead, `/proc` and `/dev/pts` mounted: joined as it is
    /// ([`AttemptOnTemplate::prepare_copy`]).
    PreparedCopy(OwnedFd),
}

/// Everything the agent's child needs, computed before the fork.
pub struct Prepared {
    pub(super) layout: SandboxLayout,
    pub(super) host_root: Vec<RootEntry>,
    pub(super) privileges: PrivilegePlan,
    pub(super) network_none: bool,
    /// The sandbox's shape as a copy of a template, and the namespace it starts from.
    pub(super) template: Option<(AttemptOnTemplate, TemplateNs)>,
    /// `$HOME` inside the sandbox.
    pub home: PathBuf,
    /// The host ids of the task's user namespace (`None`: the agent's ids are the host's).
    pub(super) id_block: Option<IdBlock>,
    /// That namespace, when the daemon made it (else the shim's clone makes it).
    pub(super) userns: Option<OwnedFd>,
    /// The attempt's network namespace, when the daemon made it (`network: None | Allow`:
    /// `crate::network::task_namespace`); else one of its own is made by the agent's child.
    pub(super) netns: Option<OwnedFd>,
    /// The seccomp filter, built here (once per process) rather than in the agent's child,
    /// which shares its parent's memory and should allocate little.
    pub(super) seccomp: &'static [crate::sys::seccomp::Instruction],
    /// The host-state lines of the paths the unit names, as the start's preparation job read
    /// them in a worker ([`crate::sandbox::spec::PathFindings`]; empty when none ran).
    pub(super) path_lines: std::collections::BTreeMap<PathBuf, String>,
}

/// Resolve the sandbox of `spec`. Errors say what to fix (an unknown user, a capability
/// name) and are reported as the attempt's spawn failure. `list_host_root`: the listing of
/// the host's `/` — [`mounts::list_host_root`], or the daemon's templates' (kept while `/`
/// does not change: [`crate::sandbox::templates`]).
pub fn prepare(
    spec: &SandboxSpec,
    list_host_root: impl FnOnce() -> std::io::Result<Vec<RootEntry>>,
) -> Result<Prepared, ResolveError> {
    // Before anything is done for it: a writable path may not give the agent keel's state.
    spec.check_writable().map_err(ResolveError::Writable)?;
    // The user databases only matter for `sandbox.user` (root needs no lookup).
    let read = |path: &str| match &spec.user {
        Some(_) => std::fs::read_to_string(path).unwrap_or_default(),
        None => String::new(),
    };
    let (passwd, group) = (read("/etc/passwd"), read("/etc/group"));
    let mut privileges = privileges::plan(
        &spec.capabilities,
        spec.user.as_deref(),
        spec.network.own_namespace(),
        &passwd,
        &group,
    )
    .map_err(ResolveError::Privileges)?;
    // Read here, on the host's /proc, for the child that drops the bounding set.
    privileges::last_cap();
    // CAP_NET_ADMIN is the task's own network's only with a user namespace of its own:
    // without one it holds over the host's, and reaches the host's network namespace (its
    // shim, PID 1, is in it: `ip link add … netns 1`).
    let net_admin = (spec.capabilities.iter())
        .any(|c| c.to_ascii_uppercase().trim_start_matches("CAP_") == "NET_ADMIN");
    if net_admin && spec.id_block.is_none() {
        return Err(ResolveError::NetAdminWithoutUserNamespace);
    }
    // A daemon in a user namespace of its own (rootless) builds the sandbox there: the
    // agent's uid must be one that namespace maps.
    let in_user_namespace = !crate::sys::own_userns::in_initial_user_namespace();
    if let (true, None, Some((uid, gid))) = (in_user_namespace, spec.id_block, privileges.user) {
        if !crate::sys::own_userns::maps_own(uid, gid) {
            return Err(ResolveError::UnmappedUser { uid, gid });
        }
        // `sandbox.user: "root"` where setgroups is denied (rootless): the agent is root
        // already, and its groups cannot be changed.
        if (uid, gid) == (0, 0) && crate::sys::own_userns::setgroups_denied() {
            privileges.user = None;
        }
    }
    let home = home_for(privileges.user.map(|(uid, _)| uid), &passwd);
    // `$HOME` is a tmpfs the host side mounts: owned by the agent's ids as the host knows them.
    let home_owner = match spec.id_block {
        Some(block) => Some(host_ids(block, privileges.user.unwrap_or((0, 0)))?),
        None => privileges.user,
    };
    if let Some((uid, gid)) = privileges.user {
        // The agent's own directories must be writable by the user it runs as.
        for path in [
            &spec.work_source,
            &spec.checkpoint_source,
            &spec.progress_file,
        ] {
            chown(path, uid, gid)?;
        }
    }
    let layout = SandboxLayout {
        new_root: spec.new_root.clone(),
        work_source: spec.work_source.clone(),
        checkout: spec.checkout.clone(),
        workdir: spec.workdir.clone(),
        progress_file: spec.progress_file.clone(),
        checkpoint_source: spec.checkpoint_source.clone(),
        home: home.clone(),
        home_owner,
        tmp_size: spec.tmp_size,
        home_size: spec.home_size,
        hidden: spec.hidden.clone(),
        veiled: spec.veiled.clone(),
        writable: spec.writable.clone(),
        // /etc/resolv.conf may point into /run (systemd-resolved), which the sandbox has its
        // own of: keep the host's resolver directory visible, read-only.
        // Not with a network of its own: that directory holds the host resolver's own
        // sockets (systemd-resolved's varlink `io.systemd.Resolve`), a way out past the
        // namespace (a unix socket by path is no network's); `Allow` has keel's resolv.conf.
        readonly: match spec.network.own_namespace() {
            true => Vec::new(),
            false => mounts::resolv_conf_run_dir().into_iter().collect(),
        },
        in_user_namespace,
        // A daemon in a user namespace of its own may not mount a sysfs over the host's
        // (mount_namespaces(7): a filesystem it could see more of than it is shown).
        own_network: spec.network.own_namespace() && !in_user_namespace,
        resolver_file: match &spec.network {
            SandboxNetwork::Allow { .. } => resolver_file(spec.keel_dirs.state.as_deref()),
            _ => None,
        },
        ca_bundle: match spec.secrets.is_empty() {
            true => None,
            false => ca_bundle(spec.keel_dirs.state.as_deref()),
        },
    };
    let host_root = list_host_root().map_err(ResolveError::ListHostRoot)?;
    Ok(Prepared {
        layout,
        host_root,
        privileges,
        network_none: spec.network.own_namespace(),
        template: None,
        home,
        id_block: spec.id_block,
        userns: None,
        netns: None,
        #[cfg(target_arch = "x86_64")]
        seccomp: crate::sandbox::seccomp::filter(),
        #[cfg(not(target_arch = "x86_64"))]
        seccomp: &[],
        path_lines: spec
            .findings
            .as_ref()
            .map(|f| f.lines.clone())
            .unwrap_or_default(),
    })
}

impl Prepared {
    /// The host-state lines a worker read of the paths the unit names (templates' key).
    pub fn path_lines(&self) -> &std::collections::BTreeMap<PathBuf, String> {
        &self.path_lines
    }

    /// The checkout's overlay upper layer (host path), if the task has one.
    pub fn upper_layer(&self) -> Option<&Path> {
        match &self.layout.checkout.as_ref()?.files {
            CheckoutFiles::Overlay { upper, .. } => Some(upper),
            CheckoutFiles::Bind(_) => None,
        }
    }

    /// Hold the attempt's network namespace, made by the daemon.
    pub fn hold_network_namespace(&mut self, netns: OwnedFd) {
        self.netns = Some(netns);
    }

    /// The attempt's network namespace, when the daemon made it.
    pub fn network_namespace(&self) -> Option<BorrowedFd<'_>> {
        self.netns.as_ref().map(|fd| fd.as_fd())
    }

    /// Hold the task's user namespace, made by the daemon (for the block of
    /// [`Prepared::id_block`]).
    pub fn hold_user_namespace(&mut self, userns: OwnedFd) {
        self.userns = Some(userns);
    }

    /// The task's user namespace, if the daemon made it.
    pub fn user_namespace(&self) -> Option<BorrowedFd<'_>> {
        self.userns.as_ref().map(|fd| fd.as_fd())
    }

    /// The host ids of the task's user namespace, if it has one.
    pub fn id_block(&self) -> Option<IdBlock> {
        self.id_block
    }

    /// The mounts this sandbox needs (its shape, with [`Prepared::host_root`]).
    pub fn layout(&self) -> &SandboxLayout {
        &self.layout
    }

    /// The host's `/` as it was listed for this sandbox.
    pub fn host_root(&self) -> &[RootEntry] {
        &self.host_root
    }

    /// Build on `ns`, a template of this sandbox's shape (`attempt`): the agent's start then
    /// mounts a dozen things, not sixty ([`crate::sandbox::templates`] chooses it).
    pub fn build_on_template(&mut self, attempt: AttemptOnTemplate, ns: OwnedFd) {
        self.template = Some((attempt, TemplateNs::Template(ns)));
    }

    /// The descriptor of the namespace this sandbox is built on, if any.
    pub fn template_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.template.as_ref().map(|(_, ns)| match ns {
            TemplateNs::Template(fd) | TemplateNs::PreparedCopy(fd) => fd.as_raw_fd(),
        })
    }

    /// The template this sandbox is built on, if any.
    pub fn on_template(&self) -> Option<&AttemptOnTemplate> {
        self.template.as_ref().map(|(attempt, _)| attempt)
    }

    /// What a spare shim needs to start this sandbox (with the template's descriptor).
    pub fn parts(&self) -> PreparedParts {
        PreparedParts {
            layout: self.layout.clone(),
            host_root: self.host_root.clone(),
            privileges: self.privileges,
            network_none: self.network_none,
            template: self.on_template().cloned(),
            home: self.home.clone(),
            id_block: self.id_block,
        }
    }

    /// In a spare shim: the sandbox the daemon resolved (`parts`), on `template` — the
    /// template's namespace it was sent — or, better, on `prepared`: a copy the spare made
    /// ahead, when it is a copy of the same template. Without either, the whole plan.
    pub fn from_parts(
        parts: PreparedParts,
        template: Option<OwnedFd>,
        prepared: Option<(AttemptOnTemplate, OwnedFd)>,
        userns: Option<OwnedFd>,
    ) -> Prepared {
        let ns = match (&parts.template, prepared, template) {
            (Some(attempt), Some((made_for, copy)), _) if attempt.can_use_copy_of(&made_for) => {
                Some(TemplateNs::PreparedCopy(copy))
            }
            (Some(_), _, Some(fd)) => Some(TemplateNs::Template(fd)),
            _ => None,
        };
        Prepared {
            layout: parts.layout,
            host_root: parts.host_root,
            privileges: parts.privileges,
            network_none: parts.network_none,
            template: parts.template.zip(ns),
            home: parts.home,
            id_block: parts.id_block,
            userns,
            netns: None,
            #[cfg(target_arch = "x86_64")]
            seccomp: crate::sandbox::seccomp::filter(),
            #[cfg(not(target_arch = "x86_64"))]
            seccomp: &[],
            // The daemon chose the template already.
            path_lines: Default::default(),
        }
    }

    /// Whether the agent's child joins a copy prepared ahead (not the template).
    pub fn on_prepared_copy(&self) -> bool {
        matches!(self.template, Some((_, TemplateNs::PreparedCopy(_))))
    }
}

/// What a sandbox of a unit with secrets trusts: keel's CA bundle (written by the daemon at
/// its start: `crate::secrets::write_ca_bundle`), shown over the host's bundle. `None`
/// (logged) when either is missing: TLS that keel intercepts then fails verification inside,
/// which is fail-closed.
fn ca_bundle(state: Option<&Path>) -> Option<(PathBuf, PathBuf)> {
    let source = crate::secrets::ca_bundle_path(state?);
    if !source.is_file() {
        log::warn!(
            "{} is missing: sandboxes with secrets do not trust keel's CA",
            source.display()
        );
        return None;
    }
    let Some(target) = crate::secrets::ca_bundle_target() else {
        log::warn!("the host has no CA bundle: sandboxes with secrets do not trust keel's CA");
        return None;
    };
    Some((source, target))
}

/// What a sandbox with `network: Allow` reads as its `/etc/resolv.conf`: only the sandbox's
/// resolver (198.18.0.2, served by the task's relay). The file is keel's (`STATE/network/
/// resolv.conf`, written when it is missing or other), shown where the host's resolv.conf
/// really is (it may be a symlink into `/run`). `None` (logged) when the host has none or the
/// file cannot be written: names then do not resolve inside, which is fail-closed.
fn resolver_file(state: Option<&Path>) -> Option<(PathBuf, PathBuf)> {
    let text = format!(
        "# keel: the sandbox's resolver (sandbox.network: Allow)\nnameserver {}\noptions ndots:0\n",
        crate::network::fake::RESOLVER_ADDRESS
    );
    let dir = state?.join("network");
    let file = dir.join("resolv.conf");
    use std::os::unix::fs::PermissionsExt;
    let readable = std::fs::metadata(&file).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o644);
    if !readable || std::fs::read(&file).ok().as_deref() != Some(text.as_bytes()) {
        let written = std::fs::create_dir_all(&dir)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                crate::state::replace_volatile(&file, text.as_bytes(), 0o644)
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = written {
            log::warn!("cannot write {}: {e}", file.display());
            return None;
        }
    }
    let Ok(target) = std::fs::canonicalize("/etc/resolv.conf") else {
        log::warn!("the host has no /etc/resolv.conf: names do not resolve in Allow sandboxes");
        return None;
    };
    Some((file, target))
}

/// The host's ids of `(uid, gid)` inside the task's user namespace (`block`).
fn host_ids(block: IdBlock, (uid, gid): (u32, u32)) -> Result<(u32, u32), ResolveError> {
    match (block.host_id(uid), block.host_id(gid)) {
        (Some(u), Some(g)) => Ok((u, g)),
        _ => Err(ResolveError::OutsideUserNamespace {
            uid,
            gid,
            count: block.count,
        }),
    }
}

/// `$HOME` inside: `/root` for root; for another user, the home directory `/etc/passwd` gives
/// when it exists on the host, else `/root` (a mountpoint the sandbox always has). Either way
/// a private, empty tmpfs owned by the agent's user: the host's dotfiles (git signing keys,
/// credentials) never reach the agent.
fn home_for(uid: Option<u32>, passwd: &str) -> PathBuf {
    let Some(uid) = uid else {
        return PathBuf::from("/root");
    };
    passwd
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.len() >= 7 && fields[2].parse::<u32>().ok() == Some(uid))
                .then(|| PathBuf::from(fields[5]))
        })
        .find(|home| {
            home.is_absolute()
                && !["/", "/tmp", "/run", "/proc", "/dev"].contains(&home.to_str().unwrap_or("/"))
                && home.is_dir()
        })
        .unwrap_or_else(|| PathBuf::from("/root"))
}

fn chown(path: &Path, uid: u32, gid: u32) -> Result<(), ResolveError> {
    nix::unistd::chown(path, Some(uid.into()), Some(gid.into())).map_err(|error| {
        ResolveError::GiveToUser {
            path: path.to_path_buf(),
            uid,
            error,
        }
    })
}

/// A start that could not be resolved, for a reason the unit's author (or the operator) can
/// fix: recorded as the attempt's spawn failure. The message names the step and what to do.
#[derive(Debug)]
pub enum ResolveError {
    /// A `sandbox.writable` path that would give the agent keel's state (the check's text).
    Writable(String),
    /// `sandbox.user` or `sandbox.capabilities` (an unknown user, a capability name).
    Privileges(privileges::PrivilegeError),
    /// `sandbox.user` outside the ids the task's user namespace maps (`count` of them).
    OutsideUserNamespace {
        uid: u32,
        gid: u32,
        count: u32,
    },
    /// One of the task's own directories could not be given to the agent's user.
    GiveToUser {
        path: PathBuf,
        uid: u32,
        error: nix::errno::Errno,
    },
    ListHostRoot(std::io::Error),
    /// `sandbox.user` is not mapped in the user namespace the daemon runs in (rootless: only
    /// the daemon's own uid is, as 0).
    UnmappedUser {
        uid: u32,
        gid: u32,
    },
    /// The agent's command line, environment or working directory (a NUL byte, an empty
    /// command: the plan's text).
    Command(String),
    /// `CAP_NET_ADMIN` for a task without a user namespace (`user_namespaces: Off`).
    NetAdminWithoutUserNamespace,
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolveError::Writable(message) => write!(f, "sandbox: {message}"),
            ResolveError::Privileges(e) => write!(f, "sandbox: {e}"),
            ResolveError::OutsideUserNamespace { uid, gid, count } => write!(
                f,
                "sandbox: sandbox.user {uid}:{gid} is outside the task's user namespace, which \
                 maps ids 0–{}: choose a uid and gid below {count}",
                count - 1
            ),
            ResolveError::GiveToUser { path, uid, error } => write!(
                f,
                "sandbox: cannot give {} to uid {uid}: {error}",
                path.display()
            ),
            ResolveError::ListHostRoot(e) => write!(f, "sandbox: cannot list the host's /: {e}"),
            ResolveError::UnmappedUser { uid, gid } => write!(
                f,
                "sandbox: sandbox.user {uid}:{gid} is not mapped in the daemon's user namespace (a daemon that is not root maps only its own uid, as 0, into its tasks): remove sandbox.user, or run keel as root"
            ),
            ResolveError::Command(message) => write!(f, "cannot start the agent: {message}"),
            ResolveError::NetAdminWithoutUserNamespace => f.write_str(
                "sandbox.capabilities: CAP_NET_ADMIN needs the task's own user namespace: with \
                 user_namespaces: Off in keel.ron it holds over the host's network as well \
                 (a device made in the host's namespace); leave it out, or turn user namespaces \
                 on",
            ),
        }
    }
}

mod refusal;
pub use refusal::{missing_account, missing_user};

#[cfg(test)]
mod tests;
