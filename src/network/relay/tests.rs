use super::dns_side;
use super::proxy::{self, Head};
use super::report::Counts;
use super::slab::Slab;
use super::splicing::Flow;
use crate::network::dns::{self, Resolution, TYPE_A};
use crate::network::fake::FakeAddresses;
use crate::network::policy::{Destination, Policy};
use crate::network::relay_protocol::{RefusedCount, RelayReport};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

fn policy(entries: &[&str]) -> Policy {
    let entries: Vec<_> = entries
        .iter()
        .map(|e| crate::network::entry::parse(e).unwrap())
        .collect();
    Policy::new(&entries, &BTreeMap::new()).unwrap()
}

fn request(head: &Head) -> &proxy::Request {
    match head {
        Head::Request(request) => request,
        other => panic!("not a request: {other:?}"),
    }
}

#[test]
fn connect_names_its_target_and_keeps_what_follows_the_head() {
    let head =
        proxy::read_head(b"CONNECT API.Example.com.:443 HTTP/1.1\r\nHost: x\r\n\r\n\x16\x03");
    let r = request(&head);
    assert_eq!(
        (r.host.as_str(), r.port, r.tunnel),
        ("api.example.com", 443, true)
    );
    assert_eq!(r.forward, b"\x16\x03");
    let v6 = proxy::read_head(b"CONNECT [2001:db8::1]:22 HTTP/1.1\r\n\r\n");
    assert_eq!(request(&v6).host, "2001:db8::1");
    assert_eq!(request(&v6).port, 22);
}

#[test]
fn an_absolute_form_request_is_forwarded_in_origin_form_one_per_connection() {
    let head = proxy::read_head(
        b"POST http://example.com:8080/a/b?c HTTP/1.1\r\nHost: example.com:8080\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi",
    );
    let r = request(&head);
    assert_eq!(
        (r.host.as_str(), r.port, r.tunnel),
        ("example.com", 8080, false)
    );
    let text = String::from_utf8(r.forward.clone()).unwrap();
    assert_eq!(
        text,
        "POST /a/b?c HTTP/1.1\r\nHost: example.com:8080\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"
    );
    // No path, no Host header, no port: "/", the authority as Host, port 80.
    let r = proxy::read_head(b"GET http://example.com HTTP/1.0\r\n\r\n");
    let text = String::from_utf8(request(&r).forward.clone()).unwrap();
    assert!(
        text.starts_with("GET / HTTP/1.0\r\nHost: example.com\r\n"),
        "{text}"
    );
    assert_eq!(request(&r).port, 80);
}

#[test]
fn a_head_not_served_is_told_apart_from_one_not_complete() {
    assert_eq!(
        proxy::read_head(b"CONNECT a.com:443 HTTP/1.1\r\n"),
        Head::Incomplete
    );
    assert_eq!(proxy::read_head(b""), Head::Incomplete);
    for bad in [
        &b"GET /relative HTTP/1.1\r\n\r\n"[..],
        b"GET https://a.com/ HTTP/1.1\r\n\r\n",
        b"CONNECT a.com HTTP/1.1\r\n\r\n",
        b"CONNECT a.com:0 HTTP/1.1\r\n\r\n",
        b"CONNECT :443 HTTP/1.1\r\n\r\n",
        b"CONNECT a.com:443 SPDY/3\r\n\r\n",
        b"NONSENSE\r\n\r\n",
        b"GET http://a.com/ HTTP/1.1 extra\r\n\r\n",
        b"\xff\xfe\r\n\r\n",
    ] {
        assert!(matches!(proxy::read_head(bad), Head::Bad(_)), "{bad:?}");
    }
    let long = vec![b'a'; proxy::MAX_HEAD];
    assert!(matches!(proxy::read_head(&long), Head::Bad(_)));
    let response = String::from_utf8(proxy::response("403 Forbidden", "no\r\nway")).unwrap();
    assert!(response.starts_with("HTTP/1.1 403 Forbidden\r\n"));
    assert!(response.ends_with("\r\n\r\nno  way\n"), "{response}");
}

#[test]
fn a_proxy_target_is_judged_as_the_agent_would_have_dialled_it() {
    let mut fake = FakeAddresses::new();
    let addr = fake.assign("a.example.com").unwrap();
    assert_eq!(
        proxy::destination_of(&addr.to_string(), &fake),
        Some(Destination::Name("a.example.com".into()))
    );
    assert_eq!(proxy::destination_of("198.18.9.9", &fake), None);
    assert_eq!(
        proxy::destination_of("host.keel.internal", &fake),
        Some(Destination::Host)
    );
    assert_eq!(
        proxy::destination_of("10.0.0.1", &fake),
        Some(Destination::Address("10.0.0.1".parse().unwrap()))
    );
    assert_eq!(
        proxy::destination_of("b.example.com", &fake),
        Some(Destination::Name("b.example.com".into()))
    );
}

