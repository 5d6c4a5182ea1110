//! The threaded base-tree writer against libgit2's own checkout of the same commit: the same
//! files (types, permission bits, contents, symlink targets, submodule directories) and the
//! same index (paths, modes, ids, sizes), with stat data that matches what is on disk.

use crate::checkout::base::{write_checkout, write_with_libgit2};
use crate::checkout::write::{self, Progress};
use crate::checkout::BaseProgress;
use git2::{Oid, Repository, Signature};
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("keel-write-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A tree of `entries` (path, mode, contents) under `repo`, nested directories made as needed.
fn tree_of(repo: &Repository, entries: &[(&str, i32, &[u8])]) -> Oid {
    let mut children: BTreeMap<String, Vec<(String, i32, Vec<u8>)>> = BTreeMap::new();
    let mut builder = repo.treebuilder(None).unwrap();
    for (path, mode, content) in entries {
        match path.split_once('/') {
            Some((dir, rest)) => children.entry(dir.to_string()).or_default().push((
                rest.to_string(),
                *mode,
                content.to_vec(),
            )),
            None => {
                let id = if *mode == 0o160000 {
                    Oid::from_bytes(&[7; 20]).unwrap()
                } else {
                    repo.blob(content).unwrap()
                };
                builder.insert(path, id, *mode).unwrap();
            }
        }
    }
    for (dir, inner) in children {
        let inner: Vec<(&str, i32, &[u8])> = inner
            .iter()
            .map(|(p, m, c)| (p.as_str(), *m, c.as_slice()))
            .collect();
        builder
            .insert(&dir, tree_of(repo, &inner), 0o040000)
            .unwrap();
    }
    builder.write().unwrap()
}

fn commit_of(repo: &Repository, entries: &[(&str, i32, &[u8])]) -> Oid {
    let tree = repo.find_tree(tree_of(repo, entries)).unwrap();
    let who = Signature::now("t", "t@example.com").unwrap();
    repo.commit(None, &who, &who, "files", &tree, &[]).unwrap()
}

/// Every path under `root`: its type, permission bits, and contents or link target.
fn listing(root: &Path) -> BTreeMap<PathBuf, (String, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let perm = meta.permissions().mode() & 0o7777;
            let item = if meta.is_dir() {
                stack.push(path.clone());
                ("dir".to_string(), perm, Vec::new())
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                (
                    "link".to_string(),
                    0,
                    target.into_os_string().into_encoded_bytes(),
                )
            } else {
                ("file".to_string(), perm, std::fs::read(&path).unwrap())
            };
            out.insert(rel, item);
        }
    }
    out
}

/// The index's entries as git compares them across checkouts, after checking that each
/// entry's stat data is what is on disk under `root` (so that git finds the files clean).
fn index_listing(index: &Path, root: &Path) -> Vec<(Vec<u8>, u32, Oid, u32)> {
    let index = git2::Index::open(index).unwrap();
    index
        .iter()
        .map(|e| {
            let path = root.join(std::str::from_utf8(&e.path).unwrap());
            let meta = std::fs::symlink_metadata(&path).unwrap();
            assert_eq!(e.ino, meta.ino() as u32, "{}", path.display());
            assert_eq!(e.mtime.seconds(), meta.mtime() as i32, "{}", path.display());
            assert_eq!(e.mtime.nanoseconds(), meta.mtime_nsec() as u32);
            (e.path, e.mode, e.id, e.file_size)
        })
        .collect()
}

