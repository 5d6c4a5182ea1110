//! The daemon's side of a task's network (`sandbox.network: None | Allow`): the attempt's
//! network namespace, made before the shim's spawn ([`crate::network::task_namespace`]), and for
//! `Allow` the task's relay (`keel relay`, the policy side), spawned into the task's cgroup —
//! it dies with the attempt, its CPU and memory are the task's, and it outlives a daemon that
//! dies (a re-adopted task's connections, open ones included, go on). The daemon looks at
//! the relay every few seconds ([`Timer::Network`]): one that died is started again (its
//! sockets made anew in the namespace; the fake addresses it handed out are in its `names`
//! file), and its report's new refusals are journaled as `net-denied`, coalesced per
//! destination.

use crate::network::relay_protocol::{RelayReport, RelaySpec};
use crate::network::task_namespace::{self, RelaySockets};
use crate::sandbox::spec::SandboxNetwork;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the daemon looks at each relay and its report.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(2);
/// The first wait before a relay that died is started again; doubled per death, at most
/// [`RESTART_MAX`].
const RESTART_FIRST: Duration = Duration::from_secs(1);
const RESTART_MAX: Duration = Duration::from_secs(30);
/// A relay's log is cut back past this size (one line per event, refusals coalesced).
const RELAY_LOG_MAX_BYTES: u64 = 1 << 20;

/// An attempt's network, as the daemon holds it.
pub(crate) struct TaskNetwork {
    /// The namespace (its `lo`, its routes), held while the attempt runs.
    pub netns: OwnedFd,
    /// The relay, for `Allow`.
    relay: Option<Relay>,
}

struct Relay {
    spec: RelaySpec,
    spec_path: PathBuf,
    /// `(pid, pidfd)` of the running one; `None` between a death and its restart.
    process: Option<(i32, OwnedFd)>,
    deaths: u32,
    restart_at: Option<Instant>,
    cgroup: Option<OwnedFd>,
    v1_procs: Vec<PathBuf>,
    /// What was journaled so far: the report's counts.
    journaled: Journaled,
}

/// The report's counts already journaled: refusals per destination, misdirected
/// placeholders per (secret, destination).
#[derive(Debug, Default)]
pub(crate) struct Journaled {
    pub refused: BTreeMap<String, u64>,
    pub misdirected: BTreeMap<(String, String), u64>,
}

impl Journaled {
    /// All that `report` counts, taken as journaled.
    fn of(report: Option<&RelayReport>) -> Journaled {
        let refused = (report.iter().flat_map(|r| &r.refused))
            .map(|r| (r.destination.clone(), r.count))
            .collect();
        let misdirected = (report.iter().flat_map(|r| &r.misdirected))
            .map(|m| ((m.secret.clone(), m.destination.clone()), m.count))
            .collect();
        Journaled {
            refused,
            misdirected,
        }
    }
}

/// An event of the journal a relay's report calls for: `net-denied` or `secret-misdirected`,
/// and its detail.
pub(crate) type NetworkEvent = (&'static str, String);

/// Where the attempt's relay asks names on the host (`keel.ron`), and what it inherits of the
/// task's cgroup.
pub(crate) struct NetworkContext<'a> {
    pub unit: &'a str,
    pub run_dir: &'a Path,
    pub resolver: Option<SocketAddr>,
    pub cgroup: Option<BorrowedFd<'a>>,
    pub v1_procs: &'a [PathBuf],
    /// The attempt's secrets (with their placeholders), which its relay swaps in.
    pub secrets: &'a [crate::secrets::TaskSecret],
    /// The state root, whose CA the relay signs with (`crate::network::tls::CA_DIR`).
    pub state_root: &'a Path,
    /// `keel.ron`'s `network.trust`: CA files for the intercepted hosts' upstreams.
    pub trust: &'a [PathBuf],
}

