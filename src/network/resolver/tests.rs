use super::*;
use crate::network::dns::CLASS_IN;
use std::net::UdpSocket;

#[test]
fn the_first_nameserver_of_resolv_conf_is_asked() {
    let text = "# comment\nsearch example.com\nnameserver fe80::1%eth0\nnameserver 10.0.0.2\nnameserver 10.0.0.3\n";
    assert_eq!(nameserver_of(text), Some("10.0.0.2:53".parse().unwrap()));
    assert_eq!(
        nameserver_of("nameserver 2001:db8::53"),
        Some("[2001:db8::53]:53".parse().unwrap())
    );
    assert_eq!(nameserver_of("options ndots:2\n"), None);
}

/// A DNS server on loopback that answers each query with `answer(type, query)`, for as many
/// queries as given (none: it never answers); it keeps its port until 10 s without a query.
fn server(answers: usize, answer: fn(u16, &[u8]) -> Option<Vec<u8>>) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        let mut answered = 0;
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            if answered == answers {
                continue;
            }
            let query = &buf[..n];
            let qtype = u16::from_be_bytes([query[n - 4], query[n - 3]]);
            if let Some(reply) = answer(qtype, query) {
                socket.send_to(&reply, peer).unwrap();
                answered += 1;
            }
        }
    });
    addr
}

/// The reply to `query` with `rcode` and the records `(type, data)`.
fn reply(query: &[u8], rcode: u16, records: &[(u16, &[u8])]) -> Vec<u8> {
    let mut out = query[..2].to_vec();
    out.extend_from_slice(&(0x8180 | rcode).to_be_bytes());
    out.extend_from_slice(&[0, 1]);
    out.extend_from_slice(&(records.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&query[12..]);
    for (rtype, data) in records {
        out.extend_from_slice(&[0xc0, 12]);
        out.extend_from_slice(&rtype.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&60u32.to_be_bytes());
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(data);
    }
    out
}

#[test]
fn a_name_resolves_to_its_ipv4_then_ipv6_addresses() {
    let addr = server(2, |qtype, query| {
        Some(match qtype {
            TYPE_A => reply(query, 0, &[(5, b"\x01x\x00"), (TYPE_A, &[192, 0, 2, 7])]),
            _ => reply(
                query,
                0,
                &[(
                    TYPE_AAAA,
                    &[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                )],
            ),
        })
    });
    let addrs = resolve(addr, "www.example.com", Duration::from_secs(10)).unwrap();
    assert_eq!(
        addrs,
        vec![
            "192.0.2.7".parse::<IpAddr>().unwrap(),
            "2001:db8::1".parse().unwrap()
        ]
    );
}

#[test]
fn a_name_that_does_not_exist_or_has_no_address_says_so() {
    let nx = server(2, |_, query| Some(reply(query, 3, &[])));
    assert_eq!(
        resolve(nx, "nope.example.com", Duration::from_secs(10)),
        Err(ResolveError::NoSuchName)
    );
    let empty = server(2, |_, query| Some(reply(query, 0, &[])));
    assert_eq!(
        resolve(empty, "empty.example.com", Duration::from_secs(10)),
        Err(ResolveError::NoAddress)
    );
    let failing = server(2, |_, query| Some(reply(query, 2, &[])));
    assert_eq!(
        resolve(failing, "fail.example.com", Duration::from_secs(10)),
        Err(ResolveError::Failed(2))
    );
    assert_eq!(
        resolve(failing, "bad..name", Duration::from_secs(10)),
        Err(ResolveError::BadName)
    );
}

#[test]
fn an_answer_to_another_query_is_ignored_and_silence_times_out() {
    // Answers with the wrong id only: never taken for the real one.
    let liar = server(100, |_, query| {
        let mut wrong = reply(query, 0, &[(TYPE_A, &[192, 0, 2, 9])]);
        wrong[0] ^= 0xff;
        Some(wrong)
    });
    assert_eq!(
        resolve(liar, "www.example.com", Duration::from_millis(300)),
        Err(ResolveError::Timeout)
    );
    let silent = server(0, |_, _| None);
    assert_eq!(
        resolve(silent, "www.example.com", Duration::from_millis(300)),
        Err(ResolveError::Timeout)
    );
}
