//! The kernel side of pausing: a task's v2 cgroup frozen and thawed (`cgroup.freeze`), and
//! whether the kernel says it is frozen (`cgroup.events`, `frozen 1`). cgroup-v2.rst,
//! "cgroup.freeze": the processes are stopped without a signal they could see, a frozen
//! process still dies of SIGKILL, and the freeze takes a moment ("frozen" in
//! `cgroup.events` turns 1 once every process is). The v2 hierarchy has it on hybrid hosts as
//! well (the unified mount at `/sys/fs/cgroup/unified`, without controllers).
//!
//! Each call is one small write or read of a cgroup file: it never waits for the freeze.

use super::slices::{slice_of, Slices};
use super::Task;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Ask the kernel to freeze (`true`) or thaw the cgroup at `dir` (its v2 directory).
pub(crate) fn set_frozen(dir: &Path, frozen: bool) -> std::io::Result<()> {
    std::fs::write(dir.join("cgroup.freeze"), if frozen { "1" } else { "0" })
}

/// Whether every process of the cgroup at `dir` is frozen now (`cgroup.events`).
pub(crate) fn is_frozen(dir: &Path) -> std::io::Result<bool> {
    let events = std::fs::read_to_string(dir.join("cgroup.events"))?;
    Ok(events_say_frozen(&events))
}

/// `cgroup.events` says `frozen 1`.
pub(crate) fn events_say_frozen(events: &str) -> bool {
    events
        .lines()
        .filter_map(|line| line.split_once(' '))
        .any(|(key, value)| key == "frozen" && value.trim() == "1")
}

/// The task's own cgroup (`unit`'s slice in the v2 hierarchy).
pub(crate) fn task_cgroup(slices: &Slices, unit: &str) -> Result<PathBuf, String> {
    slice_of(slices, unit)
        .map(|slice| slice.v2_path().to_path_buf())
        .ok_or_else(|| "keel has no cgroup tree for it".to_string())
}

/// Freeze or thaw the cgroup at `dir`, the error in words.
pub(crate) fn freeze(dir: &Path, frozen: bool) -> Result<(), String> {
    set_frozen(dir, frozen)
        .map_err(|e| format!("cannot write {}: {e}", dir.join("cgroup.freeze").display()))
}

/// The pause is over (resumed, stopped, or the attempt ended): its frozen time joins the
/// record's (in memory: the caller persists). Returns the frozen cgroup, which the caller
/// thaws once the record is persisted (or which goes with the ended attempt), and how long
/// this pause lasted.
pub(crate) fn end_pause(task: &mut Task) -> (Option<PathBuf>, Duration) {
    let lasted = task
        .paused_at
        .take()
        .map_or(Duration::ZERO, |at| at.elapsed());
    let ms = lasted.as_millis().min(u128::from(u64::MAX / 4)) as u64;
    task.record.paused_ms = task.record.paused_ms.saturating_add(ms);
    task.record.paused = None;
    task.frozen = false;
    (task.frozen_cgroup.take(), lasted)
}

/// A stop of a paused attempt thaws it: a frozen agent would neither see its stop signal
/// nor use the `stop.timeout` it is owed to exit cleanly. Called once the stop is persisted
/// (the record says `stopping`, not paused): a daemon that dies before the thaw leaves a
/// frozen cgroup, which the next one thaws when it adopts the attempt (`pausing.rs`).
pub(crate) fn thaw_for_stop(unit: &str, cgroup: Option<PathBuf>) {
    let Some(dir) = cgroup else {
        return;
    };
    match freeze(&dir, false) {
        Ok(()) => log::info!("{unit}: thawed to be stopped"),
        Err(why) => log::error!("{unit}: cannot thaw it to stop it: {why}"),
    }
}
