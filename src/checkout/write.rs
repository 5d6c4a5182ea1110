//! Writing a commit's files by several threads at once: the fast way to a base tree (or a full
//! checkout). A file's creation costs about a millisecond on a journaled root disk, mostly
//! waiting, so a few writers at once go several times faster than one — git's
//! `checkout.workers` does the same. Directories are made first, a level at a time (each
//! level by all the threads), then every file, symlink and submodule directory; the index
//! comes from the tree (`read_tree`) with every entry's stat data taken from what was written.
//!
//! Only for a tree that checks out byte for byte as stored: no `.gitattributes` in it, no
//! attributes file elsewhere, no `core.autocrlf = true`, symlinks on, and only names that
//! every checkout writes as they are. Anything else ([`plan`] says `None`) goes through
//! libgit2's own checkout, which applies filters and refuses names as git does.
//!
//! Nothing is followed or overwritten: directories are made with mkdir (which fails on
//! anything already there), files with `O_CREAT | O_EXCL | O_NOFOLLOW`, so a malformed tree
//! (two entries of one name, a symlink then a directory of its name) fails the build instead
//! of writing through a link.

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use git2::{Oid, Repository, Tree};

use super::error::{git_err, io_err, CheckoutError};
use super::BaseProgress;

/// A progress callback, as [`super::PrepareOptions::progress`] carries it.
pub(crate) type Progress = Arc<dyn Fn(BaseProgress) + Send + Sync>;

/// Writers at once. Where a file's creation waits on the disk (about a millisecond each on a
/// journaled root disk that syncs its journal), several writers overlap the waits; where it is
/// CPU-bound, more than the cores gain nothing and cost little. On the 2-core development
/// machine, shared with other builds, runs with 1, 4, 8 and 16 writers varied more from run to
/// run than from each other (docs/benchmarks.md, "Base tree build rate").
const WRITERS: usize = 8;

/// Files a writer takes at a time: neighbours in one directory, while the other writers are
/// in other directories (a directory's entries are created one at a time by the kernel).
const CHUNK: usize = 32;

/// One thing to write, its path relative to the target.
#[derive(Debug)]
struct Entry {
    path: PathBuf,
    id: Oid,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File {
        executable: bool,
    },
    Symlink,
    /// A submodule: an empty directory, as git leaves an uninitialised one.
    Submodule,
}

/// What a tree needs written.
pub(crate) struct Plan {
    /// Directories, by depth (all of depth 1, then 2, …).
    dirs: Vec<Vec<PathBuf>>,
    entries: Vec<Entry>,
}

