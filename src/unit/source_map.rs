//! Positions: ron reports where its cursor was; an operator needs the offending token. A small
//! lexer and a tolerant structural scan of the text map field paths to positions and back.

use super::lexer::{lex, Tok, TokKind};
use super::scanner::{Node, Paths, Scanner};
use super::suggest::{did_you_mean, one_of};
use super::validate::{FieldPath, PathSeg};

const DURATION_HINT: &str = "a duration such as \"90s\", \"5m\" or \"250ms\"";

/// What each field holds, for messages ("expected …"). Keys as [`FieldPath::schema_key`].
pub(super) const SCHEMA: &[(&str, &str)] = &[
    ("", "a unit, Unit(command: [\"program\", \"arg\"], ...)"),
    (
        "command",
        "a list of strings such as [\"claude\", \"-p\", \"...\"]",
    ),
    ("command[]", "a string"),
    (
        "resume_command",
        "None or Some([\"program\", \"arg\", ...])",
    ),
    ("resume_command[]", "a string"),
    ("env", "a map of strings such as {\"RUST_LOG\": \"info\"}"),
    ("env{}", "a string"),
    (
        "secrets",
        "a map such as {\"ANTHROPIC_API_KEY\": Secret(file: \"/etc/keel/secrets/anthropic\", hosts: [\"api.anthropic.com\"])}",
    ),
    (
        "secrets{}",
        "Secret(file: \"/etc/keel/secrets/NAME\", hosts: [\"api.example.com\"]) or Secret(env: \"NAME\", hosts: [...])",
    ),
    (
        "secrets{}.file",
        "an absolute path such as \"/etc/keel/secrets/anthropic\"",
    ),
    (
        "secrets{}.env",
        "the name of a variable of keel's environment, such as \"ANTHROPIC_API_KEY\"",
    ),
    (
        "secrets{}.hosts",
        "a list of host names such as [\"api.anthropic.com\"]",
    ),
    ("secrets{}.hosts[]", "a host name such as \"api.anthropic.com\""),
    ("secrets{}.headers", "a list of header names such as [\"x-api-key\"]"),
    ("secrets{}.headers[]", "a header name such as \"x-api-key\""),
    (
        "repo",
        "None or Some(Repo(path: \"/srv/repos/app\", base: \"main\"))",
    ),
    ("repo.path", "an absolute path such as \"/srv/repos/app\""),
    ("repo.base", "a branch, tag or commit such as \"main\""),
    ("repo.branch", "None or Some(\"branch-name\")"),
    ("restart", "Always, OnFailure or Never"),
    (
        "backoff",
        "Backoff(initial: \"1s\", max: \"5m\", factor: 2.0, reset_after: \"10m\")",
    ),
    ("backoff.initial", DURATION_HINT),
    ("backoff.max", DURATION_HINT),
    ("backoff.factor", "a number such as 2.0"),
    ("backoff.reset_after", DURATION_HINT),
    ("restart_limit", "RestartLimit(count: 5, within: \"1h\")"),
    ("restart_limit.count", "a whole number such as 5"),
    ("restart_limit.within", DURATION_HINT),
    (
        "resources",
        "Resources(cpu: 0.25, memory: \"512M\", pids: 1024, cpu_limit: None, memory_limit: Some(\"4G\"))",
    ),
    ("resources.cpu", "a number of CPU cores such as 0.25 or 2.0"),
    ("resources.memory", "a size such as \"512M\" or \"4G\""),
    ("resources.pids", "a whole number such as 1024"),
    (
        "resources.cpu_limit",
        "None (no cap) or Some(cores) such as Some(4.0)",
    ),
    (
        "resources.memory_limit",
        "None (the default limit) or Some(size) such as Some(\"4G\")",
    ),
    ("priority", "a whole number such as 0, 10 or -5"),
    (
        "after",
        "a list of unit names such as [\"build\", \"lint\"]",
    ),
    ("after[]", "a unit name (a string)"),
    ("preemptible", "true or false"),
    (
        "liveness",
        "Liveness(heartbeat_timeout: \"5m\", progress_timeout: \"30m\", ...)",
    ),
    ("liveness.heartbeat_timeout", DURATION_HINT),
    ("liveness.progress_timeout", DURATION_HINT),
    ("liveness.startup_grace", DURATION_HINT),
    ("liveness.on_stall", "Restart, Kill or Report"),
    (
        "liveness.signals",
        "a list such as [Heartbeat, Output, Cpu]",
    ),
    ("liveness.signals[]", "Heartbeat, Output or Cpu"),
    ("workdir", "an absolute path such as \"/work\""),
    (
        "sandbox",
        "Sandbox(network: Allow([\"api.example.com\"]), user: None, capabilities: [], writable: [], hidden: [])",
    ),
    (
        "sandbox.network",
        "Allow([\"api.example.com\", ...]), None or Host",
    ),
    (
        "sandbox.network[]",
        "an allow-list entry such as \"api.example.com\", \"github.com:22\", \"*.npmjs.org\", \"10.0.0.0/8:5432\", \"host:11434\" or \"@list\"",
    ),
    ("sandbox.user", "None or Some(\"uid:gid\")"),
    (
        "sandbox.capabilities",
        "a list of strings such as [\"CAP_NET_BIND_SERVICE\"]",
    ),
    (
        "sandbox.capabilities[]",
        "a capability name such as \"CAP_NET_BIND_SERVICE\"",
    ),
    (
        "sandbox.writable",
        "a list of absolute paths such as [\"/data\"]",
    ),
    ("sandbox.writable[]", "an absolute path (a string)"),
    (
        "sandbox.hidden",
        "a list of absolute paths such as [\"/home\"]",
    ),
    ("sandbox.hidden[]", "an absolute path (a string)"),
    ("stop", "Stop(signal: \"SIGTERM\", timeout: \"30s\")"),
    ("stop.signal", "a signal name such as \"SIGTERM\""),
    ("stop.timeout", DURATION_HINT),
    ("essential", "true or false"),
    ("max_runtime", "None or Some(\"8h\")"),
    ("max_total_runtime", "None or Some(\"24h\")"),
];

