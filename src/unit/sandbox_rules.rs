//! What a unit's `sandbox` may not ask for: writable paths that would give the agent the host
//! (its system directories, keel's own directories, a repository's git directory) and
//! capabilities that reach past the sandbox. Pure functions of paths and numbers, shared by the
//! validator (`keel check`, the daemon's load) and the daemon's check at each start, which
//! alone knows its state and units directories ([`crate::sandbox::spec`]).
//!
//! Capabilities that act across uids are refused, not left to the task's user namespace: in
//! it they act on the ids of the task's own block, but through its idmapped mounts (the work
//! directory, `sandbox.writable`) the agent's root is the host's root's files' owner, and a
//! `keel.ron` with `user_namespaces: Off` gives the agent the host's ids.

use std::path::{Component, Path};

/// How a writable path stands to a protected directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// The same directory.
    Same,
    /// The writable path is an ancestor of the directory (binding it shares the directory).
    Covers,
    /// The writable path lies inside the directory.
    Inside,
}

impl Relation {
    /// `"is"`, `"covers"`, `"lies inside"`: reads between a path and a directory.
    pub fn verb(self) -> &'static str {
        match self {
            Relation::Same => "is",
            Relation::Covers => "covers",
            Relation::Inside => "lies inside",
        }
    }
}

/// How `path` stands to `dir`, compared by components (`/a//b/` is `/a/b`); `None`: neither
/// contains the other. Both are absolute paths without `..` (the validator refuses `..`).
pub fn relation(path: &Path, dir: &Path) -> Option<Relation> {
    let path: Vec<Component> = path
        .components()
        .filter(|c| *c != Component::CurDir)
        .collect();
    let dir: Vec<Component> = dir
        .components()
        .filter(|c| *c != Component::CurDir)
        .collect();
    if path == dir {
        Some(Relation::Same)
    } else if dir.starts_with(&path) {
        Some(Relation::Covers)
    } else if path.starts_with(&dir) {
        Some(Relation::Inside)
    } else {
        None
    }
}

/// The host's system trees: a writable path may be none of them, cover none and lie inside
/// none. Writing there changes the host for every process (its programs, configuration,
/// devices, the kernel's interfaces, root's home, package and service state, the sockets
/// of the host's service managers and container engines, other users' runtime directories).
const SYSTEM_TREES: [&str; 30] = [
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/root",
    // The host's runtime directory: its services' sockets (libvirt, CRI-O, k3s, LXD, udev,
    // snapd, sudo's timestamps …) live anywhere below it; the sandbox's own /run is keel's.
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/run",
    "/var/lock",
    // cron and at jobs run as their owners (root's included).
    "/var/spool",
    "/var/lib/dpkg",
    "/var/lib/apt",
    "/var/lib/rpm",
    "/var/lib/systemd",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/containers",
    "/var/lib/kubelet",
    "/var/lib/libvirt",
    "/var/lib/lxd",
    "/var/lib/incus",
    "/var/lib/polkit-1",
    "/var/lib/sudo",
];

/// Directories shared by the whole host: a directory *inside* one is a legitimate thing to
/// share (`/var/lib/myapp`, `/srv/data`, `/tmp/build`), the directory itself (or anything
/// that covers it) is not.
const SHARED_ROOTS: [&str; 14] = [
    "/home",
    "/media",
    "/mnt",
    "/opt",
    "/srv",
    "/tmp",
    "/var",
    "/var/cache",
    "/var/lib",
    "/var/log",
    "/var/mail",
    "/var/opt",
    "/var/tmp",
    "/var/www",
];

/// Why `path`, a `sandbox.writable` entry (absolute, without `..`), may not be shared with an
/// agent, from the path alone; `repo`: the unit's `repo.path`, whose git directory the agent
/// must not write. `None`: nothing known against it (the daemon checks the rest at each start).
pub fn writable_problem(path: &str, repo: Option<&str>) -> Option<String> {
    let at = Path::new(path);
    if at
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::CurDir))
    {
        return Some(
            "is the root directory: the agent could write every file of the host; list only \
             the directories it needs, e.g. \"/srv/agent-data\""
                .to_string(),
        );
    }
    let system = SYSTEM_TREES.iter().map(|dir| (*dir, true));
    let shared = SHARED_ROOTS.iter().map(|dir| (*dir, false));
    let related: Vec<(&str, bool, Relation)> = system
        .chain(shared)
        .filter_map(|(dir, system)| Some((dir, system, relation(at, Path::new(dir))?)))
        .collect();
    // The directory it is or lies in says most; what it covers, only when nothing else does.
    let worst = related
        .iter()
        .find(|(_, system, relation)| *system && *relation != Relation::Covers)
        .or_else(|| {
            related
                .iter()
                .find(|(_, _, relation)| *relation == Relation::Same)
        })
        .or_else(|| {
            related
                .iter()
                .find(|(_, _, relation)| *relation == Relation::Covers)
        });
    match worst {
        Some((dir, true, relation)) => {
            return Some(format!(
                "{path:?} {} the host's system directory {dir}: an agent that writes there \
                 changes the host for every process; share a directory of your own instead, \
                 e.g. \"/srv/agent-data\" or \"/var/lib/myapp\"",
                relation.verb()
            ))
        }
        Some((dir, false, relation)) => {
            return Some(format!(
                "{path:?} {} {dir}, which the whole host shares (other users' and services' \
                 files): share a directory inside it, e.g. \"{dir}/myapp\"",
                relation.verb()
            ))
        }
        None => {}
    }
    if at.components().any(|c| c.as_os_str() == ".git") {
        return Some(format!(
            "{path:?} lies in a git directory (.git): {GIT_DIR_HARM}"
        ));
    }
    if let Some(repo) = repo.filter(|repo| repo.starts_with('/')) {
        if let Some(relation @ (Relation::Same | Relation::Covers)) = relation(at, Path::new(repo))
        {
            return Some(format!(
                "{path:?} {} the task's main repository {repo}, its .git included: the agent \
                 works in a checkout of its own at workdir; share only directories outside the \
                 repository",
                relation.verb()
            ));
        }
    }
    None
}

