//! What a task changed against its base, for a person's review (`keel diff`) and for the
//! daemon's "unreviewed" mark (a worker computes the [`Review::fingerprint`] of a finished
//! task; `keel diff` sends the one it showed).
//!
//! Two parts: the commits of the task's branch past its base commit, read from the task's git
//! directory (after [`guard_git_dir`](super::guard::guard_git_dir), as every read of it is),
//! and what is uncommitted in its files — staged (HEAD → index), unstaged and untracked (index
//! → files) — which needs the files as the agent sees them: an overlay's merged view is
//! mounted for the moment in a private mount namespace, so the task must be stopped, and a
//! checkout holding files keel will not open (`unread`) is not shown to libgit2 at all.

use std::path::Path;

use git2::{Diff, DiffFormat, DiffOptions, DiffStatsFormat, ObjectType, Oid, Repository};

use super::error::{git_err, CheckoutError};
use super::inspect;
use super::record::{self, CheckoutRecord};
use crate::state::StateDir;

/// One commit of the task's branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewCommit {
    pub id: String,
    pub author: String,
    /// Unix seconds.
    pub time: i64,
    pub summary: String,
    /// `git diff --stat` of the commit against its first parent.
    pub stat: String,
}

/// A patch: its `--stat` summary and its lines (`origin` as libgit2 gives it: `+`, `-`, ` `,
/// `F` a file header, `H` a hunk header, `B` binary, `=`/`>`/`<` end-of-file notes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patch {
    pub files: usize,
    pub stat: String,
    pub lines: Vec<(char, String)>,
}

/// What is not committed in the task's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uncommitted {
    /// The task runs: its files are mounted in its sandbox only.
    Running,
    /// Files keel will not open (FIFOs, sockets, devices…), the first few named, and the count.
    Unreadable { named: Vec<String>, count: usize },
    /// HEAD → index, and index → files (untracked files included, as additions).
    Shown { staged: Patch, unstaged: Patch },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    pub branch: String,
    pub base: String,
    pub base_commit: String,
    /// The branch's commit in the task's git directory (`None`: no such branch, no HEAD).
    pub head: Option<String>,
    /// Newest first, at most [`LISTED_COMMITS`] (the job's look: at most one).
    pub commits: Vec<ReviewCommit>,
    /// How many commits the branch has past its base (at least `commits.len()`).
    pub commit_count: usize,
    /// Base → head.
    pub committed: Patch,
    pub uncommitted: Uncommitted,
    /// Of the head and the uncommitted files (each changed file's contents hashed): equal
    /// fingerprints, the same work.
    pub fingerprint: String,
}

/// `tasks/<unit>/reviewed.ron`: the work a person last looked at (`keel diff`), written by
/// the daemon (`Request::MarkReviewed`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reviewed {
    pub fingerprint: String,
    pub head: Option<String>,
    pub at_ms: u64,
}

pub fn reviewed_path(dirs: &StateDir, unit: &str) -> std::path::PathBuf {
    dirs.task_dir(unit).join("reviewed.ron")
}

impl Review {
    /// Is there anything to review: commits, or changes in the files?
    pub fn has_work(&self) -> bool {
        !self.commits.is_empty()
            || match &self.uncommitted {
                Uncommitted::Running => false,
                Uncommitted::Unreadable { count, .. } => *count > 0,
                Uncommitted::Shown { staged, unstaged } => staged.files + unstaged.files > 0,
            }
    }
}

/// At most this many commits are read whole (all are counted).
pub const LISTED_COMMITS: usize = 1000;

/// The review of `unit`'s checkout (its files only when the task is stopped).
pub fn review(dirs: &StateDir, unit: &str) -> Result<Review, CheckoutError> {
    review_with(dirs, unit, true)
}

/// [`review`] without its patches and summaries (empty): what the daemon's job needs to tell
/// whether there is work and which (the fingerprint hashes each changed file all the same).
pub fn work(dirs: &StateDir, unit: &str) -> Result<Review, CheckoutError> {
    review_with(dirs, unit, false)
}

