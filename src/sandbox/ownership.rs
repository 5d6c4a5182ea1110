//! The one part of a task's files kept by ownership rather than an idmapped mount: its
//! checkout's overlay upper layer.
//!
//! overlayfs copies a file up with the credentials of whoever mounted it — the host's root,
//! so that its trusted xattrs (`redirect_dir`, opaque directories) work — and an idmapped
//! upper layer could not store what the host's root creates (it has no id inside the task's
//! user namespace). So the upper layer is a plain directory whose files belong to the task's
//! block of host ids: the agent's root is the block's first id there. A layer made before the
//! task had this block (by a keel without user namespaces, or under another range) is shifted
//! once, at the next start, from the block its root directory shows.

use crate::sandbox::spec::IdBlock;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Make the tree at `root` belong to `block`: every entry whose uid (gid) lies in the block
/// the root directory is in now — `0..count` when the root is owned by an id below `count`
/// — moves to the same place in `block`; others are left. The root directory is changed last,
/// so that a walk cut short is done again in full at the next start. Returns how many entries
/// changed owner. Symlinks are not followed (lchown).
pub fn give_tree_to(root: &Path, block: IdBlock) -> io::Result<u64> {
    let meta = std::fs::symlink_metadata(root)?;
    // In the block already (its root's, or a `sandbox.user`'s: the layer's top directory is
    // given to that user when the checkout is made).
    let in_block = |id: u32| id.checked_sub(block.first).is_some_and(|o| o < block.count);
    if in_block(meta.uid()) && in_block(meta.gid()) {
        return Ok(0);
    }
    let base = |id: u32| if id < block.count { 0 } else { id };
    let shift = Shift {
        from_uid: base(meta.uid()),
        from_gid: base(meta.gid()),
        block,
    };
    let mut changed = 0;
    shift.walk(root, &mut changed)?;
    Ok(changed)
}

struct Shift {
    from_uid: u32,
    from_gid: u32,
    block: IdBlock,
}

impl Shift {
    fn id(&self, id: u32, from: u32) -> u32 {
        match id.checked_sub(from) {
            Some(offset) if offset < self.block.count => self.block.first + offset,
            _ => id,
        }
    }

    /// Children first, then `path` itself.
    fn walk(&self, path: &Path, changed: &mut u64) -> io::Result<()> {
        let meta = std::fs::symlink_metadata(path)?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(path)? {
                self.walk(&entry?.path(), changed)?;
            }
        }
        let (uid, gid) = (
            self.id(meta.uid(), self.from_uid),
            self.id(meta.gid(), self.from_gid),
        );
        if (uid, gid) != (meta.uid(), meta.gid()) {
            std::os::unix::fs::lchown(path, Some(uid), Some(gid))
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            *changed += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
