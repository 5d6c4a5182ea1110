//! What failed with cgroups, and what the operator should do about it.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// One variant per step; each carries the path it is about and says what to fix.
#[derive(Debug)]
pub enum CgroupError {
    /// `/proc/self/mountinfo` or `/proc/self/cgroup` could not be read.
    Detect { path: PathBuf, source: io::Error },
    /// No cgroup2 mount, or the process has no v2 cgroup.
    NoV2Mount,
    /// The process's cgroup is not below what the hierarchy's mount shows.
    OutsideMount {
        hierarchy: String,
        cgroup: String,
        mount_root: String,
    },
    /// A controller is bound to a v1 hierarchy that is not mounted here.
    V1NotMounted { controller: &'static str },
    /// cpu, memory and pids are split between v1 and v2.
    MixedControllers {
        on_v1: Vec<&'static str>,
        on_v2: Vec<&'static str>,
    },
    /// A tree or unit name that is not a single path component.
    InvalidName { name: String },
    /// mkdir of `<name>`, `<name>/supervisor` or `<name>/tasks`.
    CreateTree { path: PathBuf, source: io::Error },
    /// Writing the daemon's pid into `supervisor/cgroup.procs`.
    MoveIn {
        path: PathBuf,
        pid: i32,
        source: io::Error,
    },
    /// Writing `+controller` into a `cgroup.subtree_control` (v2).
    EnableController {
        path: PathBuf,
        controller: &'static str,
        source: io::Error,
    },
    /// mkdir of a task cgroup.
    CreateTask { path: PathBuf, source: io::Error },
    /// A task cgroup exists and still holds processes.
    TaskInUse { path: PathBuf },
    /// Writing a limit file.
    SetLimit {
        path: PathBuf,
        controller: &'static str,
        value: String,
        source: io::Error,
    },
    /// Opening the task's v2 directory for `CLONE_INTO_CGROUP`.
    OpenDir { path: PathBuf, source: io::Error },
    /// Joining the task's v1 cgroups (the shim, before it starts the agent).
    Join { path: PathBuf, source: io::Error },
    /// Reading a figure (`cgroup.events`, `cpu.stat`, `memory.current`, ...).
    Read { path: PathBuf, source: io::Error },
    /// A file whose content is not what the kernel documents.
    Parse { path: PathBuf, content: String },
    /// Writing `cgroup.kill` (or the freeze-and-kill fallback).
    Kill { path: PathBuf, source: io::Error },
    /// rmdir failed for a reason other than "still busy".
    Remove { path: PathBuf, source: io::Error },
    /// A cgroup still held processes when the time to remove it was up.
    Busy { path: PathBuf },
    /// Task cgroups remain under `tasks/` at teardown.
    TasksRemain { path: PathBuf, units: Vec<String> },
    /// Arming the OOM notification (eventfd, `cgroup.event_control`, `memory.events`).
    OomWatch { path: PathBuf, source: io::Error },
    /// Writing `-controller` into a `cgroup.subtree_control` at teardown (v2).
    DisableController {
        path: PathBuf,
        controller: &'static str,
        source: io::Error,
    },
    /// Moving the daemon back to the cgroup it was started in, at teardown.
    MoveBack {
        path: PathBuf,
        pid: i32,
        source: io::Error,
    },
}

impl CgroupError {
    /// The I/O error underneath, if any.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            CgroupError::Detect { source, .. }
            | CgroupError::CreateTree { source, .. }
            | CgroupError::MoveIn { source, .. }
            | CgroupError::EnableController { source, .. }
            | CgroupError::CreateTask { source, .. }
            | CgroupError::SetLimit { source, .. }
            | CgroupError::OpenDir { source, .. }
            | CgroupError::Join { source, .. }
            | CgroupError::Read { source, .. }
            | CgroupError::Kill { source, .. }
            | CgroupError::Remove { source, .. }
            | CgroupError::OomWatch { source, .. }
            | CgroupError::DisableController { source, .. }
            | CgroupError::MoveBack { source, .. } => Some(source),
            CgroupError::NoV2Mount
            | CgroupError::OutsideMount { .. }
            | CgroupError::V1NotMounted { .. }
            | CgroupError::MixedControllers { .. }
            | CgroupError::InvalidName { .. }
            | CgroupError::TaskInUse { .. }
            | CgroupError::Parse { .. }
            | CgroupError::Busy { .. }
            | CgroupError::TasksRemain { .. } => None,
        }
    }
}

