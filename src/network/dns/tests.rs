use super::*;
use crate::network::entry::parse;
use std::collections::BTreeMap;

fn policy(entries: &[&str]) -> Policy {
    let entries: Vec<_> = entries.iter().map(|e| parse(e).unwrap()).collect();
    Policy::new(&entries, &BTreeMap::new()).unwrap()
}

/// A query as a stub resolver sends it (RD set, one question).
fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = Vec::new();
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&0x0100u16.to_be_bytes());
    q.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    q
}

fn rcode(reply: &[u8]) -> u16 {
    u16::from_be_bytes([reply[2], reply[3]]) & 0xf
}

fn answers(reply: &[u8]) -> u16 {
    u16::from_be_bytes([reply[6], reply[7]])
}

#[test]
fn a_listed_name_gets_its_fake_address_and_keeps_it() {
    let p = policy(&["api.anthropic.com"]);
    let mut fake = FakeAddresses::new();
    let (reply, resolution) = respond(&p, &mut fake, &query(7, "API.anthropic.com", TYPE_A));
    let reply = reply.unwrap();
    assert_eq!(&reply[0..2], &7u16.to_be_bytes());
    assert_eq!(u16::from_be_bytes([reply[2], reply[3]]) & 0x8000, 0x8000);
    assert_eq!(rcode(&reply), 0);
    assert_eq!(answers(&reply), 1);
    let address = Ipv4Addr::new(
        reply[reply.len() - 4],
        reply[reply.len() - 3],
        reply[reply.len() - 2],
        reply[reply.len() - 1],
    );
    assert!(FakeAddresses::in_range(address));
    assert_eq!(
        resolution,
        Resolution::Listed {
            name: "api.anthropic.com".into(),
            address: Some(address)
        }
    );
    // The question is echoed as sent, case included.
    let echoed = &query(7, "API.anthropic.com", TYPE_A)[12..];
    assert_eq!(&reply[12..12 + echoed.len()], echoed);
    let (again, _) = respond(&p, &mut fake, &query(8, "api.anthropic.com", TYPE_A));
    assert_eq!(&again.unwrap()[reply.len() - 4..], &address.octets());
}

#[test]
fn other_types_of_a_listed_name_are_empty_answers() {
    let p = policy(&["api.anthropic.com"]);
    let mut fake = FakeAddresses::new();
    for qtype in [28u16, 65, 15, 16, 255] {
        let (reply, resolution) = respond(&p, &mut fake, &query(1, "api.anthropic.com", qtype));
        let reply = reply.unwrap();
        assert_eq!((rcode(&reply), answers(&reply)), (0, 0), "type {qtype}");
        assert!(matches!(
            resolution,
            Resolution::Listed { address: None, .. }
        ));
    }
}

#[test]
fn an_unlisted_name_is_nxdomain_at_once() {
    let p = policy(&["api.anthropic.com"]);
    let mut fake = FakeAddresses::new();
    for name in ["example.com", "anthropic.com", "evil.api.anthropic.com"] {
        let (reply, resolution) = respond(&p, &mut fake, &query(3, name, TYPE_A));
        assert_eq!(rcode(&reply.unwrap()), 3, "{name}");
        assert_eq!(resolution, Resolution::Unlisted(name.into()));
    }
    assert!(fake.is_empty());
}

#[test]
fn the_host_name_resolves_only_with_a_host_entry() {
    let mut fake = FakeAddresses::new();
    let with = policy(&["host:8080"]);
    let (reply, _) = respond(&with, &mut fake, &query(1, "host.keel.internal", TYPE_A));
    let reply = reply.unwrap();
    assert_eq!(&reply[reply.len() - 4..], &HOST_ADDRESS.octets());
    let without = policy(&["example.com"]);
    let (reply, _) = respond(&without, &mut fake, &query(1, "host.keel.internal", TYPE_A));
    assert_eq!(rcode(&reply.unwrap()), 3);
}

#[test]
fn what_is_not_a_plain_query_is_refused_or_dropped() {
    let p = policy(&["example.com"]);
    let mut fake = FakeAddresses::new();
    // Too short, or an answer: dropped.
    assert_eq!(respond(&p, &mut fake, &[0; 5]), (None, Resolution::Dropped));
    let mut answer = query(1, "example.com", TYPE_A);
    answer[2] |= 0x80;
    assert_eq!(respond(&p, &mut fake, &answer).1, Resolution::Dropped);
    // Another opcode: not implemented.
    let mut notify = query(1, "example.com", TYPE_A);
    notify[2] |= 4 << 3;
    assert_eq!(rcode(&respond(&p, &mut fake, &notify).0.unwrap()), 4);
    // Two questions, a truncated question: format error.
    let mut two = query(1, "example.com", TYPE_A);
    two[5] = 2;
    assert_eq!(rcode(&respond(&p, &mut fake, &two).0.unwrap()), 1);
    let truncated = query(1, "example.com", TYPE_A);
    let cut = &truncated[..truncated.len() - 2];
    assert_eq!(rcode(&respond(&p, &mut fake, cut).0.unwrap()), 1);
    // Another class: refused.
    let mut chaos = query(1, "example.com", TYPE_A);
    let n = chaos.len();
    chaos[n - 1] = 3;
    assert_eq!(rcode(&respond(&p, &mut fake, &chaos).0.unwrap()), 5);
}

