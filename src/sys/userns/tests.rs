use super::*;
use std::os::fd::AsFd;

/// A namespace made with a block maps exactly that block, is owned by the block's first id
/// (the kernel charges per-user counts to the owner too), and a process that enters it is
/// its root: uid and gid 0 inside, the block's first id outside.
#[test]
fn a_process_that_enters_is_root_of_the_block() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none()
                && std::env::var_os("KEEL_REQUIRE_PRIVILEGED").is_none(),
            "needs root (CAP_SETUID, CAP_SETGID, CAP_SYS_ADMIN)"
        );
        return;
    }
    let (read_end, write_end) = crate::sys::fds::pipe().unwrap();
    // SAFETY: the child only makes system calls, reads a file and exits without unwinding;
    // what another test thread held at the fork is never touched in it.
    match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => {
            // In the child, single-threaded as `create` asks (the test harness is not): a
            // change of ids there applies to every thread.
            let report = (|| -> Result<String, String> {
                let ns = create(3_000_000_000, 65536).map_err(|e| format!("create: {e}"))?;
                // ioctl_ns(2) NS_GET_OWNER_UID: owned by the block's first id, not by root.
                let mut owner: libc::uid_t = u32::MAX;
                // SAFETY: NS_GET_OWNER_UID writes one uid_t through the pointer given.
                let rc = unsafe {
                    libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&ns), 0xb704, &mut owner)
                };
                if rc < 0 {
                    return Err(format!("NS_GET_OWNER_UID: {}", io::Error::last_os_error()));
                }
                enter(ns.as_fd()).map_err(|e| format!("enter: {e}"))?;
                let map =
                    std::fs::read_to_string("/proc/self/uid_map").map_err(|e| e.to_string())?;
                Ok(format!(
                    "owner {owner}: {} {} {}",
                    nix::unistd::getuid(),
                    nix::unistd::getgid(),
                    map.split_whitespace().collect::<Vec<_>>().join(" ")
                ))
            })()
            .unwrap_or_else(|e| e);
            let _ = nix::unistd::write(&write_end, report.as_bytes());
            crate::sys::fds::exit_now(0);
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(write_end);
            let mut out = String::new();
            use std::io::Read;
            std::fs::File::from(read_end)
                .read_to_string(&mut out)
                .unwrap();
            nix::sys::wait::waitpid(child, None).unwrap();
            assert_eq!(out, "owner 3000000000: 0 0 0 3000000000 65536");
        }
    }
}
