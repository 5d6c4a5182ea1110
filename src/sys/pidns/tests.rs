use super::*;
use std::os::fd::AsFd;

fn id_of_path(path: &str) -> io::Result<NamespaceId> {
    NamespaceId::of(std::fs::File::open(path)?.as_fd())
}

/// A PID namespace made in a user namespace is owned by it, and the first child cloned into
/// it is its PID 1; the caller's own namespace for children is back afterwards.
#[test]
fn the_first_child_cloned_into_a_namespace_made_in_a_user_namespace_is_its_pid_1() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none()
                && std::env::var_os("KEEL_REQUIRE_PRIVILEGED").is_none(),
            "needs root (CAP_SETUID, CAP_SETGID, CAP_SYS_ADMIN)"
        );
        return;
    }
    let (read_end, write_end) = crate::sys::fds::pipe().unwrap();
    // SAFETY: the child only makes system calls and exits without unwinding; what another
    // test thread held at the fork is never touched in it.
    match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => {
            // Single-threaded, as userns::create asks.
            let report = (|| -> Result<String, String> {
                let userns = crate::sys::userns::create(3_000_065_536, 65536)
                    .map_err(|e| format!("create: {e}"))?;
                let ns = pid_namespace_in(userns.as_fd()).map_err(|e| e.to_string())?;
                let owner = owner_of(ns.as_fd()).map_err(|e| format!("owner: {e}"))?;
                let owned = NamespaceId::of(owner.as_fd()).map_err(|e| e.to_string())?
                    == NamespaceId::of(userns.as_fd()).map_err(|e| e.to_string())?;
                let (pid, _pidfd) =
                    crate::sys::clone3_with_pidfd(0, None, Some(ns.as_fd()), true, &mut || {
                        crate::sys::fds::exit_now(nix::unistd::getpid().as_raw())
                    })
                    .map_err(|e| format!("clone: {e}"))?;
                let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None)
                    .map_err(|e| e.to_string())?;
                let own = id_of_path("/proc/self/ns/pid").map_err(|e| e.to_string())?;
                let children = id_of_path("/proc/thread-self/ns/pid_for_children")
                    .map_err(|e| e.to_string())?;
                Ok(format!(
                    "owned {owned}, {status:?} in it, own restored {}",
                    own == children
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
            assert!(out.starts_with("owned true, Exited(Pid("), "{out}");
            assert!(out.ends_with("), 1) in it, own restored true"), "{out}");
        }
    }
}
