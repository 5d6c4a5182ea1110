//! Every connection attempt in a task's network namespace, seen on its `lo` (issue 19): in a
//! namespace where every address is routed `local` on `lo`, a TCP connect to a port nobody
//! listens on is reset by the kernel at once and a UDP datagram to a port without a socket
//! earns an ICMP port-unreachable — no listener of keel's ever sees them, yet the relay must
//! journal them as refusals. A packet socket (packet(7), `AF_PACKET`, `SOCK_DGRAM`: the
//! network header first) bound to that `lo` sees them instead.
//!
//! What the kernel passes up is decided by a classic BPF filter ([`filter`]), attached before
//! the socket is bound (a packet socket made with protocol 0 receives nothing until bind(2)),
//! so no unfiltered packet is ever queued:
//! - only packets `lo` receives (`PACKET_HOST`; `lo` shows each packet twice, going out and
//!   coming in);
//! - IPv4 (no later fragment: it has no transport header) and IPv6 whose next header is TCP or
//!   UDP directly — an IPv6 packet with extension headers is dropped: `connect(2)` and
//!   `sendto(2)` never add them, and only a hand-made packet (raw sockets) carries them;
//! - TCP with SYN set and ACK clear (a connection's first packet), or UDP but to the
//!   sandbox's resolver, `198.18.0.2:53` (keel's: not a refusal; DNS to any other server is),
//!   nor the resolver's replies (from `198.18.0.2:53`);
//! - to a destination outside `127.0.0.0/8` and `::1`: the agent's own loopback traffic (its
//!   test servers) costs keel nothing.
//!
//! Whether an attempt was refused is the relay's decision (an attempt to a captured address
//! is seen here as well); [`parse_attempt`] checks everything the filter checked once more.
//! The receive buffer is small ([`RECEIVE_BUFFER`]): a SYN flood costs bounded memory and
//! drops packets ([`take_dropped`] counts them), which a coalesced journal can afford.