impl Plan {
    /// Files, symlinks and submodules: what progress counts.
    pub(crate) fn total(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Whether the tree has a submodule, which libgit2's checkout refuses ("cannot get
    /// submodules without a working tree").
    pub(crate) fn has_submodules(&self) -> bool {
        self.entries.iter().any(|e| e.kind == Kind::Submodule)
    }
}

/// What the tree of `repo`'s `tree` needs written, or `None` when a plain copy of its blobs
/// would not be what git checks out (see the module's documentation).
pub(crate) fn plan(repo: &Repository, tree: &Tree) -> Result<Option<Plan>, CheckoutError> {
    if !plain_checkout(repo) {
        return Ok(None);
    }
    let path = repo.path();
    let mut plan = Plan {
        dirs: Vec::new(),
        entries: Vec::new(),
    };
    let mut stack = vec![(tree.id(), PathBuf::new(), 0usize)];
    while let Some((id, dir, depth)) = stack.pop() {
        let tree = repo
            .find_tree(id)
            .map_err(git_err("reading the base tree", path))?;
        for entry in tree.iter() {
            let name = entry.name_bytes();
            if !plain_name(name) || name == b".gitattributes" {
                return Ok(None);
            }
            let rel = dir.join(OsStr::from_bytes(name));
            let kind = match entry.filemode() {
                0o040000 => {
                    if plan.dirs.len() <= depth {
                        plan.dirs.push(Vec::new());
                    }
                    plan.dirs[depth].push(rel.clone());
                    stack.push((entry.id(), rel, depth + 1));
                    continue;
                }
                0o100644 => Kind::File { executable: false },
                0o100755 => Kind::File { executable: true },
                0o120000 => Kind::Symlink,
                0o160000 => Kind::Submodule,
                _ => return Ok(None),
            };
            plan.entries.push(Entry {
                path: rel,
                id: entry.id(),
                kind,
            });
        }
    }
    Ok(Some(plan))
}

/// Does a checkout of this repository write blobs as they are stored? Not when attributes
/// may apply a filter (a file of them anywhere libgit2 reads one; in the tree, see [`plan`])
/// or `core.autocrlf` converts line ends, nor when symlinks are written as files.
fn plain_checkout(repo: &Repository) -> bool {
    let Ok(config) = repo.config().and_then(|mut c| c.snapshot()) else {
        return false;
    };
    if config.get_bool("core.autocrlf").unwrap_or(false)
        || !config.get_bool("core.symlinks").unwrap_or(true)
        || config.get_bytes("core.attributesfile").is_ok()
    {
        return false;
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| home.map(|h| h.join(".config")));
    let mut files = vec![
        repo.path().join("info/attributes"),
        PathBuf::from("/etc/gitattributes"),
    ];
    files.extend(xdg.map(|x| x.join("git/attributes")));
    !files.iter().any(|f| fs::symlink_metadata(f).is_ok())
}

/// A name every checkout writes as it is: no path separator, no `.`, `..` or `.git` (in any
/// case, with the trailing dots and spaces some filesystems drop), nothing Windows' short
/// names or NTFS streams would make special. libgit2 decides about the others.
fn plain_name(name: &[u8]) -> bool {
    if name.is_empty()
        || name
            .iter()
            .any(|b| matches!(b, b'/' | b'\0' | b'\\' | b':'))
    {
        return false;
    }
    let lower = name.to_ascii_lowercase();
    let trimmed = lower
        .iter()
        .rposition(|b| !matches!(b, b'.' | b' '))
        .map_or(&lower[..0], |end| &lower[..=end]);
    !(trimmed.is_empty() || trimmed == b".git" || lower.starts_with(b"git~"))
}

/// Shared by the writers.
struct Shared<'a> {
    target: &'a Path,
    common_dir: &'a Path,
    owner: Option<(u32, u32)>,
    failed: AtomicBool,
    error: Mutex<Option<CheckoutError>>,
    done: AtomicU64,
    reporter: Option<Mutex<Reporter<'a>>>,
}

struct Reporter<'a> {
    progress: &'a Progress,
    total: u64,
    step: u64,
    last_done: u64,
    last_at: Instant,
}

impl Shared<'_> {
    fn fail(&self, e: CheckoutError) {
        self.failed.store(true, Ordering::SeqCst);
        let mut error = self.error.lock().unwrap_or_else(|e| e.into_inner());
        error.get_or_insert(e);
    }

    /// One more written; tell the caller when ~1% more is done or 100 ms have passed.
    fn written(&self) {
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        let Some(reporter) = &self.reporter else {
            return;
        };
        // Whoever holds it reports; the others go on writing.
        let Ok(mut r) = reporter.try_lock() else {
            return;
        };
        let advanced = done.saturating_sub(r.last_done);
        if done < r.total
            && advanced > 0
            && (advanced >= r.step || r.last_at.elapsed() >= Duration::from_millis(100))
        {
            r.last_done = done;
            r.last_at = Instant::now();
            (r.progress)(BaseProgress {
                done,
                total: r.total,
            });
        }
    }
}

