//! The host ids of the tasks' user namespaces. Each task holds one block of
//! [`ID_BLOCK_SIZE`] ids of the range `keel.ron` names (`user_namespaces`): chosen at its first
//! start (the lowest block no other task holds), persisted in its record with the start's
//! decision before the spawn uses it, kept across attempts and daemon restarts, and free again
//! once the task is removed (`keel rm`, or its unit file gone): no record, no holder. Blocks
//! are claimed host-wide ([`claims`]): a block another keel daemon's task holds is skipped, and
//! a running task's claim outlives its daemon (its shim holds it).
//!
//! At start the daemon checks the range against the host ([`check_at_start`]): it must overlap
//! no entry of `/etc/subuid`, `/etc/subgid`, `/etc/passwd` or `/etc/group` — their text, never
//! NSS (a directory service may be slow, absent at boot, or list every user of a company) —
//! and the kernel must let the daemon make user namespaces. The judges are pure; the readers
//! take their paths, so tests give them files of their own.

use crate::config::{IdRange, UserNamespaces, ID_BLOCK_SIZE, ID_RANGE_LIMIT, MIN_FIRST_ID};
use crate::sandbox::spec::IdBlock;
use std::fmt;
use std::path::{Path, PathBuf};

const SIZE: u64 = ID_BLOCK_SIZE as u64;

/// The `index`th block of `range` (`index < range.blocks`).
pub fn block_at(range: &IdRange, index: u32) -> IdBlock {
    IdBlock {
        first: range.first_id + index * ID_BLOCK_SIZE,
        count: ID_BLOCK_SIZE,
    }
}

/// Whether `block` is one of `range`'s blocks (one chosen under another range is not).
pub fn is_block_of(range: &IdRange, block: IdBlock) -> bool {
    let first = u64::from(block.first);
    block.count == ID_BLOCK_SIZE
        && block.first >= range.first_id
        && (first - u64::from(range.first_id)) % SIZE == 0
        && first + SIZE <= range.end()
}

/// Whether `[a, a_end)` and `[b, b_end)` share an id.
fn overlaps(a: u64, a_end: u64, b: u64, b_end: u64) -> bool {
    a < b_end && b < a_end
}

/// The blocks of `range` that share no id with any of `held`, lowest first.
pub fn free_blocks(range: &IdRange, held: impl IntoIterator<Item = IdBlock>) -> Vec<IdBlock> {
    let (first, end) = (u64::from(range.first_id), range.end());
    let mut taken = vec![false; range.blocks as usize];
    for block in held {
        let start = u64::from(block.first);
        let block_end = start + u64::from(block.count);
        if !overlaps(start, block_end, first, end) {
            continue;
        }
        // A block of another range (a changed keel.ron) may cover parts of two of ours.
        let low = (start.max(first) - first) / SIZE;
        let high = (block_end.min(end) - 1 - first) / SIZE;
        for index in low..=high {
            taken[index as usize] = true;
        }
    }
    (0..range.blocks)
        .filter(|&index| !taken[index as usize])
        .map(|index| block_at(range, index))
        .collect()
}

/// The lowest block of `range` that shares no id with any of `held`.
pub fn lowest_free(range: &IdRange, held: impl IntoIterator<Item = IdBlock>) -> Option<IdBlock> {
    free_blocks(range, held).first().copied()
}

/// [`choose_block`] on a host where every block can be claimed (no other keel daemon).
pub fn block_for_start(
    range: &IdRange,
    holding: Option<IdBlock>,
    others: &[IdBlock],
) -> Result<IdBlock, Exhausted> {
    choose_block(range, holding, others, |_| true)
}

/// The block a task starts with: the one it holds while that is still a block of `range`, no
/// other task holds any of its ids and its host-wide claim is (or can now be) the task's;
/// else the lowest block no other task of this daemon holds whose claim can be taken now
/// (`claim`: takes it, `false` when anyone else on the host holds one of its ids —
/// [`claims`]). `others`: the blocks every other task the daemon knows holds.
pub fn choose_block(
    range: &IdRange,
    holding: Option<IdBlock>,
    others: &[IdBlock],
    mut claim: impl FnMut(IdBlock) -> bool,
) -> Result<IdBlock, Exhausted> {
    let shared = |block: IdBlock| {
        let (start, end) = (u64::from(block.first), u64::from(block.first) + SIZE);
        others.iter().any(|other| {
            let other_start = u64::from(other.first);
            overlaps(
                start,
                end,
                other_start,
                other_start + u64::from(other.count),
            )
        })
    };
    if let Some(block) = holding {
        if is_block_of(range, block) && !shared(block) && claim(block) {
            return Ok(block);
        }
    }
    let mut elsewhere = 0;
    for block in free_blocks(range, others.iter().copied()) {
        // The kept block was tried above.
        if Some(block) != holding && claim(block) {
            return Ok(block);
        }
        elsewhere += 1;
    }
    Err(Exhausted {
        range: *range,
        elsewhere,
    })
}

