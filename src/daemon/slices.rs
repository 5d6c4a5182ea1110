//! The daemon's side of cgroups (DESIGN, "cgroups"): keel's tree, one slice per attempt with
//! the unit's limits, OOM events through the loop, the sweep that tears a slice down, and the
//! figures `keel status` shows. The cgroup files themselves are written by [`crate::cgroup`].

use super::event_loop::{EventLoop, Source, OOM_KILLS};
use super::record::{LastExit, TaskState};
use super::store::Store;
use super::task::{CpuSample, OomWatched};
use super::timers::{Timer, Timers};
use super::{Daemon, Task};
use crate::cgroup::{CgroupError, Layout, Limits, Removal, TaskCgroup, Tree};
use crate::state::now_ms;
use crate::sys::wait::AgentStatus;
use crate::unit::Unit;
use mio::unix::SourceFd;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// A killed slice whose processes have not exited yet is retried after 1 ms, then twice as
/// long each time up to 100 ms (cgroup.kill of 100 processes takes 7–12 ms here), this many
/// times (~10 s in all).
const REMOVE_RETRY_FIRST: Duration = Duration::from_millis(1);
const REMOVE_RETRY_MAX: Duration = Duration::from_millis(100);
const REMOVE_TRIES: u32 = 110;
/// A v1 OOM notification without a counted kill is looked at again after this long.
const OOM_RECHECK: Duration = Duration::from_millis(50);
/// An attempt killed within this long after an OOM kill in its cgroup died of it (the agent's
/// own death, or its shell's, follows the kill by milliseconds; the slack covers a busy host).
const OOM_CAUSE_WINDOW_MS: u64 = 5_000;
/// `keel status` shows the CPU share over at least this long.
const CPU_WINDOW: Duration = Duration::from_secs(1);

mod workers;
pub(crate) use workers::WorkersCgroup;

/// keel's workers cgroup (`<tree>/workers`, bounded by `jobs.memory`), or why workers run
/// without one (each is then bounded by RLIMIT_AS).
pub(crate) fn workers_for(slices: &Slices, memory: u64) -> Result<WorkersCgroup, String> {
    let made = match slices {
        Ok(tree) => workers::set_up_workers(tree, memory),
        Err(why) => Err(format!("cgroups unavailable: {why}")),
    };
    match &made {
        Ok(_) => log::info!(
            "jobs: workers run in keel's workers cgroup, {} in all",
            crate::fmt::format_bytes(memory, false)
        ),
        Err(why) => log::warn!(
            "jobs: workers run without a cgroup ({why}); each is limited to {} of address space",
            crate::fmt::format_bytes(memory, false)
        ),
    }
    made
}

/// keel's cgroup tree, or why there is none (then no task starts: never unconfined in silence).
pub(crate) type Slices = Result<Tree, String>;

/// Set up keel's tree under the cgroup the daemon was started in (`layout`, detected),
/// moving the daemon into its own leaf.
fn setup_slices(layout: Result<Layout, CgroupError>, name: &str) -> Slices {
    let tree = layout.and_then(|layout| Tree::setup(layout, name));
    match tree {
        Ok(tree) => {
            let placement = if tree.layout().daemon_stays_in.is_some() {
                "; the daemon stays in its own cgroup, named like the tree (a systemd service \
                 without DelegateSubgroup=), so that systemd can start the next daemon there"
            } else {
                ""
            };
            log::info!(
                "cgroups: {} at {}{placement}",
                tree.mode(),
                tree.v2_root().display()
            );
            Ok(tree)
        }
        Err(e) => {
            log::error!("cgroups unavailable: {e}; no task will start");
            Err(e.to_string())
        }
    }
}

/// [`setup_slices`], and tell the templates whether spare shims pay off with these cgroups.
pub(crate) fn set_up(
    layout: Result<Layout, CgroupError>,
    name: &str,
    templates: &mut crate::sandbox::templates::SandboxTemplates,
) -> Slices {
    let slices = setup_slices(layout, name);
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    templates.spares_pay_off(spares_pay_off(
        slices.as_ref().ok().map(|t| t.mode()),
        &mountinfo,
    ));
    slices
}