/// The CA that signs the certificates the relays show for the secrets' hosts
/// (`STATE/network/ca/`, made once), and the bundle the sandboxes of units with secrets see
/// as the host's (`STATE/network/ca-bundle.pem`: the host's bundle and that CA). A failure is
/// logged, never fatal: the tasks with secrets then cannot reach their hosts (fail-closed).
pub(crate) fn prepare_authority(state_root: &Path) {
    let authority = match crate::network::tls::Authority::open(state_root) {
        Ok(authority) => authority,
        Err(e) => {
            log::error!(
                "the CA for the tasks' secrets: {e} (tasks with secrets cannot reach their hosts)"
            );
            return;
        }
    };
    match crate::secrets::write_ca_bundle(state_root, authority.cert_pem()) {
        Ok(path) => log::debug!("the sandboxes' CA bundle: {}", path.display()),
        Err(e) => log::error!(
            "the sandboxes' CA bundle: {e} (tasks with secrets cannot reach their hosts)"
        ),
    }
}

/// Why a unit with secrets cannot start now for want of keel's CA or the sandboxes' bundle
/// (made at the daemon's start: tried again here, in keel's own state directory). The host's
/// problem: the start waits (deferred), spending nothing of the task's.
pub(crate) fn authority_problem(state_root: &Path, unit: &crate::unit::Unit) -> Option<String> {
    if unit.secrets.is_empty() {
        return None;
    }
    // As the relay will load it (a key another keel or an operator left wider is refused
    // there too): keel's own state directory, a few small files.
    let ready = || {
        crate::network::tls::Authority::load(state_root).is_ok()
            && crate::secrets::ca_bundle_path(state_root).is_file()
    };
    if ready() {
        return None;
    }
    prepare_authority(state_root);
    match ready() {
        true => None,
        false => Some(
            "keel's CA for the secrets' hosts could not be made (the daemon's log says why)"
                .to_string(),
        ),
    }
}

/// The network of an attempt of `network`: `None` for `Host`; else its namespace (owned by
/// `userns`, the task's) and, for `Allow`, its relay, started. `Err`: why not (the host's
/// problem: no network namespace can be made, or the relay cannot run).
pub(crate) fn start(
    network: &SandboxNetwork,
    userns: Option<BorrowedFd<'_>>,
    ctx: &NetworkContext<'_>,
) -> Result<Option<TaskNetwork>, String> {
    let allow = match network {
        SandboxNetwork::Host => return Ok(None),
        SandboxNetwork::None => None,
        SandboxNetwork::Allow { entries, lists } => Some((&entries[..], lists)),
    };
    let (netns, sockets) = task_namespace::make(allow, userns)?;
    let Some(sockets) = sockets else {
        return Ok(Some(TaskNetwork { netns, relay: None }));
    };
    let dir = task_namespace::network_dir(ctx.run_dir);
    // A new namespace: what an earlier attempt's relay counted and handed out is not this one's.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let fds = sockets.relay_fds(netns.as_fd());
    let Some((entries, lists)) = allow else {
        return Err("no relay spec for an Allow network".into());
    };
    let relay_ctx = (ctx.unit, ctx.run_dir, ctx.resolver);
    let mut spec = task_namespace::relay_spec(entries, lists, relay_ctx, fds);
    if !ctx.secrets.is_empty() {
        spec.secrets = ctx.secrets.to_vec();
        spec.state_root = Some(ctx.state_root.to_path_buf());
        spec.trust = ctx.trust.to_vec();
    }
    let cgroup = (ctx.cgroup)
        .map(|fd| fd.try_clone_to_owned())
        .transpose()
        .map_err(|e| format!("cannot keep the task's cgroup for its relay: {e}"))?;
    let mut relay = Relay {
        spec,
        spec_path: dir.join("relay.json"),
        process: None,
        deaths: 0,
        restart_at: None,
        cgroup,
        v1_procs: ctx.v1_procs.to_vec(),
        journaled: Journaled::default(),
    };
    relay.spawn(netns.as_fd(), &sockets)?;
    Ok(Some(TaskNetwork {
        netns,
        relay: Some(relay),
    }))
}

