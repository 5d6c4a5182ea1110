//! Whether a daemon that is not root may manage the cgroup it starts in: a cgroup v2 subtree
//! delegated to its user (cgroup-v2.rst, "Delegation"), as systemd's `Delegate=yes` makes one.
//!
//! A cgroup is delegated to a user when the directory and its `cgroup.procs` and
//! `cgroup.subtree_control` are the user's (writable by it), and the controllers keel needs are
//! available in it (`cgroup.controllers`: the parent enabled them). keel then makes its tree
//! below, moves itself into `<name>/supervisor` (allowed: the base's `cgroup.procs` is the
//! common ancestor's, and writable) and enables cpu, memory and pids down the path.
//!
//! keel's cgroups are not optional (no task ever runs unconfined), and the cgroup a process
//! starts in does not change while it runs: a daemon without a delegation could start no task
//! until it is started again elsewhere. So it refuses to start, naming what to set up
//! ([`judge`]), rather than run and fail every start. A daemon running as root is not judged
//! here: it may write every cgroup, and its errors are the ones of [`super::Tree::setup`].
//!
//! [`judge`] is a pure function of what [`observe`] reads.

use super::{CgroupError, Layout, Mode, CONTROLLERS};
use std::fmt;
use std::path::{Path, PathBuf};

/// The files of the base a delegatee must be able to write (cgroup-v2.rst, "Model of
/// Delegation": the directory, `cgroup.procs`, `cgroup.threads` and `cgroup.subtree_control`
/// are chowned; keel uses no threaded cgroup, so `cgroup.threads` is not needed).
pub const DELEGATED_FILES: [&str; 2] = ["cgroup.procs", "cgroup.subtree_control"];

/// What [`observe`] saw of the cgroup a daemon starts in (its v2 base).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseAccess {
    pub base: PathBuf,
    /// The text of `<base>/cgroup.controllers` (`None`: unreadable).
    pub controllers: Option<String>,
    /// The base directory and each of [`DELEGATED_FILES`] that the daemon's effective ids
    /// may not write.
    pub unwritable: Vec<PathBuf>,
}

/// Why a daemon that is not root cannot manage its cgroups; each names what to set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No usable cgroup2 mount or cgroup (the detection's own error).
    NoLayout { uid: u32, why: String },
    /// cpu, memory and pids are bound to v1 hierarchies.
    Hybrid { uid: u32 },
    /// In a systemd service's cgroup named like the tree, without `DelegateSubgroup=`
    /// (systemd < 254): root would make its tree at the hierarchy's root, which a user may not.
    NoDelegateSubgroup { uid: u32, cgroup: PathBuf },
    /// The base is not the user's.
    NotDelegated {
        uid: u32,
        base: PathBuf,
        unwritable: Vec<PathBuf>,
    },
    /// The base is the user's, but the controllers keel needs are not available in it.
    ControllersMissing {
        uid: u32,
        base: PathBuf,
        missing: Vec<&'static str>,
    },
}

/// Judge whether a daemon running with effective uid `uid` may manage its cgroups, from the
/// detected `layout` and what [`observe`] read of its base. Root is never refused here.
pub fn judge(
    uid: u32,
    layout: Result<&Layout, &CgroupError>,
    access: Option<&BaseAccess>,
) -> Result<(), Refusal> {
    if uid == 0 {
        return Ok(());
    }
    let layout = layout.map_err(|e| Refusal::NoLayout {
        uid,
        why: e.to_string(),
    })?;
    if layout.mode == Mode::Hybrid {
        return Err(Refusal::Hybrid { uid });
    }
    if let Some(cgroup) = &layout.daemon_stays_in {
        return Err(Refusal::NoDelegateSubgroup {
            uid,
            cgroup: cgroup.clone(),
        });
    }
    let Some(access) = access else {
        return Err(Refusal::NotDelegated {
            uid,
            base: layout.v2_base.clone(),
            unwritable: vec![layout.v2_base.clone()],
        });
    };
    if !access.unwritable.is_empty() {
        return Err(Refusal::NotDelegated {
            uid,
            base: access.base.clone(),
            unwritable: access.unwritable.clone(),
        });
    }
    let available = access.controllers.as_deref().unwrap_or("");
    let missing: Vec<&'static str> = CONTROLLERS
        .into_iter()
        .filter(|c| !available.split_whitespace().any(|w| w == *c))
        .collect();
    if !missing.is_empty() {
        return Err(Refusal::ControllersMissing {
            uid,
            base: access.base.clone(),
            missing,
        });
    }
    Ok(())
}