use crate::sys::netlink::LOOPBACK_INDEX;
use crate::sys::seccomp::Instruction;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A transport protocol of an [`Attempt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
}

/// One connection attempt (a TCP SYN) or datagram (UDP) seen on the namespace's `lo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Attempt {
    pub protocol: Protocol,
    pub source: SocketAddr,
    pub destination: SocketAddr,
}

/// The ethertypes the filter passes (`skb->protocol`, the `sll_protocol` of a packet read).
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;
const DNS_PORT: u16 = 53;
/// The sandbox's own resolver (`crate::network::fake::RESOLVER_ADDRESS`, 198.18.0.2): its
/// queries are no attempt; DNS to any other server is (refused, and journaled).
const SANDBOX_RESOLVER: [u8; 4] = [198, 18, 0, 2];
const IPV4_FRAGMENT_OFFSET: u32 = 0x1FFF;
const IPV6_HEADER: usize = 40;
/// Bytes of each packet the kernel keeps: the longest IPv4 header (60) and the first 20 of
/// TCP's (ports and flags). The rest of a datagram never reaches userspace (its buffer still
/// counts against [`RECEIVE_BUFFER`] while queued).
pub const SNAP_LENGTH: u32 = 80;
/// `SO_RCVBUF` asked for (the kernel doubles it for its bookkeeping): about 150 queued
/// attempts between two reads of the relay (158 small datagrams measured on Linux 6.18), then
/// drops, counted by [`take_dropped`].
pub const RECEIVE_BUFFER: libc::c_int = 64 * 1024;
/// At most this many packets per [`read_attempts`] call, so that a flood never keeps its
/// caller reading forever; the descriptor stays readable while more are queued.
pub const MAX_READ_PER_CALL: usize = 1024;

/// A socket that sees every connection attempt in the calling thread's network namespace (on
/// its `lo`), nonblocking and close-on-exec; read it with [`read_attempts`] when poll(2) says
/// it is readable. Call it on a thread inside the target namespace
/// (`crate::sys::netns::run_in`): the socket stays in that namespace wherever its descriptor
/// goes. Needs `CAP_NET_RAW` over the namespace.
pub fn open_attempt_sniffer() -> io::Result<OwnedFd> {
    // SAFETY: integer arguments only; a new descriptor or -1. Protocol 0: the socket is not
    // hooked to any device (receives nothing) until bind(2) below.
    let raw = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    let socket = unsafe { OwnedFd::from_raw_fd(raw) };
    attach_filter(socket.as_raw_fd(), &filter())?;
    set_int_option(
        socket.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVBUF,
        RECEIVE_BUFFER,
    )?;
    // Outgoing copies are not even cloned for this socket (Linux 4.20); the filter drops them
    // on older kernels.
    match set_int_option(
        socket.as_raw_fd(),
        libc::SOL_PACKET,
        libc::PACKET_IGNORE_OUTGOING,
        1,
    ) {
        Err(e) if e.raw_os_error() != Some(libc::ENOPROTOOPT) => return Err(e),
        _ => {}
    }
    // SAFETY: sockaddr_ll is a plain C struct of integers; all-zero is a valid value.
    let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    address.sll_family = libc::AF_PACKET as u16;
    address.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    address.sll_ifindex = LOOPBACK_INDEX as i32;
    // SAFETY: `address` lives on our stack for the call and its size is passed with it.
    let rc = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            &address as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(socket)
}

/// Read every queued packet (up to [`MAX_READ_PER_CALL`]) without blocking and append the
/// attempts among them to `out`; returns how many were appended. A packet the parser does not
/// take (or one `lo` did not receive) is skipped. `ENETDOWN` is returned once after the
/// namespace's `lo` went down (packet(7)).
pub fn read_attempts(fd: BorrowedFd<'_>, out: &mut Vec<Attempt>) -> io::Result<usize> {
    let mut appended = 0;
    let mut buffer = [0u8; SNAP_LENGTH as usize];
    for _ in 0..MAX_READ_PER_CALL {
        // SAFETY: sockaddr_ll is a plain C struct of integers; all-zero is a valid value.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut from_length = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: `buffer` and `from` live on our stack for the call, their sizes passed with
        // them; the kernel writes at most that much into each.
        let read = unsafe {
            libc::recvfrom(
                fd.as_raw_fd(),
                buffer.as_mut_ptr() as *mut libc::c_void,
                buffer.len(),
                libc::MSG_DONTWAIT,
                &mut from as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                &mut from_length,
            )
        };
        if read < 0 {
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EAGAIN) => break,
                Some(libc::EINTR) => continue,
                _ => return Err(error),
            }
        }
        if from.sll_pkttype != libc::PACKET_HOST {
            continue;
        }
        let packet = &buffer[..(read as usize).min(buffer.len())];
        if let Some(attempt) = parse_attempt(u16::from_be(from.sll_protocol), packet) {
            out.push(attempt);
            appended += 1;
        }
    }
    Ok(appended)
}

/// Packets the kernel dropped for want of room since the last call (`PACKET_STATISTICS`,
/// which resets the count): what a journal can add as "and N more".
pub fn take_dropped(fd: BorrowedFd<'_>) -> io::Result<u32> {
    // struct tpacket_stats: tp_packets, tp_drops.
    let mut stats = [0u32; 2];
    let mut length = std::mem::size_of_val(&stats) as libc::socklen_t;
    // SAFETY: `stats` lives on our stack for the call and its size is passed with it.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            stats.as_mut_ptr() as *mut libc::c_void,
            &mut length,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stats[1])
}