fn schema_hint(path: &FieldPath) -> Option<&'static str> {
    let key = path.schema_key();
    SCHEMA
        .iter()
        .find(|(schema_key, _)| *schema_key == key)
        .map(|(_, hint)| *hint)
}

/// The nested struct a top-level field name belongs to, and how to open it
/// (`factor` → `backoff`, `Backoff(`).
fn nested_home(field: &str) -> Option<(&'static str, &'static str, &'static str)> {
    let (key, _) = SCHEMA
        .iter()
        .find(|(key, _)| key.split_once('.').is_some_and(|(_, name)| name == field))?;
    let (parent, _) = key.split_once('.')?;
    let (open, close) = match parent {
        "backoff" => ("Backoff(", ")"),
        "restart_limit" => ("RestartLimit(", ")"),
        "resources" => ("Resources(", ")"),
        "liveness" => ("Liveness(", ")"),
        "sandbox" => ("Sandbox(", ")"),
        "stop" => ("Stop(", ")"),
        "repo" => ("Some(Repo(", "))"),
        _ => return None,
    };
    Some((parent, open, close))
}

/// 1-based line and column (in characters, as ron counts) of a byte offset.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = 1 + before.bytes().filter(|b| *b == b'\n').count();
    let line_start = before.rfind('\n').map_or(0, |n| n + 1);
    (line, 1 + text[line_start..offset].chars().count())
}

/// The byte offset of a ron position (1-based line and column in characters).
pub(super) fn offset_of(text: &str, position: ron::error::Position) -> usize {
    let mut start = 0;
    for _ in 1..position.line {
        match text[start..].find('\n') {
            Some(n) => start += n + 1,
            None => return text.len(),
        }
    }
    text[start..]
        .char_indices()
        .nth(position.col.saturating_sub(1))
        .map_or(text.len(), |(n, _)| start + n)
}

