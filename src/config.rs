//! The daemon's configuration file, `keel.ron` in the state directory (or `--config PATH`):
//!
//! ```ron
//! Config(
//!     capacity: Capacity(cpu: 2.0, memory: "8G", max_running: Some(4)),
//!     starvation_limit: "10m",
//!     pressure: Pressure(cpu: 40.0, memory: 10.0, io: 40.0),
//!     user_namespaces: UserNamespaces(first_id: 1879048192, blocks: 1024),
//!     jobs: Jobs(workers: 2, memory: "1G", deadline: "10m"),
//!     network: Network(lists: {"anthropic": ["api.anthropic.com"]}, resolver: None, trust: []),
//!     notify: [Notify(on: [Failed, Stalled, OomKill], command: ["ntfy", "publish", "agents"])],
//! )
//! ```
//!
//! Every field is optional and a missing file means all defaults: the CPUs the daemon may run
//! on, 90% of the memory it may use (the rest is left to keel, the shims and the host), no count
//! limit, a starvation limit of 10 minutes, starts held back above 40% CPU, 10% memory or 40%
//! I/O pressure ([`pressure`]), and a user namespace for every task with its ids
//! from [`DEFAULT_FIRST_ID`] ([`UserNamespaces`]). Unknown fields are errors. The file is RON like
//! a unit file and is read with the unit module's machinery, so its errors name `file:line:col`
//! and read the same way. `notify` names commands run on chosen events ([`notify`],
//! docs/notifications.md); a hook's `user` is looked up as the file is read.

pub mod jobs;
pub mod network;
pub mod notify;
pub mod pressure;

use crate::fmt::format_bytes;
use crate::unit::source_map::SourceMap;
use crate::unit::{
    cpu_millis, format_size, read_ron_text, Dur, FieldPath, Size, UnitError, MIN_MEMORY,
};
use serde::{Deserialize, Deserializer};
use std::path::Path;
use std::time::Duration;

/// The file name of the configuration in the state directory.
pub const CONFIG_FILE: &str = "keel.ron";

/// The default `starvation_limit`.
pub const DEFAULT_STARVATION_LIMIT: Duration = Duration::from_secs(600);

/// The configuration as written: `None` for each field left out.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, rename = "Config")]
pub struct RawConfig {
    #[serde(default)]
    pub capacity: RawCapacity,
    #[serde(default, deserialize_with = "written")]
    pub starvation_limit: Option<Dur>,
    #[serde(default, deserialize_with = "written")]
    pub pressure: Option<pressure::RawPressure>,
    #[serde(default, deserialize_with = "written")]
    pub user_namespaces: Option<RawUserNamespaces>,
    #[serde(default)]
    pub jobs: jobs::RawJobs,
    #[serde(default, deserialize_with = "written")]
    pub harvest_limits: Option<crate::checkout::HarvestLimits>,
    #[serde(default)]
    pub network: network::RawNetwork,
    /// `disk_reserve: "1G"`: below this much free space on the state filesystem, new starts
    /// wait (`crate::daemon::disk`).
    #[serde(default, deserialize_with = "written")]
    pub disk_reserve: Option<Size>,
    /// `notify: [Notify(on: [Failed], command: [...])]`: hooks run on chosen events.
    #[serde(default)]
    pub notify: Vec<notify::RawNotify>,
}

/// `user_namespaces: UserNamespaces(first_id: 1879048192, blocks: 1024)` or
/// `user_namespaces: Off`, as written (each field of `UserNamespaces(...)` may be left out).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum RawUserNamespaces {
    Off,
    UserNamespaces {
        #[serde(default, deserialize_with = "written")]
        first_id: Option<u32>,
        #[serde(default, deserialize_with = "written")]
        blocks: Option<u32>,
    },
}

/// `Capacity(cpu: 2.0, memory: "8G", max_running: Some(4))`, as written.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, rename = "Capacity")]
pub struct RawCapacity {
    #[serde(default, deserialize_with = "written")]
    pub cpu: Option<f64>,
    #[serde(default, deserialize_with = "written")]
    pub memory: Option<Size>,
    /// Written `Some(4)` or `None` (no limit, as when left out).
    #[serde(default)]
    pub max_running: Option<usize>,
}

