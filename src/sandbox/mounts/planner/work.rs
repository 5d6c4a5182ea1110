//! The task's files at `workdir`: its work directory bound, or its git checkout — an overlay
//! of the shared base tree or a bound full checkout — with the task's git directory bound on
//! the checkout's `.git`, and the main repository's objects read-only at their own paths.

use std::path::{Path, PathBuf};

use super::super::error::Step;
use super::super::{CheckoutFiles, MountAttrs, MountOp, SandboxLayout};
use super::{Layer, Planner};

impl Planner<'_> {
    /// The task's files at `at` (sandbox path of `workdir`): its work directory bound, or its
    /// checkout — an overlay or a bound full checkout, and its git directory bound on the
    /// `.git` directory the checkout holds. All stay writable.
    pub(super) fn work(&mut self, at: &Path) {
        let layout = self.layout;
        let Some(checkout) = &layout.checkout else {
            let step = Step::Work {
                source: layout.work_source.clone(),
                workdir: layout.workdir.clone(),
            };
            self.bind(&step, &layout.work_source, at, false, false);
            self.keep.push((at.to_path_buf(), MountAttrs::RDONLY, step));
            return;
        };
        match &checkout.files {
            CheckoutFiles::Overlay { lower, upper, work } => {
                let step = Step::Overlay {
                    upper: upper.clone(),
                    workdir: layout.workdir.clone(),
                };
                self.ensure_dir(&step, at);
                let op = MountOp::Overlay {
                    lower: lower.clone(),
                    upper: upper.clone(),
                    work: work.clone(),
                    target: self.host(at),
                };
                self.push(&step, op);
                // Nothing of it may be created by the plan (it would land in the task's
                // upper layer), and no host path shows through it.
                self.mounted(at, Layer::Opaque);
                self.keep.push((at.to_path_buf(), MountAttrs::RDONLY, step));
            }
            CheckoutFiles::Bind(files) => {
                let step = Step::Work {
                    source: files.clone(),
                    workdir: layout.workdir.clone(),
                };
                self.bind(&step, files, at, false, false);
                self.keep.push((at.to_path_buf(), MountAttrs::RDONLY, step));
            }
        }
        // `.git` exists in the checkout (keel makes it, as a directory, when it makes the
        // checkout): nothing is created for it here.
        let git = at.join(".git");
        let step = Step::GitDir {
            source: checkout.git_dir.clone(),
            at: layout.workdir.join(".git"),
        };
        self.bind(&step, &checkout.git_dir, &git, false, false);
        self.keep.push((git, MountAttrs::RDONLY, step));
    }
}

/// The main repository's object directories a checkout borrows from: bound read-only.
pub(in crate::sandbox::mounts) fn checkout_objects(
    layout: &SandboxLayout,
) -> impl Iterator<Item = &PathBuf> {
    layout.checkout.iter().flat_map(|c| c.objects.iter())
}