#[test]
fn compression_pointers_are_followed_backwards_only() {
    let p = policy(&["example.com"]);
    let mut fake = FakeAddresses::new();
    // A pointer to itself (a loop) is a format error, not a hang.
    let mut looped = query(1, "x", TYPE_A);
    looped.truncate(12);
    looped.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
    assert_eq!(rcode(&respond(&p, &mut fake, &looped).0.unwrap()), 1);
}

#[test]
fn labels_that_no_entry_can_name_are_nxdomain() {
    let p = policy(&["example.com"]);
    let mut fake = FakeAddresses::new();
    let mut odd = query(1, "exa mple.com", TYPE_A);
    odd[13 + 3] = b' ';
    let (reply, resolution) = respond(&p, &mut fake, &odd);
    assert_eq!(rcode(&reply.unwrap()), 3);
    assert!(matches!(resolution, Resolution::Unlisted(_)));
}

#[test]
fn no_input_makes_it_panic() {
    let p = policy(&["example.com", "*.example.org", "host:1"]);
    let mut fake = FakeAddresses::new();
    let base = query(0x1234, "a.example.org", TYPE_A);
    // Every prefix, and every single-byte change of a real query.
    for len in 0..=base.len() {
        let _ = respond(&p, &mut fake, &base[..len]);
    }
    for i in 0..base.len() {
        for value in [0u8, 1, 0x3f, 0x40, 0x80, 0xc0, 0xff] {
            let mut changed = base.clone();
            changed[i] = value;
            let _ = respond(&p, &mut fake, &changed);
        }
    }
    // A deterministic pseudo-random stream of messages.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        let mut message = vec![0u8; (state % 80) as usize];
        for byte in message.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *byte = state as u8;
        }
        let _ = respond(&p, &mut fake, &message);
    }
}

#[test]
fn keel_s_own_query_is_answered_and_the_answer_read_back() {
    let p = policy(&["api.example.com"]);
    let mut fake = FakeAddresses::new();
    let query = encode_query(9, "API.example.com.", TYPE_A).unwrap();
    let (reply, _) = respond(&p, &mut fake, &query);
    let reply = reply.unwrap();
    let expected = fake.assign("api.example.com").unwrap();
    assert_eq!(
        parse_answer(&reply, 9, TYPE_A),
        Some(Answer::Addresses {
            addresses: vec![std::net::IpAddr::V4(expected)],
            truncated: false
        })
    );
    // Another id, or a query instead of an answer: not ours.
    assert_eq!(parse_answer(&reply, 10, TYPE_A), None);
    assert_eq!(parse_answer(&query, 9, TYPE_A), None);
    // AAAA of a listed name: no records.
    let (aaaa, _) = respond(
        &p,
        &mut fake,
        &encode_query(3, "api.example.com", TYPE_AAAA).unwrap(),
    );
    assert_eq!(
        parse_answer(&aaaa.unwrap(), 3, TYPE_AAAA),
        Some(Answer::Addresses {
            addresses: vec![],
            truncated: false
        })
    );
    let (nx, _) = respond(
        &p,
        &mut fake,
        &encode_query(4, "other.example.com", TYPE_A).unwrap(),
    );
    assert_eq!(
        parse_answer(&nx.unwrap(), 4, TYPE_A),
        Some(Answer::NoSuchName)
    );
}

#[test]
fn a_name_that_cannot_be_asked_for_makes_no_query() {
    assert_eq!(encode_query(1, "a..b", TYPE_A), None);
    assert_eq!(encode_query(1, &"x".repeat(64), TYPE_A), None);
    let long = vec!["abcdefghij"; 30].join(".");
    assert_eq!(encode_query(1, &long, TYPE_A), None);
}

#[test]
fn every_cut_of_an_answer_is_read_without_a_panic() {
    let p = policy(&["api.example.com"]);
    let mut fake = FakeAddresses::new();
    let (reply, _) = respond(
        &p,
        &mut fake,
        &encode_query(5, "api.example.com", TYPE_A).unwrap(),
    );
    let reply = reply.unwrap();
    for cut in 0..reply.len() {
        let _ = parse_answer(&reply[..cut], 5, TYPE_A);
    }
    let mut flipped = reply.clone();
    for i in 0..flipped.len() {
        flipped[i] ^= 0xff;
        let _ = parse_answer(&flipped, 5, TYPE_A);
        flipped[i] ^= 0xff;
    }
}
