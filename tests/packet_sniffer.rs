//! The connection attempts of a task's network namespace, seen by keel's sniffer on its `lo`
//! (issue 19), in namespaces the test makes: only `lo`, every address routed `local` on it (as
//! a task's is), so nothing leaves them. A connect to an address nobody listens on is refused
//! at once and still seen, with its destination; UDP is seen except DNS; the agent's own
//! loopback traffic is not; an attempt that a listener takes is seen too (the relay, not the
//! sniffer, decides what a refusal is); a flood costs a bounded queue and counted drops.

mod common;
use common::*;
use keel::sys::packet::{self, Attempt, Protocol};
use keel::sys::{netlink, netns};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(20);

/// A namespace like a task's: `lo` up, every IPv4 and IPv6 address routed `local` on it.
fn task_namespace() -> OwnedFd {
    let ns = netns::create().unwrap();
    netns::run_in(ns.as_fd(), || {
        netlink::loopback_up()?;
        netlink::add_local_route(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)?;
        netlink::add_local_route(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)
    })
    .unwrap();
    ns
}

/// What the sniffer reported so far.
struct Sniffer {
    fd: OwnedFd,
    seen: Vec<Attempt>,
}

impl Sniffer {
    fn open(ns: BorrowedFd<'_>) -> Sniffer {
        let fd = netns::run_in(ns, packet::open_attempt_sniffer).unwrap();
        Sniffer {
            fd,
            seen: Vec::new(),
        }
    }

    /// Read what is queued now, without waiting.
    fn drain(&mut self) -> usize {
        let mut total = 0;
        loop {
            let read = packet::read_attempts(self.fd.as_fd(), &mut self.seen).unwrap();
            total += read;
            if read == 0 {
                return total;
            }
        }
    }

    /// Wait (poll(2), up to the deadline) until an attempt to `destination` has been seen.
    fn wait_for(&mut self, protocol: Protocol, destination: SocketAddr) -> Attempt {
        let deadline = Instant::now() + DEADLINE;
        loop {
            self.drain();
            let found = self
                .seen
                .iter()
                .find(|a| a.protocol == protocol && a.destination == destination);
            if let Some(found) = found {
                return *found;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no {protocol:?} attempt to {destination} within {DEADLINE:?}; seen {:?}",
                self.seen
            );
            let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            let wait = PollTimeout::from(left.as_millis().min(1000) as u16);
            nix::poll::poll(&mut fds, wait).unwrap();
        }
    }
}

fn refused_connect(ns: BorrowedFd<'_>, to: SocketAddr) {
    let error = netns::run_in(ns, move || {
        TcpStream::connect_timeout(&to, DEADLINE).map(|_| ())
    })
    .expect_err("nothing listens there");
    assert_eq!(error.kind(), ErrorKind::ConnectionRefused, "{to}: {error}");
}

/// A datagram to `to` from a connected socket, and the port-unreachable that answers it
/// (ECONNREFUSED on the next receive): once it is back, the datagram went past the sniffer.
/// Returns the sender's address.
fn refused_datagram(ns: BorrowedFd<'_>, to: SocketAddr) -> SocketAddr {
    netns::run_in(ns, move || {
        let any: SocketAddr = match to {
            SocketAddr::V4(_) => "0.0.0.0:0".parse().unwrap(),
            SocketAddr::V6(_) => "[::]:0".parse().unwrap(),
        };
        let socket = UdpSocket::bind(any)?;
        socket.connect(to)?;
        socket.set_read_timeout(Some(DEADLINE))?;
        socket.send(b"hello")?;
        let error = socket.recv(&mut [0u8; 16]).expect_err("nobody answers");
        assert_eq!(error.kind(), ErrorKind::ConnectionRefused, "{to}: {error}");
        socket.local_addr()
    })
    .unwrap()
}

/// A listener at `at` made inside, and a connection to it from inside: returns the client's
/// address.
fn accepted_connect(ns: BorrowedFd<'_>, at: SocketAddr) -> SocketAddr {
    netns::run_in(ns, move || {
        let listener = TcpListener::bind(at)?;
        let at = listener.local_addr()?;
        let client = TcpStream::connect_timeout(&at, DEADLINE)?;
        let (_, peer) = listener.accept()?;
        assert_eq!(peer, client.local_addr()?);
        Ok(peer)
    })
    .unwrap()
}

