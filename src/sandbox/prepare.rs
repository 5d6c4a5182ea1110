//! The sandbox from the shim's side: before the fork, resolve the user and `$HOME` (on the
//! host's view, where `/etc/passwd` is), give the task's own directories to that user, and list
//! the host's `/`; after the fork, in the agent's child, [`Prepared::enter`] unshares the
//! mount, IPC and UTS (and network) namespaces, builds the mounts, drops privileges and
//! installs the seccomp filter, in that order.

use crate::sandbox::mounts::template::{AttemptOnTemplate, EnterError};
use crate::sandbox::mounts::{self, Idmap, KernelMounter, RootEntry, SandboxLayout};
use crate::sandbox::privileges::{self, PrivilegePlan};
use crate::sandbox::protocol::PreparedParts;
use crate::sandbox::spec::{CheckoutFiles, IdBlock, SandboxSpec};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The namespace an attempt on a template starts from.
enum TemplateNs {
    /// The template itself: the agent's child joins and copies it.
    Template(OwnedFd),
    /// A copy a spare shim made ahead, `/proc` and `/dev/pts` mounted: joined as it is
    /// ([`AttemptOnTemplate::prepare_copy`]).
    PreparedCopy(OwnedFd),
}

/// Everything the agent's child needs, computed before the fork.
pub struct Prepared {
    layout: SandboxLayout,
    host_root: Vec<RootEntry>,
    privileges: PrivilegePlan,
    network_none: bool,
    /// The sandbox's shape as a copy of a template, and the namespace it starts from.
    template: Option<(AttemptOnTemplate, TemplateNs)>,
    /// `$HOME` inside the sandbox.
    pub home: PathBuf,
    /// The host ids of the task's user namespace (`None`: the agent's ids are the host's).
    id_block: Option<IdBlock>,
    /// That namespace, when the daemon made it (else the shim's clone makes it).
    userns: Option<OwnedFd>,
    /// The seccomp filter, built here (once per process) rather than in the agent's child,
    /// which shares its parent's memory and should allocate little.
    seccomp: &'static [crate::sys::seccomp::Instruction],
}

/// Resolve the sandbox of `spec`. Errors say what to fix (an unknown user, a capability
/// name) and are reported as the attempt's spawn failure. `list_host_root`: the listing of
/// the host's `/` — [`mounts::list_host_root`], or the daemon's templates' (kept while `/`
/// does not change: [`crate::sandbox::templates`]).
pub fn prepare(
    spec: &SandboxSpec,
    list_host_root: impl FnOnce() -> std::io::Result<Vec<RootEntry>>,
) -> Result<Prepared, String> {
    // Before anything is done for it: a writable path may not give the agent keel's state.
    spec.check_writable()?;
    // The user databases only matter for `sandbox.user` (root needs no lookup).
    let read = |path: &str| match &spec.user {
        Some(_) => std::fs::read_to_string(path).unwrap_or_default(),
        None => String::new(),
    };
    let (passwd, group) = (read("/etc/passwd"), read("/etc/group"));
    let privileges = privileges::plan(
        &spec.capabilities,
        spec.user.as_deref(),
        spec.network_none,
        &passwd,
        &group,
    )
    .map_err(|e| e.to_string())?;
    // Read here, on the host's /proc, for the child that drops the bounding set.
    privileges::last_cap();
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
        writable: spec.writable.clone(),
        // /etc/resolv.conf may point into /run (systemd-resolved), which the sandbox has its
        // own of: keep the host's resolver directory visible, read-only.
        readonly: mounts::resolv_conf_run_dir().into_iter().collect(),
    };
    let host_root = list_host_root().map_err(|e| format!("cannot list the host's /: {e}"))?;
    Ok(Prepared {
        layout,
        host_root,
        privileges,
        network_none: spec.network_none,
        template: None,
        home,
        id_block: spec.id_block,
        userns: None,
        #[cfg(target_arch = "x86_64")]
        seccomp: crate::sandbox::seccomp::filter(),
        #[cfg(not(target_arch = "x86_64"))]
        seccomp: &[],
    })
}

impl Prepared {
    /// In the agent's child: the sandbox built on the host's side, then the task's user
    /// namespace `userns` joined and the sandbox's namespaces made in it, then the
    /// privileges (which need the capabilities the mounts used, so they come last).
    ///
    /// With a user namespace, the mounts are made as the host's root in a mount namespace of
    /// the host's (a copy of the template, or of the host's), the task's own files idmapped;
    /// then [`enter_user_namespace`] copies that namespace into one the task's user namespace
    /// owns — every mount of it locked together (mount_namespaces(7), "Restrictions on mount
    /// namespaces"): the agent cannot unmount a hide to see what is under it, nor make a
    /// read-only mount writable — with the IPC, UTS (and network) namespaces, all owned by
    /// the task's user namespace. Without one, all of them are made with the mounts.
    pub fn enter(&self, userns: Option<BorrowedFd<'_>>) -> Result<(), String> {
        let others = match userns {
            Some(_) => nix::sched::CloneFlags::empty(),
            None => mounts::task_namespaces(self.network_none),
        };
        match &self.template {
            Some((attempt, ns)) => match ns.enter(attempt, others, userns) {
                Ok(()) => {}
                // The host's view is still ours: the whole plan, as without a template.
                Err(EnterError::Unjoined(_)) => self.build_in_full(others, userns)?,
                Err(EnterError::Failed(message)) => return Err(message),
            },
            None => self.build_in_full(others, userns)?,
        }
        if let Some(userns) = userns {
            enter_user_namespace(userns, self.network_none)?;
        }
        privileges::apply(&self.privileges).map_err(|e| e.to_string())?;
        // Last: it needs no_new_privs (set just above) and denies the mount calls used before.
        #[cfg(target_arch = "x86_64")]
        crate::sys::seccomp::install_seccomp_filter(self.seccomp).map_err(|e| {
            format!(
                "cannot install the seccomp filter: {e} (a kernel without CONFIG_SECCOMP_FILTER?)"
            )
        })?;
        Ok(())
    }