/// What an agent that writes a git directory does, and what to share instead.
pub const GIT_DIR_HARM: &str = "an agent that writes there \
     plants hooks and configuration (core.hooksPath, core.fsmonitor) that run as whoever next \
     uses that repository; give the task repo: for a checkout of its own, or share only \
     directories without a .git";

/// Capabilities a sandboxed agent may never hold: each one reaches past the sandbox (the
/// host's processes through /proc, the kernel, the host's files by handle or across uids, the
/// host network). `None`: grantable.
pub fn refused_capability(number: u8, host_network: bool) -> Option<String> {
    const NO_USERNS: &str = "through its idmapped mounts (the work directory, sandbox.writable) \
        the agent's root owns what the host's root owns there, and with user_namespaces: Off \
        in keel.ron its uids are the host's";
    let (why, instead): (String, &str) = match number {
        0 => (
            format!("CAP_CHOWN gives files to any host uid and takes theirs: {NO_USERNS}"),
            "let the agent create its files as the right user with sandbox.user",
        ),
        1 => (
            format!(
                "CAP_DAC_OVERRIDE bypasses file permissions: {NO_USERNS}, so every root-only \
                 file it can see would be readable and writable"
            ),
            "make what the agent needs readable by its sandbox.user, or share it with sandbox.writable",
        ),
        2 => (
            "CAP_DAC_READ_SEARCH opens host files by handle (open_by_handle_at), hidden ones too"
                .to_string(),
            "share what the agent needs with sandbox.writable",
        ),
        3 => (
            format!(
                "CAP_FOWNER bypasses the owner's checks (chmod, utimes, ACLs) on every host \
                 file the agent can reach: {NO_USERNS}"
            ),
            "run the agent as the files' owner with sandbox.user",
        ),
        4 => (
            "CAP_FSETID keeps set-user-ID bits on files the agent changes, and its files are \
             the host's"
                .to_string(),
            "building and running programs needs none",
        ),
        6 | 7 => (
            format!(
                "CAP_{} lets the agent become any host {}: {NO_USERNS}",
                if number == 7 { "SETUID" } else { "SETGID" },
                if number == 7 { "user" } else { "group" }
            ),
            "name the user the agent runs as with sandbox.user",
        ),
        9 => (
            "CAP_LINUX_IMMUTABLE makes the host's files undeletable (chattr +i), for keel rm too"
                .to_string(),
            "leave it out",
        ),
        12 if host_network => (
            "CAP_NET_ADMIN with network: Host reconfigures the host's network".to_string(),
            "give the task a network of its own (network: Allow([...]), the default, or network: None)",
        ),
        13 if host_network => (
            "CAP_NET_RAW with network: Host reads and forges the host's traffic, loopback included"
                .to_string(),
            "give the task a network of its own (network: Allow([...]), the default, or network: None)",
        ),
        15 => (
            "CAP_IPC_OWNER bypasses the permissions of System V IPC objects (the task's own, in its \
             IPC namespace; refused until the task's root is not the host's)"
                .to_string(),
            "leave it out",
        ),
        16 => ("CAP_SYS_MODULE loads kernel modules".to_string(), "leave it out"),
        17 => (
            "CAP_SYS_RAWIO gives raw access to devices and memory".to_string(),
            "leave it out",
        ),
        19 => (
            "CAP_SYS_PTRACE reaches the shim, which sees the host's filesystem".to_string(),
            "leave it out",
        ),
        21 => (
            "CAP_SYS_ADMIN undoes the sandbox's mounts and namespaces".to_string(),
            "leave it out",
        ),
        22 => ("CAP_SYS_BOOT reboots the host".to_string(), "leave it out"),
        23 => (
            "CAP_SYS_NICE gives real-time scheduling, which runs outside the task's CPU limit"
                .to_string(),
            "raise resources.cpu or priority",
        ),
        24 => (
            "CAP_SYS_RESOURCE overrides the kernel's limits and uses the disk space reserved \
             for root"
                .to_string(),
            "raise the task's resources",
        ),
        25 => ("CAP_SYS_TIME sets the host's clock".to_string(), "leave it out"),
        27 => (
            "CAP_MKNOD creates device nodes: a disk's node reads every file of the host"
                .to_string(),
            "the sandbox's /dev has null, zero, full, random, urandom, tty and pts",
        ),
        28 => (
            "CAP_LEASE takes leases on other users' files, which stalls the host's processes \
             that open them"
                .to_string(),
            "leave it out",
        ),
        30 | 37 => (
            "CAP_AUDIT_CONTROL and CAP_AUDIT_READ change and read the host's audit log".to_string(),
            "leave it out",
        ),
        31 => (
            "CAP_SETFCAP puts file capabilities on the agent's files, which are the host's: \
             whoever runs one there gets them"
                .to_string(),
            "leave it out",
        ),
        32 | 33 => (
            "CAP_MAC_OVERRIDE and CAP_MAC_ADMIN change the host's security policy".to_string(),
            "leave it out",
        ),
        34 => ("CAP_SYSLOG reads kernel addresses".to_string(), "leave it out"),
        38 | 39 => (
            "CAP_PERFMON and CAP_BPF reach into the kernel".to_string(),
            "leave it out",
        ),
        _ => return None,
    };
    Some(format!(
        "{why}: not grantable to a sandboxed agent; {instead}"
    ))
}
