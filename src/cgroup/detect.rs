//! Which cgroup hierarchies this host has, and where keel's base is in each: pure functions of
//! the text of `/proc/self/mountinfo` and `/proc/self/cgroup`.

use super::CgroupError;
use std::fmt;
use std::path::{Component, Path, PathBuf};

/// How the host's controllers are arranged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// cpu, memory and pids are all on the unified (v2) hierarchy.
    V2,
    /// cpu, memory and pids on v1 hierarchies, plus a cgroup2 mount (usually without
    /// controllers) for `cgroup.kill`, `cgroup.events` and `CLONE_INTO_CGROUP`.
    Hybrid,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::V2 => write!(f, "v2"),
            Mode::Hybrid => write!(f, "hybrid (v1 cpu,memory,pids + v2 unified)"),
        }
    }
}

/// The v1 controllers keel uses on a hybrid host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum V1Controller {
    Cpu,
    /// Optional: only read (`cpuacct.usage`) when the unified `cpu.stat` is missing.
    Cpuacct,
    Memory,
    Pids,
}

impl V1Controller {
    pub const ALL: [V1Controller; 4] = [
        V1Controller::Cpu,
        V1Controller::Cpuacct,
        V1Controller::Memory,
        V1Controller::Pids,
    ];

    /// The controller's name, as in `/proc/self/cgroup` and the mount options.
    pub fn name(self) -> &'static str {
        match self {
            V1Controller::Cpu => "cpu",
            V1Controller::Cpuacct => "cpuacct",
            V1Controller::Memory => "memory",
            V1Controller::Pids => "pids",
        }
    }
}

impl fmt::Display for V1Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where keel's tree goes in each hierarchy. Each base is the hierarchy's mount point joined with
/// the process's own cgroup in that hierarchy (relative to the mount's root) — or two levels
/// above it when the process already sits in `<name>/supervisor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub mode: Mode,
    pub v2_base: PathBuf,
    /// The same base as `/proc/<pid>/cgroup` names it (relative to our cgroup namespace's
    /// root): the mount's root joined with the base's path below the mount point.
    pub v2_base_cgroup: PathBuf,
    /// Hybrid only: one entry per v1 controller in use; co-mounted controllers (`cpu,cpuacct`)
    /// share a path. Empty on v2.
    pub v1: Vec<(V1Controller, PathBuf)>,
    /// The process already sat in `<base>/<name>/supervisor` (a daemon restarted after moving
    /// itself there): the tree exists and is adopted.
    pub adopted: bool,
    /// v2 only: the process sits in a cgroup named like the tree itself, a systemd service
    /// (`--cgroup-name keel.service`) without `DelegateSubgroup=` (systemd < 254). systemd puts
    /// every daemon it starts (each restart) into that cgroup, which therefore must never
    /// enable controllers for children (it would hold a process: "no internal processes",
    /// and the next start fails with 219/CGROUP). So the tree is made at the hierarchy's root
    /// (`<mount>/<name>`, as a cgroupfs-driven runtime makes its own) and the daemon stays
    /// where it is, a leaf: [`Layout::v2_base`] is the root, `Tree` neither moves the daemon
    /// nor disables the root's controllers again, and the limits keel may use are this
    /// cgroup's (`MemoryMax=`, `CPUQuota=` of the service).
    pub daemon_stays_in: Option<PathBuf>,
}

impl Layout {
    /// The base of a v1 controller's hierarchy, if it is used.
    pub fn v1_base(&self, controller: V1Controller) -> Option<&Path> {
        self.v1
            .iter()
            .find(|(c, _)| *c == controller)
            .map(|(_, p)| p.as_path())
    }

    /// Every distinct v1 base (co-mounted controllers once), in [`V1Controller::ALL`] order.
    pub fn v1_bases(&self) -> Vec<&Path> {
        let mut bases: Vec<&Path> = Vec::new();
        for (_, path) in &self.v1 {
            if !bases.contains(&path.as_path()) {
                bases.push(path);
            }
        }
        bases
    }

    /// The v2 cgroup whose limits are keel's: the one it starts in.
    fn limits_cgroup(&self) -> &Path {
        self.daemon_stays_in.as_deref().unwrap_or(&self.v2_base)
    }

    /// Every base, v2 first.
    pub fn bases(&self) -> Vec<&Path> {
        let mut all = vec![self.v2_base.as_path()];
        all.extend(self.v1_bases());
        all
    }