/// Write `plan` under `target` (an empty directory), by [`WRITERS`] threads, the files given
/// to `owner`. Tells `progress` as it goes, and once at the end.
pub(crate) fn write(
    plan: &Plan,
    common_dir: &Path,
    target: &Path,
    owner: Option<(u32, u32)>,
    progress: Option<&Progress>,
) -> Result<(), CheckoutError> {
    let total = plan.total();
    let shared = Shared {
        target,
        common_dir,
        owner,
        failed: AtomicBool::new(false),
        error: Mutex::new(None),
        done: AtomicU64::new(0),
        reporter: progress.map(|progress| {
            Mutex::new(Reporter {
                progress,
                total,
                step: (total / 100).max(1),
                last_done: 0,
                last_at: Instant::now(),
            })
        }),
    };
    if let Some(progress) = progress {
        progress(BaseProgress { done: 0, total });
    }
    for level in &plan.dirs {
        in_parallel(&shared, level.len(), |_, i| make_dir(&shared, &level[i]));
    }
    in_parallel(&shared, plan.entries.len(), |repo, i| {
        write_entry(&shared, repo, &plan.entries[i])
    });
    if let Some(e) = shared.error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    if let Some(progress) = progress {
        progress(BaseProgress { done: total, total });
    }
    Ok(())
}

/// Run `job(repo, i)` for every `i` below `count`, on up to [`WRITERS`] threads (each with a
/// repository handle of its own: libgit2's are not shared between threads), in chunks.
fn in_parallel(
    shared: &Shared<'_>,
    count: usize,
    job: impl Fn(&Repository, usize) -> Result<(), CheckoutError> + Sync,
) {
    if count == 0 || shared.failed.load(Ordering::SeqCst) {
        return;
    }
    let next = AtomicUsize::new(0);
    let threads = WRITERS.min(count.div_ceil(CHUNK)).max(1);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let repo = match super::resolve::open_git_dir(shared.common_dir) {
                    Ok(repo) => repo,
                    Err(e) => {
                        return shared.fail(CheckoutError::git("opening", shared.common_dir, e))
                    }
                };
                loop {
                    let start = next.fetch_add(CHUNK, Ordering::Relaxed);
                    if start >= count || shared.failed.load(Ordering::Relaxed) {
                        return;
                    }
                    for i in start..(start + CHUNK).min(count) {
                        if let Err(e) = job(&repo, i) {
                            return shared.fail(e);
                        }
                    }
                }
            });
        }
    });
}

fn make_dir(shared: &Shared<'_>, rel: &Path) -> Result<(), CheckoutError> {
    let path = shared.target.join(rel);
    fs::DirBuilder::new()
        .mode(0o755)
        .create(&path)
        .map_err(io_err("writing the checkout", &path))?;
    if let Some((uid, gid)) = shared.owner {
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid)).map_err(io_err("chown", &path))?;
    }
    Ok(())
}

fn write_entry(shared: &Shared<'_>, repo: &Repository, entry: &Entry) -> Result<(), CheckoutError> {
    let path = shared.target.join(&entry.path);
    let read = || {
        repo.find_blob(entry.id)
            .map_err(git_err("reading the base tree", repo.path()))
    };
    match entry.kind {
        Kind::Submodule => make_dir(shared, &entry.path)?,
        Kind::Symlink => {
            let blob = read()?;
            std::os::unix::fs::symlink(OsStr::from_bytes(blob.content()), &path)
                .map_err(io_err("writing the checkout", &path))?;
            if let Some((uid, gid)) = shared.owner {
                std::os::unix::fs::lchown(&path, Some(uid), Some(gid))
                    .map_err(io_err("chown", &path))?;
            }
        }
        Kind::File { executable } => {
            let blob = read()?;
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(if executable { 0o755 } else { 0o644 })
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
                .map_err(io_err("writing the checkout", &path))?;
            file.write_all(blob.content())
                .map_err(io_err("writing the checkout", &path))?;
            if let Some((uid, gid)) = shared.owner {
                std::os::unix::fs::fchown(&file, Some(uid), Some(gid))
                    .map_err(io_err("chown", &path))?;
            }
        }
    }
    shared.written();
    Ok(())
}