#[test]
fn every_attempt_off_loopback_is_seen_and_nothing_else() {
    if !require_root("every_attempt_off_loopback_is_seen_and_nothing_else") {
        return;
    }
    let ns = task_namespace();
    let mut sniffer = Sniffer::open(ns.as_fd());

    // What must not be seen, first: each call returns only once its packets have passed `lo`
    // (the reset, the port-unreachable, the handshake came back), hence past the sniffer.
    refused_datagram(ns.as_fd(), "198.18.0.2:53".parse().unwrap());
    accepted_connect(ns.as_fd(), "127.0.0.1:0".parse().unwrap());
    accepted_connect(ns.as_fd(), "[::1]:0".parse().unwrap());

    // What must be seen (DNS to any server but the sandbox's is too).
    let dns6: SocketAddr = "[fd00::53]:53".parse().unwrap();
    refused_datagram(ns.as_fd(), dns6);
    let tcp: SocketAddr = "10.1.2.3:80".parse().unwrap();
    refused_connect(ns.as_fd(), tcp);
    let udp: SocketAddr = "10.1.2.3:123".parse().unwrap();
    let udp_source = refused_datagram(ns.as_fd(), udp);
    let captured: SocketAddr = "198.18.0.5:443".parse().unwrap();
    let captured_source = accepted_connect(ns.as_fd(), captured);
    let tcp6: SocketAddr = "[fd00::1]:80".parse().unwrap();
    refused_connect(ns.as_fd(), tcp6);

    sniffer.wait_for(Protocol::Tcp, tcp);
    let seen_udp = sniffer.wait_for(Protocol::Udp, udp);
    assert_eq!(seen_udp.source, udp_source);
    let seen_captured = sniffer.wait_for(Protocol::Tcp, captured);
    assert_eq!(seen_captured.source, captured_source);
    sniffer.wait_for(Protocol::Udp, dns6);
    let seen_tcp6 = sniffer.wait_for(Protocol::Tcp, tcp6);
    assert!(seen_tcp6.source.is_ipv6(), "{seen_tcp6:?}");

    // Exactly those, each once (`lo` shows every packet twice: once going out).
    sniffer.drain();
    let mut seen: Vec<(Protocol, SocketAddr)> = sniffer
        .seen
        .iter()
        .map(|a| (a.protocol, a.destination))
        .collect();
    seen.sort();
    let mut expected = vec![
        (Protocol::Tcp, tcp),
        (Protocol::Udp, udp),
        (Protocol::Tcp, captured),
        (Protocol::Tcp, tcp6),
        (Protocol::Udp, dns6),
    ];
    expected.sort();
    assert_eq!(seen, expected, "{:?}", sniffer.seen);
}

#[test]
fn a_flood_is_bounded_counted_and_survived() {
    if !require_root("a_flood_is_bounded_counted_and_survived") {
        return;
    }
    let ns = task_namespace();
    let mut sniffer = Sniffer::open(ns.as_fd());
    const SENT: u32 = 3000;
    // Unconnected datagrams, none read until the end: far more than the queue holds.
    netns::run_in(ns.as_fd(), || {
        let socket = UdpSocket::bind("0.0.0.0:0")?;
        for port in 0..SENT {
            socket.send_to(b"x", SocketAddr::from(([10, 1, 2, 3], 1000 + port as u16)))?;
        }
        Ok(())
    })
    .unwrap();
    // Drops are counted as the kernel makes them (perhaps later than the sends returned).
    let deadline = Instant::now() + DEADLINE;
    let mut dropped = 0;
    while dropped == 0 && Instant::now() < deadline {
        dropped += packet::take_dropped(sniffer.fd.as_fd()).unwrap();
        if dropped == 0 {
            let mut fds = [PollFd::new(sniffer.fd.as_fd(), PollFlags::POLLIN)];
            nix::poll::poll(&mut fds, PollTimeout::from(100u16)).unwrap();
        }
    }
    assert!(dropped > 0, "{SENT} datagrams unread and nothing dropped");
    let queued = sniffer.drain() as u32;
    dropped += packet::take_dropped(sniffer.fd.as_fd()).unwrap();
    assert!(queued > 0, "nothing kept of the flood");
    assert!(
        queued + dropped <= SENT,
        "{queued} kept + {dropped} dropped of {SENT}"
    );
    assert!(
        queued < SENT / 2,
        "{queued} of {SENT} queued: the receive buffer is not bounded"
    );
    assert!(sniffer.seen.iter().all(|a| a.protocol == Protocol::Udp
        && a.destination.ip() == IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))));
    // Read empty, the sniffer sees the next attempt as before.
    let after: SocketAddr = "10.1.2.3:80".parse().unwrap();
    refused_connect(ns.as_fd(), after);
    sniffer.wait_for(Protocol::Tcp, after);
}

#[test]
fn the_sniffer_sees_its_own_namespace_only() {
    if !require_root("the_sniffer_sees_its_own_namespace_only") {
        return;
    }
    let watched = task_namespace();
    let other = task_namespace();
    let mut sniffer = Sniffer::open(watched.as_fd());
    let elsewhere: SocketAddr = "10.7.7.7:80".parse().unwrap();
    refused_connect(other.as_fd(), elsewhere);
    let here: SocketAddr = "10.8.8.8:80".parse().unwrap();
    refused_connect(watched.as_fd(), here);
    sniffer.wait_for(Protocol::Tcp, here);
    sniffer.drain();
    assert!(
        sniffer.seen.iter().all(|a| a.destination != elsewhere),
        "{:?}",
        sniffer.seen
    );
}
