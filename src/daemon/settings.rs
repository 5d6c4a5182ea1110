//! The daemon's settings at start and at reload: `keel.ron` (with the last copy that loaded as
//! the fallback), the host's capacity it is read against, and the name of its cgroup tree.

use super::{slices, Daemon, DaemonError};
use crate::cgroup::{CgroupError, Layout};
use crate::config::{Config, HostCapacity};
use crate::state::StateDir;
use std::path::{Path, PathBuf};

pub(crate) struct Settings {
    /// `keel.ron`: capacity and starvation limit (re-read on reload).
    pub config: Config,
    pub config_path: PathBuf,
    /// What keel may use: the host's CPUs and memory, capped by the cgroup it starts in.
    pub host: HostCapacity,
    /// The name of keel's cgroup tree under the cgroup the daemon started in.
    pub cgroup_name: String,
}

impl Settings {
    /// The settings at start, and the cgroup layout detected on the way (the host's capacity
    /// is capped by the cgroup the daemon starts in). `config_path` default: `STATE/keel.ron`;
    /// `cgroup_name` default: [`default_cgroup_name`].
    pub fn load(
        dirs: &StateDir,
        config_path: Option<PathBuf>,
        cgroup_name: Option<String>,
    ) -> Result<(Self, Result<Layout, CgroupError>), DaemonError> {
        let config_path = config_path.unwrap_or_else(|| dirs.root.join(crate::config::CONFIG_FILE));
        let cgroup_name = cgroup_name.unwrap_or_else(|| default_cgroup_name(&dirs.root));
        let layout = crate::cgroup::detect(&cgroup_name);
        let rootless = refuse_without_delegation(&layout)?;
        let (quota, memory_limit) = layout.as_ref().map_or((None, None), |l| {
            (l.base_cpu_quota(), l.base_memory_limit())
        });
        let host = HostCapacity::detect(quota, memory_limit).map_err(super::setup(
            "read the host's CPUs and memory (/proc/meminfo)",
        ))?;
        let mut config = load_at_start(dirs, &config_path, &host)?;
        if rootless {
            become_root_of_own_user_namespace(&mut config)?;
        }
        let settings = Settings {
            config,
            config_path,
            host,
            cgroup_name,
        };
        Ok((settings, layout))
    }

    /// Re-read `keel.ron`: whether the configuration changed. A bad file leaves it as it was.
    fn reload(&mut self, dirs: &StateDir) -> Result<bool, String> {
        match crate::config::load_config(&self.config_path, &self.host) {
            Ok(mut config) => {
                keep_accepted_config(dirs, &self.config_path);
                let rootless = crate::sys::own_userns::host_ids().is_some();
                if config.user_namespaces != self.config.user_namespaces && !rootless {
                    // The range was checked against the host's users at start; a new one is
                    // checked at the next.
                    log::warn!(
                        "{}: user_namespaces changed: it takes effect at the next daemon start",
                        self.config_path.display()
                    );
                }
                // Rootless: always Off (become_root_of_own_user_namespace).
                config.user_namespaces = self.config.user_namespaces;
                if config == self.config {
                    return Ok(false);
                }
                log::info!("{}: configuration changed", self.config_path.display());
                self.config = config;
                Ok(true)
            }
            Err(e) => Err(format!("{e} (the previous configuration stays in force)")),
        }
    }
}

/// A daemon that is not root must start in a cgroup v2 subtree delegated to its user, or it
/// could start no task while it runs (its cgroup is fixed at its start): it refuses to start,
/// naming what to set up ([`crate::cgroup::delegation`]). Root is not judged. `Ok(true)`: not
/// root, and delegated.
fn refuse_without_delegation(layout: &Result<Layout, CgroupError>) -> Result<bool, DaemonError> {
    use crate::cgroup::delegation;
    let uid = nix::unistd::geteuid().as_raw();
    if uid == 0 {
        return Ok(false);
    }
    let access = layout
        .as_ref()
        .ok()
        .filter(|l| l.mode == crate::cgroup::Mode::V2)
        .map(|l| delegation::observe(&l.v2_base));
    delegation::judge(uid, layout.as_ref(), access.as_ref())
        .map_err(|refusal| DaemonError::Config(refusal.to_string()))?;
    log::info!(
        "running as uid {uid}: cgroup {} is delegated to it",
        access
            .map(|a| a.base.display().to_string())
            .unwrap_or_default()
    );
    Ok(true)
}