/// Whether spare shims make sandboxed starts faster with these cgroups
/// ([`crate::sandbox::spare`]). A spare joins its task's v2 cgroup by writing to
/// `cgroup.procs`, and such a migration waits for an RCU grace period (7.2 ms measured on this
/// host, docs/operations.md) unless the cgroup2 mount has `favordynmods` — while on a pure v2
/// host the daemon's clone goes straight into the cgroup (`CLONE_INTO_CGROUP`) and migrates
/// nothing. On a hybrid host every shim migrates anyway (its v1 joins): the spare's write only
/// comes first. `mountinfo`: `/proc/self/mountinfo`.
/// `mode`: `None` without cgroups (no task starts then, nor is any spare made).
pub(crate) fn spares_pay_off(mode: Option<crate::cgroup::Mode>, mountinfo: &str) -> bool {
    match mode {
        None | Some(crate::cgroup::Mode::Hybrid) => true,
        Some(crate::cgroup::Mode::V2) => mountinfo.lines().any(|line| {
            let Some((_, after)) = line.split_once(" - ") else {
                return false;
            };
            let fields: Vec<&str> = after.split(' ').collect();
            fields.first() == Some(&"cgroup2")
                && fields
                    .get(2)
                    .is_some_and(|options| options.split(',').any(|o| o == "favordynmods"))
        }),
    }
}

/// A new attempt's slice, ready: what the spawn needs.
pub(crate) struct PreparedSlice {
    pub v2_dir: OwnedFd,
    pub v1_procs: Vec<std::path::PathBuf>,
}

/// Why an attempt cannot have its slice.
pub(crate) enum SliceProblem {
    /// Not yet: try again shortly.
    Busy(String),
    /// Not at all (no cgroups, a limit the kernel refuses): the attempt fails to start.
    Failed(String),
}

/// What `keel status` shows of a running task's slice.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SliceFigures {
    pub cpu_usec: u64,
    pub cpu_percent: Option<f64>,
    pub memory: u64,
    pub memory_peak: Option<u64>,
    pub pids: u64,
}

fn limits_of(unit: &Unit) -> Limits {
    let resources = &unit.resources;
    Limits {
        cpu_request: resources.cpu,
        cpu_limit: resources.cpu_limit,
        memory_request: resources.memory.0,
        memory_limit: resources.memory_limit_bytes(),
        pids: resources.pids,
    }
}

/// The slice of `unit` in keel's tree.
pub(crate) fn slice_of(slices: &Slices, unit: &str) -> Option<TaskCgroup> {
    slices.as_ref().ok()?.task(unit).ok()
}

/// A fresh slice for a new attempt, with the unit's limits: the v2 directory to spawn the
/// shim into (`CLONE_INTO_CGROUP`) and the v1 `cgroup.procs` files the shim joins before it
/// starts the agent (hybrid hosts). A leftover slice of an earlier attempt is emptied and
/// removed first, so that its counters (OOM kills) start from zero; while its killed
/// processes are still exiting the start waits (`Busy`), without blocking the loop.
pub(crate) fn prepare_slice(
    slices: &Slices,
    unit: &str,
    unit_def: &Unit,
) -> Result<PreparedSlice, SliceProblem> {
    let tree = slices
        .as_ref()
        .map_err(|why| SliceProblem::Failed(format!("cgroups unavailable: {why}")))?;
    let slice = tree
        .task(unit)
        .map_err(|e| SliceProblem::Failed(e.to_string()))?;
    let _ = slice.kill();
    match slice.try_remove() {
        Ok(Removal::Removed) => {}
        Ok(Removal::Busy) => {
            return Err(SliceProblem::Busy(format!(
                "the cgroup of an earlier attempt ({}) still holds exiting processes",
                slice.v2_path().display()
            )))
        }
        Err(e) => return Err(SliceProblem::Failed(e.to_string())),
    }
    slice
        .create(&limits_of(unit_def))
        .map_err(|e| SliceProblem::Failed(format!("cannot create the task's cgroup: {e}")))?;
    let dir = slice
        .open_v2_dir()
        .map_err(|e| SliceProblem::Failed(format!("cannot open the task's cgroup: {e}")))?;
    Ok(PreparedSlice {
        v2_dir: dir,
        v1_procs: slice.v1_procs_files(),
    })
}