    /// The CPU quota of the cgroup keel starts in, as `(quota µs, period µs)`, if it has one:
    /// v2 `cpu.max` ("max 100000" is none), v1 `cpu.cfs_quota_us` (-1 is none). What keel may
    /// use at most, whatever the host has.
    pub fn base_cpu_quota(&self) -> Option<(u64, u64)> {
        let read = |path: PathBuf| std::fs::read_to_string(path).ok();
        match self.mode {
            Mode::V2 => parse_cpu_max(&read(self.limits_cgroup().join("cpu.max"))?),
            Mode::Hybrid => {
                let base = self.v1_base(V1Controller::Cpu)?;
                let quota: i64 = read(base.join("cpu.cfs_quota_us"))?.trim().parse().ok()?;
                let period: u64 = read(base.join("cpu.cfs_period_us"))?.trim().parse().ok()?;
                u64::try_from(quota).ok().map(|q| (q, period))
            }
        }
    }

    /// The memory limit of the cgroup keel starts in, if it has one (v2 `memory.max`, v1
    /// `memory.limit_in_bytes`; v1 says "none" with a number near 2^63).
    pub fn base_memory_limit(&self) -> Option<u64> {
        let path = match self.mode {
            Mode::V2 => self.limits_cgroup().join("memory.max"),
            Mode::Hybrid => self
                .v1_base(V1Controller::Memory)?
                .join("memory.limit_in_bytes"),
        };
        let limit: u64 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
        (limit < 1 << 62).then_some(limit)
    }
}

/// `cpu.max`: "$MAX $PERIOD", `max` meaning no quota (cgroup-v2.rst, "cpu.max").
pub fn parse_cpu_max(text: &str) -> Option<(u64, u64)> {
    let mut parts = text.split_whitespace();
    let quota = parts.next()?.parse().ok()?;
    let period = parts.next().map_or(Some(100_000), |p| p.parse().ok())?;
    Some((quota, period))
}

/// Read this process's layout from `/proc/self`. `tree_name` is the name of keel's tree (a base
/// inside it means an adopted tree, see [`Layout::adopted`]).
pub fn detect(tree_name: &str) -> Result<Layout, CgroupError> {
    let read = |path: &str| {
        std::fs::read_to_string(path).map_err(|source| CgroupError::Detect {
            path: PathBuf::from(path),
            source,
        })
    };
    let mountinfo = read("/proc/self/mountinfo")?;
    let cgroup = read("/proc/self/cgroup")?;
    parse_layout(&mountinfo, &cgroup, tree_name)
}

/// A cgroup mount from mountinfo: its root inside the hierarchy and its mount point.
#[derive(Debug)]
struct CgroupMount {
    v2: bool,
    root: String,
    mount_point: PathBuf,
    /// v1: the controllers of the hierarchy (from the super options).
    controllers: Vec<String>,
    /// The mount (not the superblock) is read-only, as container engines mount
    /// `/sys/fs/cgroup` for a container that is not privileged.
    read_only: bool,
    /// The per-mount options other than `ro`.
    options: Vec<String>,
}

/// The mount points of the read-only cgroup mounts in a mountinfo text, with their other
/// per-mount options (`nosuid`, `nodev`, …), for `keel init` to make them writable.
pub fn read_only_cgroup_mounts(mountinfo: &str) -> Vec<(PathBuf, Vec<String>)> {
    cgroup_mounts(mountinfo)
        .into_iter()
        .filter(|m| m.read_only)
        .map(|m| (m.mount_point, m.options))
        .collect()
}

/// Where a cgroup2 hierarchy should be mounted when none is (a container on a hybrid host:
/// the engine mounted the v1 controllers only, and keel needs cgroup2's `cgroup.kill`,
/// `cgroup.events` and PSI): `unified` beside the v1 hierarchies, as systemd lays a hybrid host
/// out. `None` when a cgroup2 mount is there, or no v1 hierarchy is either (nothing to go by).
pub fn missing_cgroup2_mount_point(mountinfo: &str) -> Option<PathBuf> {
    let mounts = cgroup_mounts(mountinfo);
    if mounts.iter().any(|m| m.v2) {
        return None;
    }
    let first_v1 = mounts.iter().find(|m| !m.v2)?;
    Some(first_v1.mount_point.parent()?.join("unified"))
}

