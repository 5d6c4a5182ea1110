//! Modules and references: the module tree read from the crate root's `mod` items, every
//! `crate::`/`super::`/`self::` path with the module it was written in, the names re-exported
//! by `pub use`, and the resolution of a path to the module it names.

use super::tokens::{tokenize, Tok};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module's path below its crate root: `["cli", "status"]` is `crate::cli::status`.
pub(crate) type ModPath = Vec<String>;

/// Where a reference was written and what it said.
#[derive(Clone, Debug)]
pub(crate) struct Site {
    pub(crate) file: PathBuf,
    pub(crate) line: usize,
    pub(crate) text: String,
}

/// One `crate::`/`super::`/`self::` path: the module it was written in, the absolute segments
/// it spells (before resolution to a module), where.
#[derive(Debug)]
pub(crate) struct Reference {
    pub(crate) from: ModPath,
    pub(crate) segments: Vec<String>,
    pub(crate) site: Site,
}

#[derive(Debug, Default)]
pub(crate) struct Crate {
    pub(crate) modules: BTreeSet<ModPath>,
    pub(crate) files: BTreeSet<PathBuf>,
    pub(crate) references: Vec<Reference>,
    /// `pub use` items: (the module, the name it exports) → the absolute path it names.
    pub(crate) reexports: BTreeMap<(ModPath, String), Vec<String>>,
}

/// One name a `pub use` item exports, as written.
#[derive(Debug)]
pub(crate) struct ReExport {
    pub(crate) module: ModPath,
    pub(crate) name: String,
    /// Absolute (from `crate`/`super`/`self`), or relative to `module` (a child's item, or
    /// another crate's: told apart once every module is known).
    pub(crate) target: Vec<String>,
    pub(crate) relative: bool,
}

/// Reads the crate whose root file is `root`, following its `mod` items.
pub(crate) fn read_crate(root: &Path) -> Crate {
    let mut krate = Crate::default();
    krate.modules.insert(Vec::new());
    let mut reexports = Vec::new();
    read_module_file(root, &[], true, &mut krate, &mut reexports);
    for ReExport {
        module,
        name,
        target,
        relative,
    } in reexports
    {
        let target = if relative {
            // `pub use child::Item`: a path into a child module; `pub use serde::X`: not ours.
            let child: ModPath = module.iter().chain(target.first()).cloned().collect();
            if !krate.modules.contains(&child) {
                continue;
            }
            module.iter().chain(&target).cloned().collect()
        } else {
            target
        };
        krate.reexports.insert((module, name), target);
    }
    krate
}

/// Reads one file that is module `module`; `mod_rs` when its children live in its own directory
/// (`lib.rs`, `main.rs`, `mod.rs`, or a file named by `#[path]`), not in a directory of its name.
pub(crate) fn read_module_file(
    file: &Path,
    module: &[String],
    mod_rs: bool,
    krate: &mut Crate,
    reexports: &mut Vec<ReExport>,
) {
    let text = fs::read_to_string(file).unwrap_or_else(|e| {
        panic!(
            "{}: cannot read ({e}); named by a `mod` item",
            file.display()
        )
    });
    krate.files.insert(file.to_path_buf());
    let dir = file.parent().unwrap_or(Path::new("."));
    let children_dir = if mod_rs {
        dir.to_path_buf()
    } else {
        dir.join(file.file_stem().unwrap_or_default())
    };
    let scanned = scan_file(&tokenize(&text), module, file);
    krate.references.extend(scanned.references);
    reexports.extend(scanned.reexports);
    let children = scanned.children;
    for child in children {
        krate.modules.insert(child.module.clone());
        let Some(file_child) = child.file else {
            continue;
        };
        let (path, child_mod_rs) = match file_child {
            ChildFile::Path(path) => (dir.join(path), true),
            ChildFile::Default(inline_dirs) => {
                let base = inline_dirs
                    .iter()
                    .fold(children_dir.clone(), |d, s| d.join(s));
                let name = child.module.last().expect("a child has a name");
                let flat = base.join(format!("{name}.rs"));
                if flat.exists() {
                    (flat, false)
                } else {
                    (base.join(name).join("mod.rs"), true)
                }
            }
        };
        read_module_file(&path, &child.module, child_mod_rs, krate, reexports);
    }
}

pub(crate) enum ChildFile {
    /// `#[path = "…"]`, relative to the declaring file's directory.
    Path(String),
    /// The default place; the inline modules between the file and the `mod` item.
    Default(Vec<String>),
}

pub(crate) struct Child {
    pub(crate) module: ModPath,
    /// None for an inline `mod x { … }` (scanned as part of its file).
    pub(crate) file: Option<ChildFile>,
}

/// What one file declares and writes.
pub(crate) struct Scanned {
    pub(crate) children: Vec<Child>,
    pub(crate) references: Vec<Reference>,
    pub(crate) reexports: Vec<ReExport>,
}