#[test]
fn a_name_given_an_address_is_reported_once_so_its_listeners_come_first() {
    let p = policy(&["a.example.com", "b.example.com:22"]);
    let mut fake = FakeAddresses::new();
    let query = dns::encode_query(1, "a.example.com", TYPE_A).unwrap();
    let (reply, resolution, given) = dns_side::answer(&p, &mut fake, &query);
    let (name, addr) = given.unwrap();
    assert_eq!(name, "a.example.com");
    assert!(reply.is_some());
    assert_eq!(
        resolution,
        Resolution::Listed {
            name: name.clone(),
            address: Some(addr)
        }
    );
    assert_eq!(p.ports_for(&name), vec![80, 443]);
    let (_, _, again) = dns_side::answer(&p, &mut fake, &query);
    assert_eq!(again, None, "known already");
    let unlisted = dns::encode_query(2, "c.example.com", TYPE_A).unwrap();
    let (_, resolution, given) = dns_side::answer(&p, &mut fake, &unlisted);
    assert_eq!(
        (resolution, given),
        (Resolution::Unlisted("c.example.com".into()), None)
    );
}

#[test]
fn the_names_file_reads_back_without_its_torn_or_broken_lines() {
    let text = format!(
        "{}{}garbage\n198.18.0.9\n198.18.0.7 ",
        dns_side::names_line(Ipv4Addr::new(198, 18, 0, 3), "a.example.com"),
        dns_side::names_line(Ipv4Addr::new(198, 18, 0, 4), "b.example.com"),
    );
    assert_eq!(
        dns_side::read_names(&text),
        vec![
            (Ipv4Addr::new(198, 18, 0, 3), "a.example.com".to_string()),
            (Ipv4Addr::new(198, 18, 0, 4), "b.example.com".to_string()),
        ]
    );
}

#[test]
fn dns_over_tcp_takes_whole_messages_and_keeps_the_rest() {
    let mut buffer = dns_side::frame(b"one");
    buffer.extend(dns_side::frame(b"two!"));
    buffer.extend_from_slice(&[0, 9, b'p']);
    let messages = dns_side::take_messages(&mut buffer);
    assert_eq!(messages, vec![b"one".to_vec(), b"two!".to_vec()]);
    assert_eq!(buffer, vec![0, 9, b'p']);
    let mut short = vec![0];
    assert!(dns_side::take_messages(&mut short).is_empty());
    assert_eq!(short, vec![0]);
}

#[test]
fn refusals_are_coalesced_per_destination_and_counting_goes_on_after_a_restart() {
    let mut counts = Counts::from_report(RelayReport::default());
    // The first refusal of a destination is the one the log says.
    assert!(counts.refused("a.example.com:22", "first reason", 10));
    assert!(!counts.refused("a.example.com:22", "second reason", 20));
    assert!(counts.refused("b.example.com", "other", 15));
    counts.opened("c.example.com:443", 30);
    counts.bytes("c.example.com:443", 5, 7, 31);
    let report = counts.report(42, 40);
    assert_eq!(report.pid, 42);
    assert_eq!(report.open_connections, 1);
    assert_eq!(
        report.refused[0],
        RefusedCount {
            destination: "a.example.com:22".into(),
            reason: "second reason".into(),
            count: 2,
            first_ms: 10,
            last_ms: 20,
        }
    );
    assert_eq!(report.refused.len(), 2);
    let again = Counts::from_report(report.clone());
    let mut again = again;
    again.opened("c.example.com:443", 50);
    let next = again.report(43, 60);
    assert_eq!(next.allowed[0].connections, 2);
    assert_eq!(
        (next.allowed[0].bytes_out, next.allowed[0].bytes_in),
        (5, 7)
    );
    assert_eq!(
        next.open_connections, 1,
        "the last relay's open ones are not carried"
    );
    assert_eq!(next.refused, report.refused);
}

#[test]
fn the_report_is_due_only_when_changed_and_not_more_than_twice_a_second() {
    let mut counts = Counts::from_report(RelayReport::default());
    assert!(
        counts.due().is_some(),
        "a new relay writes its first report"
    );
    let now = std::time::Instant::now();
    counts.mark_written(now);
    assert_eq!(counts.due(), None);
    counts.closed();
    assert_eq!(counts.due(), Some(now + super::report::WRITE_PERIOD));
}

#[test]
fn a_misdirected_placeholder_is_counted_per_secret_and_destination_and_written_at_once() {
    let mut counts = Counts::from_report(RelayReport::default());
    let now = std::time::Instant::now();
    counts.mark_written(now);
    assert!(counts.misdirected("API_KEY", "evil.example:80", 10));
    assert!(!counts.misdirected("API_KEY", "evil.example:80", 20));
    assert!(counts.misdirected("OTHER", "evil.example:80", 30));
    // Not after the write period: the agent may end at once, its relay with it.
    let due = counts.due().expect("due");
    assert!(due < now + super::report::WRITE_PERIOD, "{due:?}");
    let report = counts.report(1, 40);
    assert_eq!(report.misdirected.len(), 2);
    let first = &report.misdirected[0];
    assert_eq!(
        (
            first.secret.as_str(),
            first.destination.as_str(),
            first.count
        ),
        ("API_KEY", "evil.example:80", 2)
    );
    assert_eq!((first.first_ms, first.last_ms), (10, 20));
    // Counting goes on in a relay started again.
    let mut again = Counts::from_report(report);
    assert!(!again.misdirected("API_KEY", "evil.example:80", 50));
    assert_eq!(again.report(2, 60).misdirected[0].count, 3);
    counts.mark_written(now);
    assert_eq!(counts.due(), None);
}