#[test]
fn threads_write_what_libgit2_writes() {
    let scratch = Scratch::new("same");
    let repo = Repository::init_bare(scratch.0.join("repo.git")).unwrap();
    let mut entries: Vec<(String, i32, Vec<u8>)> = vec![
        ("README".into(), 0o100644, b"hello\n".to_vec()),
        ("empty".into(), 0o100644, Vec::new()),
        (
            "bin/run.sh".into(),
            0o100755,
            b"#!/bin/sh\necho hi\n".to_vec(),
        ),
        ("link-rel".into(), 0o120000, b"bin/run.sh".to_vec()),
        ("link-abs".into(), 0o120000, b"/etc/hostname".to_vec()),
        ("link-dangling".into(), 0o120000, b"no/such/file".to_vec()),
        (
            "a dir/with space é.txt".into(),
            0o100644,
            b"unicode\n".to_vec(),
        ),
        (
            "binary.bin".into(),
            0o100644,
            (0..=255u8).cycle().take(70_000).collect(),
        ),
        ("crlf.txt".into(), 0o100644, b"a\r\nb\r\n".to_vec()),
    ];
    for i in 0..300 {
        let mode = if i % 7 == 0 { 0o100755 } else { 0o100644 };
        entries.push((
            format!("src/m{}/f{i}.rs", i % 9),
            mode,
            format!("// {i}\n").into_bytes(),
        ));
    }
    let borrowed: Vec<(&str, i32, &[u8])> = entries
        .iter()
        .map(|(p, m, c)| (p.as_str(), *m, c.as_slice()))
        .collect();
    let commit = commit_of(&repo, &borrowed);
    let tree = repo.find_commit(commit).unwrap().tree().unwrap();
    assert!(
        write::plan(&repo, &tree).unwrap().is_some(),
        "a plain tree is written by threads"
    );

    let reports: Arc<Mutex<Vec<BaseProgress>>> = Arc::default();
    let seen = reports.clone();
    let progress: Progress = Arc::new(move |p| seen.lock().unwrap().push(p));
    let (threaded, sequential) = (scratch.0.join("threads"), scratch.0.join("libgit2"));
    let (index_t, index_s) = (scratch.0.join("index-t"), scratch.0.join("index-s"));
    let written = write_checkout(
        repo.path(),
        commit,
        &threaded,
        &index_t,
        None,
        Some(&progress),
    )
    .unwrap();
    write_with_libgit2(&repo, &tree, &sequential, &index_s, None, None).unwrap();

    assert_eq!(listing(&threaded), listing(&sequential));
    let listed = listing(&threaded);
    assert_eq!(
        listed[Path::new("bin/run.sh")].1 & 0o100,
        0o100,
        "executable"
    );
    assert_eq!(
        index_listing(&index_t, &threaded),
        index_listing(&index_s, &sequential)
    );
    assert_eq!(written, entries.len());

    // Progress: from 0 to all of it, never backwards, and not once a file.
    let reports = reports.lock().unwrap();
    let total = entries.len() as u64;
    assert_eq!(reports.first(), Some(&BaseProgress { done: 0, total }));
    assert_eq!(reports.last(), Some(&BaseProgress { done: total, total }));
    assert!(reports
        .windows(2)
        .all(|w| w[0].done <= w[1].done && w[1].total == total));
    assert!(reports.len() < entries.len(), "{} reports", reports.len());
}

/// libgit2 cannot check a submodule out without a work tree ("cannot get submodules without
/// a working tree"); the threads leave its directory empty, as git does, and index it.
#[test]
fn a_submodule_gets_an_empty_directory_and_its_index_entry() {
    let scratch = Scratch::new("submodule");
    let repo = Repository::init_bare(scratch.0.join("repo.git")).unwrap();
    let commit = commit_of(
        &repo,
        &[("README", 0o100644, b"r\n"), ("vendor/lib", 0o160000, b"")],
    );
    let (target, index) = (scratch.0.join("out"), scratch.0.join("index"));
    write_checkout(repo.path(), commit, &target, &index, None, None).unwrap();
    let listed = listing(&target);
    assert_eq!(listed[Path::new("vendor/lib")].0, "dir");
    assert_eq!(
        std::fs::read_dir(target.join("vendor/lib"))
            .unwrap()
            .count(),
        0
    );
    let entries = index_listing(&index, &target);
    let gitlink = entries.iter().find(|e| e.0 == b"vendor/lib").unwrap();
    assert_eq!(
        (gitlink.1, gitlink.2),
        (0o160000, Oid::from_bytes(&[7; 20]).unwrap())
    );
}