/// Every block of the range is held: the start waits for one (a host-side limit, not the
/// task's failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted {
    pub range: IdRange,
    /// How many of them other keel daemons of the host hold (by their claims).
    pub elsewhere: u32,
}

impl fmt::Display for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let IdRange { first_id, blocks } = self.range;
        let all = match blocks {
            1 => "the only block of host ids is held".to_string(),
            n => format!("all {n} blocks of host ids are held"),
        };
        let elsewhere = match self.elsewhere {
            0 => String::new(),
            n if n == blocks => " by other keel daemons of this host".to_string(),
            n => format!(" ({n} by other keel daemons of this host)"),
        };
        write!(
            f,
            "{all}{elsewhere}, one per task until it is removed \
             (user_namespaces in keel.ron: blocks: {blocks}, {ID_BLOCK_SIZE} ids each from {first_id}): \
             remove finished tasks (keel rm), or raise blocks"
        )?;
        if self.elsewhere > 0 {
            write!(
                f,
                ", or give this daemon a range of its own (claims in {})",
                claims::claims_dir().display()
            )?;
        }
        Ok(())
    }
}

/// What kind of host entry owns ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A line of `/etc/subuid`: `name:first:count`.
    SubUids,
    /// A line of `/etc/subgid`.
    SubGids,
    /// A line of `/etc/passwd`: `name:x:uid:gid:…`.
    User,
    /// A line of `/etc/group`: `name:x:gid:members`.
    Group,
}

/// One entry of a host file that owns ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIds {
    pub file: PathBuf,
    /// 1-based.
    pub line: usize,
    pub kind: EntryKind,
    pub name: String,
    pub first: u64,
    pub count: u64,
}

impl HostIds {
    fn end(&self) -> u64 {
        self.first + self.count
    }
}

impl fmt::Display for HostIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (file, line, name) = (self.file.display(), self.line, &self.name);
        let last = self.end() - 1;
        match self.kind {
            EntryKind::SubUids => write!(
                f,
                "{file}:{line}: {name}'s subordinate uids {}-{last}",
                self.first
            ),
            EntryKind::SubGids => write!(
                f,
                "{file}:{line}: {name}'s subordinate gids {}-{last}",
                self.first
            ),
            EntryKind::User => write!(f, "{file}:{line}: user {name} (uid {})", self.first),
            EntryKind::Group => write!(f, "{file}:{line}: group {name} (gid {})", self.first),
        }
    }
}

/// The lines of a file that are entries: not empty, not a comment, not an NIS `+`/`-` line.
fn entry_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(n, line)| (n + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with(['#', '+', '-']))
}

/// `/etc/subuid` or `/etc/subgid` (`kind` says which): `name:first:count` per line. A line
/// that does not read so owns nothing (shadow's tools ignore it too).
pub fn parse_subordinate(file: &Path, kind: EntryKind, text: &str) -> Vec<HostIds> {
    entry_lines(text)
        .filter_map(|(line, entry)| {
            let mut fields = entry.split(':');
            let name = fields.next()?;
            let first: u64 = fields.next()?.trim().parse().ok()?;
            let count: u64 = fields.next()?.trim().parse().ok()?;
            (count > 0).then(|| HostIds {
                file: file.to_path_buf(),
                line,
                kind,
                name: name.to_string(),
                first,
                count,
            })
        })
        .collect()
}

/// `/etc/passwd` or `/etc/group` (`kind` says which): the id is the third field.
pub fn parse_id_database(file: &Path, kind: EntryKind, text: &str) -> Vec<HostIds> {
    entry_lines(text)
        .filter_map(|(line, entry)| {
            let mut fields = entry.split(':');
            let name = fields.next()?;
            let id: u64 = fields.nth(1)?.trim().parse().ok()?;
            Some(HostIds {
                file: file.to_path_buf(),
                line,
                kind,
                name: name.to_string(),
                first: id,
                count: 1,
            })
        })
        .collect()
}

