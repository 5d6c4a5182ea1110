//! The little of rtnetlink(7) a task's network namespace needs: its loopback up, and routes of
//! type `local` on it (every address of a range answered by this namespace itself, as
//! `ip route add local 198.18.0.0/15 dev lo` makes them: bind(2) and connect(2) to any of them
//! then stay on `lo`, where keel's listeners take the connections).
//!
//! Each call opens a `NETLINK_ROUTE` socket in the calling thread's network namespace, sends
//! one request with `NLM_F_ACK` and reads the kernel's answer: 0, or the errno it refused with.
//! No unsafe code: the messages are built as bytes (netlink(7), rtnetlink(7)).

use nix::sys::socket::{
    recv, sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

/// `lo` is the first device of every network namespace (`LOOPBACK_IFINDEX`).
pub const LOOPBACK_INDEX: u32 = 1;

const RTM_NEWLINK: u16 = 16;
const RTM_NEWROUTE: u16 = 24;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_STATIC: u8 = 4;
const RT_SCOPE_HOST: u8 = 254;
const RTN_LOCAL: u8 = 2;
const HEADER: usize = 16;

/// Bring `lo` up (`ip link set lo up`).
pub fn loopback_up() -> io::Result<()> {
    // ifinfomsg: family, pad, type, index, flags, change.
    let mut body = vec![libc::AF_UNSPEC as u8, 0, 0, 0];
    body.extend_from_slice(&(LOOPBACK_INDEX as i32).to_ne_bytes());
    body.extend_from_slice(&(libc::IFF_UP as u32).to_ne_bytes());
    body.extend_from_slice(&(libc::IFF_UP as u32).to_ne_bytes());
    request(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, &body)
}

/// A route of type `local` for `addr/prefix` through `lo`, in the main table
/// (`ip route add local ADDR/PREFIX dev lo`). EEXIST when it is there already.
pub fn add_local_route(addr: IpAddr, prefix: u8) -> io::Result<()> {
    let (family, octets): (u8, Vec<u8>) = match addr {
        IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec()),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec()),
    };
    if usize::from(prefix) > octets.len() * 8 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("/{prefix} is longer than {addr}"),
        ));
    }
    // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    let mut body = vec![
        family,
        prefix,
        0,
        0,
        RT_TABLE_MAIN,
        RTPROT_STATIC,
        RT_SCOPE_HOST,
        RTN_LOCAL,
    ];
    body.extend_from_slice(&0u32.to_ne_bytes());
    if prefix > 0 {
        attribute(&mut body, RTA_DST, &octets);
    }
    attribute(&mut body, RTA_OIF, &LOOPBACK_INDEX.to_ne_bytes());
    request(
        RTM_NEWROUTE,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        &body,
    )
}

/// Append an rtattr (length, type, data, padded to 4 bytes).
fn attribute(out: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = 4 + data.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(data);
    out.resize(out.len() + (align(len) - len), 0);
}

fn align(len: usize) -> usize {
    (len + 3) & !3
}

/// One request, its acknowledgement read back.
fn request(kind: u16, flags: u16, body: &[u8]) -> io::Result<()> {
    let socket = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    let message = encode(kind, flags, 1, body);
    sendto(
        socket.as_raw_fd(),
        &message,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )?;
    let mut answer = [0u8; 4096];
    let read = recv(socket.as_raw_fd(), &mut answer, MsgFlags::empty())?;
    acknowledgement(&answer[..read])
}

/// A netlink message: the header (length, type, flags, sequence, port 0: the kernel's) and
/// `body`.
pub fn encode(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let len = HEADER + body.len();
    let mut message = Vec::with_capacity(align(len));
    message.extend_from_slice(&(len as u32).to_ne_bytes());
    message.extend_from_slice(&kind.to_ne_bytes());
    message.extend_from_slice(&flags.to_ne_bytes());
    message.extend_from_slice(&seq.to_ne_bytes());
    message.extend_from_slice(&0u32.to_ne_bytes());
    message.extend_from_slice(body);
    message
}

/// The kernel's answer to a request with `NLM_F_ACK`: an `NLMSG_ERROR` whose code is 0 (done)
/// or a negative errno.
pub fn acknowledgement(answer: &[u8]) -> io::Result<()> {
    let malformed = || io::Error::new(io::ErrorKind::InvalidData, "malformed netlink answer");
    let header = answer.get(..HEADER).ok_or_else(malformed)?;
    let kind = u16::from_ne_bytes([header[4], header[5]]);
    if kind != NLMSG_ERROR {
        return Err(malformed());
    }
    let code = answer.get(HEADER..HEADER + 4).ok_or_else(malformed)?;
    match i32::from_ne_bytes([code[0], code[1], code[2], code[3]]) {
        0 => Ok(()),
        errno if errno < 0 => Err(io::Error::from_raw_os_error(-errno)),
        _ => Err(malformed()),
    }
}

#[cfg(test)]
mod tests;