/// The attempt in `packet` (its network header first), received with ethertype `ethertype`,
/// or `None` unless it is one the filter passes: IPv4 (not a later fragment) or IPv6 (no
/// extension header) carrying a TCP SYN without ACK, or UDP but to `198.18.0.2:53`, to a
/// destination off loopback. Only the headers are read (a capture is cut at
/// [`SNAP_LENGTH`]); never panics on any bytes.
pub fn parse_attempt(ethertype: u16, packet: &[u8]) -> Option<Attempt> {
    let (source, destination, protocol, transport) = match ethertype {
        ETHERTYPE_IPV4 => {
            let header = packet.get(..20)?;
            let header_length = usize::from(header[0] & 0x0F) * 4;
            let fragment_offset = u32::from(u16::from_be_bytes([header[6], header[7]]));
            if header[0] >> 4 != 4
                || header_length < 20
                || fragment_offset & IPV4_FRAGMENT_OFFSET != 0
            {
                return None;
            }
            let source = Ipv4Addr::from(<[u8; 4]>::try_from(&header[12..16]).ok()?);
            let destination = Ipv4Addr::from(<[u8; 4]>::try_from(&header[16..20]).ok()?);
            (
                IpAddr::V4(source),
                IpAddr::V4(destination),
                header[9],
                packet.get(header_length..)?,
            )
        }
        ETHERTYPE_IPV6 => {
            let header = packet.get(..IPV6_HEADER)?;
            if header[0] >> 4 != 6 {
                return None;
            }
            let source = Ipv6Addr::from(<[u8; 16]>::try_from(&header[8..24]).ok()?);
            let destination = Ipv6Addr::from(<[u8; 16]>::try_from(&header[24..40]).ok()?);
            (
                IpAddr::V6(source),
                IpAddr::V6(destination),
                header[6],
                &packet[IPV6_HEADER..],
            )
        }
        _ => return None,
    };
    if destination.is_loopback() {
        return None;
    }
    let source_port = u16::from_be_bytes([*transport.first()?, *transport.get(1)?]);
    let destination_port = u16::from_be_bytes([*transport.get(2)?, *transport.get(3)?]);
    let protocol = match protocol {
        IPPROTO_TCP => {
            let flags = *transport.get(13)?;
            if flags & (TCP_SYN | TCP_ACK) != TCP_SYN {
                return None;
            }
            Protocol::Tcp
        }
        // The resolver's replies (from 198.18.0.2:53 to the client, whose address in the
        // namespace may be any: every address is local) are no attempt either.
        IPPROTO_UDP
            if source_port == DNS_PORT
                && source == IpAddr::V4(Ipv4Addr::from(SANDBOX_RESOLVER)) =>
        {
            return None
        }
        IPPROTO_UDP
            if destination_port != DNS_PORT
                || destination != IpAddr::V4(Ipv4Addr::from(SANDBOX_RESOLVER)) =>
        {
            Protocol::Udp
        }
        _ => return None,
    };
    Some(Attempt {
        protocol,
        source: SocketAddr::new(source, source_port),
        destination: SocketAddr::new(destination, destination_port),
    })
}

// linux/bpf_common.h, linux/filter.h.
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_LD_H_ABS: u16 = 0x28;
const BPF_LD_B_ABS: u16 = 0x30;
const BPF_LD_H_IND: u16 = 0x48;
const BPF_LD_B_IND: u16 = 0x50;
const BPF_LDX_B_MSH: u16 = 0xB1;
const BPF_LDX_IMM: u16 = 0x01;
const BPF_ALU_AND_K: u16 = 0x54;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JSET_K: u16 = 0x45;
const BPF_JMP_JA: u16 = 0x05;
const BPF_RET_K: u16 = 0x06;
/// `SKF_AD_OFF + n`: the ancillary field n (`skb->pkt_type`, `skb->protocol`), as a load's k.
const fn ancillary(field: libc::c_int) -> u32 {
    (libc::SKF_AD_OFF + field) as u32
}

/// Where a jump of the filter goes: the next instruction or a named place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    Next,
    Ipv4,
    Ipv6,
    Ipv6Destination,
    Transport,
    Tcp,
    Udp,
    UdpDestination,
    Dns,
    Accept,
    Drop,
}

