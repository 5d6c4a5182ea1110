//! The credential syscalls the sandbox makes just before it execs the agent: prctl(2) on the
//! capability sets, capset(2)/capget(2), setgroups(2), setresuid(2)/setresgid(2), and the
//! netdevice(7) ioctls that bring an interface up.
//!
//! Thin and safe: each function is one call, returns `io::Result`, and decides nothing; the
//! order and the error messages belong to `crate::sandbox::privileges`.
//!
//! Capabilities, no_new_privs and the keep-capabilities flag are attributes of a *thread*
//! (capabilities(7), "Thread capability sets"); the callers run these functions in a
//! single-threaded child, right before execve, where thread and process are the same thing.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// `_LINUX_CAPABILITY_VERSION_3` (linux/capability.h): 64-bit sets, passed as two 32-bit halves.
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct` (capset(2)).
#[repr(C)]
struct CapHeader {
    version: u32,
    /// 0: the calling thread.
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct` (capset(2)); version 3 takes an array of two: element 0
/// holds capabilities 0..=31, element 1 holds 32..=63.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// One capability set split into the two halves version 3 expects.
fn halves(set: u64) -> (u32, u32) {
    (set as u32, (set >> 32) as u32)
}

fn joined(low: u32, high: u32) -> u64 {
    u64::from(low) | (u64::from(high) << 32)
}

/// prctl(2) with all five arguments: options such as PR_CAP_AMBIENT and PR_SET_NO_NEW_PRIVS
/// fail with EINVAL unless the unused ones are zero, so every caller passes them explicitly.
fn prctl(
    option: libc::c_int,
    arg2: libc::c_ulong,
    arg3: libc::c_ulong,
    arg4: libc::c_ulong,
    arg5: libc::c_ulong,
) -> io::Result<libc::c_int> {
    // SAFETY: every option used in this module takes integer arguments only; no pointer is
    // passed, so the kernel reads or writes none of our memory.
    let rc = unsafe { libc::prctl(option, arg2, arg3, arg4, arg5) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// `prctl(PR_CAPBSET_DROP, cap)`: remove `cap` from the bounding set, for good (no way back
/// for this thread or anything it execs). Needs CAP_SETPCAP in the effective set; EINVAL when
/// the kernel does not know `cap`.
pub fn bounding_drop(cap: u8) -> io::Result<()> {
    prctl(libc::PR_CAPBSET_DROP, cap.into(), 0, 0, 0).map(drop)
}

/// `prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)`: empty the ambient set. Needs no
/// privilege; EINVAL before Linux 4.3.
pub fn ambient_clear_all() -> io::Result<()> {
    prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        0,
        0,
        0,
    )
    .map(drop)
}

/// `prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap)`: EPERM unless `cap` is in both the
/// permitted and the inheritable set (prctl(2)).
pub fn ambient_raise(cap: u8) -> io::Result<()> {
    prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
        cap.into(),
        0,
        0,
    )
    .map(drop)
}