/// A field written as a bare value (`cpu: 2.0`, not `cpu: Some(2.0)`) that may be left out.
fn written<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// The configuration in force: every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub capacity: Capacity,
    /// How long a blocked task may be passed by smaller ones before it holds the line.
    pub starvation_limit: Duration,
    /// The pressure above which queued tasks wait; `None`: `pressure: Off`.
    pub pressure: Option<pressure::PressureThresholds>,
    /// Whether tasks get a user namespace, and the host ids their blocks come from.
    pub user_namespaces: UserNamespaces,
    /// How keel's workers are bounded ([`jobs::Jobs`]).
    pub jobs: jobs::Jobs,
    /// What a harvest refuses to bring home.
    pub harvest_limits: crate::checkout::HarvestLimits,
    /// The named allow-lists units reuse, and the DNS server of the tasks' relays.
    pub network: network::NetworkConfig,
    /// The free space new starts leave on the state filesystem, as written; `None`: the
    /// default, [`default_disk_reserve`] of the filesystem's size.
    pub disk_reserve: Option<u64>,
    /// The commands run on chosen events ([`notify::Hook`]).
    pub notify: Vec<notify::Hook>,
}

/// The default `disk_reserve`: 1 GiB, or 5% of the state filesystem when that is smaller (a
/// small test or container filesystem is not held at "never start").
pub fn default_disk_reserve(filesystem_bytes: u64) -> u64 {
    (filesystem_bytes / 20).min(1 << 30)
}

/// The ids of a task's user namespace: each task holds one block of [`ID_BLOCK_SIZE`] host ids
/// (the same numbers for uids and gids), the agent's `0..65536` mapped to the block's
/// (`crate::daemon::id_blocks` hands them out and checks the range against the host at start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserNamespaces {
    /// No user namespace: the agent's ids are the host's, so its root is the host's root for
    /// file permissions and per-user kernel quotas (epoll and inotify watches, message
    /// queues). Only for hosts that cannot make user namespaces: it weakens the sandbox.
    Off,
    On(IdRange),
}

/// `blocks` blocks of [`ID_BLOCK_SIZE`] host ids from `first_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    pub first_id: u32,
    pub blocks: u32,
}

impl IdRange {
    /// The first host id past the range (u64: the end of a range may be 2^32).
    pub fn end(&self) -> u64 {
        u64::from(self.first_id) + u64::from(self.blocks) * u64::from(ID_BLOCK_SIZE)
    }
}

/// Host ids per task: a full 16-bit id space inside the namespace, so that an image's system
/// users and groups exist as its files name them: `_apt` (42), `nobody`/`nogroup` (65534),
/// the 60000s of distributions' dynamic users. A smaller block leaves their files unmapped
/// (owned by the overflow id), and `chown` to them fails. 65536 is also what rootless Podman,
/// systemd-nspawn's `--private-users=pick` and shadow's `useradd` give each container or user.
pub const ID_BLOCK_SIZE: u32 = 65536;

/// The default first host id, 0x70000000. systemd's UIDS-GIDS.md assigns 0x00080000–0x6FFFFFFF
/// to nspawn containers (`--private-users=pick`) and leaves 0x70000000–0x7FFFFFFF unused; ids
/// from 2^31 up are avoided because programs keep uids in signed 32-bit integers; shadow's
/// `useradd` (and so Podman's `/etc/subuid` entries) counts from 100000 up, and regular users
/// and systemd's dynamic and homed users live below 65536. The daemon still checks the range
/// against the host's `/etc/subuid`, `/etc/subgid`, `/etc/passwd` and `/etc/group` at start.
pub const DEFAULT_FIRST_ID: u32 = 0x7000_0000;

/// The default number of blocks (tasks holding a user namespace's ids at once): 1024 blocks
/// of 65536 ids, 0x70000000–0x73FFFFFF, a quarter of the range systemd leaves unused.
pub const DEFAULT_ID_BLOCKS: u32 = 1024;

/// No block may start below this: ids under 65536 are the host's own users and groups
/// (systemd's dynamic users, 61184–65519, are in no file the daemon could check), `nobody`
/// (65534) and the 16-bit invalid id 65535.
pub const MIN_FIRST_ID: u32 = 65536;

