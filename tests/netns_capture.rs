//! The kernel side of a sandbox's captured connections (issue 19), in network namespaces the
//! test makes (nothing leaves them: only `lo`, and only the fake-address range is dialled):
//! a `local` route makes every address of the range answer on `lo`; a listener made inside the
//! namespace by a thread that joins it is held and served from outside; the address a client
//! dialled is read back from the accepted connection; an address of the range with no
//! listener is refused at once; without the route the range is unreachable.

mod common;
use common::*;
use keel::sys::{netlink, netns};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

const FAKE_RANGE: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);

fn dial(ns: std::os::fd::BorrowedFd<'_>, to: SocketAddr) -> std::io::Result<(TcpStream, Duration)> {
    netns::run_in(ns, move || {
        let start = Instant::now();
        let stream = TcpStream::connect_timeout(&to, Duration::from_secs(10))?;
        Ok((stream, start.elapsed()))
    })
}

#[test]
fn a_local_route_sends_the_fake_range_to_listeners_held_outside_the_namespace() {
    if !require_root("a_local_route_sends_the_fake_range_to_listeners_held_outside_the_namespace") {
        return;
    }
    let ns = netns::create().unwrap();
    assert_ne!(
        netns::id_of(ns.as_fd()).unwrap(),
        netns::id_of(std::fs::File::open("/proc/self/ns/net").unwrap().as_fd()).unwrap(),
        "a namespace of its own"
    );
    netns::run_in(ns.as_fd(), || {
        netlink::loopback_up()?;
        netlink::add_local_route(IpAddr::V4(FAKE_RANGE), 15)
    })
    .unwrap();
    // Made twice: the kernel says it is there.
    let again = netns::run_in(ns.as_fd(), || {
        netlink::add_local_route(IpAddr::V4(FAKE_RANGE), 15)
    })
    .unwrap_err();
    assert_eq!(again.raw_os_error(), Some(libc::EEXIST), "{again}");

    // A listener of one fake address and port, made inside, held here (outside).
    let at: SocketAddr = "198.18.0.5:443".parse().unwrap();
    let listener = netns::run_in(ns.as_fd(), move || TcpListener::bind(at)).unwrap();
    let client = {
        let ns = ns.try_clone().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = dial(ns.as_fd(), at)?;
            stream.write_all(b"hello")?;
            Ok::<_, std::io::Error>(stream)
        })
    };
    let (mut accepted, peer) = listener.accept().unwrap();
    let mut hello = [0u8; 5];
    accepted.read_exact(&mut hello).unwrap();
    assert_eq!(&hello, b"hello");
    // The destination the client dialled, read back: what names the connection's target.
    assert_eq!(accepted.local_addr().unwrap(), at);
    assert!(peer.ip().is_loopback() || peer.ip() == at.ip(), "{peer}");
    client.join().unwrap().unwrap();

    // Another address of the range, no listener: refused at once, not left to time out.
    let refused = dial(ns.as_fd(), "198.18.9.9:80".parse().unwrap()).unwrap_err();
    assert_eq!(
        refused.kind(),
        std::io::ErrorKind::ConnectionRefused,
        "{refused}"
    );
}

#[test]
fn without_the_route_the_fake_range_is_unreachable() {
    if !require_root("without_the_route_the_fake_range_is_unreachable") {
        return;
    }
    let ns = netns::create().unwrap();
    netns::run_in(ns.as_fd(), netlink::loopback_up).unwrap();
    let unreachable = dial(ns.as_fd(), "198.18.0.5:443".parse().unwrap()).unwrap_err();
    assert_eq!(
        unreachable.raw_os_error(),
        Some(libc::ENETUNREACH),
        "{unreachable}"
    );
    // A prefix longer than the address is refused before the kernel is asked.
    let bad = netns::run_in(ns.as_fd(), || {
        netlink::add_local_route(IpAddr::V4(FAKE_RANGE), 33)
    })
    .unwrap_err();
    assert_eq!(bad.kind(), std::io::ErrorKind::InvalidInput);
}