#[test]
fn a_reused_slot_is_told_apart_by_its_generation() {
    let mut slab = Slab::default();
    let (a, ga) = slab.insert("a");
    assert_eq!(slab.remove(a), Some("a"));
    let (b, gb) = slab.insert("b");
    assert_eq!(a, b);
    assert_ne!(ga, gb);
    assert!(slab.get_current(a, ga).is_none());
    assert_eq!(slab.get_current(b, gb).copied(), Some("b"));
    assert_eq!(slab.len(), 1);
    assert_eq!(slab.remove(a), Some("b"));
    assert_eq!(slab.remove(a), None);
}

/// Two connected loopback sockets: (ours, the relay's side as mio sees it).
fn pair() -> (TcpStream, mio::net::TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let ours = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (theirs, _) = listener.accept().unwrap();
    theirs.set_nonblocking(true).unwrap();
    ours.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    (ours, mio::net::TcpStream::from_std(theirs))
}

#[test]
fn a_flow_splices_its_head_then_the_bytes_then_passes_the_end_of_file_on() {
    let (mut agent, from_agent) = pair();
    let (mut upstream, to_upstream) = pair();
    let mut flow = Flow::new(b"HEAD ".to_vec()).unwrap();
    agent.write_all(b"body").unwrap();
    agent.shutdown(std::net::Shutdown::Write).unwrap();
    let mut moved = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !flow.finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "the flow did not finish"
        );
        moved += flow.pump(&from_agent, &to_upstream).unwrap().moved;
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        moved, 4,
        "spliced bytes are counted, the relay's own head is not"
    );
    let mut got = Vec::new();
    upstream.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"HEAD body");
}

#[test]
fn a_sniffed_attempt_is_a_refusal_only_when_nothing_serves_it() {
    use super::attempts::{refusal_of, Served};
    use super::Protocol;
    use crate::network::policy::Refusal;
    use std::collections::HashSet;
    use std::net::SocketAddr;
    let p = policy(&["a.example.com", "host:8080", "10.0.0.0/8:5432"]);
    let listened: HashSet<SocketAddr> = ["198.18.0.1:8080".parse().unwrap()].into();
    let ports: HashSet<u16> = [5432].into();
    let served = |destination| Served {
        policy: &p,
        listened: &listened,
        listened_ports: &ports,
        destination,
    };
    let at = |s: &str| s.parse::<SocketAddr>().unwrap();
    assert_eq!(
        refusal_of(&served(None), Protocol::Udp, at("198.18.0.2:53")),
        None
    );
    assert_eq!(
        refusal_of(&served(None), Protocol::Udp, at("8.8.8.8:53")),
        Some(Refusal::Udp(at("8.8.8.8:53")))
    );
    assert_eq!(
        refusal_of(
            &served(Some(Destination::Host)),
            Protocol::Tcp,
            at("198.18.0.1:8080")
        ),
        None,
        "accepted by its listener"
    );
    assert_eq!(
        refusal_of(
            &served(Some(Destination::Host)),
            Protocol::Tcp,
            at("198.18.0.1:22")
        ),
        Some(Refusal::HostPortNotListed(22))
    );
    assert_eq!(
        refusal_of(
            &served(Some(Destination::Address("10.1.1.1".parse().unwrap()))),
            Protocol::Tcp,
            at("10.1.1.1:5432")
        ),
        None,
        "an address entry's port is listened on everywhere"
    );
    let name = Some(Destination::Name("a.example.com".into()));
    assert!(matches!(
        refusal_of(&served(name), Protocol::Tcp, at("198.18.0.3:22")),
        Some(Refusal::PortNotListed { port: 22, .. })
    ));
    assert_eq!(
        refusal_of(&served(None), Protocol::Tcp, at("198.18.9.9:443")),
        Some(Refusal::AddressNotListed(at("198.18.9.9:443")))
    );
}

#[test]
fn made_up_destinations_past_the_bound_are_counted_together() {
    use super::report::{MAX_DESTINATIONS, OTHERS};
    let mut counts = Counts::from_report(RelayReport::default());
    for n in 0..MAX_DESTINATIONS + 10 {
        counts.refused(&format!("n{n}.example.com"), "why", 1);
    }
    counts.refused("n0.example.com", "why", 2);
    let report = counts.report(1, 3);
    assert_eq!(report.refused.len(), MAX_DESTINATIONS + 1);
    let others = report
        .refused
        .iter()
        .find(|r| r.destination == OTHERS)
        .unwrap();
    assert_eq!(others.count, 10);
    let first = report
        .refused
        .iter()
        .find(|r| r.destination == "n0.example.com")
        .unwrap();
    assert_eq!(first.count, 2, "a destination counted apart stays apart");
}