enum Step {
    Plain(Instruction),
    Jump {
        code: u16,
        k: u32,
        yes: Label,
        no: Label,
    },
    Goto(Label),
    Here(Label),
}

/// A classic BPF program whose jumps name [`Label`]s, resolved to the forward offsets of cBPF
/// by [`Builder::finish`].
#[derive(Default)]
struct Builder {
    steps: Vec<Step>,
}

impl Builder {
    fn op(&mut self, code: u16, k: u32) -> &mut Self {
        let instruction = Instruction {
            code,
            jt: 0,
            jf: 0,
            k,
        };
        self.steps.push(Step::Plain(instruction));
        self
    }

    fn jump(&mut self, code: u16, k: u32, yes: Label, no: Label) -> &mut Self {
        self.steps.push(Step::Jump { code, k, yes, no });
        self
    }

    fn goto(&mut self, to: Label) -> &mut Self {
        self.steps.push(Step::Goto(to));
        self
    }

    fn label(&mut self, label: Label) -> &mut Self {
        self.steps.push(Step::Here(label));
        self
    }

    /// The instructions, every jump an offset. Panics on a label placed twice or never, or a
    /// jump backwards or further than 255 (a mistake in [`filter`], caught by its tests).
    fn finish(&self) -> Vec<Instruction> {
        let mut places = Vec::new();
        let mut index = 0usize;
        for step in &self.steps {
            match step {
                Step::Here(label) => {
                    assert!(
                        !places.iter().any(|(l, _)| l == label),
                        "{label:?} placed twice"
                    );
                    places.push((*label, index));
                }
                _ => index += 1,
            }
        }
        let offset = |from: usize, to: Label| -> u8 {
            if to == Label::Next {
                return 0;
            }
            let (_, at) = places
                .iter()
                .find(|(l, _)| *l == to)
                .unwrap_or_else(|| panic!("{to:?} never placed"));
            let distance = at
                .checked_sub(from + 1)
                .unwrap_or_else(|| panic!("a jump back to {to:?}"));
            u8::try_from(distance).expect("a jump of at most 255 instructions")
        };
        let mut program = Vec::with_capacity(index);
        for step in &self.steps {
            match *step {
                Step::Plain(instruction) => program.push(instruction),
                Step::Jump { code, k, yes, no } => {
                    let here = program.len();
                    program.push(Instruction {
                        code,
                        jt: offset(here, yes),
                        jf: offset(here, no),
                        k,
                    });
                }
                Step::Goto(to) => {
                    let here = program.len();
                    program.push(Instruction {
                        code: BPF_JMP_JA,
                        jt: 0,
                        jf: 0,
                        k: u32::from(offset(here, to)),
                    });
                }
                Step::Here(_) => {}
            }
        }
        program
    }
}