/// Watch a live attempt's slice for OOM kills.
pub(crate) fn watch_oom(task: &mut Task, slices: &Slices, events: &mut EventLoop) {
    unwatch_oom(task, events);
    let unit = task.name.as_str();
    let Some(slice) = slice_of(slices, unit) else {
        return;
    };
    let watch = match slice.oom_watch() {
        Ok(watch) => watch,
        Err(e) => {
            log::warn!("{unit}: OOM kills will only be seen at exit: {e}");
            return;
        }
    };
    // Refused by the kernel, the watch is read on a timer instead (event_loop.rs).
    let (fd, what) = (watch.as_raw_fd(), Source::Oom(unit.to_string()));
    let token = events.watch_fd(fd, watch.interest(), what, OOM_KILLS, unit);
    task.oom = Some(OomWatched { watch, token });
}

fn unwatch_oom(task: &mut Task, events: &mut EventLoop) {
    let Some(watched) = task.oom.take() else {
        return;
    };
    let fd = watched.watch.as_raw_fd();
    events.unwatch(&mut SourceFd(&fd), watched.token);
}

/// The slice's OOM watch fired (or a recheck is due): if the OOM killer struck, say so at
/// once and remember when. The attempt's exit is classified when it ends ([`account_oom`]).
/// On v1 the notification comes before the kernel counts the kill: with `recheck`, a
/// notification without a new kill is looked at again shortly.
pub(crate) fn check_oom(task: &mut Task, recheck: bool, store: &mut Store, events: &mut EventLoop) {
    let Some(watched) = task.oom.as_mut() else {
        return;
    };
    let unit = task.name.as_str();
    match watched.watch.drain() {
        Ok(true) => {
            let kills = watched.watch.oom_kills();
            task.last_oom_ms = Some(now_ms());
            let limit = task
                .unit
                .as_ref()
                .map(|u| crate::unit::format_size(u.resources.memory_limit_bytes()))
                .unwrap_or_default();
            log::warn!("{unit}: OOM kill in the task's cgroup (memory limit {limit})");
            store.task_event(
                task,
                "oom-kill",
                &format!("{kills} so far; memory limit {limit}"),
            );
        }
        Ok(false) if recheck => events.timers.add_after(
            OOM_RECHECK,
            Timer::OomRecheck {
                unit: unit.to_string(),
            },
        ),
        Ok(false) => {}
        Err(e) => {
            log::warn!("{unit}: OOM watch: {e}");
            unwatch_oom(task, events);
        }
    }
}

/// An attempt that died of SIGKILL (as a signal, as a shell's status 137, or vanished)
/// ended of `oom` when the OOM killer struck in its cgroup shortly before it ended and keel
/// did not send a SIGKILL of its own since: an OOM kill of a child hours earlier, or keel's
/// stop timeout, is not the attempt's cause of death.
pub(crate) fn account_oom(
    task: &Task,
    slices: &Slices,
    exit: LastExit,
    ended_ms: Option<u64>,
) -> LastExit {
    let killed = match exit {
        LastExit::Agent(AgentStatus::Signaled(sig)) => sig == libc::SIGKILL,
        LastExit::Agent(AgentStatus::Exited(code)) => code == 128 + libc::SIGKILL,
        LastExit::Lost => true,
        _ => false,
    };
    if !killed {
        return exit;
    }
    let ended = ended_ms.unwrap_or_else(now_ms);
    let last_oom = match (task.last_oom_ms, &task.oom) {
        (Some(at), _) => at,
        // No watch (it could not be armed): the counter alone, read now.
        (None, None) => {
            let kills = slice_of(slices, &task.name)
                .and_then(|slice| slice.stats().ok())
                .map_or(0, |stats| stats.oom_kills);
            if kills == 0 || task.keel_kill_ms.is_some() {
                return exit;
            }
            ended
        }
        (None, Some(_)) => return exit,
    };
    let recent = ended.saturating_sub(last_oom) <= OOM_CAUSE_WINDOW_MS;
    let keel_killed_after = task.keel_kill_ms.is_some_and(|k| k >= last_oom);
    if recent && !keel_killed_after {
        LastExit::Oom
    } else {
        exit
    }
}