/// Read what [`judge`] needs of `base`: its available controllers, and which of the base and
/// [`DELEGATED_FILES`] this process's effective ids may not write (faccessat(2), AT_EACCESS).
pub fn observe(base: &Path) -> BaseAccess {
    use nix::fcntl::AtFlags;
    use nix::unistd::AccessFlags;
    let writable = |path: &Path| {
        nix::unistd::faccessat(
            nix::fcntl::AT_FDCWD,
            path,
            AccessFlags::W_OK,
            AtFlags::AT_EACCESS,
        )
        .is_ok()
    };
    let mut paths = vec![base.to_path_buf()];
    paths.extend(DELEGATED_FILES.iter().map(|f| base.join(f)));
    BaseAccess {
        base: base.to_path_buf(),
        controllers: std::fs::read_to_string(base.join("cgroup.controllers")).ok(),
        unwritable: paths.into_iter().filter(|p| !writable(p)).collect(),
    }
}

/// How to give a user a delegated cgroup, for every refusal's end.
const HOW_TO_DELEGATE: &str = "start keel in a cgroup delegated to its user: `systemd-run --user \
     -p Delegate=yes --scope keel daemon …`, or `Delegate=yes` in the [Service] section of a \
     user unit (`systemctl --user`), with `loginctl enable-linger USER` so that the user's \
     manager (and keel) run without a login session; or run keel as root";

/// The user manager delegates only the controllers its own unit has (`user@.service`).
const HOW_TO_ADD_CONTROLLERS: &str = "give the user's manager the controllers: a drop-in \
     /etc/systemd/system/user@.service.d/delegate.conf with `[Service]` and `Delegate=cpu \
     memory pids`, then `systemctl daemon-reload` and a new login (or `systemctl restart \
     user@UID.service`); by hand, write `+cpu +memory +pids` into the parent's \
     cgroup.subtree_control as root";

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NoLayout { uid, why } => write!(
                f,
                "keel runs as uid {uid} (not root) and has no cgroup v2 subtree to manage \
                 ({why}): {HOW_TO_DELEGATE}"
            ),
            Refusal::Hybrid { uid } => write!(
                f,
                "keel runs as uid {uid} (not root), and this host has cpu, memory and pids on \
                 cgroup v1 hierarchies (hybrid): a user can be delegated controllers only on \
                 cgroup v2 (systemd never delegates v1 controllers to an unprivileged user). \
                 Boot with systemd.unified_cgroup_hierarchy=1 (pure cgroup v2), then {HOW_TO_DELEGATE}"
            ),
            Refusal::NoDelegateSubgroup { uid, cgroup } => write!(
                f,
                "keel runs as uid {uid} (not root) in {}, a service's cgroup named like its tree \
                 (--cgroup-name) but not in its `supervisor` subgroup: systemd < 254 has no \
                 DelegateSubgroup=, and would start the next daemon in the cgroup where keel's \
                 tree enables controllers (219/CGROUP). Start keel in a scope instead: \
                 `systemd-run --user -p Delegate=yes --scope keel daemon …` (without \
                 --cgroup-name), or under `keel init` in a container",
                cgroup.display()
            ),
            Refusal::NotDelegated {
                uid,
                base,
                unwritable,
            } => {
                let names: Vec<String> =
                    unwritable.iter().map(|p| p.display().to_string()).collect();
                write!(
                    f,
                    "keel runs as uid {uid} (not root) in the cgroup {}, which is not delegated \
                     to it (it may not write {}): {HOW_TO_DELEGATE}",
                    base.display(),
                    names.join(", ")
                )
            }
            Refusal::ControllersMissing { uid, base, missing } => write!(
                f,
                "keel runs as uid {uid} (not root) in the cgroup {}, delegated to it, but \
                 without the {} controller{} (not in its cgroup.controllers: the parent does \
                 not enable {}): {HOW_TO_ADD_CONTROLLERS}",
                base.display(),
                missing.join(", "),
                if missing.len() == 1 { "" } else { "s" },
                if missing.len() == 1 { "it" } else { "them" },
            ),
        }
    }
}

#[cfg(test)]
mod tests;
