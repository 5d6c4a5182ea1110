//! systemd's notify protocol (sd_notify(3), sd_watchdog_enabled(3)): datagrams to
//! `$NOTIFY_SOCKET`, and the watchdog (`$WATCHDOG_USEC`, `$WATCHDOG_PID`). Without the
//! variables (not under systemd with `Type=notify`) every call is a no-op.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Where the datagrams go: a path, or (`@name`) an abstract socket.
enum Target {
    Path(std::path::PathBuf),
    Abstract(Vec<u8>),
}

pub struct Notifier {
    target: Option<(UnixDatagram, Target)>,
    /// How often to ping: half of `WATCHDOG_USEC`, as systemd recommends.
    watchdog: Option<Duration>,
    last_status: Option<String>,
}

/// Half of `WATCHDOG_USEC`, when the watchdog is meant for this process: `WATCHDOG_PID`, if
/// set, must be ours (sd_watchdog_enabled(3)).
pub fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, own_pid: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    if let Some(pid) = pid {
        if pid.trim().parse::<u32>().ok() != Some(own_pid) {
            return None;
        }
    }
    Some(Duration::from_micros(usec / 2))
}

impl Notifier {
    /// Read the variables, then remove them from the environment: shims (and their agents)
    /// inherit the daemon's environment and must never speak for it.
    pub fn from_env() -> Self {
        let socket = std::env::var_os("NOTIFY_SOCKET");
        let usec = std::env::var("WATCHDOG_USEC").ok();
        let pid = std::env::var("WATCHDOG_PID").ok();
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
            // The daemon is single-threaded.
            std::env::remove_var(name);
        }
        let Some(socket) = socket.filter(|s| !s.is_empty()) else {
            return Notifier::disabled();
        };
        let bytes = socket.as_encoded_bytes();
        let target = match bytes.strip_prefix(b"@") {
            Some(name) => Target::Abstract(name.to_vec()),
            None => Target::Path(socket.clone().into()),
        };
        let watchdog = watchdog_interval(usec.as_deref(), pid.as_deref(), std::process::id());
        match UnixDatagram::unbound() {
            Ok(datagram) => Notifier {
                target: Some((datagram, target)),
                watchdog,
                last_status: None,
            },
            Err(e) => {
                log::warn!("sd_notify: cannot create a socket: {e}");
                Notifier::disabled()
            }
        }
    }

    pub fn disabled() -> Self {
        Notifier {
            target: None,
            watchdog: None,
            last_status: None,
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// How often the loop must ping the watchdog, if systemd set one up for us.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog.filter(|_| self.is_enabled())
    }

    fn send(&self, message: &str) {
        let Some((socket, target)) = &self.target else {
            return;
        };
        let result = match target {
            Target::Path(path) => socket.send_to(message.as_bytes(), path),
            Target::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                std::os::unix::net::SocketAddr::from_abstract_name(name)
                    .and_then(|addr| socket.send_to_addr(message.as_bytes(), &addr))
            }
        };
        if let Err(e) = result {
            log::warn!("sd_notify: {e}");
        }
    }

    /// `READY=1` with a status line, once the daemon has reconciled.
    pub fn ready(&mut self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}"));
        self.last_status = Some(status.to_string());
    }

    /// `STATUS=…`, when it differs from the last one sent.
    pub fn status(&mut self, status: &str) {
        if self.is_enabled() && self.last_status.as_deref() != Some(status) {
            self.send(&format!("STATUS={status}"));
            self.last_status = Some(status.to_string());
        }
    }

    pub fn stopping(&self) {
        self.send("STOPPING=1");
    }

    pub fn watchdog_ping(&self) {
        self.send("WATCHDOG=1");
    }
}

#[cfg(test)]
mod tests;
