//! The overlayfs mount of a task's checkout: the mount data string, and the paths it cannot
//! carry.
//!
//! overlayfs splits its mount data at `,` and `lowerdir` at `:`, with `\` as an escape whose
//! handling has changed across kernel versions (the legacy parser, then the fs_context one of
//! Linux 6.5). Rather than escape and hope, a path holding any of the three is refused, with a
//! message that names it: keel's own state paths are the only ones that go here.

use std::path::Path;

/// Options on top of the three directories, and why:
/// - `redirect_dir=on`: renaming a directory that comes from the base tree works (without it,
///   rename(2) fails with EXDEV: `git mv dir`, cargo, most build tools). Measured here: the
///   kernel's default is off.
/// - `index=off`, said explicitly: with the inodes index on, an upper layer is tied to the
///   exact lower inodes it was made over, and a base tree rebuilt after a loss (same commit,
///   same content, new inodes) would refuse every existing checkout.
const OPTIONS: &str = "redirect_dir=on,index=off";

/// The options in a user namespace other than the host's (rootless, or a user-namespaced
/// container): overlayfs keeps its metadata in `trusted.*` xattrs, which need `CAP_SYS_ADMIN`
/// over the host, unless told `userxattr` (`user.overlay.*`), which forbids redirects: there,
/// renaming a directory of the base tree that has files fails with EXDEV (`mv` copies
/// instead). Measured on 6.18: `redirect_dir=on` in such a namespace is refused ("overlayfs:
/// redirect_dir requires permission to access trusted xattrs").
const OPTIONS_IN_USER_NAMESPACE: &str = "userxattr,index=off";

/// Why `path` cannot be an overlay layer (`None`: it can). Only the characters the mount
/// data cannot carry are checked here; existence is the kernel's business.
pub fn overlay_path_problem(path: &Path) -> Option<String> {
    let Some(text) = path.to_str() else {
        return Some(format!(
            "{} is not UTF-8: overlayfs mount options cannot carry it",
            path.display()
        ));
    };
    let bad: Vec<String> = [',', ':', '\\']
        .into_iter()
        .filter(|c| text.contains(*c))
        .map(|c| format!("{c:?}"))
        .collect();
    if bad.is_empty() {
        None
    } else {
        Some(format!(
            "{} contains {}, which overlayfs mount options cannot carry safely (use a state \
             directory whose path has no ',', ':' or '\\')",
            path.display(),
            bad.join(" and ")
        ))
    }
}

/// The data argument of mount(2) for an overlay of `lower` (read-only) under `upper`, with
/// overlayfs's scratch directory `work` (on the same filesystem as `upper`), mounted by this
/// process in its own user namespace.
pub fn overlay_data(lower: &Path, upper: &Path, work: &Path) -> Result<String, String> {
    let in_user_namespace = !crate::sys::own_userns::in_initial_user_namespace();
    overlay_data_in(lower, upper, work, in_user_namespace)
}

/// [`overlay_data`], for a mount made in a user namespace other than the host's when
/// `in_user_namespace`.
pub fn overlay_data_in(
    lower: &Path,
    upper: &Path,
    work: &Path,
    in_user_namespace: bool,
) -> Result<String, String> {
    for path in [lower, upper, work] {
        if let Some(problem) = overlay_path_problem(path) {
            return Err(problem);
        }
        if !path.is_absolute() {
            return Err(format!(
                "{}: an overlay layer must be an absolute path",
                path.display()
            ));
        }
    }
    // to_str: checked by overlay_path_problem above.
    let text = |p: &Path| p.to_str().unwrap_or_default().to_string();
    let options = match in_user_namespace {
        true => OPTIONS_IN_USER_NAMESPACE,
        false => OPTIONS,
    };
    Ok(format!(
        "lowerdir={},upperdir={},workdir={},{options}",
        text(lower),
        text(upper),
        text(work)
    ))
}

#[cfg(test)]
mod tests;
