//! Base trees: one read-only checkout of each (repository, base commit, owner), made once and
//! shared as the lower layer of every task's overlay; and the routine that writes a checkout
//! (a base tree, or a task's full checkout) with its index.
//!
//! A base is built under a temporary name, synced (one syncfs(2): fsyncing ten thousand files
//! one by one would cost seconds), marked `ready`, then renamed into place: a crash leaves
//! either no base or a whole one. A directory without `ready` is rebuilt.

use std::fs;
use std::path::{Path, PathBuf};

use git2::{build::CheckoutBuilder, Index, Oid};

use super::error::{git_err, io_err, CheckoutError};
use super::files;
use super::write::{self, Progress};
use super::BaseProgress;
use crate::state::StateDir;

/// `STATE/bases`.
pub fn bases_dir(dirs: &StateDir) -> PathBuf {
    dirs.bases_dir()
}

/// `<16 hex of the repository's git directory>-<commit>[-u<uid>.<gid>]`: the repository's
/// path is hashed (SHA-1 through git2, stable across builds, unlike std's hasher), and the
/// owner is part of the key because the files belong to the agent's user (an agent that is
/// not root could not change files owned by root through the overlay).
pub fn base_key(common_dir: &Path, commit: &str, owner: Option<(u32, u32)>) -> String {
    use std::os::unix::ffi::OsStrExt;
    let hash = Oid::hash_object(git2::ObjectType::Blob, common_dir.as_os_str().as_bytes())
        .map(|oid| oid.to_string())
        .unwrap_or_default();
    let mut key = format!("{}-{commit}", &hash[..16.min(hash.len())]);
    if let Some((uid, gid)) = owner {
        key.push_str(&format!("-u{uid}.{gid}"));
    }
    key
}

pub(crate) fn base_dir(dirs: &StateDir, key: &str) -> PathBuf {
    bases_dir(dirs).join(key)
}

/// The files of a base (the overlay's lower layer): no `.git` in it.
pub(crate) fn tree_path(base: &Path) -> PathBuf {
    base.join("tree")
}

/// The index of the base tree, with the stat data of its files: copied into each task's git
/// directory, so that git finds the checkout clean without reading a file.
pub(crate) fn index_path(base: &Path) -> PathBuf {
    base.join("index")
}

fn ready_path(base: &Path) -> PathBuf {
    base.join("ready")
}

pub(crate) fn is_ready(base: &Path) -> bool {
    ready_path(base).is_file()
}

/// Make sure the base `key` exists: reuse it when ready, else build it from `commit` of the
/// repository whose git directory is `common_dir`. Returns whether it was built now.
pub(crate) fn ensure_base(
    dirs: &StateDir,
    key: &str,
    common_dir: &Path,
    commit: Oid,
    owner: Option<(u32, u32)>,
    progress: Option<&Progress>,
) -> Result<bool, CheckoutError> {
    let base = base_dir(dirs, key);
    if is_ready(&base) {
        return Ok(false);
    }
    let parent = bases_dir(dirs);
    // 0700 (crate::state::create_private_dir): the trees are copies of the repository's
    // files, which keep their own modes for the agent; the directory around them hides them.
    crate::state::create_private_dir(&parent)
        .map_err(io_err("creating the bases directory", &parent))?;
    files::remove_stale_builds(&parent);
    if base.exists() {
        // Not ready: not ours to trust (renamed in only when complete, so somebody's hands
        // were in it). Built again from the same commit, it has the same content.
        log::warn!(
            "{}: base tree without `ready`: rebuilding it",
            base.display()
        );
        files::remove_tree(&base).map_err(io_err("removing an incomplete base", &base))?;
    }
    let tmp = files::build_path(&parent, key);
    crate::state::create_new_private_dir(&tmp).map_err(io_err("creating a base tree", &tmp))?;
    let result = (|| {
        write_checkout(
            common_dir,
            commit,
            &tree_path(&tmp),
            &index_path(&tmp),
            owner,
            progress,
        )?;
        files::sync_filesystem(&tmp)?;
        files::write_durably(&ready_path(&tmp), commit.to_string().as_bytes())?;
        if let Err(e) = fs::rename(&tmp, &base) {
            // Another builder of the same base (a thread of this process) got there first.
            if is_ready(&base) {
                files::remove_tree(&tmp).map_err(io_err("removing a spare base", &tmp))?;
                return Ok(false);
            }
            return Err(CheckoutError::io("renaming the base into place", &base, e));
        }
        files::sync_dir(&parent)?;
        Ok(true)
    })();
    if result.is_err() {
        let _ = files::remove_tree(&tmp);
    }
    result
}