/// The host files whose ids keel's range must not overlap.
#[derive(Debug, Clone)]
pub struct HostIdFiles {
    pub subuid: PathBuf,
    pub subgid: PathBuf,
    pub passwd: PathBuf,
    pub group: PathBuf,
}

impl HostIdFiles {
    /// This host's: `/etc/subuid`, `/etc/subgid`, `/etc/passwd`, `/etc/group`.
    pub fn system() -> Self {
        HostIdFiles {
            subuid: "/etc/subuid".into(),
            subgid: "/etc/subgid".into(),
            passwd: "/etc/passwd".into(),
            group: "/etc/group".into(),
        }
    }
}

/// Every entry of the files, in file order. A missing file has none (a host without Podman
/// has no `/etc/subuid`); one that cannot be read stops the check: it cannot be judged.
pub fn read_host_ids(files: &HostIdFiles) -> Result<Vec<HostIds>, String> {
    let sources = [
        (&files.subuid, EntryKind::SubUids),
        (&files.subgid, EntryKind::SubGids),
        (&files.passwd, EntryKind::User),
        (&files.group, EntryKind::Group),
    ];
    let mut entries = Vec::new();
    for (path, kind) in sources {
        let text = match std::fs::read(path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(format!(
                    "cannot read {} to check keel's user-namespace range against it: {e}",
                    path.display()
                ))
            }
        };
        entries.extend(match kind {
            EntryKind::SubUids | EntryKind::SubGids => parse_subordinate(path, kind, &text),
            EntryKind::User | EntryKind::Group => parse_id_database(path, kind, &text),
        });
    }
    Ok(entries)
}

/// The entries that share an id with `range` (as uids or gids alike: a task's block is both).
pub fn overlapping<'a>(range: &IdRange, entries: &'a [HostIds]) -> Vec<&'a HostIds> {
    let (first, end) = (u64::from(range.first_id), range.end());
    entries
        .iter()
        .filter(|e| overlaps(e.first, e.end(), first, end))
        .collect()
}

/// The lowest first id, from `range.first_id` up (else from [`MIN_FIRST_ID`]), whose range of
/// `range.blocks` blocks overlaps no entry and ends by [`ID_RANGE_LIMIT`].
pub fn clear_first_id(range: &IdRange, entries: &[HostIds]) -> Option<u32> {
    let length = u64::from(range.blocks) * SIZE;
    let search = |mut candidate: u64| loop {
        if candidate + length > ID_RANGE_LIMIT {
            return None;
        }
        let hit = entries
            .iter()
            .filter(|e| overlaps(e.first, e.end(), candidate, candidate + length))
            .map(HostIds::end)
            .max();
        match hit {
            // Past the entry, at a block boundary.
            Some(end) => candidate = end.div_ceil(SIZE) * SIZE,
            None => return u32::try_from(candidate).ok(),
        }
    };
    search(u64::from(range.first_id)).or_else(|| search(u64::from(MIN_FIRST_ID)))
}

/// Refuse a range that overlaps a host entry: the message names the entry and its line, and
/// what to write in `config_path` instead.
pub fn judge_range(range: &IdRange, entries: &[HostIds], config_path: &Path) -> Result<(), String> {
    let hits = overlapping(range, entries);
    let Some(first_hit) = hits.first() else {
        return Ok(());
    };
    let more = match hits.len() - 1 {
        0 => String::new(),
        1 => " (and 1 more entry)".to_string(),
        n => format!(" (and {n} more entries)"),
    };
    let config = config_path.display();
    let fix = match clear_first_id(range, entries) {
        Some(first_id) => format!(
            "Set user_namespaces: UserNamespaces(first_id: {first_id}, blocks: {}) in {config} \
             (clear of every entry of /etc/subuid, /etc/subgid, /etc/passwd and /etc/group)",
            range.blocks
        ),
        None => format!(
            "No {} blocks fit clear of the host's entries below {ID_RANGE_LIMIT}: set fewer blocks in \
             user_namespaces in {config}",
            range.blocks
        ),
    };
    Err(format!(
        "keel's user-namespace range {}-{} ({} blocks of {ID_BLOCK_SIZE} ids from {}) overlaps \
         {first_hit}{more}: a task's ids would be that entry's too. {fix}, or move the entry",
        range.first_id,
        range.end() - 1,
        range.blocks,
        range.first_id,
    ))
}

