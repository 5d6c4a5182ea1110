//! A task's git directory, made safe for keel to read on the host before libgit2 opens it:
//! the agent writes in it at will (it is bound read-write in the sandbox).

use std::fs;
use std::path::Path;

use super::error::{io_err, CheckoutError};

/// Make a task's git directory safe for keel to read on the host: the agent writes in it at
/// will (it is bound read-write in the sandbox). A `commondir` or changed alternates would
/// point libgit2 at another repository's refs or objects (another task's, say) and bring
/// them home at the next harvest: they are put back as keel made them. A symlinked
/// directory on the way (which would make that repair write elsewhere, as root) is refused.
///
/// Before anything of it is opened by libgit2 (as root, on the host): every entry is walked
/// without following anything, and a symlink (libgit2 follows them in loose refs and object
/// directories: another task's refs or objects brought home), a FIFO (opening it blocks the
/// daemon's thread forever), a socket or a device is refused, naming it. So are history
/// rewrites libgit2 honours — `info/grafts`, and a `shallow` other than main's own (copied
/// at creation) — and configuration includes (a file anywhere, a FIFO included).
pub(crate) fn guard_git_dir(git: &Path, common_dir: &Path) -> Result<(), CheckoutError> {
    refuse_special_files(git)?;
    refuse_rewritten_history(git, common_dir)?;
    for name in ["config", "config.worktree"] {
        refuse_config_includes(&git.join(name))?;
    }
    for rel in ["objects", "objects/info", "refs"] {
        let path = git.join(rel);
        let is_dir = fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        if !is_dir {
            return Err(CheckoutError::Tampered {
                path,
                what: "not a directory (a symlink?)".into(),
            });
        }
    }
    for name in ["commondir", "gitdir"] {
        let path = git.join(name);
        if fs::symlink_metadata(&path).is_ok() {
            log::warn!("{}: not keel's, removed", path.display());
            fs::remove_file(&path).map_err(io_err("removing", &path))?;
        }
    }
    let alternates = git.join("objects/info/alternates");
    let wanted = format!("{}\n", common_dir.join("objects").display());
    let plain = fs::symlink_metadata(&alternates).is_ok_and(|m| m.is_file());
    if !plain || fs::read_to_string(&alternates).ok().as_deref() != Some(wanted.as_str()) {
        log::warn!("{}: changed, put back", alternates.display());
        let _ = fs::remove_file(&alternates);
        fs::write(&alternates, wanted).map_err(io_err("writing", &alternates))?;
    }
    Ok(())
}

/// Walk `git` without following anything: only directories and regular files may be in it.
pub(crate) fn refuse_special_files(git: &Path) -> Result<(), CheckoutError> {
    let tampered = |path: &Path, what: &str| CheckoutError::Tampered {
        path: path.to_path_buf(),
        what: what.to_string(),
    };
    let meta = fs::symlink_metadata(git).map_err(io_err("reading the git directory", git))?;
    if !meta.is_dir() {
        return Err(tampered(
            git,
            "the git directory is not a directory (a symlink?)",
        ));
    }
    let mut stack = vec![git.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = fs::read_dir(&dir).map_err(io_err("reading the git directory", &dir))?;
        for entry in entries {
            let entry = entry.map_err(io_err("reading the git directory", &dir))?;
            let path = entry.path();
            let meta =
                fs::symlink_metadata(&path).map_err(io_err("reading the git directory", &path))?;
            let kind = meta.file_type();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() && meta.len() > largest_readable(git, &path) {
                return Err(tampered(
                    &path,
                    &format!(
                        "{} bytes: more than keel reads whole (a sparse file would take that \
                         much memory)",
                        meta.len()
                    ),
                ));
            } else if !kind.is_file() {
                use std::os::unix::fs::FileTypeExt;
                let what = if kind.is_symlink() {
                    "a symlink (keel follows none in a task's git directory)"
                } else if kind.is_fifo() {
                    "a FIFO (keel would block reading it)"
                } else if kind.is_socket() {
                    "a socket"
                } else {
                    "a device"
                };
                return Err(tampered(&path, what));
            }
        }
    }
    Ok(())
}