    /// The checkout's overlay upper layer (host path), if the task has one.
    pub fn upper_layer(&self) -> Option<&Path> {
        match &self.layout.checkout.as_ref()?.files {
            CheckoutFiles::Overlay { upper, .. } => Some(upper),
            CheckoutFiles::Bind(_) => None,
        }
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
            #[cfg(target_arch = "x86_64")]
            seccomp: crate::sandbox::seccomp::filter(),
            #[cfg(not(target_arch = "x86_64"))]
            seccomp: &[],
        }
    }

    /// Whether the agent's child joins a copy prepared ahead (not the template).
    pub fn on_prepared_copy(&self) -> bool {
        matches!(self.template, Some((_, TemplateNs::PreparedCopy(_))))
    }

    /// The whole mount plan, in a mount namespace copied from the caller's (with the task's
    /// `others` namespaces); the task's own files idmapped with `userns` when it has one.
    fn build_in_full(
        &self,
        others: nix::sched::CloneFlags,
        userns: Option<BorrowedFd<'_>>,
    ) -> Result<(), String> {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS | others).map_err(|e| {
            format!(
                "cannot create the task's mount namespace{} (unshare: {e}): run keel as root — namespaces need CAP_SYS_ADMIN",
                if others.is_empty() { "" } else { " and its IPC, UTS (and network) ones" }
            )
        })?;
        let mut mounter = KernelMounter::new(&self.layout.new_root);
        if let Some(userns) = userns {
            let userns = userns
                .try_clone_to_owned()
                .map_err(|e| format!("cannot hold the task's user namespace: {e}"))?;
            mounter = mounter.with_idmap(Idmap {
                userns,
                own: self.own_sources(),
            });
        }
        mounts::build(&self.layout, &self.host_root, &mut mounter).map_err(|e| e.to_string())
    }

    /// The host paths of the task's own files, bound idmapped: its work directory (or full
    /// checkout) and git directory, its checkpoint directory and progress file, and the
    /// unit's `sandbox.writable` paths (shared by the operator: the agent's root writes
    /// there as the host's root did before user namespaces).
    fn own_sources(&self) -> Vec<PathBuf> {
        let layout = &self.layout;
        let mut own = vec![
            layout.work_source.clone(),
            layout.checkpoint_source.clone(),
            layout.progress_file.clone(),
        ];
        own.extend(layout.writable.iter().cloned());
        if let Some(checkout) = &layout.checkout {
            own.push(checkout.git_dir.clone());
            // Read-only (the plan's read-only pass, locked in the user namespace): owned by
            // the agent's root there, as they were by uid 0 before, so that objects of a
            // repository made under umask 077 stay readable.
            own.extend(checkout.objects.iter().cloned());
            if let CheckoutFiles::Bind(files) = &checkout.files {
                own.push(files.clone());
            }
        }
        own
    }
}

/// In the agent's child, its sandbox built: join the task's user namespace as its root, and
/// make the sandbox's mount namespace (a copy of the one built, every mount locked), IPC and
/// UTS namespaces (and network, for `network: None`) in it.
fn enter_user_namespace(userns: BorrowedFd<'_>, network_none: bool) -> Result<(), String> {
    crate::sys::userns::enter(userns)
        .map_err(|e| format!("cannot join the task's user namespace: {e}"))?;
    let flags = nix::sched::CloneFlags::CLONE_NEWNS | mounts::task_namespaces(network_none);
    nix::sched::unshare(flags).map_err(|e| {
        format!("cannot create the task's namespaces in its user namespace (unshare: {e})")
    })
}

/// The host's ids of `(uid, gid)` inside the task's user namespace (`block`).
fn host_ids(block: IdBlock, (uid, gid): (u32, u32)) -> Result<(u32, u32), String> {
    match (block.host_id(uid), block.host_id(gid)) {
        (Some(u), Some(g)) => Ok((u, g)),
        _ => Err(format!(
            "sandbox.user {uid}:{gid} is outside the task's user namespace, which maps ids \
             0–{}: choose a uid and gid below {}",
            block.count - 1,
            block.count
        )),
    }
}

impl TemplateNs {
    fn enter(
        &self,
        attempt: &AttemptOnTemplate,
        others: nix::sched::CloneFlags,
        userns: Option<BorrowedFd<'_>>,
    ) -> Result<(), EnterError> {
        match self {
            TemplateNs::Template(ns) => attempt.enter(ns.as_fd(), others, userns),
            TemplateNs::PreparedCopy(ns) => attempt.enter_prepared(ns.as_fd(), others, userns),
        }
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

fn chown(path: &Path, uid: u32, gid: u32) -> Result<(), String> {
    nix::unistd::chown(path, Some(uid.into()), Some(gid.into()))
        .map_err(|e| format!("cannot give {} to uid {uid}: {e}", path.display()))
}

#[cfg(test)]
mod tests;