/// No block may reach past this, 0x7FFE0000: there systemd (258 and later) begins its
/// "foreign" range (0x7FFE0000–0x7FFEFFFF, the owner of disk images from elsewhere), and from
/// 2^31 up programs that keep ids in signed 32-bit integers break (see [`DEFAULT_FIRST_ID`]).
pub const ID_RANGE_LIMIT: u64 = 0x7FFE_0000;

impl Config {
    /// `starvation_limit` in milliseconds, as the scheduler takes it.
    pub fn starvation_limit_ms(&self) -> u64 {
        u64::try_from(self.starvation_limit.as_millis()).unwrap_or(u64::MAX)
    }
}

/// What the daemon may hand out (the scheduler's capacity, `crate::daemon::queue`): the sum of
/// running reservations stays within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    pub cpu_millis: u64,
    pub memory: u64,
    /// At most this many tasks run at once; `None`: no count limit.
    pub max_running: Option<usize>,
}

/// What the host lets the daemon use, the base of the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCapacity {
    /// The CPUs the daemon may run on, in millicores, capped by its cgroup's CPU quota.
    pub cpu_millis: u64,
    /// The memory it may use: MemTotal, capped by its cgroup's memory limit.
    pub memory: u64,
}

impl HostCapacity {
    /// From the figures: `cpus` the daemon may run on (its affinity), `cpu_quota` as
    /// `(quota µs, period µs)` from cgroup v2 `cpu.max` or v1 `cpu.cfs_quota_us` /
    /// `cpu.cfs_period_us` (`None` for no quota), `mem_total` in bytes, and the cgroup's
    /// `memory.max` / `memory.limit_in_bytes` (`None` for no limit).
    pub fn new(
        cpus: usize,
        cpu_quota: Option<(u64, u64)>,
        mem_total: u64,
        memory_limit: Option<u64>,
    ) -> HostCapacity {
        let mut cpu = (cpus.max(1) as u64).saturating_mul(1000);
        if let Some((quota, period)) = cpu_quota.filter(|(_, period)| *period > 0) {
            // Integer arithmetic: "150000 100000" is exactly 1500 millicores. A quota below a
            // millicore still leaves one, so that the default capacity is never zero.
            let millis = u128::from(quota) * 1000 / u128::from(period);
            cpu = cpu.min(u64::try_from(millis).unwrap_or(u64::MAX).max(1));
        }
        let memory = memory_limit.map_or(mem_total, |limit| limit.min(mem_total));
        HostCapacity {
            cpu_millis: cpu,
            memory,
        }
    }

    /// This process's figures: its CPU affinity and `/proc/meminfo`, capped by the cgroup
    /// figures the caller read (see [`HostCapacity::new`]).
    pub fn detect(
        cpu_quota: Option<(u64, u64)>,
        memory_limit: Option<u64>,
    ) -> std::io::Result<HostCapacity> {
        use nix::sched::{sched_getaffinity, CpuSet};
        let cpus = match sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
            Ok(set) => (0..CpuSet::count())
                .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
                .count(),
            // Only on a host with more CPUs than a cpu_set_t holds; std asks the kernel with a
            // larger set.
            Err(_) => std::thread::available_parallelism().map_or(1, usize::from),
        };
        let meminfo = std::fs::read_to_string("/proc/meminfo")?;
        let mem_total = parse_mem_total(&meminfo).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "/proc/meminfo has no MemTotal line",
            )
        })?;
        Ok(HostCapacity::new(cpus, cpu_quota, mem_total, memory_limit))
    }
}

/// `MemTotal:  16316412 kB` of `/proc/meminfo`, in bytes.
pub fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let number: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => number.checked_mul(1024),
        None => Some(number),
        Some(_) => None,
    }
}