impl Relay {
    /// Write its spec (the descriptors' numbers are this daemon's, which the relay inherits)
    /// and start `keel relay` in the task's cgroup.
    fn spawn(&mut self, netns: BorrowedFd<'_>, sockets: &RelaySockets) -> Result<(), String> {
        self.spec.fds = sockets.relay_fds(netns);
        let text = serde_json::to_vec_pretty(&self.spec).map_err(|e| e.to_string())?;
        // Read by the relay at its start only: no fsync on the start's path.
        crate::state::replace_volatile(&self.spec_path, &text, 0o600)
            .map_err(|e| format!("cannot write {}: {e}", self.spec_path.display()))?;
        let log_path = self.spec_path.with_file_name("relay.log");
        if std::fs::metadata(&log_path).is_ok_and(|m| m.len() > RELAY_LOG_MAX_BYTES) {
            let _ = std::fs::rename(&log_path, log_path.with_extension("log.1"));
        }
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&log_path)
            .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
        let devnull = crate::sys::fds::open_dev_null().map_err(|e| e.to_string())?;
        let nul = |s: &str| CString::new(s).map_err(|_| format!("a NUL in {s:?}"));
        let program = nul("/proc/self/exe")?;
        let spec_arg = CString::new(self.spec_path.as_os_str().as_encoded_bytes())
            .map_err(|_| "a NUL in the relay's spec path".to_string())?;
        let argv = [nul("keel")?, nul("relay")?, nul("--spec")?, spec_arg];
        // The daemon's environment (KEEL_LOG, JOURNAL_STREAM), but not its crash point: that
        // names the daemon's own writes.
        let envp = crate::sys::process::environment_except(&["KEEL_CRASH_AT"]);
        let keep = sockets.raw_fds(netns);
        let request = crate::sys::SpawnRequest {
            program: &program,
            argv: &argv,
            envp: &envp,
            stdin: devnull.as_raw_fd(),
            stdout: log.as_raw_fd(),
            stderr: log.as_raw_fd(),
            extra_flags: 0,
            pid_namespace: None,
            cgroup_fd: self.cgroup.as_ref().map(|fd| fd.as_raw_fd()),
            keep_as_fd3: None,
            keep_fds: &keep,
            nofile: None,
            signals_blocked: false,
        };
        let (pid, pidfd) = crate::sys::spawn_with_pidfd(&request)
            .map_err(|e| format!("cannot start the task's relay: {e}"))?;
        // Hybrid hosts: the v1 controllers' cgroups too (the v2 one was joined at the clone).
        for procs in &self.v1_procs {
            if let Err(e) = std::fs::write(procs, pid.to_string()) {
                log::warn!(
                    "{}: relay {pid}: cannot join {}: {e}",
                    self.spec.unit,
                    procs.display()
                );
            }
        }
        log::info!("{}: network relay started (pid {pid})", self.spec.unit);
        self.process = Some((pid, pidfd));
        Ok(())
    }

    /// Whether the running relay has exited (its pidfd readable).
    fn exited(&self) -> bool {
        self.process.as_ref().is_some_and(|(_, pidfd)| {
            crate::sys::fds::wait_readable(pidfd.as_fd(), Some(Duration::ZERO))
        })
    }
}

impl TaskNetwork {
    /// Whether the attempt has a relay (`Allow`), running or to be started again.
    pub(crate) fn has_relay(&self) -> bool {
        self.relay.is_some()
    }

    /// An attempt's network that no shim took (its spawn failed): its relay is killed
    /// (through its pidfd: never another process).
    pub(crate) fn kill_relay(self) {
        let Some((pid, pidfd)) = self.relay.and_then(|r| r.process) else {
            return;
        };
        if let Err(e) = crate::sys::pidfd_send_signal(&pidfd, libc::SIGKILL) {
            log::warn!("network relay {pid}: cannot kill it: {e}");
        }
    }

