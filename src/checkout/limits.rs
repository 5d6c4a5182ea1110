//! What a harvest would bring, weighed before anything is copied: every object of the task's
//! new history that the main repository lacks — commits, their trees, the trees' blobs, tags
//! — with its size read from the object's header (libgit2's `read_header`: a loose object's
//! first bytes inflated, a packed one's entry header; never the contents), against
//! [`HarvestLimits`]. A sparse 2 GiB file commits as a 2 MiB pack; inflated, it would take
//! 2 GiB of the harvester's memory. An object past the limit, or a total past it, refuses the
//! harvest before a byte is written to main; the branch stays in the task's checkout.
//!
//! Only commits and trees are read whole (to walk them), after their headers are checked.
//! The pack is then built of exactly the objects listed here, with libgit2's delta search
//! held to small objects and a bounded window ([`bound_packing`]), so its memory is about the
//! largest object, twice.

use std::collections::HashSet;
use std::path::Path;

use git2::{ObjectType, Odb, Oid, Repository};

use super::error::{git_err, short, CheckoutError};
use super::files;
use super::HarvestLimits;

/// An object to bring, with the path it has in a tree of the branch (a hint for the pack's
/// delta search, and what a refusal names).
pub(crate) struct Wanted {
    pub id: Oid,
    pub path: Option<String>,
}

/// One object as found on the walk: for the messages.
#[derive(Debug, Clone)]
struct Found {
    id: Oid,
    kind: ObjectType,
    size: u64,
    path: Option<String>,
    commit: Option<Oid>,
}

/// Every object packed in the task's own object directory `objects` (not its alternates),
/// weighed on its header before the walk reads any whole: a packed delta's header gives the
/// size of what it inflates to, and its base lies in the same pack, so an object the walk
/// never names (an unreachable 2 GiB base under a small commit) is weighed too — the walk's
/// `find_commit` and the pack builder would inflate it. A loose object is never a delta's
/// base: an unreachable one is left alone (the walk weighs those it brings). The same limit
/// as the walk's.
pub(crate) fn own_objects_within(
    objects: &Path,
    limits: &HarvestLimits,
    unit: &str,
) -> Result<(), CheckoutError> {
    let reading = "reading the task's objects";
    let text = objects.to_str().ok_or_else(|| CheckoutError::Git {
        what: reading.into(),
        path: objects.to_path_buf(),
        message: "the path is not UTF-8".into(),
    })?;
    let odb = Odb::new().map_err(git_err(reading, objects))?;
    odb.add_disk_alternate(text)
        .map_err(git_err(reading, objects))?;
    let mut ids = Vec::new();
    odb.foreach(|id| {
        ids.push(*id);
        true
    })
    .map_err(git_err(reading, objects))?;
    for id in ids {
        let hex = id.to_string();
        if objects.join(&hex[..2]).join(&hex[2..]).exists() {
            continue;
        }
        let (size, kind) = odb.read_header(id).map_err(git_err(reading, objects))?;
        let size = size as u64;
        if size > limits.max_object_bytes {
            return Err(CheckoutError::HarvestTooBig {
                unit: unit.to_string(),
                object: format!(
                    "{kind} {} (packed in the task's repository, perhaps unreachable: `git log --all --find-object={}` in the checkout names its commit; `git reflog expire --expire=now --all && git gc -q --prune=now` drops it if none does)",
                    short(&id.to_string()),
                    short(&id.to_string())
                ),
                object_bytes: size,
                size,
                limit: limits.max_object_bytes,
                setting: "max_object_bytes",
            });
        }
    }
    Ok(())
}

/// The objects of `tips`' histories that `main` (its own object store, `main_odb`) lacks, read
/// through `walker` (main's objects and the task's), checked against `limits`. `unit` names the
/// task in a refusal. An object missing on the way fails the walk: main never gets a ref to a
/// commit whose ancestors, trees or blobs it lacks.
pub(crate) fn objects_to_bring(
    main_odb: &Odb,
    walker: &Repository,
    tips: &[Oid],
    limits: &HarvestLimits,
    unit: &str,
) -> Result<Vec<Wanted>, CheckoutError> {
    let path = walker.path().to_path_buf();
    let reading = "reading the task's objects";
    let odb = walker.odb().map_err(git_err(reading, &path))?;
    let mut walk = Walk {
        main_odb,
        odb: &odb,
        limits,
        unit,
        path: &path,
        seen: HashSet::new(),
        wanted: Vec::new(),
        bytes: 0,
        largest: None,
    };
    let mut commits = Vec::new();
    let mut trees = Vec::new();
    for &tip in tips {
        let mut id = tip;
        while let Some(kind) = walk.visit(id, None, None)? {
            match kind {
                ObjectType::Tag => {
                    let tag = walker.find_tag(id).map_err(git_err(reading, &path))?;
                    id = tag.target_id();
                }
                ObjectType::Commit => {
                    commits.push(id);
                    break;
                }
                ObjectType::Tree => {
                    trees.push((id, String::new(), None));
                    break;
                }
                _ => break,
            }
        }
    }
    while let Some(id) = commits.pop() {
        let commit = walker.find_commit(id).map_err(git_err(reading, &path))?;
        for parent in commit.parent_ids() {
            if walk.visit(parent, None, None)?.is_some() {
                commits.push(parent);
            }
        }
        if walk.visit(commit.tree_id(), Some(""), Some(id))?.is_some() {
            trees.push((commit.tree_id(), String::new(), Some(id)));
        }
        while let Some((tree_id, prefix, at)) = trees.pop() {
            let tree = walker.find_tree(tree_id).map_err(git_err(reading, &path))?;
            for entry in tree.iter() {
                let name = String::from_utf8_lossy(entry.name_bytes());
                let entry_path = if prefix.is_empty() {
                    name.into_owned()
                } else {
                    format!("{prefix}/{name}")
                };
                match entry.filemode() {
                    0o160000 => {} // a submodule's commit: another repository's
                    0o040000 => {
                        if walk.visit(entry.id(), Some(&entry_path), at)?.is_some() {
                            trees.push((entry.id(), entry_path, at));
                        }
                    }
                    _ => {
                        walk.visit(entry.id(), Some(&entry_path), at)?;
                    }
                }
            }
        }
    }
    Ok(walk.wanted)
}