/// The configuration in force: what `raw` says, the defaults for the rest.
pub fn resolve(raw: &RawConfig, host: &HostCapacity) -> Config {
    let capacity = &raw.capacity;
    Config {
        capacity: Capacity {
            cpu_millis: capacity.cpu.map_or(host.cpu_millis, cpu_millis),
            memory: capacity.memory.map_or(default_memory(host.memory), |s| s.0),
            max_running: capacity.max_running,
        },
        starvation_limit: raw
            .starvation_limit
            .map_or(DEFAULT_STARVATION_LIMIT, |d| d.0),
        pressure: pressure::resolve(raw.pressure.as_ref()),
        user_namespaces: match raw.user_namespaces {
            Some(RawUserNamespaces::Off) => UserNamespaces::Off,
            Some(RawUserNamespaces::UserNamespaces { first_id, blocks }) => {
                UserNamespaces::On(IdRange {
                    first_id: first_id.unwrap_or(DEFAULT_FIRST_ID),
                    blocks: blocks.unwrap_or(DEFAULT_ID_BLOCKS),
                })
            }
            None => UserNamespaces::On(IdRange {
                first_id: DEFAULT_FIRST_ID,
                blocks: DEFAULT_ID_BLOCKS,
            }),
        },
        jobs: jobs::resolve(&raw.jobs),
        harvest_limits: raw.harvest_limits.unwrap_or_default(),
        network: network::resolve(&raw.network),
        disk_reserve: raw.disk_reserve.map(|s| s.0),
        notify: notify::resolve(&raw.notify),
    }
}

/// 90% of `memory`, without overflow.
fn default_memory(memory: u64) -> u64 {
    (u128::from(memory) * 9 / 10) as u64
}

/// Read and resolve the configuration file at `path`; no file means all defaults.
pub fn load_config(path: &Path, host: &HostCapacity) -> Result<Config, UnitError> {
    if let Err(e) = std::fs::symlink_metadata(path) {
        if e.kind() == std::io::ErrorKind::NotFound {
            return Ok(resolve(&RawConfig::default(), host));
        }
    }
    let text = read_ron_text(
        path,
        "the configuration is a file Config(...)",
        "the configuration",
    )?;
    Ok(resolve(&parse_config(path, &text)?, host))
}

/// Parse and check the text of a configuration file; `file` is only used in error messages.
/// The first problem in file order is reported. A leading byte-order mark is ignored.
pub fn parse_config(file: &Path, text: &str) -> Result<RawConfig, UnitError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let error_at = |offset: usize, message: String| UnitError::at(file, text, offset, message);
    let map = SourceMap::new(text);
    let mut raw: RawConfig = match ron::from_str(text) {
        Ok(raw) => raw,
        Err(error) => {
            let (offset, message) = map.explain(&error);
            return Err(error_at(offset, reword(&error.code, message)));
        }
    };
    let mut problems: Vec<(usize, String)> = check(&raw)
        .into_iter()
        .map(|(path, message)| (map.locate(&path), format!("{path}: {message}")))
        .collect();
    problems.sort_by_key(|(offset, _)| *offset);
    if let Some((offset, message)) = problems.into_iter().next() {
        return Err(error_at(offset, message));
    }
    notify::resolve_users(&mut raw.notify)
        .map_err(|(path, message)| error_at(map.locate(&path), format!("{path}: {message}")))?;
    Ok(raw)
}

/// The unit module explains ron's errors in a unit's words; these few are about the file as a
/// whole and say what a configuration is instead.
fn reword(code: &ron::error::Error, message: String) -> String {
    use ron::error::Error as E;
    const UNIT_ROOT: &str = "a unit, Unit(command: [\"program\", \"arg\"], ...)";
    const CONFIG_ROOT: &str = "Config(capacity: Capacity(cpu: 2.0, memory: \"8G\"), ...)";
    const OUT_OF_BOUNDS: &str = "expected integer is out of bounds";
    match code {
        _ if message.starts_with("the file holds no unit") => {
            "the file holds no configuration: write Config() with the fields to set (all are \
             optional), or remove the file for the defaults"
                .to_string()
        }
        E::TrailingCharacters => message.replace(
            "after the end of the unit: a unit file holds exactly one Unit(...)",
            "after the end of the configuration: the file holds exactly one Config(...)",
        ),
        E::NoSuchStructField {
            found,
            outer: Some(outer),
            ..
        } if outer == "Config" && ["cpu", "memory", "max_running"].contains(&&**found) => {
            format!(
                "{message} ({found:?} belongs inside capacity: write capacity: Capacity({found}: ...))"
            )
        }
        _ if message.starts_with("user_namespaces.") && message.ends_with(OUT_OF_BOUNDS) => {
            message.replace(
                OUT_OF_BOUNDS,
                "first_id is a host id such as 1879048192 (0x70000000), blocks a count such as 1024",
            )
        }
        _ => message.replace(UNIT_ROOT, CONFIG_ROOT),
    }
}

