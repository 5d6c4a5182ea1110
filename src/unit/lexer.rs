//! A small lexer for RON text, tolerant of anything: it never fails, so that positions can be
//! found even in a damaged file.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TokKind {
    Ident,
    Str,
    Char,
    Num,
    Punct(char),
    Comment,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Tok {
    pub(super) kind: TokKind,
    pub(super) start: usize,
    pub(super) end: usize,
}

fn is_ron_whitespace(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t'
            | '\n'
            | '\r'
            | '\x0B'
            | '\x0C'
            | '\u{85}'
            | '\u{200E}'
            | '\u{200F}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// Tokens of RON text, tolerant of anything: an unterminated string or comment runs to the end.
pub(super) fn lex(text: &str) -> Vec<Tok> {
    let mut toks = Vec::new();
    let mut i = 0;
    while let Some(c) = text[i..].chars().next() {
        let start = i;
        let rest = &text[i..];
        let next = rest[c.len_utf8()..].chars().next();
        let kind = if is_ron_whitespace(c) {
            i += c.len_utf8();
            continue;
        } else if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
            TokKind::Comment
        } else if rest.starts_with("/*") {
            i += block_comment_len(rest);
            TokKind::Comment
        } else if let Some(len) = raw_string_len(rest) {
            i += len;
            TokKind::Str
        } else if c == '"' {
            i += quoted_len(rest, '"');
            TokKind::Str
        } else if c == 'b' && next == Some('"') {
            i += 1 + quoted_len(&rest[1..], '"');
            TokKind::Str
        } else if c == '\'' || (c == 'b' && next == Some('\'')) {
            // A char literal is short ('a', '\n', '\u{1F600}'): look no further than that, so
            // that stray quotes cannot make the scan quadratic.
            let skip = usize::from(c == 'b');
            let mut window = (skip + 16).min(rest.len());
            while !rest.is_char_boundary(window) {
                window -= 1;
            }
            let len = quoted_len(&rest[skip..window], '\'');
            if rest[skip..skip + len].ends_with('\'') && len > 2 {
                i += skip + len;
                TokKind::Char
            } else {
                i += c.len_utf8();
                TokKind::Punct(c)
            }
        } else if c.is_ascii_digit()
            || (matches!(c, '+' | '-' | '.')
                && next.is_some_and(|n| n.is_ascii_digit() || n == '.' || n.is_alphabetic()))
        {
            i += c.len_utf8();
            let mut prev = c;
            while let Some(n) = text[i..].chars().next() {
                let exponent_sign = matches!(n, '+' | '-') && matches!(prev, 'e' | 'E');
                if !(n.is_alphanumeric() || n == '_' || n == '.' || exponent_sign) {
                    break;
                }
                i += n.len_utf8();
                prev = n;
            }
            TokKind::Num
        } else if c == '_' || c.is_alphabetic() {
            i += c.len_utf8();
            if c == 'r' && next == Some('#') {
                i += 1;
            }
            while let Some(n) = text[i..].chars().next() {
                if !(n.is_alphanumeric() || n == '_') {
                    break;
                }
                i += n.len_utf8();
            }
            TokKind::Ident
        } else {
            i += c.len_utf8();
            TokKind::Punct(c)
        };
        toks.push(Tok {
            kind,
            start,
            end: i,
        });
    }
    toks
}

/// Length of a (nested) block comment at the start of `text`.
fn block_comment_len(text: &str) -> usize {
    let mut depth = 0;
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with("/*") {
            depth += 1;
            i += 2;
        } else if text[i..].starts_with("*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += text[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    text.len()
}

/// Length of a quoted literal at the start of `text` (opening quote included), honouring
/// backslash escapes; to the end of `text` when unterminated.
fn quoted_len(text: &str, quote: char) -> usize {
    let mut chars = text.char_indices().skip(1);
    while let Some((n, c)) = chars.next() {
        if c == '\\' {
            chars.next();
        } else if c == quote {
            return n + c.len_utf8();
        }
    }
    text.len()
}

/// Length of a raw string (`r"…"`, `r#"…"#`, `br"…"`) at the start of `text`, if there is one.
fn raw_string_len(text: &str) -> Option<usize> {
    let after_b = text.strip_prefix('b').unwrap_or(text);
    let after_r = after_b.strip_prefix('r')?;
    let hashes = after_r.len() - after_r.trim_start_matches('#').len();
    let body = after_r[hashes..].strip_prefix('"')?;
    let prefix = text.len() - body.len();
    let closing = format!("\"{}", "#".repeat(hashes));
    Some(match body.find(&closing) {
        Some(n) => prefix + n + closing.len(),
        None => text.len(),
    })
}

/// The value of a string token (for map keys), or `None` when it cannot be decoded simply.
pub(super) fn decode_string(token: &str) -> Option<String> {
    if let Some(body) = token
        .strip_prefix('r')
        .map(|t| t.trim_matches('#'))
        .and_then(|t| t.strip_prefix('"'))
        .and_then(|t| t.strip_suffix('"'))
    {
        return Some(body.to_string());
    }
    let body = token.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            '0' => out.push('\0'),
            'u' => {
                let hex: String = chars.by_ref().take_while(|c| *c != '}').collect();
                let code = u32::from_str_radix(hex.trim_start_matches('{'), 16).ok()?;
                out.push(char::from_u32(code)?);
            }
            other => out.push(other),
        }
    }
    Some(out)
}