fn review_with(dirs: &StateDir, unit: &str, patches: bool) -> Result<Review, CheckoutError> {
    let record = inspect::load(dirs, unit)?;
    let checkout = record::checkout_dir(dirs, unit);
    let git = record::git_dir(&checkout);
    super::guard::guard_git_dir(&git, &record.common_dir)?;
    let repo =
        super::resolve::open_git_dir(&git).map_err(git_err("opening the git directory", &git))?;
    let reading = |e: git2::Error| CheckoutError::git("reading the task's branch", &git, e);
    let head = repo
        .refname_to_id(&format!("refs/heads/{}", record.branch))
        .or_else(|_| repo.refname_to_id("HEAD"))
        .ok();
    let base = Oid::from_str(&record.base_commit).map_err(reading)?;
    let (commits, commit_count) = match head {
        Some(head) => commits(&repo, head, base, patches).map_err(reading)?,
        None => (Vec::new(), 0),
    };
    let committed = match head {
        Some(head) if patches => {
            let (old, new) = (repo.find_commit(base), repo.find_commit(head));
            let old = old.and_then(|c| c.tree()).map_err(reading)?;
            let new = new.and_then(|c| c.tree()).map_err(reading)?;
            let diff = repo.diff_tree_to_tree(Some(&old), Some(&new), Some(&mut options(false)));
            patch(&diff.map_err(reading)?).map_err(reading)?
        }
        _ => Patch::default(),
    };
    drop(repo);
    let mut hashed = Vec::new();
    // Held while the files are looked at: no attempt mounts the upper directory meanwhile.
    let held = inspect::hold_stopped(dirs, unit);
    let uncommitted = if let Err(CheckoutError::Running { .. }) = held {
        Uncommitted::Running
    } else {
        let _held = held?;
        let unread = inspect::unreadable(dirs, unit, &record)?;
        if unread.count > 0 {
            Uncommitted::Unreadable {
                named: unread.named,
                count: unread.count,
            }
        } else {
            let (shown, files) = inspect::with_files(dirs, unit, &record, |view| {
                uncommitted(&git, view, head, patches)
            })?;
            hashed = files;
            shown
        }
    };
    let fingerprint = fingerprint(&record, head, &uncommitted, &hashed);
    Ok(Review {
        branch: record.branch.clone(),
        base: record.base.clone(),
        base_commit: record.base_commit.clone(),
        head: head.map(|h| h.to_string()),
        commits,
        commit_count,
        committed,
        uncommitted,
        fingerprint,
    })
}

fn options(untracked: bool) -> DiffOptions {
    let mut options = DiffOptions::new();
    options
        .include_untracked(untracked)
        .recurse_untracked_dirs(untracked)
        .show_untracked_content(untracked)
        .ignore_submodules(true)
        // Larger files are shown as binary (the fingerprint hashes them whole).
        .max_size(4 << 20);
    options
}

fn commits(
    repo: &Repository,
    head: Oid,
    base: Oid,
    stats: bool,
) -> Result<(Vec<ReviewCommit>, usize), git2::Error> {
    // Without stats (the job), one commit says there is work: the walk stops there.
    let listed = if stats { LISTED_COMMITS } else { 1 };
    let mut walk = repo.revwalk()?;
    walk.push(head)?;
    walk.hide(base)?;
    let mut commits = Vec::new();
    let mut count = 0;
    for id in walk {
        let id = id?;
        count += 1;
        if commits.len() >= listed {
            if !stats {
                break;
            }
            continue;
        }
        let commit = repo.find_commit(id)?;
        let mut stat = git2::Buf::new();
        if stats {
            let tree = commit.tree()?;
            let parent = commit.parent(0).and_then(|p| p.tree()).ok();
            let diff =
                repo.diff_tree_to_tree(parent.as_ref(), Some(&tree), Some(&mut options(false)));
            stat = diff?.stats()?.to_buf(DiffStatsFormat::FULL, 80)?;
        }
        commits.push(ReviewCommit {
            id: commit.id().to_string(),
            author: String::from_utf8_lossy(commit.author().name_bytes()).into_owned(),
            time: commit.time().seconds(),
            summary: String::from_utf8_lossy(commit.summary_bytes().unwrap_or_default())
                .into_owned(),
            stat: String::from_utf8_lossy(&stat).into_owned(),
        });
    }
    Ok((commits, count))
}