/// The modules one file declares, the paths it writes and the names it re-exports, for the
/// file that is `module`.
pub(crate) fn scan_file(toks: &[(Tok, usize)], module: &[String], file: &Path) -> Scanned {
    let mut children = Vec::new();
    let mut references = Vec::new();
    let mut reexports = Vec::new();
    // Inline modules open in this file: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut pending_path: Option<String> = None;
    let current = |inline: &[(String, usize)]| -> ModPath {
        let mut m = module.to_vec();
        m.extend(inline.iter().map(|(n, _)| n.clone()));
        m
    };
    let mut i = 0;
    while i < toks.len() {
        let (tok, line) = &toks[i];
        match tok {
            Tok::Punct('#') => {
                // An attribute: note `#[path = "…"]`, skip the rest (paths in attributes are
                // not dependencies: `#[cfg(...)]`, `#[serde(...)]`).
                let mut j = i + 1;
                if toks.get(j).map(|t| &t.0) == Some(&Tok::Punct('!')) {
                    j += 1;
                }
                if toks.get(j).map(|t| &t.0) == Some(&Tok::Punct('[')) {
                    let end = matching(toks, j, '[', ']');
                    if let [(Tok::Ident(p), _), (Tok::Punct('='), _), (Tok::Str(s), _)] =
                        &toks[j + 1..end]
                    {
                        if p == "path" {
                            pending_path = Some(s.clone());
                        }
                    }
                    i = end + 1;
                    continue;
                }
            }
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(word) if word == "mod" => {
                if let Some((Tok::Ident(name), _)) = toks.get(i + 1) {
                    let mut child = current(&inline);
                    child.push(name.clone());
                    match toks.get(i + 2).map(|t| &t.0) {
                        Some(Tok::Punct(';')) => {
                            let file = match pending_path.take() {
                                Some(path) => ChildFile::Path(path),
                                None => ChildFile::Default(
                                    inline.iter().map(|(n, _)| n.clone()).collect(),
                                ),
                            };
                            children.push(Child {
                                module: child,
                                file: Some(file),
                            });
                            i += 3;
                            continue;
                        }
                        Some(Tok::Punct('{')) => {
                            pending_path = None;
                            depth += 1;
                            inline.push((name.clone(), depth));
                            children.push(Child {
                                module: child,
                                file: None,
                            });
                            i += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
            }
            Tok::Ident(word)
                if word == "use" && matches!(toks.get(i + 1), Some((Tok::Ident(_), _))) =>
            {
                // A use item: its paths (groups expanded), and what it exports when it is `pub`.
                let exported = is_pub(toks, i);
                let first_is_ours = matches!(&toks[i + 1].0, Tok::Ident(w) if is_path_start(w));
                let from = current(&inline);
                let (paths, end) = read_path(toks, i + 1);
                for (path, alias) in paths {
                    let segments = if first_is_ours {
                        absolute(&from, &path)
                    } else {
                        None
                    };
                    if let Some(segments) = &segments {
                        references.push(Reference {
                            from: from.clone(),
                            segments: segments.clone(),
                            site: Site {
                                file: shown(file),
                                line: *line,
                                text: path.join("::"),
                            },
                        });
                    }
                    let name = alias.or_else(|| path.last().cloned()).unwrap_or_default();
                    if exported && !matches!(name.as_str(), "*" | "self" | "super" | "crate") {
                        reexports.push(ReExport {
                            module: from.clone(),
                            name,
                            target: segments.clone().unwrap_or_else(|| path.clone()),
                            relative: segments.is_none(),
                        });
                    }
                }
                i = end;
                continue;
            }
            Tok::Ident(word)
                if is_path_start(word) && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::PathSep) =>
            {
                let after_sep = i > 0 && toks[i - 1].0 == Tok::PathSep;
                let macro_var = i > 0 && toks[i - 1].0 == Tok::Punct('$');
                // `pub(in crate::x)` names a visibility, not a dependency.
                let visibility = i > 1
                    && toks[i - 1].0 == Tok::Ident("in".into())
                    && toks[i - 2].0 == Tok::Punct('(');
                if !after_sep && !macro_var {
                    let (paths, end) = read_path(toks, i);
                    if !visibility {
                        let from = current(&inline);
                        for (path, _) in paths {
                            if let Some(segments) = absolute(&from, &path) {
                                let site = Site {
                                    file: shown(file),
                                    line: *line,
                                    text: path.join("::"),
                                };
                                references.push(Reference {
                                    from: from.clone(),
                                    segments,
                                    site,
                                });
                            }
                        }
                    }
                    i = end;
                    continue;
                }
            }
            Tok::Punct(';') => pending_path = None,
            _ => {}
        }
        i += 1;
    }
    Scanned {
        children,
        references,
        reexports,
    }
}

/// Whether the item whose keyword is at `i` is `pub` (or `pub(crate)`, `pub(super)`, …).
pub(crate) fn is_pub(toks: &[(Tok, usize)], i: usize) -> bool {
    let pub_at = |j: usize| toks.get(j).is_some_and(|t| t.0 == Tok::Ident("pub".into()));
    if i == 0 {
        return false;
    }
    if toks[i - 1].0 != Tok::Punct(')') {
        return pub_at(i - 1);
    }
    let mut depth = 0;
    for j in (0..i).rev() {
        match toks[j].0 {
            Tok::Punct(')') => depth += 1,
            Tok::Punct('(') => {
                depth -= 1;
                if depth == 0 {
                    return j > 0 && pub_at(j - 1);
                }
            }
            _ => {}
        }
    }
    false
}

/// `file` as the message shows it: relative to the package.
pub(crate) fn shown(file: &Path) -> PathBuf {
    file.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(file)
        .to_path_buf()
}

pub(crate) fn is_path_start(word: &str) -> bool {
    matches!(word, "crate" | "super" | "self")
}

/// Index of the token closing the bracket opened at `open`.
pub(crate) fn matching(toks: &[(Tok, usize)], open: usize, left: char, right: char) -> usize {
    let mut depth = 0;
    for (j, (tok, _)) in toks.iter().enumerate().skip(open) {
        if *tok == Tok::Punct(left) {
            depth += 1;
        } else if *tok == Tok::Punct(right) {
            depth -= 1;
            if depth == 0 {
                return j;
            }
        }
    }
    toks.len() - 1
}

/// A path as read, and the name a use item gives it (`as name`), if any.
pub(crate) type PathRead = (Vec<String>, Option<String>);

/// The path(s) starting at `i` — more than one for a use group `a::{b, c::{d, self}}` — and
/// the index after it. A group's `self` names the group's prefix; a glob ends in `*`.
pub(crate) fn read_path(toks: &[(Tok, usize)], mut i: usize) -> (Vec<PathRead>, usize) {
    let mut prefix = Vec::new();
    loop {
        match toks.get(i).map(|t| &t.0) {
            Some(Tok::Ident(seg)) => {
                prefix.push(seg.clone());
                i += 1;
            }
            _ => return (vec![(prefix, None)], i),
        }
        if toks.get(i).map(|t| &t.0) != Some(&Tok::PathSep) {
            let (alias, next) = read_alias(toks, i);
            return (vec![(prefix, alias)], next);
        }
        match toks.get(i + 1).map(|t| &t.0) {
            Some(Tok::Punct('{')) => {
                let (tails, end) = read_group(toks, i + 1);
                let paths = tails
                    .into_iter()
                    .map(|(tail, alias)| (prefix.iter().cloned().chain(tail).collect(), alias))
                    .collect();
                return (paths, end);
            }
            Some(Tok::Ident(_)) => i += 1,
            Some(Tok::Punct('*')) => {
                prefix.push("*".into());
                return (vec![(prefix, None)], i + 2);
            }
            _ => return (vec![(prefix, None)], i + 1),
        }
    }
}

/// `as name` at `i`: the name and the index after it.
pub(crate) fn read_alias(toks: &[(Tok, usize)], i: usize) -> (Option<String>, usize) {
    match (toks.get(i), toks.get(i + 1)) {
        (Some((Tok::Ident(word), _)), Some((Tok::Ident(name), _))) if word == "as" => {
            (Some(name.clone()), i + 2)
        }
        _ => (None, i),
    }
}

/// The trees of a use group `{…}` opened at `open`, relative to its prefix, and the index after
/// its closing brace.
pub(crate) fn read_group(toks: &[(Tok, usize)], open: usize) -> (Vec<PathRead>, usize) {
    let end = matching(toks, open, '{', '}');
    let mut paths = Vec::new();
    let mut i = open + 1;
    while i < end {
        match &toks[i].0 {
            Tok::Ident(word) if word == "self" => {
                let (alias, next) = read_alias(toks, i + 1);
                paths.push((Vec::new(), alias));
                i = next;
            }
            Tok::Ident(_) => {
                let (found, next) = read_path(toks, i);
                paths.extend(found);
                i = next.max(i + 1);
            }
            Tok::Punct('{') => {
                let (found, next) = read_group(toks, i);
                paths.extend(found);
                i = next;
            }
            Tok::Punct('*') => {
                paths.push((vec!["*".to_string()], None));
                i += 1;
            }
            _ => i += 1,
        }
    }
    (paths, end + 1)
}

/// `path` (starting with `crate`, `super` or `self`) written in module `from`, made absolute:
/// the segments below the crate root. None when `super` climbs above the root.
pub(crate) fn absolute(from: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = from.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().map(String::as_str) == Some("super") {
        base.pop()?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module `segments` names: its longest prefix that is a module, through re-exports (a
/// name a module re-exports with `pub use` is the module where the name comes from).
pub(crate) fn resolve(krate: &Crate, segments: &[String]) -> ModPath {
    let mut segments = segments.to_vec();
    let (mut module, mut at) = (ModPath::new(), 0);
    // A bound on re-exports followed (a re-export naming itself would be a compile error).
    let mut hops = 0;
    while at < segments.len() {
        let mut next = module.clone();
        next.push(segments[at].clone());
        if krate.modules.contains(&next) {
            (module, at) = (next, at + 1);
            continue;
        }
        let Some(target) = krate.reexports.get(&(module.clone(), segments[at].clone())) else {
            break;
        };
        hops += 1;
        if hops > 32 {
            break;
        }
        segments = target.iter().chain(&segments[at + 1..]).cloned().collect();
        (module, at) = (ModPath::new(), 0);
    }
    module
}