/// The attempt is over: kill whatever is left in its slice (nothing escapes — a `setsid`
/// double fork included) and remove it, retrying from a timer while the killed processes
/// exit.
pub(crate) fn release_slice(task: &mut Task, slices: &Slices, events: &mut EventLoop) {
    unwatch_oom(task, events);
    // Its relay is in the slice, and dies with it; the namespace goes with the agent.
    task.network = None;
    let unit = task.name.as_str();
    let Some(slice) = slice_of(slices, unit) else {
        return;
    };
    if let Err(e) = slice.kill() {
        log::warn!("{unit}: {e}");
    }
    try_remove_slice(unit, &slice, 0, &mut events.timers);
}

/// The slice of a unit without a task (gone, or never recorded): kill and remove it.
fn release_orphan_slice(unit: &str, slices: &Slices, timers: &mut Timers) {
    let Some(slice) = slice_of(slices, unit) else {
        return;
    };
    if let Err(e) = slice.kill() {
        log::warn!("{unit}: {e}");
    }
    try_remove_slice(unit, &slice, 0, timers);
}

fn try_remove_slice(unit: &str, slice: &TaskCgroup, tries: u32, timers: &mut Timers) {
    match slice.try_remove() {
        Ok(Removal::Removed) => {}
        Ok(Removal::Busy) if tries < REMOVE_TRIES => timers.add_after(
            (REMOVE_RETRY_FIRST * 2u32.saturating_pow(tries.min(10))).min(REMOVE_RETRY_MAX),
            Timer::RemoveSlice {
                unit: unit.to_string(),
                tries: tries + 1,
            },
        ),
        Ok(Removal::Busy) => log::error!(
            "{unit}: the task's cgroup {} still holds processes after cgroup.kill",
            slice.v2_path().display()
        ),
        Err(e) => log::error!("{unit}: {e}"),
    }
}

/// The stop timeout's SIGKILL did not end the attempt (a wedged or stopped shim): kill the
/// whole slice, shim included.
pub(crate) fn kill_slice(slices: &Slices, unit: &str) -> bool {
    match slice_of(slices, unit).map(|slice| slice.kill()) {
        Some(Ok(())) => true,
        Some(Err(e)) => {
            log::error!("{unit}: {e}");
            false
        }
        None => false,
    }
}

/// The figures of a live attempt's slice; the CPU share is over the time since the
/// previous `keel status` (or since the attempt started).
pub(crate) fn slice_figures(task: &Task, slices: &Slices) -> Option<SliceFigures> {
    if !matches!(
        task.record.state,
        TaskState::Running | TaskState::Stalled | TaskState::Stopping
    ) {
        return None;
    }
    let stats = slice_of(slices, &task.name)?.stats().ok()?;
    let now = Instant::now();
    let current = CpuSample {
        usage_usec: stats.cpu_usage_usec,
        at: now,
    };
    // The share over at least CPU_WINDOW: over a few milliseconds a task under a CFS
    // quota is either running or throttled, and the figure would flicker 0% / 100%.
    let (older, newer) = task.cpu_samples.get();
    let started = task.started_at.map(|at| CpuSample { usage_usec: 0, at });
    let reference = [newer, older, started]
        .into_iter()
        .flatten()
        .find(|s| now.duration_since(s.at) >= CPU_WINDOW);
    if newer.is_none_or(|n| now.duration_since(n.at) >= CPU_WINDOW) {
        task.cpu_samples.set((newer, Some(current)));
    }
    let cpu_percent = reference.map(|p| {
        let wall = now.duration_since(p.at).as_micros() as f64;
        stats.cpu_usage_usec.saturating_sub(p.usage_usec) as f64 * 100.0 / wall
    });
    Some(SliceFigures {
        cpu_usec: stats.cpu_usage_usec,
        cpu_percent,
        memory: stats.memory_current,
        memory_peak: stats.memory_peak,
        pids: stats.pids_current,
    })
}