fn patch(diff: &Diff) -> Result<Patch, git2::Error> {
    let stat = diff.stats()?.to_buf(DiffStatsFormat::FULL, 80)?;
    let mut lines = Vec::new();
    diff.print(DiffFormat::Patch, |_, _, line| {
        let text = String::from_utf8_lossy(line.content()).into_owned();
        lines.push((line.origin(), text));
        true
    })?;
    Ok(Patch {
        files: diff.deltas().len(),
        stat: String::from_utf8_lossy(&stat).into_owned(),
        lines,
    })
}

/// Staged and unstaged changes of `tree` (the files) against `head`, and each changed
/// file's path with the hash of what it holds now.
fn uncommitted(
    git: &Path,
    tree: &Path,
    head: Option<Oid>,
    patches: bool,
) -> Result<(Uncommitted, Vec<String>), CheckoutError> {
    let repo =
        super::resolve::open_git_dir(git).map_err(git_err("opening the git directory", git))?;
    repo.set_workdir(tree, false)
        .map_err(git_err("opening the checkout", tree))?;
    let reading = |e: git2::Error| CheckoutError::git("reading the checkout's changes", tree, e);
    let head_tree = match head {
        Some(id) => Some(
            repo.find_commit(id)
                .and_then(|c| c.tree())
                .map_err(reading)?,
        ),
        None => None,
    };
    let index = repo.index().map_err(reading)?;
    let staged = repo
        .diff_tree_to_index(head_tree.as_ref(), Some(&index), Some(&mut options(false)))
        .map_err(reading)?;
    let unstaged = repo
        .diff_index_to_workdir(Some(&index), Some(&mut options(true)))
        .map_err(reading)?;
    let mut hashed = Vec::new();
    for delta in staged.deltas().chain(unstaged.deltas()) {
        let Some(path) = delta.new_file().path().or(delta.old_file().path()) else {
            continue;
        };
        let file = tree.join(path);
        let contents = match std::fs::symlink_metadata(&file) {
            Ok(m) if m.is_file() => Oid::hash_file(ObjectType::Blob, &file)
                .map(|o| o.to_string())
                .unwrap_or_default(),
            Ok(_) => std::fs::read_link(&file)
                .map(|l| l.display().to_string())
                .unwrap_or_default(),
            Err(_) => "gone".to_string(),
        };
        hashed.push(format!(
            "{:?} {} {contents}",
            delta.status(),
            path.display()
        ));
    }
    let part = |diff: &Diff| match patches {
        true => patch(diff),
        false => Ok(Patch {
            files: diff.deltas().len(),
            ..Patch::default()
        }),
    };
    let shown = Uncommitted::Shown {
        staged: part(&staged).map_err(reading)?,
        unstaged: part(&unstaged).map_err(reading)?,
    };
    Ok((shown, hashed))
}

fn fingerprint(
    record: &CheckoutRecord,
    head: Option<Oid>,
    uncommitted: &Uncommitted,
    hashed: &[String],
) -> String {
    let mut text = format!(
        "base {}\nhead {}\n",
        record.base_commit,
        head.map(|h| h.to_string()).unwrap_or_default()
    );
    match uncommitted {
        Uncommitted::Running => text.push_str("running\n"),
        Uncommitted::Unreadable { named, count } => {
            text.push_str(&format!("unreadable {count} {}\n", named.join("\0")))
        }
        Uncommitted::Shown { .. } => {
            for line in hashed {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    Oid::hash_object(ObjectType::Blob, text.as_bytes())
        .map(|o| o.to_string())
        .unwrap_or(text)
}
