//! Layouts the planner cannot honour, refused before anything is mounted.

use std::path::{Component, Path, PathBuf};

use super::error::SandboxError;
use super::planner::{checkout_objects, checkout_repositories, under, Planner};
use super::{overlay_path_problem, CheckoutFiles, RootEntry, SandboxLayout};

fn layout_error(path: &Path, problem: impl Into<String>) -> SandboxError {
    SandboxError::Layout {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

const OBJECTS: &str = "the main repository's objects";

/// Refuse layouts the planner cannot honour, before anything is mounted.
pub(super) fn validate(
    layout: &SandboxLayout,
    host_root: &[RootEntry],
) -> Result<(), SandboxError> {
    let named = [
        (&layout.new_root, "the sandbox root"),
        (&layout.work_source, "the checkout"),
        (&layout.workdir, "workdir"),
        (&layout.progress_file, "the progress file"),
        (&layout.checkpoint_source, "the checkpoint directory"),
        (&layout.home, "HOME"),
    ];
    let mut checkout: Vec<(&PathBuf, &str)> = Vec::new();
    if let Some(c) = &layout.checkout {
        checkout.push((&c.git_dir, "the checkout's git directory"));
        match &c.files {
            CheckoutFiles::Overlay { lower, upper, work } => {
                for (path, what) in [
                    (lower, "the checkout's base tree"),
                    (upper, "the checkout's upper layer"),
                    (work, "the checkout's overlay work directory"),
                ] {
                    if let Some(problem) = overlay_path_problem(path) {
                        return Err(layout_error(path, problem));
                    }
                    checkout.push((path, what));
                }
            }
            CheckoutFiles::Bind(files) => checkout.push((files, "the checkout")),
        }
    }
    let listed = (layout.hidden.iter().map(|p| (p, "sandbox.hidden")))
        .chain(layout.writable.iter().map(|p| (p, "sandbox.writable")))
        .chain(layout.readonly.iter().map(|p| (p, "a read-only path")))
        .chain(checkout_objects(layout).map(|p| (p, OBJECTS)))
        .chain(checkout_repositories(layout).map(|p| (p, "a repository of the checkout")));
    for (path, what) in named.into_iter().chain(checkout).chain(listed) {
        let relative = !path.is_absolute();
        if relative || path.components().any(|c| c == Component::ParentDir) {
            return Err(layout_error(
                path,
                format!("{what} must be an absolute path without `..`"),
            ));
        }
        if path.parent().is_none() && what != "the sandbox root" {
            return Err(layout_error(path, format!("{what} cannot be /")));
        }
    }
    for (size, what) in [(layout.tmp_size, "/tmp"), (layout.home_size, "$HOME")] {
        if size == 0 {
            // tmpfs(5): size=0 means no limit at all.
            return Err(layout_error(
                Path::new(what),
                "the size cap must be greater than 0",
            ));
        }
    }
    let planner = Planner::new(layout, host_root);
    let hidden: Vec<PathBuf> = layout.hidden.iter().map(|h| planner.canon(h)).collect();
    let mut seen: Vec<PathBuf> = Vec::new();
    let user = [(&layout.workdir, "workdir"), (&layout.home, "HOME")]
        .into_iter()
        .chain(layout.writable.iter().map(|p| (p, "sandbox.writable")))
        .chain(layout.readonly.iter().map(|p| (p, "a read-only path")))
        .chain(checkout_objects(layout).map(|p| (p, OBJECTS)));
    let workdir = planner.canon(&layout.workdir);
    for (path, what) in user {
        let at = planner.canon(path);
        if what == OBJECTS && under(&at, &workdir) {
            // It would land in the checkout, on the task's own objects under `.git`.
            return Err(layout_error(
                path,
                format!(
                    "{what} lie inside workdir {}: set workdir to a path outside the \
                     repository",
                    layout.workdir.display()
                ),
            ));
        }
        let reserved = ["/proc", "/dev", "/run/keel"];
        if let Some(r) = reserved.iter().find(|r| under(&at, Path::new(r))) {
            return Err(layout_error(path, format!("{what} cannot be inside {r}")));
        }
        if ["/", "/tmp", "/run"].iter().any(|r| at == Path::new(r)) {
            return Err(layout_error(
                path,
                format!("{what} cannot be {}", at.display()),
            ));
        }
        if let Some(h) = hidden.iter().find(|h| under(&at, h)) {
            return Err(layout_error(
                path,
                format!("{what} lies inside hidden path {}", h.display()),
            ));
        }
        if seen.contains(&at) {
            return Err(layout_error(path, "two mounts at the same path"));
        }
        seen.push(at);
    }
    Ok(())
}
