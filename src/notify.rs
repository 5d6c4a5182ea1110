//! systemd's notify protocol (sd_notify(3)): a datagram to `$NOTIFY_SOCKET`. Without the
//! variable (not under systemd, Type=notify) every call is a no-op.

use std::os::unix::net::UnixDatagram;

fn send(message: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(socket) = UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let result = if let Some(abstract_name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)
            .and_then(|addr| socket.send_to_addr(message.as_bytes(), &addr))
    } else {
        socket.send_to(message.as_bytes(), &path)
    };
    if let Err(e) = result {
        log::warn!("sd_notify to {}: {e}", path.to_string_lossy());
    }
}

/// `READY=1` with a status line, once the daemon has reconciled.
pub fn ready(status: &str) {
    send(&format!("READY=1\nSTATUS={status}"));
}
