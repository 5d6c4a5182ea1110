//! The agent's privileges: which capabilities it keeps, which user it runs as, and the loopback
//! interface of its private network namespace (DESIGN.md, "What the agent sees").
//!
//! [`plan`] turns the unit's `sandbox` section into a [`PrivilegePlan`] — pure, so every
//! resolution rule is unit-tested. [`apply`] carries the plan out in the agent's child process,
//! after the mount sandbox is built and right before execve; the syscalls are in
//! [`crate::sys::caps`].
//!
//! User names are looked up in the `/etc/passwd` and `/etc/group` *texts* handed to [`plan`],
//! never through NSS: keel is built static (musl), where getpwnam cannot load NSS modules.

use crate::sys::caps;
use crate::unit::parse_capability;
use std::fmt;
use std::io;

/// What [`apply`] will do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PrivilegePlan {
    /// Capabilities the unit grants, bit `n` for capability `n` (capabilities(7) numbering).
    pub keep: u64,
    /// `(uid, gid)` to switch to; `None`: stay root.
    pub user: Option<(u32, u32)>,
    /// Bring `lo` up: the task has a network namespace of its own (`network: None`).
    pub loopback_up: bool,
}

/// Every way planning or applying privileges fails; each message says what to do.
#[derive(Debug)]
pub enum PrivilegeError {
    /// `sandbox.capabilities` names no capability (the parser's message names the entry).
    Capability(String),
    /// `sandbox.user` (as written) cannot be resolved: why.
    User(String, String),
    /// The unit grants capabilities (bit mask) that keel's own process does not hold.
    NotHeld(u64),
    /// Step a: SIOCGIFFLAGS/SIOCSIFFLAGS on `lo`.
    Loopback(io::Error),
    /// Step b: PR_CAPBSET_DROP of this capability.
    BoundingSet(u8, io::Error),
    /// Step c: PR_CAP_AMBIENT_CLEAR_ALL.
    AmbientClear(io::Error),
    /// Step d: setgroups(0, NULL).
    Groups(io::Error),
    /// Step d: setresgid to this gid.
    Gid(u32, io::Error),
    /// Step d: PR_SET_KEEPCAPS.
    KeepCaps(io::Error),
    /// Step d: setresuid to this uid.
    Uid(u32, io::Error),
    /// Step e: capset to this set.
    Capset(u64, io::Error),
    /// Step f: PR_CAP_AMBIENT_RAISE of this capability.
    AmbientRaise(u8, io::Error),
    /// Step g: PR_SET_NO_NEW_PRIVS.
    NoNewPrivs(io::Error),
}

const RUN_AS_ROOT: &str = "(run as root) to use sandbox.user";

impl fmt::Display for PrivilegeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use PrivilegeError::*;
        match self {
            Capability(message) => write!(f, "sandbox.capabilities: {message}"),
            User(spec, problem) => write!(f, "sandbox.user {spec:?}: {problem}"),
            NotHeld(missing) => write!(
                f,
                "sandbox.capabilities grants {}, which keel itself does not hold: remove it \
                 from the unit or run keel with it",
                cap_list(*missing)
            ),
            Loopback(e) => write!(
                f,
                "cannot bring the loopback interface up in the task's network namespace: {e}: \
                 keel must run with CAP_NET_ADMIN (run as root)"
            ),
            BoundingSet(cap, e) => write!(
                f,
                "cannot drop capability {cap} from the bounding set: {e}: keel must run with \
                 CAP_SETPCAP (run as root)"
            ),
            AmbientClear(e) => write!(
                f,
                "cannot clear the ambient capability set: {e}: keel needs Linux 4.3 or later"
            ),
            Groups(e) => write!(
                f,
                "cannot clear the supplementary groups: {e}: keel must run with CAP_SETGID \
                 {RUN_AS_ROOT}"
            ),
            Gid(gid, e) => write!(
                f,
                "cannot switch to gid {gid}: {e}: keel must run with CAP_SETGID {RUN_AS_ROOT}"
            ),
            KeepCaps(e) => write!(
                f,
                "cannot keep the granted capabilities across the switch of user \
                 (prctl PR_SET_KEEPCAPS): {e}"
            ),
            Uid(uid, e) => write!(
                f,
                "cannot switch to uid {uid}: {e}: keel must run with CAP_SETUID {RUN_AS_ROOT}"
            ),
            Capset(keep, e) => write!(
                f,
                "cannot set the capability sets to {}: {e}: keel must hold every capability \
                 the unit grants",
                cap_list(*keep)
            ),
            AmbientRaise(cap, e) => write!(
                f,
                "cannot raise capability {cap} in the ambient set: {e}: without it, it would \
                 not survive execve for a non-root sandbox.user (needs Linux 4.3 or later)"
            ),
            NoNewPrivs(e) => write!(
                f,
                "cannot set no_new_privs: {e}: keel needs Linux 3.5 or later"
            ),
        }
    }
}