/// What the kernel says about making user namespaces (`None`: the file is absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UsernsSysctls {
    /// `/proc/self/ns/user` exists: the kernel has user namespaces (`CONFIG_USER_NS`).
    pub kernel_has_userns: bool,
    /// `user.max_user_namespaces`: how many one user may have at once; 0 turns them off.
    pub max_user_namespaces: Option<u64>,
    /// `kernel.unprivileged_userns_clone` (Debian's and Ubuntu's kernels): 0 refuses them to
    /// a process without CAP_SYS_ADMIN.
    pub unprivileged_userns_clone: Option<u64>,
    /// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu 23.10 and later): 1 confines a
    /// process without CAP_SYS_ADMIN that makes one, unless an AppArmor profile allows it.
    pub apparmor_restrict_unprivileged_userns: Option<u64>,
}

impl UsernsSysctls {
    /// From `proc` (`/proc` on the host).
    pub fn read(proc: &Path) -> Self {
        let number = |name: &str| {
            std::fs::read_to_string(proc.join("sys").join(name))
                .ok()
                .and_then(|text| text.trim().parse().ok())
        };
        UsernsSysctls {
            kernel_has_userns: proc.join("self/ns/user").exists(),
            max_user_namespaces: number("user/max_user_namespaces"),
            unprivileged_userns_clone: number("kernel/unprivileged_userns_clone"),
            apparmor_restrict_unprivileged_userns: number(
                "kernel/apparmor_restrict_unprivileged_userns",
            ),
        }
    }
}

/// Whether the daemon can give its tasks user namespaces: `Err` names the setting to change;
/// `Ok(Some(warning))` when it can, but fewer than `blocks` at once. `privileged`: the daemon
/// has CAP_SYS_ADMIN (root, as it runs today): then only `user.max_user_namespaces` applies —
/// `unprivileged_userns_clone` and AppArmor's restriction bind only processes without it, and
/// are judged for a daemon run as an ordinary user.
pub fn judge_userns(
    sysctls: &UsernsSysctls,
    privileged: bool,
    blocks: u32,
) -> Result<Option<String>, String> {
    const OFF: &str = "or set user_namespaces: Off in keel.ron (no user namespace: an agent's \
                       root is then the host's root for file permissions and per-user quotas)";
    if !sysctls.kernel_has_userns {
        return Err(format!(
            "this kernel has no user namespaces (no /proc/self/ns/user: built without \
             CONFIG_USER_NS): boot a kernel with them, {OFF}"
        ));
    }
    if sysctls.max_user_namespaces == Some(0) {
        return Err(format!(
            "user namespaces are turned off on this host (user.max_user_namespaces is 0): \
             set sysctl user.max_user_namespaces=15000 (and in /etc/sysctl.d/ to keep it), {OFF}"
        ));
    }
    if !privileged {
        if sysctls.unprivileged_userns_clone == Some(0) {
            return Err(format!(
                "this host refuses user namespaces to users without CAP_SYS_ADMIN \
                 (kernel.unprivileged_userns_clone is 0): set sysctl \
                 kernel.unprivileged_userns_clone=1 (and in /etc/sysctl.d/), run keel as root, \
                 {OFF}"
            ));
        }
        if sysctls.apparmor_restrict_unprivileged_userns == Some(1) {
            return Err(format!(
                "AppArmor restricts user namespaces of users without CAP_SYS_ADMIN \
                 (kernel.apparmor_restrict_unprivileged_userns is 1): give keel an AppArmor \
                 profile that allows `userns,`, or set sysctl \
                 kernel.apparmor_restrict_unprivileged_userns=0, run keel as root, {OFF}"
            ));
        }
    }
    Ok(match sysctls.max_user_namespaces {
        Some(max) if max < u64::from(blocks) => Some(format!(
            "user.max_user_namespaces is {max}, fewer than the {blocks} blocks keel.ron allows: \
             past {max} user namespaces of keel's user at once (the host's own included) a \
             start fails; raise it with sysctl user.max_user_namespaces={blocks} or more"
        )),
        _ => None,
    })
}

/// Where [`check_host`] looks: the host's files, or a test's.
pub struct HostProbe {
    /// `/proc`.
    pub proc: PathBuf,
    pub files: HostIdFiles,
    /// The daemon has CAP_SYS_ADMIN ([`judge_userns`]).
    pub privileged: bool,
}