/// The filter (see the module's documentation). It sees the network header at offset 0
/// (`SOCK_DGRAM`); a load past the packet's end drops it.
fn filter() -> Vec<Instruction> {
    use Label::*;
    let mut p = Builder::default();
    p.op(BPF_LD_W_ABS, ancillary(libc::SKF_AD_PKTTYPE))
        .jump(BPF_JMP_JEQ_K, u32::from(libc::PACKET_HOST), Next, Drop)
        .op(BPF_LD_W_ABS, ancillary(libc::SKF_AD_PROTOCOL))
        .jump(BPF_JMP_JEQ_K, u32::from(ETHERTYPE_IPV4), Ipv4, Next)
        .jump(BPF_JMP_JEQ_K, u32::from(ETHERTYPE_IPV6), Ipv6, Drop);
    // IPv4: no later fragment, not to 127.0.0.0/8; X = the header's length (4 × IHL).
    p.label(Ipv4)
        .op(BPF_LD_H_ABS, 6)
        .jump(BPF_JMP_JSET_K, IPV4_FRAGMENT_OFFSET, Drop, Next)
        .op(BPF_LD_W_ABS, 16)
        .op(BPF_ALU_AND_K, 0xFF00_0000)
        .jump(BPF_JMP_JEQ_K, 0x7F00_0000, Drop, Next)
        .op(BPF_LDX_B_MSH, 0)
        .op(BPF_LD_B_ABS, 9)
        .goto(Transport);
    // IPv6: not to ::1 (words 24, 28, 32: 0; 36: 1); X = 40, the next header TCP or UDP.
    p.label(Ipv6);
    for word in [24, 28, 32] {
        p.op(BPF_LD_W_ABS, word)
            .jump(BPF_JMP_JEQ_K, 0, Next, Ipv6Destination);
    }
    p.op(BPF_LD_W_ABS, 36)
        .jump(BPF_JMP_JEQ_K, 1, Drop, Ipv6Destination)
        .label(Ipv6Destination)
        .op(BPF_LDX_IMM, IPV6_HEADER as u32)
        .op(BPF_LD_B_ABS, 6);
    // A = the transport protocol, X = where its header starts.
    p.label(Transport)
        .jump(BPF_JMP_JEQ_K, u32::from(IPPROTO_TCP), Tcp, Next)
        .jump(BPF_JMP_JEQ_K, u32::from(IPPROTO_UDP), Udp, Drop)
        .label(Tcp)
        .op(BPF_LD_B_IND, 13)
        .op(BPF_ALU_AND_K, u32::from(TCP_SYN | TCP_ACK))
        .jump(BPF_JMP_JEQ_K, u32::from(TCP_SYN), Accept, Drop)
        .label(Udp)
        // From port 53 of the sandbox's resolver (IPv4): its reply, no attempt.
        .op(BPF_LD_H_IND, 0)
        .jump(BPF_JMP_JEQ_K, u32::from(DNS_PORT), Next, UdpDestination)
        .op(BPF_LD_W_ABS, ancillary(libc::SKF_AD_PROTOCOL))
        .jump(
            BPF_JMP_JEQ_K,
            u32::from(ETHERTYPE_IPV4),
            Next,
            UdpDestination,
        )
        .op(BPF_LD_W_ABS, 12)
        .jump(
            BPF_JMP_JEQ_K,
            u32::from_be_bytes(SANDBOX_RESOLVER),
            Drop,
            UdpDestination,
        )
        .label(UdpDestination)
        .op(BPF_LD_H_IND, 2)
        .jump(BPF_JMP_JEQ_K, u32::from(DNS_PORT), Dns, Accept)
        // To port 53: only the sandbox's resolver's (IPv4) is no attempt.
        .label(Dns)
        .op(BPF_LD_W_ABS, ancillary(libc::SKF_AD_PROTOCOL))
        .jump(BPF_JMP_JEQ_K, u32::from(ETHERTYPE_IPV4), Next, Accept)
        .op(BPF_LD_W_ABS, 16)
        .jump(
            BPF_JMP_JEQ_K,
            u32::from_be_bytes(SANDBOX_RESOLVER),
            Drop,
            Accept,
        )
        .label(Accept)
        .op(BPF_RET_K, SNAP_LENGTH)
        .label(Drop)
        .op(BPF_RET_K, 0);
    p.finish()
}

/// `SO_ATTACH_FILTER`: the kernel checks the program and copies it.
fn attach_filter(socket: libc::c_int, program: &[Instruction]) -> io::Result<()> {
    let filters = crate::sys::seccomp::sock_filters(program);
    let fprog = crate::sys::seccomp::sock_fprog(&filters);
    // SAFETY: `fprog` points at `filters`, both alive for the call, and its size is passed;
    // the kernel copies the program and keeps no pointer.
    let rc = unsafe {
        libc::setsockopt(
            socket,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &fprog as *const libc::sock_fprog as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_int_option(
    socket: libc::c_int,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` lives on our stack for the call and its size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            socket,
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