impl std::error::Error for PrivilegeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        use PrivilegeError::*;
        match self {
            Capability(_) | User(..) | NotHeld(_) => None,
            Loopback(e) | AmbientClear(e) | Groups(e) | KeepCaps(e) | NoNewPrivs(e) => Some(e),
            BoundingSet(_, e) | Gid(_, e) | Uid(_, e) | Capset(_, e) | AmbientRaise(_, e) => {
                Some(e)
            }
        }
    }
}

/// "none" or "capabilities 10, 12" (capabilities(7) numbering).
fn cap_list(set: u64) -> String {
    let numbers: Vec<String> = caps_in(set).map(|cap| cap.to_string()).collect();
    match numbers.len() {
        0 => "no capability".to_string(),
        1 => format!("capability {}", numbers[0]),
        _ => format!("capabilities {}", numbers.join(", ")),
    }
}

/// The capability numbers whose bits are set in `set`, ascending.
fn caps_in(set: u64) -> impl Iterator<Item = u8> {
    (0..64u8).filter(move |cap| set & (1u64 << cap) != 0)
}

/// Resolve the unit's `sandbox` fields against the given `/etc/passwd` and `/etc/group` texts.
///
/// `user` is `"uid:gid"`, `"uid"` (gid: that uid's primary group in `passwd`, else the uid),
/// a user name (uid and primary group from `passwd`), or `"name:group"`; either side of the
/// colon may be a number or a name.
pub fn plan(
    capabilities: &[String],
    user: Option<&str>,
    network_none: bool,
    passwd: &str,
    group: &str,
) -> Result<PrivilegePlan, PrivilegeError> {
    let mut keep = 0u64;
    for name in capabilities {
        let cap = parse_capability(name).map_err(PrivilegeError::Capability)?;
        keep |= 1u64 << cap;
    }
    let user = match user {
        None => None,
        Some(spec) => Some(
            resolve_user(spec, passwd, group)
                .map_err(|problem| PrivilegeError::User(spec.to_string(), problem))?,
        ),
    };
    Ok(PrivilegePlan {
        keep,
        user,
        loopback_up: network_none,
    })
}

const SHAPE: &str = "give \"uid:gid\" (e.g. \"1000:1000\"), \"uid\" or a user name";

fn resolve_user(spec: &str, passwd: &str, group: &str) -> Result<(u32, u32), String> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err(format!("is empty; {SHAPE}"));
    }
    match spec.split_once(':') {
        Some((user, group_part)) => {
            if user.is_empty() || group_part.is_empty() || group_part.contains(':') {
                return Err(SHAPE.to_string());
            }
            let uid = match number(user, "uid")? {
                Some(uid) => uid,
                None => find_user(passwd, user)?.0,
            };
            let gid = match number(group_part, "gid")? {
                Some(gid) => gid,
                None => find_group(group, group_part)?,
            };
            Ok((uid, gid))
        }
        None => match number(spec, "uid")? {
            // A bare uid: its primary group if passwd lists it, else the same number, as
            // `docker run --user 1000` does.
            Some(uid) => Ok((uid, primary_gid(passwd, uid)?.unwrap_or(uid))),
            None => find_user(passwd, spec),
        },
    }
}

/// `Some(n)` for an id written in digits, `None` for a name, an error for a bad number.
fn number(text: &str, what: &str) -> Result<Option<u32>, String> {
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        if text.starts_with('-') && text[1..].bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{what} {text} is negative; {SHAPE}"));
        }
        return Ok(None);
    }
    match text.parse::<u32>() {
        // (uid_t)-1 tells setresuid(2)/setresgid(2) to leave that id unchanged: the agent
        // would silently stay root.
        Ok(u32::MAX) => Err(format!(
            "{what} {text} is (uid_t)-1, which setresuid(2) reads as \"leave unchanged\"; give a \
             real {what}"
        )),
        Ok(id) => Ok(Some(id)),
        Err(_) => Err(format!(
            "{what} {text} is out of range (at most {})",
            u32::MAX - 1
        )),
    }
}