impl Daemon {
    /// `keel status`'s word for the cgroup backend.
    pub(crate) fn cgroup_mode(&self) -> String {
        match &self.slices {
            Ok(tree) => tree.mode().to_string(),
            Err(why) => format!("unavailable: {why}"),
        }
    }

    /// The slice's OOM watch fired, or its recheck is due.
    pub(crate) fn on_oom_event(&mut self, unit: &str, recheck: bool) {
        if let Some(task) = self.tasks.get_mut(unit) {
            check_oom(task, recheck, &mut self.store, &mut self.events);
        }
    }

    pub(crate) fn on_remove_slice_due(&mut self, unit: &str, tries: u32) {
        // A new attempt may have started meanwhile: its slice is not ours to remove.
        if self
            .tasks
            .get(unit)
            .is_some_and(|t| t.record.state.has_attempt())
        {
            return;
        }
        if let Some(slice) = slice_of(&self.slices, unit) {
            let _ = slice.kill();
            try_remove_slice(unit, &slice, tries, &mut self.events.timers);
        }
    }

    /// After reconcile: watch the slices of adopted attempts; remove slices no attempt owns
    /// (of tasks that ended while no daemon ran, or of units that are gone).
    pub(crate) fn sweep_slices(&mut self) {
        let present = match &self.slices {
            Ok(tree) => tree.tasks_present(),
            Err(_) => return,
        };
        for unit in present {
            match self.tasks.get_mut(&unit) {
                Some(task) if task.shim.is_some() => {
                    watch_oom(task, &self.slices, &mut self.events)
                }
                // Still being reconciled (its shim record may yet appear): leave it.
                Some(task) if task.record.state.has_attempt() => {}
                // A live shim this daemon does not supervise (its record was unreadable, say)
                // is never killed behind the operator's back.
                _ if crate::state::attempt_lock_held(&self.store.dirs.run_dir(&unit)) => {
                    log::warn!(
                        "{unit}: a cgroup whose shim is alive but not supervised: left alone"
                    );
                }
                task => {
                    log::info!("{unit}: removing a cgroup no attempt owns");
                    match task {
                        Some(task) => release_slice(task, &self.slices, &mut self.events),
                        None => release_orphan_slice(&unit, &self.slices, &mut self.events.timers),
                    }
                }
            }
        }
    }

    /// At the end of the daemon: remove the slices of ended tasks and keel's tree (the daemon
    /// moves back to where it started). Slices of tasks left running (`--keep-tasks`) stay,
    /// and so does the tree holding them.
    pub(crate) fn teardown_slices(&mut self) {
        let Ok(tree) = &self.slices else {
            return;
        };
        for unit in tree.tasks_present() {
            let live = self
                .tasks
                .get(&unit)
                .is_some_and(|t| t.record.state.has_attempt());
            if live {
                continue;
            }
            if let Ok(slice) = tree.task(&unit) {
                let _ = slice.kill();
                if let Err(e) = slice.remove_blocking(Duration::from_secs(2)) {
                    log::error!("{unit}: {e}");
                }
            }
        }
        workers::remove_workers(tree);
        match tree.teardown() {
            Ok(()) => {}
            Err(CgroupError::TasksRemain { .. }) => {
                log::info!("cgroups: tasks left running keep keel's tree")
            }
            Err(e) => log::error!("cgroups: {e}"),
        }
    }
}

#[cfg(test)]
mod tests;