#[test]
fn trees_a_plain_copy_would_get_wrong_go_to_libgit2() {
    let scratch = Scratch::new("fallback");
    let repo = Repository::init_bare(scratch.0.join("repo.git")).unwrap();
    let plain = |entries: &[(&str, i32, &[u8])]| {
        let commit = commit_of(&repo, entries);
        let tree = repo.find_commit(commit).unwrap().tree().unwrap();
        write::plan(&repo, &tree).unwrap().is_some()
    };
    assert!(plain(&[("a.txt", 0o100644, b"a")]));
    // Attributes may name filters (eol, ident, lfs): libgit2 applies them.
    assert!(!plain(&[
        ("a.txt", 0o100644, b"a"),
        ("sub/.gitattributes", 0o100644, b"* text eol=crlf\n")
    ]));
    // Names git refuses or treats specially are libgit2's to judge (written by hand: its
    // tree builder refuses them).
    let blob = repo.blob(b"x").unwrap();
    for name in [".git", ".GIT", ".git. ", "git~1", "a\\b", "c:d", ".."] {
        let mut raw = format!("100644 {name}\0").into_bytes();
        raw.extend_from_slice(blob.as_bytes());
        let tree = repo
            .odb()
            .unwrap()
            .write(git2::ObjectType::Tree, &raw)
            .unwrap();
        let tree = repo.find_tree(tree).unwrap();
        assert!(write::plan(&repo, &tree).unwrap().is_none(), "{name:?}");
    }
    // An attributes file of the repository's own, or autocrlf.
    let info = repo.path().join("info");
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(info.join("attributes"), "*.txt ident\n").unwrap();
    assert!(!plain(&[("a.txt", 0o100644, b"a")]));
    std::fs::remove_file(info.join("attributes")).unwrap();
    repo.config()
        .unwrap()
        .set_bool("core.autocrlf", true)
        .unwrap();
    assert!(!plain(&[("a.txt", 0o100644, b"a")]));
    repo.config()
        .unwrap()
        .set_bool("core.autocrlf", false)
        .unwrap();
    assert!(plain(&[("a.txt", 0o100644, b"a")]));
}

#[test]
fn a_malformed_tree_fails_the_build_without_writing_through_a_link() {
    let scratch = Scratch::new("malformed");
    let repo = Repository::init_bare(scratch.0.join("repo.git")).unwrap();
    // A symlink `x` to a directory outside, and a directory `x` with a file in it: two
    // entries of one name (git fsck refuses it; libgit2's tree builder would not write it).
    let outside = scratch.0.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let blob = repo.blob(b"escaped\n").unwrap();
    let mut inner = repo.treebuilder(None).unwrap();
    inner.insert("f", blob, 0o100644).unwrap();
    let inner = inner.write().unwrap();
    let link = repo.blob(outside.to_str().unwrap().as_bytes()).unwrap();
    // Written by hand: `<mode> <name>\0<20-byte id>` entries, sorted as git sorts them.
    let mut raw = Vec::new();
    raw.extend_from_slice(b"120000 x\0");
    raw.extend_from_slice(link.as_bytes());
    raw.extend_from_slice(b"40000 x\0");
    raw.extend_from_slice(inner.as_bytes());
    let odb = repo.odb().unwrap();
    let tree = odb.write(git2::ObjectType::Tree, &raw).unwrap();
    let who = Signature::now("t", "t@example.com").unwrap();
    let tree = repo.find_tree(tree).unwrap();
    let commit = repo.commit(None, &who, &who, "bad", &tree, &[]).unwrap();
    let target = scratch.0.join("out");
    let result = write_checkout(
        repo.path(),
        commit,
        &target,
        &scratch.0.join("index"),
        None,
        None,
    );
    assert!(result.is_err(), "{result:?}");
    assert!(!outside.join("f").exists(), "written through the symlink");
}