/// `prctl(PR_SET_KEEPCAPS, keep)`: whether the permitted set survives a switch from uid 0 to
/// nonzero uids (capabilities(7), "Effect of user ID changes on capabilities"). Reset by execve.
pub fn set_keep_caps(keep: bool) -> io::Result<()> {
    prctl(libc::PR_SET_KEEPCAPS, keep.into(), 0, 0, 0).map(drop)
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`: execve can no longer grant privileges (set-user-ID bits,
/// file capabilities). Irreversible and inherited by every descendant.
pub fn set_no_new_privs() -> io::Result<()> {
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).map(drop)
}

/// `capset(2)` on the calling thread, version 3. libc has no wrapper (libcap does), hence the
/// raw syscall. EPERM when a set would grow beyond what capabilities(7)'s rules allow.
pub fn capset(effective: u64, permitted: u64, inheritable: u64) -> io::Result<()> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let (eff_low, eff_high) = halves(effective);
    let (prm_low, prm_high) = halves(permitted);
    let (inh_low, inh_high) = halves(inheritable);
    let data = [
        CapData {
            effective: eff_low,
            permitted: prm_low,
            inheritable: inh_low,
        },
        CapData {
            effective: eff_high,
            permitted: prm_high,
            inheritable: inh_high,
        },
    ];
    // SAFETY: header and data are live, properly laid out (#[repr(C)]) locals; version 3 makes
    // the kernel read exactly two data structs. The kernel may write the preferred version into
    // the header, which is why it is passed mutably.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's (effective, permitted, inheritable) sets, through `capget(2)`.
pub fn current_caps() -> io::Result<(u64, u64, u64)> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and data are live #[repr(C)] locals; with version 3 the kernel writes
    // exactly two data structs into `data`, which has room for two.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((
        joined(data[0].effective, data[1].effective),
        joined(data[0].permitted, data[1].permitted),
        joined(data[0].inheritable, data[1].inheritable),
    ))
}

/// `setgroups(0, NULL)`: no supplementary groups at all (setgroups(2)). Needs CAP_SETGID.
pub fn clear_groups() -> io::Result<()> {
    // SAFETY: a size of 0 means the kernel reads nothing through the (NULL) list pointer.
    let rc = unsafe { libc::setgroups(0, std::ptr::null()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `setresgid(gid, gid, gid)`: real, effective and saved gid all `gid`, so none can be
/// switched back. The libc wrapper (not the raw syscall) applies it to every thread.
pub fn set_all_gids(gid: u32) -> io::Result<()> {
    // SAFETY: integer arguments only.
    let rc = unsafe { libc::setresgid(gid, gid, gid) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `setresuid(uid, uid, uid)`: as [`set_all_gids`], for the user ids.
pub fn set_all_uids(uid: u32) -> io::Result<()> {
    // SAFETY: integer arguments only.
    let rc = unsafe { libc::setresuid(uid, uid, uid) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An `ifreq` naming `interface` (netdevice(7)); the rest zeroed.
fn ifreq_for(interface: &str) -> io::Result<libc::ifreq> {
    let name = interface.as_bytes();
    // IFNAMSIZ includes the terminating NUL.
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid interface name {interface:?}"),
        ));
    }
    // SAFETY: ifreq is a plain C struct (a name array and a union of integers, sockaddrs and a
    // pointer); all-zero is a valid value of each, and the kernel expects unused bytes zeroed.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(name) {
        *slot = *byte as libc::c_char;
    }
    Ok(request)
}

/// `SIOCGIFFLAGS` on `socket` (any AF_INET socket; netdevice(7)): the interface's flags.
pub fn interface_flags(socket: &OwnedFd, interface: &str) -> io::Result<i32> {
    let mut request = ifreq_for(interface)?;
    // SAFETY: SIOCGIFFLAGS reads the NUL-terminated name from, and writes the flags into, the
    // ifreq we pass, a live local of the size the kernel expects.
    let rc = unsafe {
        libc::ioctl(
            socket.as_raw_fd(),
            libc::SIOCGIFFLAGS as _,
            &mut request as *mut libc::ifreq,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: after a successful SIOCGIFFLAGS the kernel has filled in `ifru_flags`; every
    // bit pattern is a valid c_short.
    let flags = unsafe { request.ifr_ifru.ifru_flags };
    // The flags are an unsigned short in the kernel: widen without sign extension.
    Ok(i32::from(flags as u16))
}

/// `SIOCSIFFLAGS` on `socket`: set the interface's flags (netdevice(7)). Needs CAP_NET_ADMIN
/// in the user namespace owning the socket's network namespace.
pub fn set_interface_flags(socket: &OwnedFd, interface: &str, flags: i32) -> io::Result<()> {
    let mut request = ifreq_for(interface)?;
    request.ifr_ifru.ifru_flags = flags as u16 as libc::c_short;
    // SAFETY: SIOCSIFFLAGS only reads the ifreq we pass, a live, fully initialised local.
    let rc = unsafe {
        libc::ioctl(
            socket.as_raw_fd(),
            libc::SIOCSIFFLAGS as _,
            &mut request as *mut libc::ifreq,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