/// The entries of a colon-separated database (passwd(5), group(5)) with 1-based line numbers:
/// comments, blank lines and NIS `+`/`-` lines skipped.
fn entries(text: &str) -> impl Iterator<Item = (usize, Vec<&str>)> {
    text.lines().enumerate().filter_map(|(index, line)| {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with(['#', '+', '-']) {
            return None;
        }
        Some((index + 1, line.split(':').collect()))
    })
}

/// A numeric field of an entry, or an error naming the file, the line and what to do.
fn field(
    fields: &[&str],
    index: usize,
    file: &str,
    line: usize,
    what: &str,
) -> Result<u32, String> {
    let text = fields.get(index).copied().unwrap_or("");
    match text.parse::<u32>() {
        Ok(id) if id != u32::MAX && text.bytes().all(|b| b.is_ascii_digit()) => Ok(id),
        _ => Err(format!(
            "{file} line {line} is malformed ({what} {text:?} is not a number); give uid:gid"
        )),
    }
}

/// `(uid, primary gid)` of user `name` in passwd(5) text.
fn find_user(passwd: &str, name: &str) -> Result<(u32, u32), String> {
    for (line, fields) in entries(passwd) {
        if fields[0] == name {
            let uid = field(&fields, 2, "/etc/passwd", line, "uid")?;
            let gid = field(&fields, 3, "/etc/passwd", line, "gid")?;
            return Ok((uid, gid));
        }
    }
    Err("no such user in /etc/passwd; give uid:gid".to_string())
}

/// The primary gid of the first passwd(5) entry with this uid, if any. Entries whose uid
/// field does not parse belong to no uid and are passed over.
fn primary_gid(passwd: &str, uid: u32) -> Result<Option<u32>, String> {
    for (line, fields) in entries(passwd) {
        if fields.get(2).and_then(|text| text.parse::<u32>().ok()) == Some(uid) {
            return field(&fields, 3, "/etc/passwd", line, "gid").map(Some);
        }
    }
    Ok(None)
}

/// A user as `/etc/passwd` and `/etc/group` give it: for a process run as that user outside
/// any sandbox (a notification hook).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub uid: u32,
    pub gid: u32,
    pub home: std::path::PathBuf,
    /// The primary group, then each group(5) entry that lists the user as a member.
    pub groups: Vec<u32>,
}

/// User `name` in passwd(5) and group(5) texts, as initgroups(3) would make it (without NSS:
/// keel is built static). `Ok(None)`: no such user.
pub fn account(passwd: &str, group: &str, name: &str) -> Result<Option<Account>, String> {
    let Some((line, fields)) = entries(passwd).find(|(_, fields)| fields[0] == name) else {
        return Ok(None);
    };
    let uid = field(&fields, 2, "/etc/passwd", line, "uid")?;
    let gid = field(&fields, 3, "/etc/passwd", line, "gid")?;
    let home = std::path::PathBuf::from(fields.get(5).copied().unwrap_or("/"));
    let mut groups = vec![gid];
    for (_, fields) in entries(group) {
        let member = (fields.get(3).copied().unwrap_or(""))
            .split(',')
            .any(|m| m.trim() == name);
        let id = fields.get(2).and_then(|text| text.parse::<u32>().ok());
        if let (true, Some(id)) = (member, id) {
            if !groups.contains(&id) {
                groups.push(id);
            }
        }
    }
    Ok(Some(Account {
        uid,
        gid,
        home,
        groups,
    }))
}

/// The gid of group `name` in group(5) text.
fn find_group(group: &str, name: &str) -> Result<u32, String> {
    for (line, fields) in entries(group) {
        if fields[0] == name {
            return field(&fields, 2, "/etc/group", line, "gid");
        }
    }
    Err(format!(
        "no such group {name:?} in /etc/group; give a numeric gid"
    ))
}