/// Rootless: the daemon becomes root of a user namespace of its own
/// ([`crate::sys::own_userns`]), in which its tasks' namespaces are made. That namespace maps
/// the user's own id only, so tasks get no block of ids of their own: `user_namespaces` is
/// `Off` whatever `keel.ron` says, and every task's processes are the daemon's user on the
/// host (docs/operations.md, "Rootless").
fn become_root_of_own_user_namespace(config: &mut Config) -> Result<(), DaemonError> {
    let (uid, gid) = crate::sys::own_userns::become_root_of_own().map_err(|e| {
        DaemonError::Config(format!(
            "cannot make a user namespace of its own as uid {} (unshare/uid_map: {e}): allow \
             unprivileged user namespaces (sysctl user.max_user_namespaces > 0; \
             kernel.unprivileged_userns_clone=1 on Debian before 11; \
             kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for keel on \
             Ubuntu 23.10 and later), or run keel as root",
            nix::unistd::geteuid()
        ))
    })?;
    if config.user_namespaces != crate::config::UserNamespaces::Off {
        log::info!(
            "rootless: tasks run in the daemon's own user namespace (uid 0 inside is uid {uid}, gid 0 is gid {gid} on the host), with no block of ids of their own (user_namespaces: Off)"
        );
        config.user_namespaces = crate::config::UserNamespaces::Off;
    }
    Ok(())
}

/// The configuration at start. A malformed `keel.ron` stops the daemon at its first start
/// (file:line:col). Once a configuration has loaded, a later bad edit never keeps the daemon
/// (and so the tasks' supervision) down: it runs on the last configuration that loaded, and
/// says so.
fn load_at_start(
    dirs: &StateDir,
    config_path: &Path,
    host: &HostCapacity,
) -> Result<Config, DaemonError> {
    match crate::config::load_config(config_path, host) {
        Ok(config) => {
            keep_accepted_config(dirs, config_path);
            Ok(config)
        }
        Err(e) => {
            let last = dirs.root.join(ACCEPTED_CONFIG);
            match last
                .exists()
                .then(|| crate::config::load_config(&last, host))
            {
                Some(Ok(config)) => {
                    log::error!(
                        "{e}: running on the last configuration that loaded ({})",
                        last.display()
                    );
                    Ok(config)
                }
                _ => Err(DaemonError::Config(e.to_string())),
            }
        }
    }
}

/// A copy of the last `keel.ron` that loaded, the fallback when a later edit does not parse.
const ACCEPTED_CONFIG: &str = ".keel.ron.accepted";

fn keep_accepted_config(dirs: &StateDir, config_path: &Path) {
    let copy = dirs.root.join(ACCEPTED_CONFIG);
    let result = match std::fs::read(config_path) {
        Ok(text) => crate::state::atomic_write(&copy, &text).map_err(|e| e.to_string()),
        // No file: the defaults, which need no copy.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::remove_file(&copy).or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e.to_string()),
            })
        }
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = result {
        log::warn!("cannot keep a copy of {}: {e}", config_path.display());
    }
}

/// The cgroup tree of the daemon of `state_dir`: `keel` for the default `/var/lib/keel`, else
/// `keel-` and a hash of the directory's canonical path. Two daemons of different state
/// directories started in the same cgroup must never share a tree: each would take the other's
/// task cgroups for leftovers and kill them.
pub fn default_cgroup_name(state_dir: &Path) -> String {
    let path = state_dir
        .canonicalize()
        .unwrap_or_else(|_| state_dir.to_path_buf());
    if path == Path::new("/var/lib/keel") {
        return "keel".to_string();
    }
    // FNV-1a: stable across builds and releases (std's hasher is not).
    let hash = path
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("keel-{:012x}", hash >> 16)
}

impl Daemon {
    /// Re-read `keel.ron`. A bad file leaves the configuration in force as it was.
    pub(crate) fn reload_config(&mut self) -> Result<(), String> {
        if self.slices.is_err() {
            // The operator may have fixed what kept keel from its cgroups (a delegation).
            let layout = crate::cgroup::detect(&self.settings.cgroup_name);
            self.slices = slices::set_up(
                layout,
                &self.settings.cgroup_name,
                &mut self.sandboxing.templates,
            );
            self.store.queue_changed |= self.slices.is_ok();
        }
        let lists = self.settings.config.network.lists.clone();
        if self.settings.reload(&self.store.dirs)? {
            self.store.queue_changed = true;
            if self.settings.config.network.lists != lists {
                // Units' "@name" entries are checked against the lists as units are read.
                self.scan_units();
            }
        }
        self.jobs.reconfigure(self.settings.config.jobs);
        (self.notifications).reconfigure(&self.settings.config.notify, &mut self.store);
        Ok(())
    }
}
