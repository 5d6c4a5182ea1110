//! Dependencies between keel's modules run one way: no import circle between sibling modules.
//!
//! Reads every `src/**/*.rs` reached from a crate root (`src/lib.rs`, `src/main.rs`) through its
//! `mod` items (`#[path]` and inline `mod x { … }` included), and resolves each `crate::…`,
//! `super::…` and `self::…` path — in `use` items (groups expanded) and inline in code — to the
//! module it names, through `pub use` re-exports (`super::TaskCgroup`, which `cgroup`
//! re-exports from `cgroup::task`, names `cgroup::task`). Each reference is lifted to the pair
//! of siblings it crosses: one from `daemon::lifecycle` to `fmt` is the edge `daemon → fmt`
//! among the crate's top-level modules; one from `sandbox::shim` to `sandbox::launch::Handed`
//! the edge `shim → launch` among the children of `sandbox`. References between a module and
//! its ancestors are allowed (a child may use its parent and the parent its child). Any circle
//! among siblings fails the test, which names the modules caught in it, one cycle through
//! them and the references behind each edge. Comments and string literals are not code and
//! are skipped; a file under `src/` that no `mod` item reaches fails the test too.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module's path below its crate root: `["cli", "status"]` is `crate::cli::status`.
type ModPath = Vec<String>;

/// Where a reference was written and what it said.
#[derive(Clone, Debug)]
struct Site {
    file: PathBuf,
    line: usize,
    text: String,
}

/// One `crate::`/`super::`/`self::` path: the module it was written in, the absolute segments
/// it spells (before resolution to a module), where.
#[derive(Debug)]
struct Reference {
    from: ModPath,
    segments: Vec<String>,
    site: Site,
}

#[derive(Debug, Default)]
struct Crate {
    modules: BTreeSet<ModPath>,
    files: BTreeSet<PathBuf>,
    references: Vec<Reference>,
    /// `pub use` items: (the module, the name it exports) → the absolute path it names.
    reexports: BTreeMap<(ModPath, String), Vec<String>>,
}

/// One name a `pub use` item exports, as written.
#[derive(Debug)]
struct ReExport {
    module: ModPath,
    name: String,
    /// Absolute (from `crate`/`super`/`self`), or relative to `module` (a child's item, or
    /// another crate's: told apart once every module is known).
    target: Vec<String>,
    relative: bool,
}

// ---------------------------------------------------------------------------------------------
// Tokens: identifiers, string literals, `::` and single punctuation; comments, char literals,
// lifetimes and numbers are dropped.

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    PathSep,
    Punct(char),
}