    /// The periodic look ([`CHECK_EVERY`]): a relay that died is started again (after its
    /// backoff); the report's new refusals and misdirected placeholders are journaled.
    pub(crate) fn check(&mut self, task_name: &str, now: Instant) -> Vec<NetworkEvent> {
        let Some(relay) = self.relay.as_mut() else {
            return Vec::new();
        };
        if relay.exited() {
            let pid = relay.process.take().map_or(0, |(pid, _)| pid);
            relay.deaths += 1;
            let wait = RESTART_FIRST
                .saturating_mul(2u32.saturating_pow(relay.deaths.saturating_sub(1).min(8)))
                .min(RESTART_MAX);
            log::warn!(
                "{task_name}: network relay {pid} ended: starting it again in {} (the task goes on; new connections are refused meanwhile)",
                crate::fmt::duration_precise(wait)
            );
            relay.restart_at = Some(now + wait);
        }
        if relay.process.is_none() && relay.restart_at.is_some_and(|at| at <= now) {
            relay.restart_at = None;
            let policy = task_namespace::policy_of(&relay.spec.entries, &relay.spec.lists);
            let respawned = policy
                .and_then(|p| task_namespace::remake_sockets(self.netns.as_fd(), p))
                .and_then(|sockets| relay.spawn(self.netns.as_fd(), &sockets));
            if let Err(e) = respawned {
                log::error!("{task_name}: cannot start the network relay again: {e}");
                relay.restart_at = Some(now + RESTART_MAX);
            }
        }
        new_events(&relay.spec.report, &mut relay.journaled)
    }

    /// The events the relay's report calls for beyond those journaled, without looking at the
    /// relay itself: the attempt's last look, as it ends.
    pub(crate) fn last_events(&mut self) -> Vec<NetworkEvent> {
        match self.relay.as_mut() {
            Some(relay) => new_events(&relay.spec.report, &mut relay.journaled),
            None => Vec::new(),
        }
    }
}

/// The network of a re-adopted attempt (a daemon started again while it ran), when it has a
/// relay (`Allow`): its namespace, from the agent (the shim's first child, which is in it);
/// its relay, from the pid of its report, if that process is alive in the task's cgroup (else
/// it is started again at the next look). What the report counts now is taken as journaled
/// (what the daemon before journaled, give or take its last two seconds).
pub(crate) fn readopt(
    run_dir: &Path,
    shim_pid: i32,
    slice: &crate::cgroup::TaskCgroup,
) -> Option<TaskNetwork> {
    let spec_path = task_namespace::network_dir(run_dir).join("relay.json");
    let spec: RelaySpec = serde_json::from_slice(&std::fs::read(&spec_path).ok()?).ok()?;
    let children = std::fs::read_to_string(format!("/proc/{shim_pid}/task/{shim_pid}/children"));
    let agent: i32 = children.ok()?.split_whitespace().next()?.parse().ok()?;
    let netns = OwnedFd::from(std::fs::File::open(format!("/proc/{agent}/ns/net")).ok()?);
    let own = std::fs::File::open("/proc/self/ns/net").ok()?;
    let id = |fd: BorrowedFd<'_>| crate::sys::netns::id_of(fd).ok();
    if id(netns.as_fd()).is_none() || id(netns.as_fd()) == id(own.as_fd()) {
        return None;
    }
    let report = read_report(run_dir);
    let process = report.as_ref().and_then(|r| {
        let pid = i32::try_from(r.pid).ok()?;
        crate::sys::process_in_v2_cgroup(pid, slice.v2_cgroup())
            .ok()
            .filter(|inside| *inside)?;
        Some((pid, crate::sys::pidfd_open(pid).ok()?))
    });
    let journaled = Journaled::of(report.as_ref());
    log::info!(
        "{}: network relay {} re-adopted",
        spec.unit,
        process
            .as_ref()
            .map_or("(gone: started again)".to_string(), |(pid, _)| format!(
                "pid {pid}"
            ))
    );
    let restart_at = process.is_none().then(Instant::now);
    Some(TaskNetwork {
        netns,
        relay: Some(Relay {
            spec,
            spec_path,
            process,
            deaths: 0,
            restart_at,
            cgroup: slice.open_v2_dir().ok(),
            v1_procs: slice.v1_procs_files(),
            journaled,
        }),
    })
}

