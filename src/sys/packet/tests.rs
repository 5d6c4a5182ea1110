use super::*;
use std::os::fd::AsRawFd;

const HOST: u32 = libc::PACKET_HOST as u32;
const OUTGOING: u32 = libc::PACKET_OUTGOING as u32;

/// The classic BPF the filter uses, run as the kernel runs it on a packet socket: the packet
/// starts at its network header, a load past its end ends the program with 0 (drop), the
/// ancillary loads read `pkt_type` and the ethertype. Returns the program's verdict.
fn run(program: &[Instruction], pkttype: u32, ethertype: u16, packet: &[u8]) -> u32 {
    let (mut a, mut x) = (0u32, 0u32);
    let load = |at: u32, size: usize| -> Option<u32> {
        if at >= ancillary(0) {
            return match (at, size) {
                (k, 4) if k == ancillary(libc::SKF_AD_PKTTYPE) => Some(pkttype),
                (k, 4) if k == ancillary(libc::SKF_AD_PROTOCOL) => Some(u32::from(ethertype)),
                other => panic!("an ancillary load the test does not know: {other:?}"),
            };
        }
        let bytes = packet.get(at as usize..at as usize + size)?;
        Some(bytes.iter().fold(0u32, |v, b| (v << 8) | u32::from(*b)))
    };
    let mut pc = 0usize;
    loop {
        let i = program[pc];
        pc += 1;
        match i.code {
            BPF_LD_W_ABS => match load(i.k, 4) {
                Some(v) => a = v,
                None => return 0,
            },
            BPF_LD_H_ABS | BPF_LD_B_ABS | BPF_LD_H_IND | BPF_LD_B_IND => {
                let size = if matches!(i.code, BPF_LD_H_ABS | BPF_LD_H_IND) {
                    2
                } else {
                    1
                };
                let at = match i.code {
                    BPF_LD_H_IND | BPF_LD_B_IND => x.wrapping_add(i.k),
                    _ => i.k,
                };
                match load(at, size) {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            BPF_LDX_B_MSH => match load(i.k, 1) {
                Some(v) => x = (v & 0x0F) * 4,
                None => return 0,
            },
            BPF_LDX_IMM => x = i.k,
            BPF_ALU_AND_K => a &= i.k,
            BPF_JMP_JA => pc += i.k as usize,
            BPF_JMP_JEQ_K | BPF_JMP_JSET_K => {
                let taken = match i.code {
                    BPF_JMP_JEQ_K => a == i.k,
                    _ => a & i.k != 0,
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            BPF_RET_K => return i.k,
            code => panic!("an instruction the test does not know: {code:#x}"),
        }
    }
}

fn tcp(source_port: u16, destination_port: u16, flags: u8) -> Vec<u8> {
    let mut header = vec![0u8; 20];
    header[0..2].copy_from_slice(&source_port.to_be_bytes());
    header[2..4].copy_from_slice(&destination_port.to_be_bytes());
    header[12] = 5 << 4;
    header[13] = flags;
    header
}

fn udp(source_port: u16, destination_port: u16) -> Vec<u8> {
    let mut header = vec![0u8; 8];
    header[0..2].copy_from_slice(&source_port.to_be_bytes());
    header[2..4].copy_from_slice(&destination_port.to_be_bytes());
    header[4..6].copy_from_slice(&8u16.to_be_bytes());
    header
}

/// An IPv4 packet with `options` words of options (IHL 5 + options) and the fragment field.
fn ipv4(
    source: [u8; 4],
    destination: [u8; 4],
    protocol: u8,
    options: u8,
    fragment: u16,
    payload: &[u8],
) -> Vec<u8> {
    let header_length = 20 + 4 * usize::from(options);
    let mut packet = vec![0u8; header_length];
    packet[0] = 0x40 | (5 + options);
    packet[2..4].copy_from_slice(&((header_length + payload.len()) as u16).to_be_bytes());
    packet[6..8].copy_from_slice(&fragment.to_be_bytes());
    packet[8] = 64;
    packet[9] = protocol;
    packet[12..16].copy_from_slice(&source);
    packet[16..20].copy_from_slice(&destination);
    for option in packet[20..].iter_mut() {
        *option = 1; // NOP
    }
    packet.extend_from_slice(payload);
    packet
}

fn ipv6(source: Ipv6Addr, destination: Ipv6Addr, next_header: u8, payload: &[u8]) -> Vec<u8> {
    let mut packet = vec![0u8; 40];
    packet[0] = 0x60;
    packet[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    packet[6] = next_header;
    packet[7] = 64;
    packet[8..24].copy_from_slice(&source.octets());
    packet[24..40].copy_from_slice(&destination.octets());
    packet.extend_from_slice(payload);
    packet
}

const SYN: u8 = TCP_SYN;
const SYN_ACK: u8 = TCP_SYN | TCP_ACK;
const CLIENT: [u8; 4] = [10, 1, 2, 3];

fn v6(text: &str) -> Ipv6Addr {
    text.parse().unwrap()
}

/// Both the filter (as `lo` receives it) and the parser see `packet`: they must agree.
fn seen(ethertype: u16, packet: &[u8]) -> Option<Attempt> {
    let program = filter();
    let verdict = run(&program, HOST, ethertype, packet);
    let parsed = parse_attempt(ethertype, &packet[..packet.len().min(SNAP_LENGTH as usize)]);
    assert_eq!(
        verdict != 0,
        parsed.is_some(),
        "filter {verdict} and parser {parsed:?} disagree on {packet:?}"
    );
    if verdict != 0 {
        assert_eq!(verdict, SNAP_LENGTH);
    }
    parsed
}

#[test]
fn a_tcp_syn_to_any_address_off_loopback_is_an_attempt() {
    let packet = ipv4(
        [127, 0, 0, 1],
        CLIENT,
        IPPROTO_TCP,
        0,
        0x4000,
        &tcp(40000, 80, SYN),
    );
    let attempt = seen(ETHERTYPE_IPV4, &packet).expect("an attempt");
    assert_eq!(
        attempt,
        Attempt {
            protocol: Protocol::Tcp,
            source: "127.0.0.1:40000".parse().unwrap(),
            destination: "10.1.2.3:80".parse().unwrap(),
        }
    );
    // The same SYN on its way out of `lo` (each packet is seen twice there): the filter drops it.
    assert_eq!(run(&filter(), OUTGOING, ETHERTYPE_IPV4, &packet), 0);
}

#[test]
fn only_a_connections_first_packet_counts() {
    for flags in [
        SYN_ACK, TCP_ACK, 0x04, /* RST */
        0x11, /* FIN ACK */
        0,
    ] {
        let packet = ipv4(
            CLIENT,
            [198, 18, 0, 5],
            IPPROTO_TCP,
            0,
            0,
            &tcp(1, 443, flags),
        );
        assert_eq!(seen(ETHERTYPE_IPV4, &packet), None, "flags {flags:#x}");
    }
    // SYN with ECN bits (ECE, CWR) is still a first packet.
    let packet = ipv4(
        CLIENT,
        [198, 18, 0, 5],
        IPPROTO_TCP,
        0,
        0,
        &tcp(1, 443, SYN | 0xC0),
    );
    assert!(seen(ETHERTYPE_IPV4, &packet).is_some());
}

#[test]
fn loopback_destinations_cost_nothing() {
    for destination in [[127, 0, 0, 1], [127, 255, 3, 4]] {
        let packet = ipv4(CLIENT, destination, IPPROTO_TCP, 0, 0, &tcp(1, 8080, SYN));
        assert_eq!(seen(ETHERTYPE_IPV4, &packet), None, "{destination:?}");
    }
    let packet = ipv4(
        CLIENT,
        [128, 0, 0, 1],
        IPPROTO_TCP,
        0,
        0,
        &tcp(1, 8080, SYN),
    );
    assert!(
        seen(ETHERTYPE_IPV4, &packet).is_some(),
        "128.0.0.1 is not loopback"
    );
    let packet = ipv6(v6("::1"), v6("::1"), IPPROTO_TCP, &tcp(1, 8080, SYN));
    assert_eq!(seen(ETHERTYPE_IPV6, &packet), None);
    for near in ["::2", "::1:1", "1::1", "0:0:1::1"] {
        let packet = ipv6(v6("::1"), v6(near), IPPROTO_TCP, &tcp(1, 8080, SYN));
        assert!(
            seen(ETHERTYPE_IPV6, &packet).is_some(),
            "{near} is not loopback"
        );
    }
}

#[test]
fn udp_is_an_attempt_except_to_the_resolver() {
    let packet = ipv4(CLIENT, [10, 1, 2, 3], IPPROTO_UDP, 0, 0, &udp(5000, 123));
    let attempt = seen(ETHERTYPE_IPV4, &packet).expect("a datagram");
    assert_eq!(attempt.protocol, Protocol::Udp);
    assert_eq!(attempt.destination, "10.1.2.3:123".parse().unwrap());
    let dns = ipv4(CLIENT, [198, 18, 0, 2], IPPROTO_UDP, 0, 0, &udp(5000, 53));
    assert_eq!(seen(ETHERTYPE_IPV4, &dns), None);
    // DNS to any other server is an attempt (refused, and journaled): hard-coded resolvers.
    let elsewhere = ipv4(CLIENT, [10, 9, 9, 9], IPPROTO_UDP, 0, 0, &udp(5000, 53));
    let attempt = seen(ETHERTYPE_IPV4, &elsewhere).expect("DNS to another server");
    assert_eq!(attempt.destination, "10.9.9.9:53".parse().unwrap());
    // The resolver's reply to a client whose address is the resolver's own (every address
    // is local in the namespace): no attempt. From another server's port 53: one.
    let reply = ipv4(
        [198, 18, 0, 2],
        [198, 18, 0, 2],
        IPPROTO_UDP,
        0,
        0,
        &udp(53, 40000),
    );
    assert_eq!(seen(ETHERTYPE_IPV4, &reply), None);
    let other_reply = ipv4(
        [10, 9, 9, 9],
        [198, 18, 0, 2],
        IPPROTO_UDP,
        0,
        0,
        &udp(53, 40000),
    );
    assert!(seen(ETHERTYPE_IPV4, &other_reply).is_some());
    let dns6 = ipv6(v6("fd00::2"), v6("fd00::1"), IPPROTO_UDP, &udp(5000, 53));
    assert!(seen(ETHERTYPE_IPV6, &dns6).is_some());
    let quic = ipv6(
        v6("fd00::2"),
        v6("2001:db8::1"),
        IPPROTO_UDP,
        &udp(5000, 443),
    );
    let attempt = seen(ETHERTYPE_IPV6, &quic).expect("a datagram");
    assert_eq!(attempt.destination, "[2001:db8::1]:443".parse().unwrap());
    assert_eq!(attempt.source, "[fd00::2]:5000".parse().unwrap());
}

#[test]
fn ipv4_options_move_the_transport_header() {
    for options in [1, 3, 10] {
        let packet = ipv4(
            CLIENT,
            [10, 9, 9, 9],
            IPPROTO_TCP,
            options,
            0,
            &tcp(7, 22, SYN),
        );
        let attempt = seen(ETHERTYPE_IPV4, &packet).expect("an attempt");
        assert_eq!(
            attempt.destination,
            "10.9.9.9:22".parse().unwrap(),
            "{options}"
        );
        // The options' NOP bytes (1) where a header of 20 would put the flags: a SYN-ACK
        // behind them must still be read as one.
        let packet = ipv4(
            CLIENT,
            [10, 9, 9, 9],
            IPPROTO_TCP,
            options,
            0,
            &tcp(7, 22, SYN_ACK),
        );
        assert_eq!(seen(ETHERTYPE_IPV4, &packet), None);
    }
}

#[test]
fn a_later_fragment_has_no_transport_header_to_read() {
    let first = ipv4(CLIENT, [10, 1, 1, 1], IPPROTO_UDP, 0, 0x2000, &udp(1, 9999));
    assert!(
        seen(ETHERTYPE_IPV4, &first).is_some(),
        "first fragment (MF)"
    );
    let later = ipv4(
        CLIENT,
        [10, 1, 1, 1],
        IPPROTO_UDP,
        0,
        0x2000 | 185,
        &udp(1, 9999),
    );
    assert_eq!(seen(ETHERTYPE_IPV4, &later), None);
}

#[test]
fn other_protocols_and_extension_headers_are_not_attempts() {
    let icmp = ipv4(CLIENT, [10, 1, 1, 1], 1, 0, 0, &[8, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(seen(ETHERTYPE_IPV4, &icmp), None);
    // Hop-by-hop options (0) in front of TCP: dropped, as the module says.
    let mut hop_by_hop = vec![IPPROTO_TCP, 0, 1, 4, 0, 0, 0, 0];
    hop_by_hop.extend(tcp(1, 80, SYN));
    let packet = ipv6(v6("fd00::2"), v6("fd00::1"), 0, &hop_by_hop);
    assert_eq!(seen(ETHERTYPE_IPV6, &packet), None);
    let arp = vec![0u8; 28];
    assert_eq!(seen(0x0806, &arp), None);
    let ipv6_syn = ipv6(v6("fd00::2"), v6("fd00::1"), IPPROTO_TCP, &tcp(1, 80, SYN));
    assert!(seen(ETHERTYPE_IPV6, &ipv6_syn).is_some());
    // An IPv6 packet under IPv4's ethertype (or the reverse) is nobody's attempt.
    assert_eq!(parse_attempt(ETHERTYPE_IPV4, &ipv6_syn), None);
    let ipv4_syn = ipv4(CLIENT, [10, 1, 1, 1], IPPROTO_TCP, 0, 0, &tcp(1, 80, SYN));
    assert_eq!(parse_attempt(ETHERTYPE_IPV6, &ipv4_syn), None);
}

#[test]
fn the_longest_headers_fit_the_snap_length() {
    let packet = ipv4(CLIENT, [10, 1, 1, 1], IPPROTO_TCP, 10, 0, &tcp(1, 80, SYN));
    assert_eq!(packet.len(), SNAP_LENGTH as usize);
    let mut long = packet.clone();
    long.extend_from_slice(&[0xAA; 1000]);
    assert_eq!(seen(ETHERTYPE_IPV4, &long), seen(ETHERTYPE_IPV4, &packet));
}

/// xorshift64*: reproducible noise without a dependency.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Packets that look like the real thing, then some of their bytes changed: most of the
/// decisions of the filter and the parser are taken both ways.
fn plausible(noise: &mut Noise) -> (u16, Vec<u8>) {
    let destinations4 = [[10, 1, 2, 3], [127, 0, 0, 1], [198, 18, 0, 5]];
    let destinations6 = ["::1", "fd00::1", "::2"];
    let protocol = [IPPROTO_TCP, IPPROTO_UDP, 1][noise.below(3)];
    let port = [53u16, 80, 443][noise.below(3)];
    let transport = match protocol {
        IPPROTO_TCP => tcp(40000, port, [SYN, SYN_ACK, TCP_ACK][noise.below(3)]),
        _ => udp([40000u16, 53][noise.below(2)], port),
    };
    let from4 = [CLIENT, [198, 18, 0, 2]][noise.below(2)];
    let (ethertype, mut packet) = match noise.below(2) {
        0 => {
            let fragment = [0u16, 0x2000, 0x0001][noise.below(3)];
            let options = [0u8, 1, 10][noise.below(3)];
            let to = destinations4[noise.below(3)];
            (
                ETHERTYPE_IPV4,
                ipv4(from4, to, protocol, options, fragment, &transport),
            )
        }
        _ => {
            let to = v6(destinations6[noise.below(3)]);
            (
                ETHERTYPE_IPV6,
                ipv6(v6("fd00::9"), to, protocol, &transport),
            )
        }
    };
    for _ in 0..noise.below(3) {
        let at = noise.below(packet.len());
        packet[at] = noise.next() as u8;
    }
    (ethertype, packet)
}

/// Where the two may differ: the filter trusts the ethertype for the IP version and IPv4's
/// header length (the kernel drops a bad one right after), the parser checks both.
fn parser_stricter(ethertype: u16, packet: &[u8]) -> bool {
    match (ethertype, packet.first()) {
        (ETHERTYPE_IPV4, Some(first)) => first >> 4 != 4 || first & 0x0F < 5,
        (ETHERTYPE_IPV6, Some(first)) => first >> 4 != 6,
        _ => false,
    }
}

#[test]
fn the_parser_takes_exactly_what_the_filter_passes() {
    let program = filter();
    let mut noise = Noise(0x5EED_0019);
    let mut passed = 0;
    for _ in 0..50_000 {
        let (ethertype, packet) = plausible(&mut noise);
        let packet = &packet[..noise.below(packet.len() + 1).max(packet.len() / 2)];
        let verdict = run(&program, HOST, ethertype, packet);
        let parsed = parse_attempt(ethertype, &packet[..packet.len().min(SNAP_LENGTH as usize)]);
        if parsed.is_some() {
            assert_ne!(verdict, 0, "parsed but filtered: {packet:?}");
            passed += 1;
        } else if !parser_stricter(ethertype, packet) {
            assert_eq!(
                verdict, 0,
                "passed but not parsed: {ethertype:#x} {packet:?}"
            );
        }
        assert_eq!(run(&program, OUTGOING, ethertype, packet), 0);
    }
    assert!(passed > 1_000, "too few attempts among the noise: {passed}");
}

#[test]
fn no_bytes_make_the_parser_panic() {
    let mut noise = Noise(0xBAD_B17E5);
    for _ in 0..20_000 {
        let length = noise.below(120);
        let mut bytes = noise.bytes(length);
        // Half of them with a believable first byte, to get past the version checks.
        if noise.below(2) == 0 && !bytes.is_empty() {
            bytes[0] = [0x45, 0x4F, 0x41, 0x60][noise.below(4)];
        }
        let ethertype = [ETHERTYPE_IPV4, ETHERTYPE_IPV6, noise.next() as u16][noise.below(3)];
        let _ = parse_attempt(ethertype, &bytes);
        let _ = run(&filter(), HOST, ethertype, &bytes);
    }
    // A capture cut anywhere: an attempt once the TCP flags (byte 13) are in, nothing before.
    let packets = [
        (
            ETHERTYPE_IPV4,
            60,
            ipv4(CLIENT, [10, 1, 1, 1], IPPROTO_TCP, 10, 0, &tcp(1, 80, SYN)),
        ),
        (
            ETHERTYPE_IPV6,
            40,
            ipv6(v6("fd00::2"), v6("fd00::1"), IPPROTO_TCP, &tcp(1, 80, SYN)),
        ),
    ];
    for (ethertype, header, packet) in packets {
        for cut in 0..=packet.len() {
            let parsed = parse_attempt(ethertype, &packet[..cut]);
            assert_eq!(
                parsed.is_some(),
                cut > header + 13,
                "cut at {cut}: {parsed:?}"
            );
            assert_eq!(seen(ethertype, &packet[..cut]), parsed);
        }
    }
}

#[test]
fn every_jump_lands_inside_the_program() {
    let program = filter();
    assert!(program.len() < 64, "{} instructions", program.len());
    for (at, i) in program.iter().enumerate() {
        let furthest = match i.code {
            BPF_JMP_JA => i.k as usize,
            BPF_JMP_JEQ_K | BPF_JMP_JSET_K => usize::from(i.jt.max(i.jf)),
            BPF_RET_K => continue,
            _ => 0,
        };
        assert!(at + 1 + furthest < program.len(), "instruction {at}: {i:?}");
    }
    assert_eq!(program.last().map(|i| (i.code, i.k)), Some((BPF_RET_K, 0)));
}

#[test]
fn the_kernel_accepts_the_filter() {
    // Any socket checks a classic filter on attach: no privilege, no packet socket needed.
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    attach_filter(socket.as_raw_fd(), &filter()).unwrap();
    // And refuses a broken one (a jump out of the program), which is what makes the check worth
    // something.
    let mut broken = filter();
    broken[1].jf = 200;
    let refused = attach_filter(socket.as_raw_fd(), &broken).unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EINVAL), "{refused}");
}

#[test]
fn the_builder_resolves_labels_forward() {
    let mut p = Builder::default();
    p.jump(BPF_JMP_JEQ_K, 1, Label::Accept, Label::Next)
        .goto(Label::Drop)
        .label(Label::Accept)
        .op(BPF_RET_K, 1)
        .label(Label::Drop)
        .op(BPF_RET_K, 0);
    let program = p.finish();
    assert_eq!((program[0].jt, program[0].jf), (1, 0));
    assert_eq!((program[1].code, program[1].k), (BPF_JMP_JA, 1));
    assert_eq!(run(&program, HOST, 0, &[]), 0);
}