/// Values that parse but cannot be meant, by the field they are written in.
fn check(raw: &RawConfig) -> Vec<(FieldPath, String)> {
    let at = FieldPath::default().field("capacity");
    let mut problems = Vec::new();
    if let Some(cpu) = raw.capacity.cpu {
        // Below half a millicore rounds to none: no task could ever start.
        if !(cpu.is_finite() && cpu >= 0.0005) {
            problems.push((
                at.field("cpu"),
                format!(
                    "{cpu} is not a positive number of CPU cores: write e.g. 2.0, or leave it out for all the CPUs keel may use"
                ),
            ));
        }
    }
    if let Some(Size(memory)) = raw.capacity.memory {
        if memory < MIN_MEMORY {
            problems.push((
                at.field("memory"),
                format!(
                    "{} leaves no room for a task (the smallest memory reservation is {}): write e.g. \"8G\", or leave it out for 90% of the memory keel may use",
                    format_bytes(memory, false),
                    format_size(MIN_MEMORY)
                ),
            ));
        }
    }
    if raw.capacity.max_running == Some(0) {
        problems.push((
            at.field("max_running"),
            "Some(0) would never start a task: write None for no limit, or Some(1) or more"
                .to_string(),
        ));
    }
    if let Some(RawUserNamespaces::UserNamespaces { first_id, blocks }) = raw.user_namespaces {
        problems.extend(check_id_range(first_id, blocks));
    }
    problems.extend(pressure::check(raw.pressure.as_ref()));
    problems.extend(jobs::check(&raw.jobs));
    problems.extend(network::check(&raw.network));
    problems.extend(notify::check(&raw.notify));
    problems
}

/// `UserNamespaces(first_id: …, blocks: …)`: at least one block, none below [`MIN_FIRST_ID`]
/// or reaching past [`ID_RANGE_LIMIT`].
fn check_id_range(first_id: Option<u32>, blocks: Option<u32>) -> Vec<(FieldPath, String)> {
    let at = FieldPath::default().field("user_namespaces");
    let range = IdRange {
        first_id: first_id.unwrap_or(DEFAULT_FIRST_ID),
        blocks: blocks.unwrap_or(DEFAULT_ID_BLOCKS),
    };
    let size = u64::from(ID_BLOCK_SIZE);
    let mut problems = Vec::new();
    if range.first_id < MIN_FIRST_ID {
        problems.push((
            at.field("first_id"),
            format!(
                "{} is below {MIN_FIRST_ID}: ids under 65536 are the host's own users and groups \
                 (regular, dynamic, nobody); write e.g. first_id: {DEFAULT_FIRST_ID} (0x70000000, \
                 the default), or leave it out",
                range.first_id
            ),
        ));
    } else if range.blocks == 0 {
        problems.push((
            at.field("blocks"),
            "0 blocks would never start a task: write blocks: 1 or more (one per task), or \
             user_namespaces: Off for no user namespace"
                .to_string(),
        ));
    } else if range.end() > ID_RANGE_LIMIT {
        let fits = ID_RANGE_LIMIT.saturating_sub(u64::from(range.first_id)) / size;
        let highest_first = ID_RANGE_LIMIT.saturating_sub(u64::from(range.blocks) * size);
        // Point at what was written: the block count when it was, else the first id.
        let (field, fix) = if blocks.is_some() && fits > 0 {
            ("blocks", format!("write blocks: {fits} or fewer"))
        } else if highest_first >= u64::from(MIN_FIRST_ID) {
            (
                "first_id",
                format!("write first_id: {highest_first} or lower"),
            )
        } else {
            let most = (ID_RANGE_LIMIT - u64::from(MIN_FIRST_ID)) / size;
            (
                "blocks",
                format!("at most {most} blocks fit, from first_id: {MIN_FIRST_ID}"),
            )
        };
        problems.push((
            at.field(field),
            format!(
                "{} blocks of {ID_BLOCK_SIZE} ids from {} would end at {}, past {ID_RANGE_LIMIT} \
                 (0x7FFE0000: systemd's foreign ids begin there, and from 2^31 up programs that \
                 keep ids in signed 32-bit integers break): {fix}",
                range.blocks,
                range.first_id,
                range.end() - 1,
            ),
        ));
    }
    problems
}

#[cfg(test)]
mod tests;
