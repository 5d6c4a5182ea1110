//! `keel diff UNIT [--stat] [--no-mark]`: what a task changed against its base — the commits
//! of its branch (a `git log --stat`-like summary, then their patch) and what is still
//! uncommitted in its checkout (staged, unstaged, untracked). The git work runs here, in the
//! CLI's process ([`crate::checkout::review`]): the checkout's git directory guarded first, an
//! overlay's merged view mounted for the moment in a private mount namespace (the task must
//! be stopped for its files to be shown).
//!
//! Everything a task wrote (file names, contents, commit messages) is shown with its control
//! and invisible characters escaped (`crate::fmt::printable`), on a terminal or not: a file
//! cannot retitle the terminal or hide a line. Colour only on a terminal (or `--color`).
//!
//! Shown whole (not `--stat`) and not running, the work is marked reviewed: the daemon records
//! its fingerprint, and `keel status` stops calling the task `unreviewed` until it changes.

use super::format::{paint, use_colour, Tone};
use super::{request, CliError, CliResult};
use crate::checkout::{Patch, Review, Uncommitted};
use crate::fmt::printable_keeping;
use crate::protocol::{Request, Response};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

pub struct Options<'a> {
    pub stat: bool,
    /// `auto`, `always` or `never`.
    pub colour: &'a str,
    /// Mark what was shown as reviewed (not with `--stat`).
    pub mark: bool,
}

pub fn run(state_dir: &Path, unit: &str, options: &Options) -> CliResult {
    let dirs = super::known_task(state_dir, unit)?;
    let review = crate::checkout::review(&dirs, unit).map_err(|e| CliError(e.to_string()))?;
    let stdout = std::io::stdout();
    let colour = use_colour(
        options.colour,
        stdout.is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let text = render(unit, &review, options.stat, colour);
    let mut out = stdout.lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .is_err()
    {
        return Ok(()); // the pager went away: nothing was reviewed
    }
    drop(out);
    if options.mark && !options.stat && review.uncommitted != Uncommitted::Running {
        let mark = Request::MarkReviewed {
            unit: unit.to_string(),
            fingerprint: review.fingerprint.clone(),
            head: review.head.clone(),
        };
        match request(state_dir, &mark, Some(Duration::from_secs(30))) {
            Ok(Response::Ok { .. }) => {}
            Ok(Response::Error { message }) => eprintln!(
                "keel: not marked reviewed: {}",
                crate::fmt::printable(&message)
            ),
            Ok(_) => {}
            Err(e) => eprintln!("keel: not marked reviewed: {}", crate::fmt::printable(&e.0)),
        }
    }
    Ok(())
}

/// A line someone else wrote, escaped but for tabs.
fn shown(text: &str) -> String {
    printable_keeping(text.strip_suffix('\n').unwrap_or(text), &['\t']).into_owned()
}

/// The whole review as text. Pure.
pub fn render(unit: &str, review: &Review, stat: bool, colour: bool) -> String {
    let mut out = String::new();
    let n = review.commit_count;
    out.push_str(&paint(
        &format!(
            "{}: branch {}, {n} commit{} past its base {} ({})",
            shown(unit),
            shown(&review.branch),
            if n == 1 { "" } else { "s" },
            shown(&review.base),
            &review.base_commit[..review.base_commit.len().min(12)],
        ),
        Tone::Quiet,
        colour,
    ));
    out.push('\n');
    for commit in &review.commits {
        out.push('\n');
        out.push_str(&paint(&format!("commit {}", commit.id), Tone::Warn, colour));
        out.push('\n');
        out.push_str(&format!("Author: {}\n", shown(&commit.author)));
        out.push_str(&format!("Date:   {}\n\n", date(commit.time)));
        out.push_str(&format!("    {}\n\n", shown(&commit.summary)));
        for line in commit.stat.lines() {
            out.push_str(&format!("{}\n", shown(line)));
        }
    }
    if n > review.commits.len() {
        out.push_str(&format!(
            "\n(and {} older commits, not listed)\n",
            n - review.commits.len()
        ));
    }
    if !stat && review.committed.files > 0 {
        out.push('\n');
        patch(&mut out, &review.committed, colour);
    }
    out.push('\n');
    match &review.uncommitted {
        Uncommitted::Running => out.push_str(
            "uncommitted: not shown while the task runs (its files are mounted in its \
             sandbox only): `keel stop` it first\n",
        ),
        Uncommitted::Unreadable { named, count } => out.push_str(&format!(
            "uncommitted: not shown: {count} file{} keel will not open ({})\n",
            if *count == 1 { "" } else { "s" },
            shown(&named.join(", "))
        )),
        Uncommitted::Shown { staged, unstaged } => {
            if staged.files + unstaged.files == 0 {
                out.push_str("uncommitted: nothing\n");
            }
            for (what, part) in [
                ("staged", staged),
                ("not staged (untracked files included)", unstaged),
            ] {
                if part.files == 0 {
                    continue;
                }
                let title = format!(
                    "uncommitted, {what}: {} file{}",
                    part.files,
                    if part.files == 1 { "" } else { "s" }
                );
                out.push_str(&paint(&title, Tone::Warn, colour));
                out.push('\n');
                for line in part.stat.lines() {
                    out.push_str(&format!("{}\n", shown(line)));
                }
                if !stat {
                    out.push('\n');
                    patch(&mut out, part, colour);
                }
            }
        }
    }
    out
}

fn patch(out: &mut String, patch: &Patch, colour: bool) {
    for (origin, text) in &patch.lines {
        let tone = match origin {
            '+' => Some(Tone::Good),
            '-' => Some(Tone::Bad),
            'H' => Some(Tone::Quiet),
            _ => None,
        };
        let prefix = match origin {
            '+' | '-' | ' ' => origin.to_string(),
            _ => String::new(),
        };
        for line in text.split_inclusive('\n') {
            let line = format!("{prefix}{}", shown(line));
            match tone {
                Some(tone) => out.push_str(&paint(&line, tone, colour)),
                None => out.push_str(&line),
            }
            out.push('\n');
        }
    }
}

/// Unix seconds as RFC 3339 UTC, to the second.
fn date(seconds: i64) -> String {
    let text = crate::state::rfc3339(u64::try_from(seconds).unwrap_or(0) * 1000);
    text.replace(".000Z", "Z")
}

#[cfg(test)]
mod tests;