/// The text of a unit file, tokenized and mapped.
pub(crate) struct SourceMap<'a> {
    text: &'a str,
    /// Every token, comments included, in order.
    all: Vec<Tok>,
    /// The tokens ron parses (no comments), in order.
    toks: Vec<Tok>,
    pub(super) nodes: Vec<Node>,
    pub(super) paths: Paths,
    /// Where each path is written, by path id (see [`SourceMap::find`]).
    written: std::collections::HashMap<usize, usize>,
    /// `(closing bracket, its opening bracket)`, by token start.
    pairs: Vec<(usize, usize)>,
    /// The innermost bracket never closed.
    unclosed: Option<Tok>,
}

impl<'a> SourceMap<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let all = lex(text);
        let toks: Vec<Tok> = all
            .iter()
            .copied()
            .filter(|t| t.kind != TokKind::Comment)
            .collect();
        let mut pairs = Vec::new();
        let mut open: Vec<Tok> = Vec::new();
        for tok in &toks {
            match tok.kind {
                TokKind::Punct('(' | '[' | '{') => open.push(*tok),
                TokKind::Punct(c @ (')' | ']' | '}')) => {
                    let opener = match c {
                        ')' => '(',
                        ']' => '[',
                        _ => '{',
                    };
                    if open
                        .last()
                        .is_some_and(|o| o.kind == TokKind::Punct(opener))
                    {
                        let o = open.pop().expect("checked");
                        pairs.push((tok.start, o.start));
                    }
                }
                _ => {}
            }
        }
        let mut scanner = Scanner {
            text,
            toks: &toks,
            i: 0,
            nodes: Vec::new(),
            paths: Paths::default(),
        };
        // `#![enable(...)]` attributes come before the value.
        while scanner.at('#') {
            scanner.i += 1;
            if scanner.at('!') {
                scanner.i += 1;
            }
            if scanner.at('[') {
                scanner.skip();
            }
        }
        scanner.value(Paths::ROOT, None, 0);
        let Scanner { nodes, paths, .. } = scanner;
        // The smallest value written for each path (`"x"` rather than `Some("x")`); a map
        // entry is found by its key.
        let mut best: std::collections::HashMap<usize, &Node> = std::collections::HashMap::new();
        for node in &nodes {
            let better = |old: &&Node| {
                (node.end - node.start, std::cmp::Reverse(node.start))
                    < (old.end - old.start, std::cmp::Reverse(old.start))
            };
            if best.get(&node.path).is_none_or(better) {
                best.insert(node.path, node);
            }
        }
        let written = best
            .into_iter()
            .map(|(path, node)| {
                let offset = match paths.last(path) {
                    Some(PathSeg::Key(_)) => node.key.unwrap_or(node.start),
                    _ => node.start,
                };
                (path, offset)
            })
            .collect();
        SourceMap {
            text,
            all,
            toks,
            nodes,
            paths,
            written,
            pairs,
            unclosed: open.last().copied(),
        }
    }

    /// The first parsed token at or after `offset` (the one containing it, if any).
    fn token_from(&self, offset: usize) -> Option<(usize, Tok)> {
        self.toks
            .iter()
            .copied()
            .enumerate()
            .find(|(_, t)| t.end > offset)
    }

    /// Where the value at `path` is written (its key for a map entry), if it is.
    pub(super) fn find(&self, path: &FieldPath) -> Option<usize> {
        self.written.get(&self.paths.id_of(path)?).copied()
    }

    /// Where the value at `path` is, falling back to the nearest enclosing value written in the
    /// file (a default is not written), then to the start of the unit.
    pub(crate) fn locate(&self, path: &FieldPath) -> usize {
        let mut path = path.clone();
        loop {
            if let Some(offset) = self.find(&path) {
                return offset;
            }
            if path.0.pop().is_none() {
                return self.toks.first().map_or(0, |t| t.start);
            }
        }
    }

    /// The smallest value whose text contains `offset`.
    fn innermost(&self, offset: usize) -> Option<&Node> {
        self.nodes
            .iter()
            .filter(|n| {
                n.start <= offset && (offset < n.end || (n.start == n.end && n.start == offset))
            })
            .min_by_key(|n| {
                (
                    n.end - n.start,
                    std::cmp::Reverse(self.paths.path(n.path).0.len()),
                )
            })
    }

    /// The largest value starting exactly at `offset`.
    fn value_at(&self, offset: usize) -> Option<&Node> {
        self.nodes
            .iter()
            .filter(|n| n.start == offset && n.end > n.start)
            .max_by_key(|n| n.end)
    }

    /// A token for a message: punctuation quoted, anything else as written.
    fn token_text(&self, tok: Tok) -> String {
        match tok.kind {
            TokKind::Punct(c) => format!("\"{c}\""),
            _ => self.snippet(tok.start, tok.end),
        }
    }

    /// Source text for a message: whitespace collapsed, cut at 40 characters.
    fn snippet(&self, start: usize, end: usize) -> String {
        let flat = self.text[start..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if flat.chars().count() > 40 {
            format!("{}…", flat.chars().take(39).collect::<String>())
        } else {
            flat
        }
    }

    /// Map keys given twice (ron keeps the last silently): `(offset, message)`.
    pub(super) fn duplicate_keys(&self) -> Vec<(usize, String)> {
        let mut entries: Vec<(usize, usize)> = self
            .nodes
            .iter()
            .filter(|n| matches!(self.paths.last(n.path), Some(PathSeg::Key(_))))
            .filter_map(|n| Some((n.key?, n.path)))
            .collect();
        entries.sort_unstable();
        let mut seen = std::collections::HashSet::new();
        let mut found = Vec::new();
        for (key, path) in entries {
            if !seen.insert(path) {
                found.push((
                    key,
                    format!(
                        "{}: this key is given twice: remove one (only the last would count)",
                        self.paths.path(path)
                    ),
                ));
            }
        }
        found
    }

    /// Turns a ron error into `(offset of the offending token, message for the operator)`.
    pub(crate) fn explain(&self, error: &ron::error::SpannedError) -> (usize, String) {
        use ron::error::Error as E;
        let code = &error.code;
        let span_start = offset_of(self.text, error.span.start);
        let span_end = offset_of(self.text, error.span.end).max(span_start);

        if let E::UnclosedBlockComment = code {
            let comment = self
                .all
                .iter()
                .rev()
                .find(|t| t.kind == TokKind::Comment && t.start <= span_start);
            return (
                comment.map_or(span_start, |t| t.start),
                "this comment is never closed: add \"*/\" (block comments nest: every \"/*\" needs its own \"*/\")"
                    .to_string(),
            );
        }
        if self.toks.is_empty() {
            return (
                0,
                "the file holds no unit: write at least Unit(command: [\"program\", \"arg\"])"
                    .to_string(),
            );
        }

        // ron's span is the last thing its cursor moved over: whitespace before the offending
        // token, the token itself, or (for "expected , or )" and the like) the token before it.
        let about_what_follows = matches!(
            code,
            E::ExpectedComma
                | E::ExpectedMapColon
                | E::ExpectedArrayEnd
                | E::ExpectedMapEnd
                | E::ExpectedStructLikeEnd
                | E::ExpectedOptionEnd
                | E::Eof
                | E::TrailingCharacters
        );
        let mut offset = span_start;
        let mut target = self.token_from(offset);
        if about_what_follows && span_start < span_end {
            if let Some((_, tok)) = target {
                if tok.end <= span_end {
                    offset = span_end;
                    target = self.token_from(offset);
                }
            }
        }
        let Some((index, tok)) = target else {
            return self.unexpected_end();
        };
        let found = self.token_text(tok);

        match code {
            E::Message(message) => match self.innermost(tok.start) {
                Some(node) => (node.start, with_path(&self.paths.path(node.path), message)),
                None => (tok.start, message.clone()),
            },
            E::NoSuchStructField {
                expected,
                found: field,
                outer,
            } => {
                let mut message = format!("unknown field {field:?}");
                if let Some(outer) = outer {
                    message += &format!(" in {outer}");
                }
                if let Some(suggestion) = did_you_mean(field, expected) {
                    message += &format!(" (did you mean {suggestion:?}?)");
                } else if outer.as_deref() == Some("Unit") {
                    if let Some((parent, open, close)) = nested_home(field) {
                        message += &format!(
                            " ({field:?} belongs inside {parent}: write {parent}: {open}{field}: ...{close})"
                        );
                    }
                }
                message += &format!("; valid fields are {}", expected.join(", "));
                (tok.start, message)
            }
            E::DuplicateStructField { field, outer } => (
                tok.start,
                format!(
                    "field {field:?} is given twice{}: remove one",
                    outer.as_ref().map(|o| format!(" in {o}")).unwrap_or_default()
                ),
            ),
            E::MissingStructField { field, outer } => {
                let mut at = tok.start;
                if tok.kind == TokKind::Punct(')') {
                    if let Some(&(_, open)) = self.pairs.iter().find(|(close, _)| *close == tok.start)
                    {
                        at = open;
                        let before = self.toks.iter().rev().find(|t| t.end <= open);
                        if let Some(name) = before.filter(|t| t.kind == TokKind::Ident) {
                            at = name.start;
                        }
                    }
                }
                let message = if *field == "command" && outer.as_deref() == Some("Unit") {
                    "missing field \"command\": a unit must say what to run, e.g. command: [\"claude\", \"-p\", \"Fix the flaky test\"]".to_string()
                } else {
                    let within = outer.as_ref().map(|o| format!(" in {o}")).unwrap_or_default();
                    let hint = self
                        .innermost(at)
                        .and_then(|node| schema_hint(&self.paths.path(node.path).field(field)))
                        .map(|hint| format!(": add {field} ({hint})"))
                        .unwrap_or_default();
                    format!("missing field {field:?}{within}{hint}")
                };
                (at, message)
            }
            E::NoSuchEnumVariant {
                expected,
                found: variant,
                ..
            } => {
                let mut message = format!("unknown value {variant}");
                if let Some(suggestion) = did_you_mean(variant, expected) {
                    message += &format!(" (did you mean {suggestion}?)");
                }
                message += &format!(": use {}", one_of(expected));
                match self.value_at(tok.start) {
                    Some(node) => (tok.start, with_path(&self.paths.path(node.path), &message)),
                    None => (tok.start, message),
                }
            }
            E::ExpectedDifferentStructName { expected, found } => {
                let is_call = self.toks.get(index + 1).map(|t| t.kind) == Some(TokKind::Punct('('));
                let message = if is_call {
                    format!("expected {expected}(...) here, found {found}(...)")
                } else {
                    format!("expected {expected}(...) here, found {found}: the fields go inside {expected}( ... )")
                };
                match self.value_at(tok.start) {
                    Some(node) => (tok.start, with_path(&self.paths.path(node.path), &message)),
                    None => (tok.start, message),
                }
            }
            E::ExpectedStringEnd => (
                tok.start,
                "this string is never closed: add the closing '\"'".to_string(),
            ),
            E::TrailingCharacters => (
                tok.start,
                format!("unexpected {found} after the end of the unit: a unit file holds exactly one Unit(...)"),
            ),
            E::ExpectedComma if tok.start < offset => self.type_error(code, tok.start, &found),
            E::ExpectedComma
                if matches!(tok.kind, TokKind::Punct('(' | '[' | '{'))
                    && index > 0
                    && self.toks[index - 1].end == tok.start
                    && self.toks[index - 1].kind == TokKind::Ident =>
            {
                let previous = self.toks[index - 1];
                self.type_error(code, previous.start, &self.token_text(previous))
            }
            E::ExpectedComma => (tok.start, format!("expected \",\" before {found}")),
            E::ExpectedMapColon => (tok.start, format!("expected \":\" before {found}")),
            E::ExpectedArrayEnd => (tok.start, format!("expected \",\" or \"]\" before {found}")),
            E::ExpectedMapEnd => (tok.start, format!("expected \",\" or \"}}\" before {found}")),
            E::ExpectedStructLikeEnd | E::ExpectedOptionEnd => {
                (tok.start, format!("expected \",\" or \")\" before {found}"))
            }
            E::Eof => self.unexpected_end(),
            E::UnexpectedChar(c) => (tok.start, format!("unexpected character {c:?}")),
            E::ExpectedArray
            | E::ExpectedBoolean
            | E::ExpectedChar
            | E::ExpectedFloat
            | E::ExpectedInteger
            | E::ExpectedOption
            | E::ExpectedMap
            | E::ExpectedStructLike
            | E::ExpectedNamedStructLike(_)
            | E::ExpectedUnit
            | E::ExpectedString
            | E::ExpectedByteString
            | E::ExpectedIdentifier
            | E::ExpectedStructName(_)
            | E::InvalidValueForType { .. }
            | E::ExpectedDifferentLength { .. }
            | E::IntegerOutOfBounds
            | E::InvalidIntegerDigit { .. }
            | E::FloatUnderscore
            | E::UnderscoreAtBeginning => self.type_error(code, tok.start, &found),
            other => (tok.start, format!("{}, found {found}", lowercase_first(&other.to_string()))),
        }
    }

    /// A value of the wrong type (or out of range) starting at `at`.
    fn type_error(&self, code: &ron::error::Error, at: usize, token: &str) -> (usize, String) {
        use ron::error::Error as E;
        let Some(node) = self.value_at(at) else {
            if let Some(entry) = self.nodes.iter().find(|n| {
                n.key == Some(at) && matches!(self.paths.last(n.path), Some(PathSeg::Key(_)))
            }) {
                let mut map = self.paths.path(entry.path);
                map.0.pop();
                let message = format!("map keys are strings: write \"{token}\", not {token}");
                return (at, with_path(&map, &message));
            }
            if let Some(empty) = self.nodes.iter().find(|n| n.start == at && n.end == at) {
                let path = self.paths.path(empty.path);
                if let Some(hint) = schema_hint(&path) {
                    let message = format!("expected {hint}, found {token}");
                    return (at, with_path(&path, &message));
                }
            }
            let expected = match code {
                E::ExpectedIdentifier => "expected a field name".to_string(),
                _ => lowercase_first(&code.to_string()),
            };
            return (at, format!("{expected}, found {token}"));
        };
        let found = self.snippet(node.start, node.end);
        let path = self.paths.path(node.path);
        let expected = schema_hint(&path).map_or_else(
            || lowercase_first(&code.to_string()).replacen("expected ", "", 1),
            str::to_string,
        );
        let message = match code {
            E::IntegerOutOfBounds => format!("{found} is out of range: expected {expected}"),
            E::ExpectedOption => format!(
                "expected {expected}, found {found}: an optional value is written Some(...) or None, here Some({found})"
            ),
            E::ExpectedIdentifier if found.starts_with('"') => {
                format!("expected {expected}, found {found}: write the name without quotes")
            }
            _ => format!("expected {expected}, found {found}"),
        };
        (node.start, with_path(&path, &message))
    }

    /// The text ends inside a bracket (or is otherwise cut short).
    fn unexpected_end(&self) -> (usize, String) {
        match self.unclosed {
            Some(open) => {
                let (c, close) = match open.kind {
                    TokKind::Punct('[') => ('[', ']'),
                    TokKind::Punct('{') => ('{', '}'),
                    _ => ('(', ')'),
                };
                (
                    open.start,
                    format!("this \"{c}\" is never closed: the file ends before its \"{close}\""),
                )
            }
            None => (
                self.toks.last().map_or(0, |t| t.end),
                "the file ends too early".to_string(),
            ),
        }
    }
}

fn with_path(path: &FieldPath, message: &str) -> String {
    if path.is_root() {
        message.to_string()
    } else {
        format!("{path}: {message}")
    }
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}