fn is(source: &io::Error, errno: i32) -> bool {
    source.raw_os_error() == Some(errno)
}

/// The common causes of a failed write to a cgroup file, as a hint for the operator.
fn access_hint(source: &io::Error) -> &'static str {
    if is(source, libc::EACCES) || is(source, libc::EPERM) {
        ": keel must run as root, or own its delegated cgroup (systemd Delegate=yes)"
    } else if is(source, libc::EROFS) {
        ": the cgroup filesystem is mounted read-only (a container without a writable cgroup \
         mount: run it with --cgroupns=private and a writable /sys/fs/cgroup)"
    } else {
        ""
    }
}

impl fmt::Display for CgroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CgroupError::Detect { path, source } => write!(
                f,
                "cannot read {}: {source}: /proc must be mounted",
                path.display()
            ),
            CgroupError::NoV2Mount => write!(
                f,
                "no cgroup2 filesystem is mounted: keel needs one (for cgroup.kill and \
                 CLONE_INTO_CGROUP) even when the controllers are on v1; mount it with \
                 `mount -t cgroup2 none /sys/fs/cgroup/unified` (or boot with \
                 systemd.unified_cgroup_hierarchy=1)"
            ),
            CgroupError::OutsideMount {
                hierarchy,
                cgroup,
                mount_root,
            } => write!(
                f,
                "keel's {hierarchy} cgroup {cgroup} is not inside the mounted part of that \
                 hierarchy (mount root {mount_root}): mount the hierarchy inside keel's cgroup \
                 namespace (a container with --cgroupns=private) or run keel in a cgroup the \
                 mount shows"
            ),
            CgroupError::V1NotMounted { controller } => write!(
                f,
                "the {controller} controller is bound to a cgroup v1 hierarchy that is not \
                 mounted here: mount it (`mount -t cgroup -o {controller} cgroup \
                 /sys/fs/cgroup/{controller}`) or boot with cgroup_no_v1=all for pure v2"
            ),
            CgroupError::MixedControllers { on_v1, on_v2 } => write!(
                f,
                "controllers are split between cgroup v1 ({}) and v2 ({}): keel needs cpu, \
                 memory and pids all on v2, or all on v1; boot with cgroup_no_v1=all (or \
                 systemd.unified_cgroup_hierarchy=1) for pure v2",
                on_v1.join(","),
                on_v2.join(",")
            ),
            CgroupError::InvalidName { name } => write!(
                f,
                "invalid cgroup name {name:?}: it must be a single path component, not `.` \
                 or `..`"
            ),
            CgroupError::CreateTree { path, source } => write!(
                f,
                "cannot create keel's cgroup {}: {source}{}",
                path.display(),
                access_hint(source)
            ),
            CgroupError::MoveIn { path, pid, source } => write!(
                f,
                "cannot move the daemon (pid {pid}) into {}: {source}{}",
                path.display(),
                if is(source, libc::EBUSY) || is(source, libc::EOPNOTSUPP) {
                    ": that cgroup enables controllers for its children (or is threaded), so \
                     it may not hold processes; empty its cgroup.subtree_control"
                } else {
                    access_hint(source)
                }
            ),
            CgroupError::EnableController {
                path,
                controller,
                source,
            } => {
                write!(
                    f,
                    "cannot enable the {controller} controller in {}: {source}",
                    path.display()
                )?;
                if is(source, libc::EBUSY) {
                    write!(
                        f,
                        ": other processes share the cgroup keel was started in, and cgroup v2 \
                         allows controllers for child cgroups only in a cgroup without \
                         processes of its own (\"no internal processes\" rule): run keel in \
                         its own cgroup, e.g. a systemd service with Delegate=yes"
                    )
                } else if is(source, libc::ENOENT) {
                    write!(
                        f,
                        ": the controller is not available there; the parent cgroup must \
                         delegate it (its cgroup.subtree_control must list {controller}; \
                         systemd: Delegate=yes)"
                    )
                } else if is(source, libc::EINVAL) && *controller == "cpu" {
                    write!(
                        f,
                        ": a realtime process outside the root cgroup prevents the cpu \
                         controller on v2; move realtime processes to the root cgroup"
                    )
                } else {
                    write!(f, "{}", access_hint(source))
                }
            }
            CgroupError::CreateTask { path, source } => write!(
                f,
                "cannot create the task cgroup {}: {source}{}",
                path.display(),
                if is(source, libc::EEXIST) {
                    ": the name is taken by a file that is not a cgroup (a cgroup interface \
                     file?); rename the unit"
                } else {
                    access_hint(source)
                }
            ),
            CgroupError::TaskInUse { path } => write!(
                f,
                "the task cgroup {} still holds processes (an earlier attempt still running?): \
                 stop it (keel kill) before starting the task again",
                path.display()
            ),
            CgroupError::SetLimit {
                path,
                controller,
                value,
                source,
            } => {
                write!(f, "cannot write {value:?} to {}: {source}", path.display())?;
                if is(source, libc::ENOENT) {
                    write!(
                        f,
                        ": the {controller} controller is not enabled for this cgroup (v2: \
                         it must be delegated to keel's cgroup; v1: the {controller} \
                         hierarchy must be mounted)"
                    )
                } else if is(source, libc::EINVAL) {
                    write!(
                        f,
                        ": the {controller} limit is out of the kernel's range (or above a \
                         parent's limit): change the unit's resources"
                    )
                } else {
                    write!(f, "{}", access_hint(source))
                }
            }
            CgroupError::OpenDir { path, source } => write!(
                f,
                "cannot open the task cgroup {} for CLONE_INTO_CGROUP: {source}: was the task \
                 cgroup created?",
                path.display()
            ),
            CgroupError::Join { path, source } => write!(
                f,
                "cannot join the task's cgroup through {}: {source}{}",
                path.display(),
                access_hint(source)
            ),
            CgroupError::Read { path, source } => write!(
                f,
                "cannot read {}: {source}{}",
                path.display(),
                if is(source, libc::ENOENT) {
                    ": the cgroup is gone or its controller is not enabled"
                } else {
                    ""
                }
            ),
            CgroupError::Parse { path, content } => write!(
                f,
                "unexpected content in {}: {content:?}: not the format the kernel documents",
                path.display()
            ),
            CgroupError::Kill { path, source } => write!(
                f,
                "cannot kill the processes of {}: {source}{}",
                path.display(),
                access_hint(source)
            ),
            CgroupError::Remove { path, source } => write!(
                f,
                "cannot remove the cgroup {}: {source}{}",
                path.display(),
                if is(source, libc::EBUSY) {
                    ": it still holds processes or child cgroups that keel did not start; \
                     move or stop them, then retry"
                } else {
                    access_hint(source)
                }
            ),
            CgroupError::Busy { path } => write!(
                f,
                "the cgroup {} still holds processes after they were killed: a process stuck \
                 in the kernel (D state)? Check `cat {}/cgroup.procs`; keel retries the removal",
                path.display(),
                path.display()
            ),
            CgroupError::TasksRemain { path, units } => write!(
                f,
                "task cgroups remain in {} ({}): stop and remove those tasks before keel \
                 shuts its cgroup tree down",
                path.display(),
                units.join(", ")
            ),
            CgroupError::OomWatch { path, source } => write!(
                f,
                "cannot watch {} for OOM kills: {source}{}",
                path.display(),
                access_hint(source)
            ),
            CgroupError::DisableController {
                path,
                controller,
                source,
            } => write!(
                f,
                "cannot disable the {controller} controller in {}: {source}{}",
                path.display(),
                if is(source, libc::EBUSY) {
                    ": a child cgroup still enables it for its own children; keel's tree is \
                     left in place"
                } else {
                    access_hint(source)
                }
            ),
            CgroupError::MoveBack { path, pid, source } => write!(
                f,
                "cannot move the daemon (pid {pid}) back into {}: {source}{}",
                path.display(),
                if is(source, libc::EBUSY) {
                    ": that cgroup enables controllers for its children, so it may not hold \
                     processes (cgroup v2 \"no internal processes\" rule); keel's tree is left \
                     in place"
                } else {
                    access_hint(source)
                }
            ),
        }
    }
}

impl std::error::Error for CgroupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io_error()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
