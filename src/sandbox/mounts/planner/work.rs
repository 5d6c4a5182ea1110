//! The task's files at `workdir`: its work directory bound, or its git checkout — an overlay
//! of the shared base tree or a bound full checkout — with the task's git directory bound on
//! the checkout's `.git`, and the main repository's objects read-only at their own paths,
//! the rest of that repository (and of those it borrows from) covered.

use std::path::{Path, PathBuf};

use super::super::error::Step;
use super::super::{CheckoutFiles, MountAttrs, MountOp, SandboxLayout};
use super::{normalize, tmpfs_op, Layer, Planner, ROOT_SIZE};

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
                    in_user_namespace: layout.in_user_namespace,
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

impl Planner<'_> {
    /// Cover the repository `path` (its canonical sandbox path `at`) wherever a host bind
    /// shows it, with an empty tmpfs of keel's own, read-only after the pivot as the rest:
    /// its object directories, deeper, are bound back into it later (their mountpoints made
    /// in it), and nothing else of it — config, hooks, refs, files — is seen. Where nothing
    /// shows it (it lies in keel's `/tmp` or `$HOME`, or in a covered repository), nothing
    /// is mounted.
    pub(super) fn veil(&mut self, at: &Path, step: Step) {
        let mut places = Vec::new();
        for (i, m) in self.mounts.iter().enumerate() {
            let Layer::Host { source } = &m.layer else {
                continue;
            };
            let Ok(rel) = at.strip_prefix(source) else {
                continue;
            };
            let place = normalize(&m.at.join(rel));
            if self.covering(&place) == i {
                places.push(place);
            }
        }
        for place in places {
            // mode 0755: the agent, whatever its uid, must pass through to the objects.
            let op = tmpfs_op(self.host(&place), ROOT_SIZE, 0o755, true, None);
            self.push(&step, op);
            self.mounted(
                &place,
                Layer::Tmpfs {
                    made: Default::default(),
                },
            );
            self.keep.retain(|(k, _, _)| !super::under(k, &place));
        }
    }
}

/// The repositories a checkout borrows objects from: covered but for those objects.
pub(in crate::sandbox::mounts) fn checkout_repositories(
    layout: &SandboxLayout,
) -> impl Iterator<Item = &PathBuf> {
    layout.checkout.iter().flat_map(|c| c.repositories.iter())
}

/// The main repository's object directories a checkout borrows from: bound read-only.
pub(in crate::sandbox::mounts) fn checkout_objects(
    layout: &SandboxLayout,
) -> impl Iterator<Item = &PathBuf> {
    layout.checkout.iter().flat_map(|c| c.objects.iter())
}