struct Walk<'a> {
    main_odb: &'a Odb<'a>,
    odb: &'a Odb<'a>,
    limits: &'a HarvestLimits,
    unit: &'a str,
    path: &'a Path,
    seen: HashSet<Oid>,
    wanted: Vec<Wanted>,
    bytes: u64,
    largest: Option<Found>,
}

impl Walk<'_> {
    /// `id`, unless main has it or it was seen: its header read and weighed, the object
    /// listed. `Some(kind)`: new, to be walked further.
    fn visit(
        &mut self,
        id: Oid,
        path: Option<&str>,
        commit: Option<Oid>,
    ) -> Result<Option<ObjectType>, CheckoutError> {
        if self.main_odb.exists(id) || !self.seen.insert(id) {
            return Ok(None);
        }
        let (size, kind) = self
            .odb
            .read_header(id)
            .map_err(git_err("reading the task's objects", self.path))?;
        let found = Found {
            id,
            kind,
            size: size as u64,
            path: path.filter(|p| !p.is_empty()).map(str::to_string),
            commit,
        };
        if found.size > self.limits.max_object_bytes {
            return Err(self.refusal(&found, found.size, "max_object_bytes"));
        }
        self.bytes += found.size;
        if self.largest.as_ref().is_none_or(|l| found.size > l.size) {
            self.largest = Some(found.clone());
        }
        if self.bytes > self.limits.max_pack_bytes {
            let largest = self.largest.clone().unwrap_or(found);
            return Err(self.refusal(&largest, self.bytes, "max_pack_bytes"));
        }
        self.wanted.push(Wanted {
            id,
            path: path.map(str::to_string),
        });
        Ok(Some(kind))
    }

    fn refusal(&self, object: &Found, size: u64, setting: &'static str) -> CheckoutError {
        let limit = match setting {
            "max_object_bytes" => self.limits.max_object_bytes,
            _ => self.limits.max_pack_bytes,
        };
        CheckoutError::HarvestTooBig {
            unit: self.unit.to_string(),
            object: describe(object),
            object_bytes: object.size,
            size,
            limit,
            setting,
        }
    }
}

/// `blob big.bin in commit 1234abcd5678 (object 9abc…)`.
fn describe(found: &Found) -> String {
    let id = found.id.to_string();
    let mut text = found.kind.to_string();
    if let Some(path) = &found.path {
        text.push_str(&format!(" {path}"));
    }
    if let Some(commit) = found.commit {
        text.push_str(&format!(" in commit {}", short(&commit.to_string())));
    }
    text.push_str(&format!(" (object {})", short(&id)));
    text
}

/// libgit2's pack builder searches deltas among a window of objects it holds inflated (ten,
/// and up to 512 MiB each by default): held here to objects under 16 MiB (its big-file
/// threshold is read from `pack.deltaCacheSize`, as libgit2 1.9 does) and a 64 MiB window, by
/// a configuration file of keel's added to `walker`'s configuration at the highest level, for
/// this handle only. The file is written in `scratch` and removed when the returned guard
/// goes: keep it until the pack builder is made (which reads the configuration).
pub(crate) fn bound_packing(
    walker: &Repository,
    scratch: &Path,
) -> Result<ScratchFile, CheckoutError> {
    use std::io::Write;
    let file = ScratchFile(files::build_path(scratch, "harvest.gitconfig"));
    let text = "[pack]\n\twindowMemory = 67108864\n\tdeltaCacheSize = 16777216\n";
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&file.0)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(super::error::io_err("writing", &file.0))?;
    walker
        .config()
        .and_then(|mut c| c.add_file(&file.0, git2::ConfigLevel::App, true))
        .map_err(git_err("configuring the pack builder", scratch))?;
    Ok(file)
}

/// A file removed when dropped.
pub(crate) struct ScratchFile(std::path::PathBuf);

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
