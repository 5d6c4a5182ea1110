use super::*;
use crate::network::entry::parse;

fn policy(entries: &[&str]) -> Policy {
    let entries: Vec<Entry> = entries.iter().map(|e| parse(e).unwrap()).collect();
    Policy::new(&entries, &BTreeMap::new()).unwrap()
}

fn name(n: &str) -> Destination {
    Destination::Name(n.to_string())
}

#[test]
fn listed_names_on_their_ports_connect_by_name() {
    let p = policy(&["api.anthropic.com", "github.com:22"]);
    assert!(p.name_listed("api.anthropic.com") && p.name_listed("github.com"));
    assert!(!p.name_listed("anthropic.com") && !p.name_listed("example.com"));
    assert_eq!(
        p.decide(&name("api.anthropic.com"), 443),
        Decision::Connect(Upstream::Name {
            name: "api.anthropic.com".into(),
            port: 443
        })
    );
    let Decision::Refuse(refusal) = p.decide(&name("github.com"), 443) else {
        panic!("github.com:443 allowed");
    };
    assert_eq!(refusal.destination(), "github.com:443");
    assert!(refusal.to_string().contains("port 22 only"), "{refusal}");
    assert!(
        refusal.to_string().contains("\"github.com:443\""),
        "{refusal}"
    );
}

#[test]
fn the_same_name_twice_has_the_ports_of_both() {
    let p = policy(&["github.com:22", "github.com"]);
    for port in [22, 80, 443] {
        assert!(matches!(
            p.decide(&name("github.com"), port),
            Decision::Connect(_)
        ));
    }
    assert!(matches!(
        p.decide(&name("github.com"), 9418),
        Decision::Refuse(_)
    ));
}

#[test]
fn a_wildcard_matches_subdomains_not_its_parent_nor_lookalikes() {
    let p = policy(&["*.npmjs.org"]);
    assert!(p.name_listed("registry.npmjs.org"));
    assert!(p.name_listed("a.b.npmjs.org"));
    assert!(!p.name_listed("npmjs.org"));
    assert!(!p.name_listed("evilnpmjs.org"));
    assert!(!p.name_listed("npmjs.org.evil.com"));
}

#[test]
fn addresses_connect_only_when_an_entry_names_them_on_that_port() {
    let p = policy(&["10.0.0.0/8:5432", "[2001:db8::/32]:443"]);
    let v4: IpAddr = "10.9.8.7".parse().unwrap();
    assert_eq!(
        p.decide(&Destination::Address(v4), 5432),
        Decision::Connect(Upstream::Address(SocketAddr::new(v4, 5432)))
    );
    assert!(matches!(
        p.decide(&Destination::Address(v4), 5433),
        Decision::Refuse(Refusal::AddressNotListed(_))
    ));
    let mapped: IpAddr = "::ffff:10.1.1.1".parse().unwrap();
    assert!(matches!(
        p.decide(&Destination::Address(mapped), 5432),
        Decision::Connect(_)
    ));
    let v6: IpAddr = "2001:db8::9".parse().unwrap();
    assert!(matches!(
        p.decide(&Destination::Address(v6), 443),
        Decision::Connect(_)
    ));
}

#[test]
fn the_hosts_loopback_only_on_listed_ports() {
    let p = policy(&["host:11434"]);
    assert!(p.host_listed());
    assert_eq!(
        p.decide(&Destination::Host, 11434),
        Decision::Connect(Upstream::HostLoopback { port: 11434 })
    );
    let Decision::Refuse(refusal) = p.decide(&Destination::Host, 22) else {
        panic!("host:22 allowed");
    };
    assert!(refusal.to_string().contains("\"host:22\""), "{refusal}");
    assert!(!policy(&["example.com"]).host_listed());
}

#[test]
fn an_empty_list_allows_nothing() {
    let p = policy(&[]);
    assert!(p.is_empty());
    assert!(!p.name_listed("example.com"));
    assert!(matches!(
        p.decide(&Destination::Host, 80),
        Decision::Refuse(_)
    ));
    assert!(matches!(
        p.decide(&Destination::Address("93.184.216.34".parse().unwrap()), 443),
        Decision::Refuse(_)
    ));
}