fn tokenize(text: &str) -> Vec<(Tok, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut toks = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '"' {
            let start_line = line;
            let (value, next) = quoted(&chars, i + 1, &mut line);
            toks.push((Tok::Str(value), start_line));
            i = next;
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            if at(i + 1) == '\\' {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            if raw_prefix && (at(i) == '"' || (at(i) == '#' && matches!(at(i + 1), '#' | '"'))) {
                let start_line = line;
                let mut hashes = 0;
                while at(i) == '#' {
                    hashes += 1;
                    i += 1;
                }
                i += 1; // the opening quote
                let body = i;
                loop {
                    if i >= chars.len() {
                        break;
                    }
                    if chars[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                        break;
                    }
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
                let value: String = chars[body..i.min(chars.len())].iter().collect();
                toks.push((Tok::Str(value), start_line));
                i += 1 + hashes;
            } else if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                let start_line = line;
                let (value, next) = quoted(&chars, i + 1, &mut line);
                toks.push((Tok::Str(value), start_line));
                i = next;
            } else if word == "b" && at(i) == '\'' {
                i += 1;
                if at(i) == '\\' {
                    i += 1;
                }
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if word == "r" && at(i) == '#' {
                // A raw identifier: r#type.
                i += 1;
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                toks.push((Tok::Ident(chars[start..i].iter().collect()), line));
            } else {
                toks.push((Tok::Ident(word), line));
            }
        } else if c == ':' && at(i + 1) == ':' {
            toks.push((Tok::PathSep, line));
            i += 2;
        } else {
            toks.push((Tok::Punct(c), line));
            i += 1;
        }
    }
    toks
}

/// The body of a `"…"` literal starting at `i` (after the quote), and the index past its end.
fn quoted(chars: &[char], mut i: usize, line: &mut usize) -> (String, usize) {
    let mut value = String::new();
    while i < chars.len() && chars[i] != '"' {
        if chars[i] == '\\' {
            i += 1;
        }
        if let Some(&c) = chars.get(i) {
            *line += usize::from(c == '\n');
            value.push(c);
        }
        i += 1;
    }
    (value, i + 1)
}

// ---------------------------------------------------------------------------------------------
// Modules and references.

/// Reads the crate whose root file is `root`, following its `mod` items.
fn read_crate(root: &Path) -> Crate {
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
fn read_module_file(
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

enum ChildFile {
    /// `#[path = "…"]`, relative to the declaring file's directory.
    Path(String),
    /// The default place; the inline modules between the file and the `mod` item.
    Default(Vec<String>),
}

struct Child {
    module: ModPath,
    /// None for an inline `mod x { … }` (scanned as part of its file).
    file: Option<ChildFile>,
}

/// What one file declares and writes.
struct Scanned {
    children: Vec<Child>,
    references: Vec<Reference>,
    reexports: Vec<ReExport>,
}

/// The modules one file declares, the paths it writes and the names it re-exports, for the
/// file that is `module`.
fn scan_file(toks: &[(Tok, usize)], module: &[String], file: &Path) -> Scanned {
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
fn is_pub(toks: &[(Tok, usize)], i: usize) -> bool {
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
fn shown(file: &Path) -> PathBuf {
    file.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(file)
        .to_path_buf()
}

fn is_path_start(word: &str) -> bool {
    matches!(word, "crate" | "super" | "self")
}

/// Index of the token closing the bracket opened at `open`.
fn matching(toks: &[(Tok, usize)], open: usize, left: char, right: char) -> usize {
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
type PathRead = (Vec<String>, Option<String>);

/// The path(s) starting at `i` — more than one for a use group `a::{b, c::{d, self}}` — and
/// the index after it. A group's `self` names the group's prefix; a glob ends in `*`.
fn read_path(toks: &[(Tok, usize)], mut i: usize) -> (Vec<PathRead>, usize) {
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
fn read_alias(toks: &[(Tok, usize)], i: usize) -> (Option<String>, usize) {
    match (toks.get(i), toks.get(i + 1)) {
        (Some((Tok::Ident(word), _)), Some((Tok::Ident(name), _))) if word == "as" => {
            (Some(name.clone()), i + 2)
        }
        _ => (None, i),
    }
}

/// The trees of a use group `{…}` opened at `open`, relative to its prefix, and the index after
/// its closing brace.
fn read_group(toks: &[(Tok, usize)], open: usize) -> (Vec<PathRead>, usize) {
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
fn absolute(from: &[String], path: &[String]) -> Option<Vec<String>> {
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
fn resolve(krate: &Crate, segments: &[String]) -> ModPath {
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

// ---------------------------------------------------------------------------------------------
// Sibling edges and circles.

/// Edges among the children of each parent module: parent → (from child → to child → sites).
type SiblingEdges = BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, Vec<Site>>>>;

fn sibling_edges(krate: &Crate) -> SiblingEdges {
    let mut edges = SiblingEdges::new();
    for reference in &krate.references {
        let target = resolve(krate, &reference.segments);
        let from = &reference.from;
        let common = from.iter().zip(&target).take_while(|(a, b)| a == b).count();
        if common == from.len() || common == target.len() {
            continue; // an ancestor and its descendant (or the module itself)
        }
        edges
            .entry(from[..common].to_vec())
            .or_default()
            .entry(from[common].clone())
            .or_default()
            .entry(target[common].clone())
            .or_default()
            .push(reference.site.clone());
    }
    edges
}

/// The circles of a directed graph: for each strongly connected component of more than one node
/// (Tarjan), one concrete cycle through its smallest node, so that the message can name each
/// edge. Sorted, deterministic.
fn find_cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut nodes: BTreeSet<&String> = graph.keys().collect();
    nodes.extend(graph.values().flatten());
    let mut cycles = Vec::new();
    for component in strongly_connected(graph, &nodes) {
        if component.len() < 2 {
            continue;
        }
        let start = component.iter().min().expect("not empty").clone();
        cycles.push(shortest_cycle(graph, &start, &component));
    }
    cycles.sort();
    cycles
}

fn strongly_connected(
    graph: &BTreeMap<String, BTreeSet<String>>,
    nodes: &BTreeSet<&String>,
) -> Vec<BTreeSet<String>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g String, usize>,
        low: BTreeMap<&'g String, usize>,
        stack: Vec<&'g String>,
        on_stack: BTreeSet<&'g String>,
        components: Vec<BTreeSet<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, node: &'g String) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.graph.get(node).into_iter().flatten() {
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = BTreeSet::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.insert(top.clone());
                    if top == node {
                        break;
                    }
                }
                self.components.push(component);
            }
        }
    }
    let mut tarjan = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for node in nodes {
        if !tarjan.index.contains_key(*node) {
            tarjan.visit(node);
        }
    }
    tarjan.components
}

/// The shortest cycle from `start` back to itself inside `component` (breadth first), as the
/// nodes in order, `start` first.
fn shortest_cycle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    start: &String,
    component: &BTreeSet<String>,
) -> Vec<String> {
    let mut came_from: BTreeMap<&String, &String> = BTreeMap::new();
    let mut frontier = vec![start];
    while !frontier.is_empty() {
        let mut next_frontier = Vec::new();
        for node in frontier {
            for next in graph.get(node).into_iter().flatten() {
                if !component.contains(next) {
                    continue;
                }
                if next == start {
                    let mut cycle = vec![node.clone()];
                    let mut at = node;
                    while at != start {
                        at = came_from[at];
                        cycle.push(at.clone());
                    }
                    cycle.reverse();
                    return cycle;
                }
                if !came_from.contains_key(next) {
                    came_from.insert(next, node);
                    next_frontier.push(next);
                }
            }
        }
        frontier = next_frontier;
    }
    unreachable!("{start} is in a strongly connected component of more than one node")
}

fn module_name(path: &[String]) -> String {
    std::iter::once("crate")
        .chain(path.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("::")
}

/// Every circle among siblings in `krate`, one paragraph each: the modules caught in it, one
/// cycle through them, and every edge among them with the references that make it.
fn circles(krate: &Crate) -> Vec<String> {
    let mut found = Vec::new();
    for (parent, edges) in sibling_edges(krate) {
        let graph: BTreeMap<String, BTreeSet<String>> = edges
            .iter()
            .map(|(from, to)| (from.clone(), to.keys().cloned().collect()))
            .collect();
        let mut nodes: BTreeSet<&String> = graph.keys().collect();
        nodes.extend(graph.values().flatten());
        for component in strongly_connected(&graph, &nodes) {
            if component.len() < 2 {
                continue;
            }
            let start = component.iter().min().expect("not empty");
            let cycle = shortest_cycle(&graph, start, &component);
            let mut text = format!(
                "in {}: {} depend on each other, e.g. {} → {}",
                module_name(&parent),
                component.iter().cloned().collect::<Vec<_>>().join(", "),
                cycle.join(" → "),
                cycle[0]
            );
            for (from, to, sites) in edges
                .iter()
                .flat_map(|(from, to)| to.iter().map(move |(t, s)| (from, t, s)))
            {
                if !component.contains(from) || !component.contains(to) {
                    continue;
                }
                text.push_str(&format!(
                    "\n    {from} → {to}: {} reference(s), e.g.",
                    sites.len()
                ));
                for site in sites.iter().take(3) {
                    text.push_str(&format!(
                        "\n      {}:{}: {}",
                        site.file.display(),
                        site.line,
                        site.text
                    ));
                }
            }
            found.push(text);
        }
    }
    found.sort();
    found
}

fn rust_files(dir: &Path, out: &mut BTreeSet<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.insert(path);
        }
    }
}

#[test]
fn no_import_circle_between_sibling_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut reached = BTreeSet::new();
    let mut problems = Vec::new();
    for root in ["lib.rs", "main.rs"] {
        let krate = read_crate(&src.join(root));
        assert!(
            krate.references.len() > 10 || root == "main.rs",
            "{root}: only {} crate/super/self paths found; is the scanner reading the tree?",
            krate.references.len()
        );
        problems.extend(circles(&krate));
        reached.extend(krate.files);
    }
    let mut all = BTreeSet::new();
    rust_files(&src, &mut all);
    let unreached: Vec<_> = all
        .difference(&reached)
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        unreached.is_empty(),
        "files under src/ no `mod` item reaches (not checked): {unreached:?}"
    );
    assert!(
        problems.is_empty(),
        "import circles between sibling modules (dependencies must run one way; move what both \
         need into a leaf below them, or into the module that owns the concept):\n  {}",
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// The checker's own parts, on made-up input.

fn graph(edges: &[(&str, &str)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in edges {
        g.entry(a.to_string()).or_default().insert(b.to_string());
    }
    g
}

#[test]
fn cycle_finder_names_each_circle_once_and_ignores_chains() {
    let g = graph(&[
        ("a", "b"),
        ("b", "c"),
        ("c", "a"),
        ("c", "d"),
        ("d", "e"),
        ("e", "d"),
        ("e", "f"),
        ("x", "y"),
        ("y", "z"),
        ("x", "z"),
    ]);
    assert_eq!(
        find_cycles(&g),
        vec![
            vec!["a".to_string(), "b".into(), "c".into()],
            vec!["d".to_string(), "e".into()]
        ]
    );
    assert!(find_cycles(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
    assert!(find_cycles(&BTreeMap::new()).is_empty());
}

#[test]
fn cycle_finder_picks_the_shortest_way_back_within_a_component() {
    // a → b → c → d → a and a shortcut c → a: the component is {a, b, c, d}, the cycle from a
    // reported is a → b → c (→ a).
    let g = graph(&[("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("c", "a")]);
    assert_eq!(
        find_cycles(&g),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
}

fn scan(text: &str, module: &[&str]) -> (Vec<String>, Vec<String>, Vec<String>) {
    let module: ModPath = module.iter().map(|s| s.to_string()).collect();
    let scanned = scan_file(&tokenize(text), &module, Path::new("x.rs"));
    (
        scanned
            .children
            .iter()
            .map(|c| c.module.join("::"))
            .collect(),
        scanned
            .references
            .iter()
            .map(|r| format!("{}: {}", r.from.join("::"), r.segments.join("::")))
            .collect(),
        scanned
            .reexports
            .iter()
            .map(|r| {
                let how = if r.relative { "relative" } else { "absolute" };
                format!(
                    "{} as {}: {how} {}",
                    r.module.join("::"),
                    r.name,
                    r.target.join("::")
                )
            })
            .collect(),
    )
}

#[test]
fn scanner_expands_use_groups_and_resolves_super_inside_inline_modules() {
    let text = r##"
        //! crate::in_a_comment::is_not_code
        use crate::fmt::{self, duration, sizes::{bytes as b, Unit}};
        use super::sibling::*;
        pub(in crate::visibility) fn f() -> String {
            let s = "crate::in_a_string"; let r = r#"crate::raw"#; let c = '"';
            crate::inline::path::call(); self::own::g();
            s.to_string()
        }
        /* crate::block /* nested */ comment */
        #[path = "elsewhere.rs"]
        mod moved;
        mod tests {
            use super::*;
            use super::super::up;
        }
        pub use child::{Thing, other::Two as Deux};
        pub(crate) use crate::fmt::duration as dur;
        use super::private::Kept;
        pub use serde::Serialize;
    "##;
    let (children, references, reexports) = scan(text, &["a", "b"]);
    assert_eq!(children, ["a::b::moved", "a::b::tests"]);
    assert_eq!(
        references,
        [
            "a::b: fmt",
            "a::b: fmt::duration",
            "a::b: fmt::sizes::bytes",
            "a::b: fmt::sizes::Unit",
            "a::b: a::sibling::*",
            "a::b: inline::path::call",
            "a::b: a::b::own::g",
            "a::b::tests: a::b::*",
            "a::b::tests: a::up",
            "a::b: fmt::duration",
            "a::b: a::private::Kept",
        ]
    );
    assert_eq!(
        reexports,
        [
            "a::b as Thing: relative child::Thing",
            "a::b as Deux: relative child::other::Two",
            "a::b as dur: absolute fmt::duration",
            "a::b as Serialize: relative serde::Serialize",
        ]
    );
}

#[test]
fn edges_are_lifted_to_siblings_and_parent_child_references_are_allowed() {
    let modules: BTreeSet<ModPath> = [
        vec![],
        vec!["a"],
        vec!["a", "x"],
        vec!["a", "y"],
        vec!["b"],
        vec!["b", "z"],
    ]
    .into_iter()
    .map(|m| m.into_iter().map(String::from).collect())
    .collect();
    let reference = |from: &[&str], to: &[&str]| Reference {
        from: from.iter().map(|s| s.to_string()).collect(),
        segments: to.iter().map(|s| s.to_string()).collect(),
        site: Site {
            file: "x.rs".into(),
            line: 1,
            text: String::new(),
        },
    };
    let krate = Crate {
        modules,
        files: BTreeSet::new(),
        reexports: BTreeMap::new(),
        references: vec![
            reference(&["a", "x"], &["b", "z", "Item"]), // a → b
            reference(&["b", "z"], &["a", "y", "f"]),    // b → a: a circle at the root
            reference(&["a", "x"], &["a", "y"]),         // x → y inside a
            reference(&["a", "y"], &["a", "Type"]),      // child to parent: allowed
            reference(&["a"], &["a", "x", "g"]),         // parent to child: allowed
        ],
    };
    let edges = sibling_edges(&krate);
    let at = |parent: &[&str]| -> Vec<(String, String)> {
        let parent: ModPath = parent.iter().map(|s| s.to_string()).collect();
        edges[&parent]
            .iter()
            .flat_map(|(from, to)| to.keys().map(move |t| (from.clone(), t.clone())))
            .collect()
    };
    assert_eq!(
        at(&[]),
        [("a".into(), "b".into()), ("b".into(), "a".into())]
    );
    assert_eq!(at(&["a"]), [("x".into(), "y".into())]);
    assert_eq!(edges.len(), 2);
    let found = circles(&krate);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("in crate: a, b depend on each other, e.g. a → b → a"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("a → b: 1 reference(s)") && found[0].contains("b → a: 1 reference(s)")
    );
}

#[test]
fn a_name_re_exported_by_a_parent_is_the_module_it_comes_from() {
    // a/mod.rs: `pub use x::Thing;` — y's `super::Thing` is a reference to x, not to a.
    let text = "pub use x::Thing;\npub use serde::Serialize;\nmod x;\nmod y;\n";
    let module: ModPath = vec!["a".to_string()];
    let scanned = scan_file(&tokenize(text), &module, Path::new("a/mod.rs"));
    let mut krate = Crate::default();
    for m in [vec![], vec!["a"], vec!["a", "x"], vec!["a", "y"]] {
        krate
            .modules
            .insert(m.into_iter().map(String::from).collect());
    }
    for r in scanned.reexports {
        let child: ModPath = r.module.iter().chain(r.target.first()).cloned().collect();
        if krate.modules.contains(&child) {
            let target = r.module.iter().chain(&r.target).cloned().collect();
            krate.reexports.insert((r.module, r.name), target);
        }
    }
    assert_eq!(
        krate.reexports.len(),
        1,
        "serde's is not ours: {:?}",
        krate.reexports
    );
    let seg = |p: &[&str]| -> Vec<String> { p.iter().map(|s| s.to_string()).collect() };
    assert_eq!(
        resolve(&krate, &seg(&["a", "Thing", "new"])),
        seg(&["a", "x"])
    );
    assert_eq!(resolve(&krate, &seg(&["a", "Other"])), seg(&["a"]));
    krate.references.push(Reference {
        from: seg(&["a", "y"]),
        segments: seg(&["a", "Thing"]),
        site: Site {
            file: "a/y.rs".into(),
            line: 1,
            text: "super::Thing".into(),
        },
    });
    let edges = sibling_edges(&krate);
    assert!(edges[&seg(&["a"])]["y"].contains_key("x"), "{edges:?}");
}