/// The largest a file of a task's git directory may be: those keel or libgit2 read whole
/// (config, refs, `packed-refs`, `shallow`, logs) are small in any real repository, and 64 MiB
/// bounds what a sparse one costs; the index (read by the clean judgement) holds about 100
/// bytes a file, so 1 GiB is ten million files. Objects are weighed by the harvest itself
/// (`super::limits`), on their headers.
fn largest_readable(git: &Path, path: &Path) -> u64 {
    if path.starts_with(git.join("objects")) {
        u64::MAX
    } else if path == git.join("index") {
        1 << 30
    } else {
        64 << 20
    }
}

/// `info/grafts`, or a `shallow` file that is not the main repository's (keel copies main's
/// at creation): libgit2 would cut the task's history short where it says, and a harvest
/// walked that way would give main a commit without its ancestors. Refused, not removed:
/// the commits stay in the checkout, and whoever looks at it decides.
fn refuse_rewritten_history(git: &Path, common_dir: &Path) -> Result<(), CheckoutError> {
    let grafts = git.join("info/grafts");
    if fs::symlink_metadata(&grafts).is_ok() {
        return Err(CheckoutError::Tampered {
            path: grafts,
            what: "grafts rewrite the task's history (remove the file)".into(),
        });
    }
    let shallow = git.join("shallow");
    if fs::symlink_metadata(&shallow).is_ok() {
        let main = fs::read(common_dir.join("shallow")).ok();
        let task = fs::read(&shallow).map_err(io_err("reading", &shallow))?;
        if main.as_deref() != Some(task.as_slice()) {
            return Err(CheckoutError::Tampered {
                path: shallow,
                what: "a shallow file that is not the main repository's cuts the task's \
                       history short (remove it, or copy main's)"
                    .into(),
            });
        }
    }
    Ok(())
}

/// A git configuration file (regular, if there: see `refuse_special_files`) must include no
/// other: libgit2 reads `include.path` and `includeIf.*.path` wherever they point.
fn refuse_config_includes(path: &Path) -> Result<(), CheckoutError> {
    let text = match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(CheckoutError::io("reading", path, e)),
    };
    let includes = text.lines().any(|line| {
        let Some(rest) = line.trim_start().strip_prefix('[') else {
            return false;
        };
        let section: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        section.eq_ignore_ascii_case("include") || section.eq_ignore_ascii_case("includeif")
    });
    if includes {
        return Err(CheckoutError::Tampered {
            path: path.to_path_buf(),
            what: "the configuration includes another file (keel reads none)".into(),
        });
    }
    if let Some(key) = names_a_file(&text) {
        return Err(CheckoutError::Tampered {
            path: path.to_path_buf(),
            what: format!(
                "the configuration sets {key}, a file libgit2 would open wherever it is (keel reads none)"
            ),
        });
    }
    Ok(())
}

/// The first key of a git configuration text that names a file libgit2 opens when it looks
/// at a work tree (`core.excludesFile`, `core.attributesFile`), as `core.key`. Keys are
/// matched without case, in a `[core]` section (any subsection spelling), the way git reads
/// them; a value given on a continued line is still the key's.
pub(crate) fn names_a_file(text: &str) -> Option<String> {
    let mut in_core = false;
    for line in text.lines() {
        let line = line.trim_start();
        if let Some(rest) = line.strip_prefix('[') {
            let section: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
                .collect();
            let section = section.to_ascii_lowercase();
            in_core = section == "core" || section.starts_with("core.");
            // `[core] excludesFile = x` on the section's own line.
            let after = rest.split_once(']').map_or("", |(_, a)| a);
            if in_core {
                if let Some(key) = file_key(after) {
                    return Some(key);
                }
            }
            continue;
        }
        if in_core {
            if let Some(key) = file_key(line) {
                return Some(key);
            }
        }
    }
    None
}

fn file_key(line: &str) -> Option<String> {
    let name: String = line
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    let name = name.to_ascii_lowercase();
    matches!(name.as_str(), "excludesfile" | "attributesfile").then(|| format!("core.{name}"))
}
