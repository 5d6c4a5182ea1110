use super::*;
use std::os::fd::AsFd;

/// A namespace made with a block maps exactly that block, and a process that enters it is
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
    let userns = create(3_000_000_000, 65536).expect("create a user namespace");
    let ns = userns.fd();
    let (read_end, write_end) = crate::sys::fds::pipe().unwrap();
    // SAFETY: the child only makes system calls, reads a file and exits without unwinding;
    // what another test thread held at the fork is never touched in it.
    match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => {
            let report = (|| -> Result<String, String> {
                enter(ns.as_fd()).map_err(|e| format!("enter: {e}"))?;
                let map =
                    std::fs::read_to_string("/proc/self/uid_map").map_err(|e| e.to_string())?;
                Ok(format!(
                    "{} {} {}",
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
            assert_eq!(out, "0 0 0 3000000000 65536");
        }
    }
}