/// The relay's last report for the attempt whose run directory is `run_dir`, if it wrote one.
pub(crate) fn read_report(run_dir: &Path) -> Option<RelayReport> {
    let text = std::fs::read(task_namespace::report_path(run_dir)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// The events the report at `path` calls for beyond those `journaled` (brought up to date).
fn new_events(path: &Path, journaled: &mut Journaled) -> Vec<NetworkEvent> {
    let Some(report) = std::fs::read(path)
        .ok()
        .and_then(|text| serde_json::from_slice::<RelayReport>(&text).ok())
    else {
        return Vec::new();
    };
    let misdirected = misdirected_since(&report, &mut journaled.misdirected);
    let refused = refusals_since(&report, &mut journaled.refused);
    (misdirected
        .into_iter()
        .map(|line| ("secret-misdirected", line)))
    .chain(refused.into_iter().map(|line| ("net-denied", line)))
    .collect()
}

/// One line per (secret, destination) whose placeholder was seen again since the last look
/// (`ANTHROPIC_API_KEY's placeholder sent to example.com:80 (×2) …`): never the value, nor
/// the placeholder. Bounded per look like the refusals.
pub(crate) fn misdirected_since(
    report: &RelayReport,
    journaled: &mut BTreeMap<(String, String), u64>,
) -> Vec<String> {
    let mut lines = Vec::new();
    let mut others = 0u64;
    for m in &report.misdirected {
        let key = (m.secret.clone(), m.destination.clone());
        let before = journaled.get(&key).copied().unwrap_or(0);
        let new = m.count.checked_sub(before).unwrap_or(m.count);
        journaled.insert(key, m.count);
        if new == 0 {
            continue;
        }
        if lines.len() >= JOURNALED_PER_LOOK {
            others += new;
            continue;
        }
        let times = match new {
            1 => String::new(),
            n => format!(" (\u{d7}{n})"),
        };
        lines.push(format!(
            "{}'s placeholder sent to {}{times}, which is not one of its hosts: forwarded as it is (worthless there); a sign of prompt injection",
            m.secret, m.destination
        ));
    }
    if others > 0 {
        lines.push(format!(
            "and {others} more misdirected placeholders: keel status UNIT --json"
        ));
    }
    lines
}

/// [`new_refusals`] of a report read: one line per destination refused again since
/// (`example.com:443 ×3: the name is not listed`).
pub(crate) fn refusals_since(
    report: &RelayReport,
    journaled: &mut BTreeMap<String, u64>,
) -> Vec<String> {
    let mut lines = Vec::new();
    let (mut others, mut others_times) = (0u64, 0u64);
    for refused in &report.refused {
        let before = journaled.get(&refused.destination).copied().unwrap_or(0);
        // A relay started again counts on from its last report; fewer means a new count.
        let new = match refused.count.checked_sub(before) {
            Some(n) => n,
            None => refused.count,
        };
        journaled.insert(refused.destination.clone(), refused.count);
        if new == 0 {
            continue;
        }
        // Bounded per look, whatever an agent asks for: the journal is every task's.
        if lines.len() >= JOURNALED_PER_LOOK {
            others += 1;
            others_times += new;
            continue;
        }
        // The reason names the destination already (`Refusal`'s text).
        let times = match new {
            1 => String::new(),
            n => format!(" (\u{d7}{n})"),
        };
        lines.push(format!("{}{times}", refused.reason));
    }
    if others > 0 {
        lines.push(format!(
            "and {others} more destinations (\u{d7}{others_times}): keel status UNIT --json"
        ));
    }
    lines
}

/// At most this many `net-denied` events per task per look (and one for the rest).
const JOURNALED_PER_LOOK: usize = 20;

#[cfg(test)]
mod tests;
