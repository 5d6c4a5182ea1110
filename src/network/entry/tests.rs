use super::*;

fn name(name: &str, ports: Ports) -> Entry {
    Entry::Name {
        name: name.into(),
        ports,
    }
}

#[test]
fn names_take_the_web_ports_or_the_one_given() {
    assert_eq!(
        parse("api.anthropic.com"),
        Ok(name("api.anthropic.com", Ports::Web))
    );
    assert_eq!(
        parse("github.com:22"),
        Ok(name("github.com", Ports::One(22)))
    );
    assert_eq!(
        parse(" API.Anthropic.COM. "),
        Ok(name("api.anthropic.com", Ports::Web))
    );
    assert!(Ports::Web.contains(443) && Ports::Web.contains(80) && !Ports::Web.contains(22));
}

#[test]
fn wildcards_cover_subdomains_below_a_domain_of_someone_only() {
    assert_eq!(
        parse("*.npmjs.org"),
        Ok(Entry::Subdomains {
            parent: "npmjs.org".into(),
            ports: Ports::Web
        })
    );
    assert_eq!(
        parse("*.example.com:8443"),
        Ok(Entry::Subdomains {
            parent: "example.com".into(),
            ports: Ports::One(8443)
        })
    );
    for broad in [
        "*",
        "*.com",
        "*.co.uk",
        "*.github.io",
        "*:443",
        "*.amazonaws.com",
    ] {
        assert!(
            matches!(parse(broad), Err(EntryError::TooBroad(_))),
            "{broad}: {:?}",
            parse(broad)
        );
    }
    let message = parse("*.com").unwrap_err().to_string();
    assert!(
        message.contains("too broad") && message.contains("network: Host"),
        "{message}"
    );
    assert!(matches!(
        parse("api.*.com"),
        Err(EntryError::BadName { .. })
    ));
    assert!(matches!(
        parse("*npmjs.org"),
        Err(EntryError::BadName { .. })
    ));
}

#[test]
fn addresses_and_ranges_need_a_port() {
    let v4 = |a: [u8; 4], prefix| IpNet::new(IpAddr::V4(Ipv4Addr::from(a)), prefix).unwrap();
    assert_eq!(
        parse("203.0.113.7:22"),
        Ok(Entry::Network {
            net: v4([203, 0, 113, 7], 32),
            port: 22
        })
    );
    assert_eq!(
        parse("10.0.0.0/8:5432"),
        Ok(Entry::Network {
            net: v4([10, 0, 0, 0], 8),
            port: 5432
        })
    );
    // Host bits are cleared: the range is what it covers.
    assert_eq!(parse("10.1.2.3/8:5432"), parse("10.0.0.0/8:5432"));
    assert!(matches!(
        parse("203.0.113.7"),
        Err(EntryError::AddressWithoutPort(_))
    ));
    let message = parse("203.0.113.7").unwrap_err().to_string();
    assert!(message.contains("\"203.0.113.7:443\""), "{message}");
    assert!(matches!(
        parse("10.0.0.0/33:1"),
        Err(EntryError::BadAddress { .. })
    ));
    assert!(matches!(
        parse("0.0.0.0/0:443"),
        Err(EntryError::TooBroad(_))
    ));
    assert!(matches!(
        parse("300.1.2.3:80"),
        Err(EntryError::BadAddress { .. })
    ));
}

#[test]
fn ipv6_is_written_in_brackets() {
    let Ok(Entry::Network { net, port: 443 }) = parse("[2001:db8::/32]:443") else {
        panic!("{:?}", parse("[2001:db8::/32]:443"));
    };
    assert!(net.contains("2001:db8:1::5".parse().unwrap()));
    assert!(!net.contains("2001:db9::1".parse().unwrap()));
    assert!(matches!(
        parse("[::1]:8080"),
        Ok(Entry::Network { port: 8080, .. })
    ));
    assert!(matches!(
        parse("[::1]"),
        Err(EntryError::AddressWithoutPort(_))
    ));
    assert!(matches!(
        parse("2001:db8::1"),
        Err(EntryError::BadAddress { .. })
    ));
    assert!(matches!(
        parse("[10.0.0.1]:80"),
        Err(EntryError::BadAddress { .. })
    ));
    assert!(matches!(
        parse("[::1:80"),
        Err(EntryError::BadAddress { .. })
    ));
}

#[test]
fn host_ports_and_lists() {
    assert_eq!(parse("host:11434"), Ok(Entry::HostLoopback { port: 11434 }));
    assert_eq!(parse("@npm"), Ok(Entry::List("npm".into())));
    assert!(matches!(parse("@"), Err(EntryError::BadListName(_))));
    assert!(matches!(parse("@a b"), Err(EntryError::BadListName(_))));
    assert!(matches!(
        parse("host.keel.internal:80"),
        Err(EntryError::Reserved(_))
    ));
    assert!(matches!(
        parse("x.host.keel.internal"),
        Err(EntryError::Reserved(_))
    ));
}

#[test]
fn malformed_entries_say_what_is_wrong() {
    for (entry, expected) in [
        ("", "empty"),
        ("github.com:0", "not a port"),
        ("github.com:65536", "not a port"),
        ("github.com:+22", "not a port"),
        ("github.com:", "not a port"),
        ("host:http", "not a port"),
        ("bad_-.com", "not a DNS label"),
        ("-bad.com", "not a DNS label"),
        ("a..com", "1 to 63"),
        ("exämple.com", "xn--"),
        ("example.123", "all digits"),
    ] {
        let error = parse(entry).expect_err(entry).to_string();
        assert!(error.contains(expected), "{entry:?}: {error}");
    }
    let long = format!("{}.com", "a".repeat(64));
    assert!(parse(&long).unwrap_err().to_string().contains("1 to 63"));
    let too_long = vec!["abcdefghi"; 26].join(".");
    assert!(parse(&too_long).unwrap_err().to_string().contains("253"));
}

#[test]
fn ranges_contain_what_they_cover_only() {
    let net = IpNet::new("172.16.0.0".parse().unwrap(), 12).unwrap();
    assert!(net.contains("172.31.255.255".parse().unwrap()));
    assert!(!net.contains("172.32.0.0".parse().unwrap()));
    assert!(!net.contains("::ffff:172.16.0.1".parse().unwrap()));
    assert_eq!(net.to_string(), "172.16.0.0/12");
    assert_eq!(IpNet::host("::1".parse().unwrap()).to_string(), "[::1]");
}