/// The layout from the text of `/proc/self/mountinfo` and `/proc/self/cgroup` (proc(5)).
pub fn parse_layout(
    mountinfo: &str,
    proc_cgroup: &str,
    tree_name: &str,
) -> Result<Layout, CgroupError> {
    super::check_name(tree_name)?;
    let mounts = cgroup_mounts(mountinfo);
    // /proc/self/cgroup: "hierarchy-ID:controller-list:cgroup-path"; the v2 entry is "0::path".
    let mut v2_path = None;
    let mut v1_paths: Vec<(Vec<String>, String)> = Vec::new();
    for line in proc_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2_path = Some(path.to_string());
        } else if !controllers.is_empty() {
            let list = controllers.split(',').map(str::to_string).collect();
            v1_paths.push((list, path.to_string()));
        }
    }

    // keel needs the v2 mount in every mode: cgroup.kill, cgroup.events and CLONE_INTO_CGROUP
    // exist only there.
    let v2_mount = mounts.iter().find(|m| m.v2).ok_or(CgroupError::NoV2Mount)?;
    let v2_path = v2_path.ok_or(CgroupError::NoV2Mount)?;
    let (v2_base, v2_base_cgroup, adopted) = base_in(&mounts, true, None, &v2_path, tree_name)
        .ok_or_else(|| CgroupError::OutsideMount {
            hierarchy: "cgroup2".into(),
            cgroup: v2_path.clone(),
            mount_root: v2_mount.root.clone(),
        })?;

    // A controller listed on a non-zero hierarchy of /proc/self/cgroup is bound to v1 and cannot
    // be enabled on v2 (cgroup-v2.rst, "Mounting": a controller is available on one hierarchy
    // at a time).
    let on_v1 = |name: &str| {
        v1_paths
            .iter()
            .any(|(list, _)| list.iter().any(|c| c == name))
    };
    let bound: Vec<&'static str> = super::CONTROLLERS
        .into_iter()
        .filter(|c| on_v1(c))
        .collect();
    if bound.is_empty() {
        // The daemon's own cgroup is a systemd service's, named like the tree (and is not
        // the hierarchy's root).
        let mount = mounts
            .iter()
            .filter(|m| m.v2)
            .find(|m| v2_base.starts_with(&m.mount_point))
            .unwrap_or(v2_mount);
        let in_namesake = !adopted
            && tree_name.ends_with(".service")
            && v2_base != mount.mount_point
            && v2_base.file_name().is_some_and(|n| n == tree_name);
        let (v2_base, v2_base_cgroup, daemon_stays_in) = if in_namesake {
            let root = (mount.mount_point.clone(), PathBuf::from(&mount.root));
            (root.0, root.1, Some(v2_base))
        } else {
            (v2_base, v2_base_cgroup, None)
        };
        return Ok(Layout {
            mode: Mode::V2,
            v2_base,
            v2_base_cgroup,
            v1: Vec::new(),
            adopted,
            daemon_stays_in,
        });
    }
    if bound.len() < super::CONTROLLERS.len() {
        return Err(CgroupError::MixedControllers {
            on_v1: bound,
            on_v2: super::CONTROLLERS
                .into_iter()
                .filter(|c| !on_v1(c))
                .collect(),
        });
    }

    let mut v1 = Vec::new();
    for controller in V1Controller::ALL {
        let name = controller.name();
        let Some((_, path)) = v1_paths
            .iter()
            .find(|(list, _)| list.iter().any(|c| c == name))
        else {
            // Only cpuacct may be missing: CPU usage then comes from the unified cpu.stat.
            continue;
        };
        let mounted = mounts
            .iter()
            .any(|m| !m.v2 && m.controllers.iter().any(|c| c == name));
        if !mounted {
            if controller == V1Controller::Cpuacct {
                continue;
            }
            return Err(CgroupError::V1NotMounted { controller: name });
        }
        let (base, _, _) =
            base_in(&mounts, false, Some(name), path, tree_name).ok_or_else(|| {
                CgroupError::OutsideMount {
                    hierarchy: name.into(),
                    cgroup: path.clone(),
                    mount_root: mounts
                        .iter()
                        .find(|m| !m.v2 && m.controllers.iter().any(|c| c == name))
                        .map(|m| m.root.clone())
                        .unwrap_or_default(),
                }
            })?;
        v1.push((controller, base));
    }
    Ok(Layout {
        mode: Mode::Hybrid,
        v2_base,
        v2_base_cgroup,
        v1,
        adopted,
        daemon_stays_in: None,
    })
}