impl HostProbe {
    /// This host, as the daemon sees it.
    pub fn system() -> Self {
        HostProbe {
            proc: "/proc".into(),
            files: HostIdFiles::system(),
            privileged: nix::unistd::geteuid().is_root(),
        }
    }
}

/// The daemon's check at start: `Err` refuses to start (what to change); `Ok` holds the
/// warnings to log. `Off` checks nothing, and warns of what it gives up.
pub fn check_host(
    user_namespaces: &UserNamespaces,
    probe: &HostProbe,
    config_path: &Path,
) -> Result<Vec<String>, String> {
    let range = match user_namespaces {
        UserNamespaces::Off => {
            return Ok(vec![format!(
                "user_namespaces: Off in {}: tasks run without a user namespace — an agent's \
                 root is the host's root for file permissions and per-user kernel quotas",
                config_path.display()
            )])
        }
        UserNamespaces::On(range) => range,
    };
    let sysctls = UsernsSysctls::read(&probe.proc);
    let warnings = judge_userns(&sysctls, probe.privileged, range.blocks)?;
    let entries = read_host_ids(&probe.files)?;
    judge_range(range, &entries, config_path)?;
    Ok(warnings.into_iter().collect())
}

/// The host-wide claims on blocks this daemon takes ([`claims`]); `None` with user
/// namespaces off (no task has a block), or for a daemon that is not root and cannot use the
/// claims directory (warned: it cannot map host ids that are not its own anyway, and refuses
/// sandboxed starts). `Err`: the claims directory cannot be used (what to change).
pub(crate) fn open_claims(
    user_namespaces: &UserNamespaces,
) -> Result<Option<claims::Claims>, String> {
    if matches!(user_namespaces, UserNamespaces::Off) {
        return Ok(None);
    }
    match claims::ClaimsFile::open(&claims::claims_dir()) {
        Ok(file) => Ok(Some(claims::Claims::new(file))),
        Err(why) if !nix::unistd::geteuid().is_root() => {
            log::warn!("{why} (a daemon that is not root goes without)");
            Ok(None)
        }
        Err(why) => Err(why),
    }
}

/// [`check_host`] on this host, warnings logged.
pub(crate) fn check_at_start(
    user_namespaces: &UserNamespaces,
    config_path: &Path,
    state_dir: &Path,
) -> Result<(), String> {
    let probe = HostProbe::system();
    for warning in check_host(user_namespaces, &probe, config_path)? {
        log::warn!("{warning}");
    }
    // What the settings cannot tell (a chroot'ed daemon, a seccomp profile of a container
    // engine, a missing CAP_SETUID, a state directory that cannot be idmapped): make one, with
    // the range's first block, and an idmapped mount of the state directory with it, now —
    // rather than have every sandboxed start fail and spend its task's restarts.
    // (A daemon that is not root refuses sandboxed starts with its own message.)
    if let (UserNamespaces::On(range), true) = (user_namespaces, probe.privileged) {
        let off = format!(
            "or set user_namespaces: Off in {} (which weakens every sandbox: docs/operations.md)",
            config_path.display()
        );
        let userns = crate::sys::userns::create(range.first_id, ID_BLOCK_SIZE).map_err(|e| {
            format!(
                "cannot make a user namespace for the tasks (host ids {}…): {e} — keel needs \
                 {} and must not be started chroot(2)ed (a container engine's pivot_root is \
                 fine); {off}",
                range.first_id,
                crate::sys::userns::CAPABILITIES_NEEDED,
            )
        })?;
        use std::os::fd::AsFd;
        let idmapped = crate::sys::mount::open_no_symlinks(state_dir).and_then(|dir| {
            crate::sys::mount::idmapped_clone(dir.as_fd(), userns.as_fd(), false, true)
        });
        if let Err(e) = idmapped {
            return Err(format!(
                "cannot idmap keel's state directory {} ({e}): the tasks' own files are shown \
                 to them through idmapped mounts, which its filesystem does not support on this \
                 kernel ({}; tmpfs needs Linux 6.3, NFS and overlayfs have none) — put the state \
                 directory on ext4, xfs or btrfs (or tmpfs on Linux ≥ 6.3), {off}",
                state_dir.display(),
                kernel_release(),
            ));
        }
    }
    Ok(())
}

/// The running kernel's release (uname -r), for a message.
fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| format!("Linux {}", r.trim()))
        .unwrap_or_else(|_| "this kernel".to_string())
}

pub mod claims;

#[cfg(test)]
mod tests;
