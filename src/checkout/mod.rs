//! Per-task git checkouts (DESIGN, "Checkouts"), through git2.
//!
//! A task whose unit has a `repo` gets a checkout of its own on branch `keel/<unit>` (or the
//! unit's `branch`) at `base`: its own git directory — refs, index, new objects — borrowing
//! the main repository's objects read-only (git alternates), so that nothing run inside one
//! sandbox (`git gc --prune=now`, `git branch -D`, `git worktree prune`, `reset`) can touch
//! the main repository or another task. No admin directory is shared, unlike `git worktree`.
//!
//! Creation costs the same whatever the repository's size: one read-only base tree per
//! (repository, base commit, owner) is checked out once under `STATE/bases/` with its index,
//! and each task's files are an overlay of it with a private upper layer. The base's index,
//! copied into the task's git directory, already holds the stat data the overlay shows, so git
//! finds the checkout clean without reading a file. Where overlayfs is unusable (tried for
//! real at creation), the task gets a full checkout instead, and the reason is logged.
//!
//! ```text
//! STATE/bases/<16 hex of the repo's git dir>-<commit>[-u<uid>.<gid>]/
//!     tree/            the base commit's files, no .git        (overlay lower layer)
//!     index            their index, with the files' stat data
//!     ready            written last; a base without it is rebuilt
//! STATE/tasks/<unit>/checkout/
//!     checkout.ron     what it was made from (repo, base, branch, pin, overlay or full)
//!     git/             the task's git directory: objects/info/alternates → main's objects
//!     upper/           the overlay's upper layer: the task's changes; holds `.git/`, the
//!                      mountpoint of git/ (or files/ for a full checkout)
//!     ovl-work/        overlayfs's work directory
//! STATE/tasks/<unit>/work/   the mountpoint used when keel looks at the merged view
//! ```
//!
//! In the sandbox (see `crate::sandbox::mounts`): the files at `workdir`, `git/` bound on
//! `<workdir>/.git`, the main repository's object directories read-only at their own paths.
//! The main repository holds `refs/keel/base/<unit>` at the base commit while the checkout
//! exists, and receives the task's branch at every harvest, fast-forward only.
//!
//! The task's git directory is the agent's to write. keel reads it on the host only through
//! libgit2 (which runs no hook, fsmonitor or filter driver), and first puts back what would
//! make it read another repository (`commondir`, alternates). Whoever runs the git command
//! line on it on the host runs what the agent configured.
//!
//! Everything here is synchronous, meant for one caller at a time (the daemon runs it in
//! worker processes): a checkout and the base it shares must not be created and removed at
//! the same time by two callers. A base tree is written by a few threads of its own.

mod base;
mod base_lock;
mod create;
mod error;
mod files;
mod guard;
mod harvest;
mod inspect;
mod limits;
mod merged;
mod record;
mod resolve;
mod review;
#[cfg(test)]
mod tests;
mod unread;
mod write;

pub use base::{base_key, bases_dir};
pub use create::{prepare, PrepareOptions, Prepared};
pub use error::CheckoutError;
pub use files::disk_bytes;
pub use harvest::{harvest, harvest_with_limits, Harvest};
pub use inspect::{
    disk_usage, kept_branches, prune_bases, remove, remove_with_limits, state, CheckoutState,
    DiskUsage, Removed,
};
pub use record::{checkout_dir, CheckoutRecord, Files};
pub use resolve::{default_branch, pin_ref, validate, Resolved};
pub use review::{review, reviewed_path, work, Patch, Review, ReviewCommit, Reviewed, Uncommitted};

use crate::state::StateDir;
use crate::unit;

/// How far a base tree's build is: files written of the tree's `total` (its blobs, symlinks
/// and submodule entries), for `keel status` ("preparing: base tree 41%").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseProgress {
    pub done: u64,
    pub total: u64,
}

/// How much a harvest may bring into the main repository (keel.ron's `harvest_limits`):
/// checked on the objects' headers before anything is copied or inflated, so that a
/// decompression bomb (a sparse 2 GiB file commits as a 2 MiB pack) is refused at the cost
/// of a walk. Written as sizes: `harvest_limits: HarvestLimits(max_object_bytes: "100M",
/// max_pack_bytes: "1G")`, each field optional.
///
/// The defaults: 100 MiB per object — GitHub refuses a file over 100 MiB in a push, and
/// git's own `core.bigFileThreshold` (512 MiB) is where it stops treating a file as source —
/// so a real branch's files fit and a bomb does not; and 1 GiB of new objects (their sizes
/// inflated) in one harvest: ten of the largest files, or a branch that rewrote a large
/// repository several times over. A harvest's memory is bounded by about twice the largest
/// object (the pack is built one object at a time, deltas only between small ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HarvestLimits {
    /// The largest object (a file's contents, a tree, a commit) a harvest brings.
    #[serde(deserialize_with = "size_bytes")]
    pub max_object_bytes: u64,
    /// The most bytes of new objects (inflated sizes, added up) one harvest brings.
    #[serde(deserialize_with = "size_bytes")]
    pub max_pack_bytes: u64,
}

/// 100 MiB.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 100 << 20;
/// 1 GiB.
pub const DEFAULT_MAX_PACK_BYTES: u64 = 1 << 30;

impl Default for HarvestLimits {
    fn default() -> HarvestLimits {
        HarvestLimits {
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
            max_pack_bytes: DEFAULT_MAX_PACK_BYTES,
        }
    }
}

/// A size written `"100M"` (as everywhere in keel's files) or as a number of bytes.
fn size_bytes<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Written {
        Bytes(u64),
        Text(String),
    }
    match <Written as serde::Deserialize>::deserialize(deserializer)? {
        Written::Bytes(bytes) => Ok(bytes),
        Written::Text(text) => unit::parse_size(&text).map_err(serde::de::Error::custom),
    }
}

/// Does `unit` have a checkout (whole: its record is in place)?
pub fn exists(dirs: &StateDir, unit: &str) -> bool {
    record::record_path(&checkout_dir(dirs, unit)).is_file()
}

/// `keel add`'s check of a unit's `repo`: [`validate`] for a unit without a checkout; for one
/// that has a checkout (an edited unit added again), only that the repository is the same
/// and still opens — the checkout will be reused as it is, and its branch may well have moved
/// past the base in the main repository by then (harvests). `Ok(None)`: reused.
pub fn check(
    dirs: &StateDir,
    unit: &str,
    repo: &unit::Repo,
) -> Result<Option<Resolved>, CheckoutError> {
    let Some(existing) = record::load(dirs, unit)? else {
        return validate(repo, unit).map(Some);
    };
    if existing.repo != std::path::Path::new(&repo.path) {
        return Err(CheckoutError::OtherRepository {
            unit: unit.to_string(),
            recorded: existing.repo,
            wanted: repo.path.clone().into(),
        });
    }
    resolve::open_main(&existing.repo).map(|_| None)
}

/// The record of `unit`'s checkout, if it has one.
pub fn record(dirs: &StateDir, unit: &str) -> Result<Option<CheckoutRecord>, CheckoutError> {
    record::load(dirs, unit)
}