/// Write the tree of `commit` into `target` (created) and its index, with the stat data of
/// the files as written, at `index`; with `owner`, every file and directory is that user's.
/// Through libgit2's checkout, one file at a time — which applies the repository's attributes
/// and filters (eol, ident) as `git checkout` would, and was measured faster than several
/// writer threads on this 2-core host, 2.5× on a quiet machine (docs/benchmarks.md, "Base
/// tree build rate") — except for a tree with a submodule, which libgit2's checkout refuses:
/// its blobs as stored are written by `super::write`'s threads. `progress` is told as files are
/// written.
pub(crate) fn write_checkout(
    common_dir: &Path,
    commit: Oid,
    target: &Path,
    index: &Path,
    owner: Option<(u32, u32)>,
    progress: Option<&Progress>,
) -> Result<usize, CheckoutError> {
    let repo = super::resolve::open_git_dir(common_dir).map_err(git_err("opening", common_dir))?;
    let tree = repo
        .find_commit(commit)
        .and_then(|c| c.tree())
        .map_err(git_err("reading the base commit", common_dir))?;
    match write::plan(&repo, &tree)? {
        Some(plan) if plan.has_submodules() => {
            fs::create_dir(target).map_err(io_err("creating", target))?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::lchown(target, Some(uid), Some(gid))
                    .map_err(io_err("chown", target))?;
            }
            write::write(&plan, common_dir, target, owner, progress)?;
            let mut written = Index::open(index).map_err(git_err("creating an index", index))?;
            written
                .read_tree(&tree)
                .map_err(git_err("creating an index", index))?;
            restat(&mut written, target)?;
            written
                .write()
                .map_err(git_err("writing the index", index))?;
            Ok(written.len())
        }
        _ => write_with_libgit2(&repo, &tree, target, index, owner, progress),
    }
}

/// [`write_checkout`] by libgit2's own checkout, one file at a time.
pub(crate) fn write_with_libgit2(
    repo: &git2::Repository,
    tree: &git2::Tree,
    target: &Path,
    index: &Path,
    owner: Option<(u32, u32)>,
    progress: Option<&Progress>,
) -> Result<usize, CheckoutError> {
    // A handle of our own, opened bare: the index given to it below replaces its own for
    // the checkout, and the main repository's index and work tree are never touched.
    let mut new_index = Index::open(index).map_err(git_err("creating an index", index))?;
    repo.set_index(&mut new_index)
        .map_err(git_err("creating an index", index))?;
    let mut options = CheckoutBuilder::new();
    // A new index means an empty baseline: every file is written, and libgit2 records each
    // one's stat data in the index and writes it out.
    options.force().target_dir(target);
    let mut last: Option<(usize, std::time::Instant)> = None;
    if let Some(progress) = progress {
        options.progress(move |_, done, total| {
            let due = last.is_none_or(|(at_done, at)| {
                done >= total
                    || done.saturating_sub(at_done) >= (total / 100).max(1)
                    || at.elapsed() >= std::time::Duration::from_millis(100)
            });
            if due && last.map(|(d, _)| d) != Some(done) {
                last = Some((done, std::time::Instant::now()));
                progress(BaseProgress {
                    done: done as u64,
                    total: total as u64,
                });
            }
        });
    }
    repo.checkout_tree(tree.as_object(), Some(&mut options))
        .map_err(git_err("writing the checkout", target))?;
    let mut written = Index::open(index).map_err(git_err("reading the index", index))?;
    if let Some(owner) = owner {
        files::chown_tree(target, owner)?;
        restat(&mut written, target)?;
        written
            .write()
            .map_err(git_err("writing the index", index))?;
    }
    Ok(written.len())
}

/// Refresh the stat data of every entry of `index` from the files under `root`.
fn restat(index: &mut Index, root: &Path) -> Result<(), CheckoutError> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let entries: Vec<git2::IndexEntry> = index.iter().collect();
    for mut entry in entries {
        let path = root.join(std::ffi::OsStr::from_bytes(&entry.path));
        let meta = fs::symlink_metadata(&path).map_err(io_err("reading", &path))?;
        entry.ctime = git2::IndexTime::new(meta.ctime() as i32, meta.ctime_nsec() as u32);
        entry.mtime = git2::IndexTime::new(meta.mtime() as i32, meta.mtime_nsec() as u32);
        entry.dev = meta.dev() as u32;
        entry.ino = meta.ino() as u32;
        entry.uid = meta.uid();
        entry.gid = meta.gid();
        entry.file_size = meta.size() as u32;
        index
            .add(&entry)
            .map_err(git_err("updating the index", root))?;
    }
    Ok(())
}

/// Remove base `key` when no checkout uses it any more, nor a preparation being made on it
/// (`base_lock.rs`: a base whose lock is held is kept for a later `keel prune`). Returns the
/// bytes freed.
pub(crate) fn remove_if_unused(dirs: &StateDir, key: &str) -> Result<u64, CheckoutError> {
    let base = base_dir(dirs, key);
    if !base.exists() {
        return Ok(0);
    }
    // Taken before the records are read: a preparation's record appears only when its
    // checkout is in place, and it holds the lock until then.
    let Some(_lock) = super::base_lock::try_lock_exclusive(dirs, key)? else {
        log::info!("base tree {key}: kept: a checkout is being prepared on it");
        return Ok(0);
    };
    let Some(records) = super::record::all(dirs) else {
        return Ok(0);
    };
    if records.iter().any(|r| r.base_key() == Some(key)) {
        return Ok(0);
    }
    if !base.exists() {
        return Ok(0);
    }
    let bytes = files::disk_bytes(&base);
    // Renamed away first: a half-removed base must not look like one still in place.
    let doomed = files::build_path(&bases_dir(dirs), &format!("{key}.removing"));
    fs::rename(&base, &doomed).map_err(io_err("removing the base", &base))?;
    files::remove_tree(&doomed).map_err(io_err("removing the base", &doomed))?;
    Ok(bytes)
}
