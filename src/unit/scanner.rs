//! A tolerant structural scan of the tokens: every value written in the text, with its field
//! path and position.

use super::lexer::{decode_string, Tok, TokKind};
use super::validate::{FieldPath, PathSeg};

/// A value found in the text: where its field name (or map key) and its value are.
#[derive(Debug, Clone)]
pub(super) struct Node {
    /// Its field path, as an id in [`Paths`].
    pub(super) path: usize,
    pub(super) key: Option<usize>,
    pub(super) start: usize,
    pub(super) end: usize,
}

/// Field paths, interned: each is its parent's id and one more step, so that memory stays
/// linear in the size of the text however deep the values nest. Id 0 is the unit itself.
#[derive(Default)]
pub(super) struct Paths {
    steps: Vec<(usize, PathSeg)>,
    ids: std::collections::HashMap<(usize, PathSeg), usize>,
}

impl Paths {
    pub(super) const ROOT: usize = 0;

    fn child(&mut self, parent: usize, seg: PathSeg) -> usize {
        let next = self.steps.len() + 1;
        let id = *self.ids.entry((parent, seg.clone())).or_insert(next);
        if id == next {
            self.steps.push((parent, seg));
        }
        id
    }

    pub(super) fn id_of(&self, path: &FieldPath) -> Option<usize> {
        path.0.iter().try_fold(Self::ROOT, |parent, seg| {
            self.ids.get(&(parent, seg.clone())).copied()
        })
    }

    pub(super) fn path(&self, mut id: usize) -> FieldPath {
        let mut segs = Vec::new();
        while id != Self::ROOT {
            let (parent, seg) = &self.steps[id - 1];
            segs.push(seg.clone());
            id = *parent;
        }
        segs.reverse();
        FieldPath(segs)
    }

    pub(super) fn last(&self, id: usize) -> Option<&PathSeg> {
        id.checked_sub(1).map(|i| &self.steps[i].1)
    }
}

/// Deeper than any unit goes; the scan skips what lies below.
const MAX_SCAN_DEPTH: usize = 32;

/// Walks the tokens as ron would, recording a [`Node`] for every value; never fails.
pub(super) struct Scanner<'a> {
    pub(super) text: &'a str,
    pub(super) toks: &'a [Tok],
    pub(super) i: usize,
    pub(super) nodes: Vec<Node>,
    pub(super) paths: Paths,
}

impl Scanner<'_> {
    fn kind(&self, ahead: usize) -> Option<TokKind> {
        self.toks.get(self.i + ahead).map(|t| t.kind)
    }

    pub(super) fn at(&self, c: char) -> bool {
        self.kind(0) == Some(TokKind::Punct(c))
    }

    fn text_of(&self, tok: Tok) -> &str {
        &self.text[tok.start..tok.end]
    }

    /// Skips one token, or a whole bracketed group.
    pub(super) fn skip(&mut self) {
        let mut depth = 0usize;
        while let Some(kind) = self.kind(0) {
            self.i += 1;
            match kind {
                TokKind::Punct('(' | '[' | '{') => depth += 1,
                TokKind::Punct(')' | ']' | '}') => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth == 0 {
                break;
            }
        }
    }

    pub(super) fn value(&mut self, path: usize, key: Option<usize>, depth: usize) {
        let first = self.i;
        let start = self.toks.get(self.i).map_or(self.text.len(), |t| t.start);
        if depth > MAX_SCAN_DEPTH {
            self.skip();
        } else {
            match self.kind(0) {
                Some(TokKind::Punct('(')) => self.group(path, depth),
                Some(TokKind::Punct('[')) => self.list(path, depth),
                Some(TokKind::Punct('{')) => self.map(path, depth),
                Some(TokKind::Ident) => {
                    self.i += 1;
                    if self.at('(') {
                        self.group(path, depth);
                    }
                }
                Some(TokKind::Punct(',' | ')' | ']' | '}' | ':')) | None => {}
                Some(_) => self.i += 1,
            }
        }
        let end = if self.i > first {
            self.toks[self.i - 1].end
        } else {
            start
        };
        self.nodes.push(Node {
            path,
            key,
            start,
            end,
        });
    }

    /// Runs `element` for each comma-separated element up to `close`, making progress always.
    fn elements(&mut self, close: char, mut element: impl FnMut(&mut Self, usize)) {
        self.i += 1;
        let mut index = 0;
        while let Some(kind) = self.kind(0) {
            if kind == TokKind::Punct(close) {
                self.i += 1;
                return;
            }
            let before = self.i;
            element(self, index);
            index += 1;
            if self.at(',') {
                self.i += 1;
            } else if self.i == before {
                self.skip();
            }
        }
    }

    fn group(&mut self, path: usize, depth: usize) {
        let is_struct =
            self.kind(1) == Some(TokKind::Ident) && self.kind(2) == Some(TokKind::Punct(':'));
        self.elements(')', |scan, _| {
            if !is_struct {
                scan.value(path, None, depth + 1);
            } else if scan.kind(0) == Some(TokKind::Ident)
                && scan.kind(1) == Some(TokKind::Punct(':'))
            {
                let name_tok = scan.toks[scan.i];
                let name = scan.text_of(name_tok).trim_start_matches("r#").to_string();
                scan.i += 2;
                let field = scan.paths.child(path, PathSeg::Field(name));
                scan.value(field, Some(name_tok.start), depth + 1);
            } else {
                scan.skip();
            }
        });
    }

    fn list(&mut self, path: usize, depth: usize) {
        self.elements(']', |scan, index| {
            let element = scan.paths.child(path, PathSeg::Index(index));
            scan.value(element, None, depth + 1)
        });
    }

    fn map(&mut self, path: usize, depth: usize) {
        self.elements('}', |scan, _| {
            let Some(key_tok) = scan.toks.get(scan.i).copied() else {
                return;
            };
            if matches!(key_tok.kind, TokKind::Punct(_)) {
                scan.skip();
                return;
            }
            let text = scan.text_of(key_tok);
            let key = decode_string(text).unwrap_or_else(|| text.to_string());
            scan.i += 1;
            if scan.at(':') {
                scan.i += 1;
            }
            let entry = scan.paths.child(path, PathSeg::Key(key));
            scan.value(entry, Some(key_tok.start), depth + 1);
        });
    }
}