#[test]
fn names_that_resolve_to_special_addresses_are_refused_unless_named() {
    let p = policy(&["internal.example.com", "10.1.0.0/16:443"]);
    for (addr, kind) in [
        ("127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("192.168.1.1", "private"),
        ("172.20.0.1", "private"),
        ("100.100.100.200", "shared"),
        ("0.0.0.0", "this-network"),
        ("224.0.0.1", "multicast"),
        ("198.18.0.7", "fake-address"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("64:ff9b::a9fe:a9fe", "link-local"),
        ("2002:a9fe:a9fe::1", "link-local"),
        ("fe80::1", "link-local"),
        ("fd00::1", "private"),
        ("ff02::1", "multicast"),
        ("::", "unspecified"),
    ] {
        let addr: IpAddr = addr.parse().unwrap();
        let refusal = p
            .check_resolved("internal.example.com", addr, 443)
            .expect_err(&addr.to_string());
        assert!(refusal.to_string().contains(kind), "{addr}: {refusal}");
    }
    // Named: allowed on the named port.
    let named: IpAddr = "10.1.2.3".parse().unwrap();
    assert_eq!(p.check_resolved("internal.example.com", named, 443), Ok(()));
    assert!(p.check_resolved("internal.example.com", named, 80).is_err());
    // Public addresses pass.
    for public in ["93.184.216.34", "2606:2800:220:1::1", "8.8.8.8"] {
        let addr: IpAddr = public.parse().unwrap();
        assert_eq!(p.check_resolved("internal.example.com", addr, 443), Ok(()));
    }
}

#[test]
fn named_lists_expand_nest_and_refuse_circles_and_unknowns() {
    let entries =
        |texts: &[&str]| -> Vec<Entry> { texts.iter().map(|e| parse(e).unwrap()).collect() };
    let mut lists = BTreeMap::new();
    lists.insert("npm".to_string(), entries(&["registry.npmjs.org", "@cdn"]));
    lists.insert("cdn".to_string(), entries(&["*.jsdelivr.net"]));
    let p = Policy::new(&entries(&["@npm"]), &lists).unwrap();
    assert!(p.name_listed("registry.npmjs.org") && p.name_listed("cdn.jsdelivr.net"));

    let unknown = Policy::new(&entries(&["@pypi"]), &lists).unwrap_err();
    assert!(unknown.to_string().contains("@cdn, @npm"), "{unknown}");
    let none = Policy::new(&entries(&["@pypi"]), &BTreeMap::new()).unwrap_err();
    assert!(none.to_string().contains("names no lists"), "{none}");

    lists.insert("cdn".to_string(), entries(&["@npm"]));
    assert_eq!(
        Policy::new(&entries(&["@npm"]), &lists),
        Err(PolicyError::ListCycle("npm".into()))
    );
    // A list used twice side by side is no circle.
    lists.insert("cdn".to_string(), entries(&["*.jsdelivr.net"]));
    assert!(Policy::new(&entries(&["@cdn", "@npm"]), &lists).is_ok());
}

#[test]
fn static_ports_are_the_host_entries_and_the_address_entries_ports() {
    let p = policy(&[
        "host:8080",
        "host:11434",
        "10.0.0.0/8:5432",
        "192.168.1.7:5432",
        "203.0.113.7:22",
        "api.example.com",
    ]);
    assert_eq!(p.static_ports(), (vec![8080, 11434], vec![22, 5432]));
    assert_eq!(
        policy(&["api.example.com"]).static_ports(),
        (vec![], vec![])
    );
}

#[test]
fn the_ports_of_a_name_are_those_of_its_entries_and_wildcards() {
    let entries: Vec<_> = [
        "api.example.com",
        "api.example.com:22",
        "*.example.com:8443",
        "other.org:9",
    ]
    .iter()
    .map(|e| crate::network::entry::parse(e).unwrap())
    .collect();
    let p = Policy::new(&entries, &BTreeMap::new()).unwrap();
    assert_eq!(p.ports_for("api.example.com"), vec![22, 80, 443, 8443]);
    assert_eq!(p.ports_for("www.example.com"), vec![8443]);
    assert_eq!(p.ports_for("example.com"), Vec::<u16>::new());
    let udp = Refusal::Udp("10.0.0.1:123".parse().unwrap());
    assert_eq!(udp.destination(), "udp 10.0.0.1:123");
    assert!(udp.to_string().contains("only DNS"), "{udp}");
}

#[test]
fn lists_that_share_lists_are_expanded_once_each() {
    let entries =
        |texts: &[&str]| -> Vec<Entry> { texts.iter().map(|e| parse(e).unwrap()).collect() };
    // 30 levels of diamonds: 2^30 expansions without a memo.
    let mut lists = BTreeMap::new();
    lists.insert(
        "l30".to_string(),
        entries(&["api.example.com", "*.example.org", "10.0.0.0/8:5432"]),
    );
    for n in (0..30).rev() {
        let next = format!("@l{}", n + 1);
        lists.insert(format!("l{n}"), entries(&[&next, &next]));
    }
    let p = Policy::new(&entries(&["@l0", "@l0"]), &lists).unwrap();
    assert!(p.name_listed("api.example.com"));
    assert!(p.name_listed("www.example.org"));
    assert_eq!(p.static_ports(), (vec![], vec![5432]));
    assert_eq!(p, Policy::new(&entries(&["@l30"]), &lists).unwrap());
}