/// Carry out `plan` on the calling thread. Call it in the single-threaded child, after the
/// mount sandbox is built and right before execve: capabilities are per-thread
/// (capabilities(7)), and most of these steps cannot be undone.
///
/// The order is forced by what each step needs:
/// - the loopback goes up first: SIOCSIFFLAGS needs CAP_NET_ADMIN (netdevice(7)), which the
///   bounding-set drop and the capset below take away;
/// - the bounding set is narrowed while CAP_SETPCAP is still effective (prctl(2),
///   PR_CAPBSET_DROP); a switch to a non-root uid empties the effective set;
/// - the ambient set is cleared before anything is raised in it;
/// - groups and gid change before the uid: setgroups(2) and setresgid(2) need CAP_SETGID, lost
///   with uid 0. PR_SET_KEEPCAPS makes the permitted set survive the uid change (capabilities(7),
///   "Effect of user ID changes on capabilities"); the effective set is emptied regardless;
/// - capset comes after the uid change: it restores the effective set from the permitted one and
///   narrows permitted and inheritable to `keep` — permitted can only shrink, so this must
///   follow every step that needs a capability `keep` may lack;
/// - ambient raising needs the capability in both permitted and inheritable (prctl(2)), so
///   after capset;
/// - no_new_privs last: it only governs execve, and setting it as the final step means an `Ok`
///   from this function covers every step.
pub fn apply(plan: &PrivilegePlan) -> Result<(), PrivilegeError> {
    // Not a step but a clearer message: a granted capability keel lacks itself would
    // otherwise surface as a bare EPERM from capset, after the user switch.
    if let Ok((_, permitted, _)) = caps::current_caps() {
        let missing = plan.keep & !permitted;
        if missing != 0 {
            return Err(PrivilegeError::NotHeld(missing));
        }
    }

    if plan.loopback_up {
        bring_loopback_up().map_err(PrivilegeError::Loopback)?;
    }

    // For root, execve treats the file's capability sets as all ones (capabilities(7),
    // "Capabilities and execution of programs by root"): the new permitted set is then the
    // bounding set plus the inheritable set. Narrowing both to `keep` is what makes the
    // grant hold across execve for a root agent.
    let (last, from_kernel) = last_cap();
    for cap in (0..=last).filter(|cap| plan.keep & (1u64 << cap) == 0) {
        match caps::bounding_drop(cap) {
            Ok(()) => {}
            // Without /proc/sys/kernel/cap_last_cap we guessed the last capability; EINVAL
            // means this kernel knows no capability this high (prctl(2)).
            Err(e) if !from_kernel && e.raw_os_error() == Some(libc::EINVAL) => break,
            Err(e) => return Err(PrivilegeError::BoundingSet(cap, e)),
        }
    }

    caps::ambient_clear_all().map_err(PrivilegeError::AmbientClear)?;

    if let Some((uid, gid)) = plan.user {
        caps::clear_groups().map_err(PrivilegeError::Groups)?;
        caps::set_all_gids(gid).map_err(|e| PrivilegeError::Gid(gid, e))?;
        if plan.keep != 0 {
            // Reset by execve (prctl(2)), so it does not outlive the agent's exec.
            caps::set_keep_caps(true).map_err(PrivilegeError::KeepCaps)?;
        }
        caps::set_all_uids(uid).map_err(|e| PrivilegeError::Uid(uid, e))?;
    }

    let keep = plan.keep;
    caps::capset(keep, keep, keep).map_err(|e| PrivilegeError::Capset(keep, e))?;

    // A non-root agent execs a file without file capabilities: its new permitted set is its
    // ambient set (capabilities(7), "Ambient capability set"), so the grant rides there.
    for cap in caps_in(keep) {
        caps::ambient_raise(cap).map_err(|e| PrivilegeError::AmbientRaise(cap, e))?;
    }

    caps::set_no_new_privs().map_err(PrivilegeError::NoNewPrivs)
}

/// Set IFF_UP on `lo` in the calling thread's network namespace (netdevice(7)): a new network
/// namespace starts with `lo` down, and the agent's 127.0.0.1 would be unreachable.
fn bring_loopback_up() -> io::Result<()> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    // Any socket of the namespace will do for the interface ioctls; it is closed on return.
    let socket = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    let flags = caps::interface_flags(&socket, "lo")?;
    if flags & libc::IFF_UP == 0 {
        caps::set_interface_flags(&socket, "lo", flags | libc::IFF_UP)?;
    }
    Ok(())
}

/// The highest capability the kernel knows, and whether the kernel said so
/// (`/proc/sys/kernel/cap_last_cap`, proc(5)) or it is a guess (40, CAP_CHECKPOINT_RESTORE).
/// Read once per process (the kernel's constant): [`crate::sandbox::start::daemon::prepare`] reads it before
/// the agent's child exists, which then finds it here (its `/proc` is the sandbox's by then,
/// and reading it there cost ~40 µs of every start).
/// A failed read is not kept: the next call tries again.
pub fn last_cap() -> (u8, bool) {
    static LAST_CAP: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    if let Some(&last) = LAST_CAP.get() {
        return (last, true);
    }
    match std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|text| parse_last_cap(&text))
    {
        Some(last) => (*LAST_CAP.get_or_init(|| last), true),
        None => (40, false),
    }
}

fn parse_last_cap(text: &str) -> Option<u8> {
    text.trim().parse::<u8>().ok().filter(|last| *last < 64)
}

#[cfg(test)]
mod tests;