/// The base in the first matching mount whose root contains `cgroup_path`, and whether the path
/// was inside `<tree_name>/supervisor`.
fn base_in(
    mounts: &[CgroupMount],
    v2: bool,
    controller: Option<&str>,
    cgroup_path: &str,
    tree_name: &str,
) -> Option<(PathBuf, PathBuf, bool)> {
    mounts
        .iter()
        .filter(|m| m.v2 == v2)
        .filter(|m| controller.is_none_or(|c| m.controllers.iter().any(|x| x == c)))
        .find_map(|m| {
            let relative = relative_to_root(&m.root, cgroup_path)?;
            let (relative, adopted) = strip_supervisor(relative, tree_name);
            let (base, cgroup) = if relative.as_os_str().is_empty() {
                (m.mount_point.clone(), PathBuf::from(&m.root))
            } else {
                (
                    m.mount_point.join(&relative),
                    Path::new(&m.root).join(&relative),
                )
            };
            Some((base, cgroup, adopted))
        })
}

/// `cgroup_path` relative to the mount's `root`, both as the kernel shows them: relative to our
/// cgroup namespace's root (cgroup-v2.rst, "Namespace"). None when the process sits outside what
/// the mount shows — a bind of another part of the hierarchy, or a cgroup above our namespace's
/// root, which the kernel shows with `..` entries (cgroup_namespaces(7)).
fn relative_to_root(root: &str, cgroup_path: &str) -> Option<PathBuf> {
    let relative = Path::new(cgroup_path).strip_prefix(root).ok()?;
    let normal = relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    normal.then(|| relative.to_path_buf())
}

/// A path ending in `<tree_name>/supervisor` is a restarted daemon's own leaf: its base is two
/// levels up. One ending in [`INIT_LEAF`] is keel init's leaf (a daemon it started): its base
/// is one level up.
fn strip_supervisor(relative: PathBuf, tree_name: &str) -> (PathBuf, bool) {
    let parts: Vec<_> = relative.components().collect();
    let n = parts.len();
    if n >= 2 && parts[n - 1].as_os_str() == "supervisor" && parts[n - 2].as_os_str() == tree_name {
        (parts[..n - 2].iter().collect(), true)
    } else if n >= 1 && parts[n - 1].as_os_str() == INIT_LEAF {
        (parts[..n - 1].iter().collect(), false)
    } else {
        (relative, false)
    }
}

/// The leaf keel init moves into on v2 when its cgroup is not the hierarchy's root (a
/// container's cgroup namespace): a cgroup that enables controllers for its children may hold
/// no process (cgroup-v2.rst, "No Internal Process Constraint"; the root is exempt), and the
/// daemon enables cpu, memory and pids in the cgroup keel init started in — its base.
pub const INIT_LEAF: &str = "keel-init";

/// Whether keel init must move into [`INIT_LEAF`] of its base: on v2, unless the base is the
/// hierarchy's root (which has no `cgroup.type` file: cgroup-v2.rst, "exists on non-root
/// cgroups"). Moving a process already in the leaf into it again changes nothing.
pub fn init_needs_leaf(mode: Mode, base_has_type_file: bool) -> bool {
    mode == Mode::V2 && base_has_type_file
}

/// The cgroup and cgroup2 mounts of a mountinfo text (proc(5): "36 35 98:0 /mnt1 /mnt2 rw,noatime
/// master:1 - ext3 /dev/root rw,errors=continue"; optional fields end at " - ").
/// `(root, mount point)` of each cgroup2 mount in a mountinfo text: where a cgroup path (as
/// `/proc/<pid>/cgroup` names it) can be looked at.
pub fn cgroup2_mounts(mountinfo: &str) -> Vec<(String, PathBuf)> {
    cgroup_mounts(mountinfo)
        .into_iter()
        .filter(|m| m.v2)
        .map(|m| (m.root, m.mount_point))
        .collect()
}

fn cgroup_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    let mut mounts = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        if left.len() < 5 || right.is_empty() {
            continue;
        }
        let v2 = match right[0] {
            "cgroup2" => true,
            "cgroup" => false,
            _ => continue,
        };
        let controllers = if v2 {
            Vec::new()
        } else {
            right
                .get(2)
                .map(|opts| opts.split(',').map(str::to_string).collect())
                .unwrap_or_default()
        };
        let options: Vec<String> = left
            .get(5)
            .map(|o| o.split(',').map(str::to_string).collect())
            .unwrap_or_default();
        mounts.push(CgroupMount {
            v2,
            root: unescape(left[3]),
            mount_point: PathBuf::from(unescape(left[4])),
            controllers,
            read_only: options.iter().any(|o| o == "ro"),
            options: options.into_iter().filter(|o| o != "ro").collect(),
        });
    }
    mounts
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo` octal.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
