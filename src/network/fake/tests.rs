use super::*;

#[test]
fn a_name_keeps_its_address_and_no_two_names_share_one() {
    let mut fake = FakeAddresses::new();
    let a = fake.assign("api.anthropic.com").unwrap();
    let b = fake.assign("registry.npmjs.org").unwrap();
    assert_ne!(a, b);
    assert_eq!(fake.assign("api.anthropic.com"), Some(a));
    assert_eq!(
        fake.destination(a),
        Some(Destination::Name("api.anthropic.com".into()))
    );
    assert_eq!(fake.destination(HOST_ADDRESS), Some(Destination::Host));
    assert!(FakeAddresses::in_range(a) && FakeAddresses::in_range(b));
    assert!(a != HOST_ADDRESS && a != RESOLVER_ADDRESS && a != RANGE_START);
    assert_eq!(fake.len(), 2);
}

#[test]
fn an_address_never_given_names_nothing() {
    let fake = FakeAddresses::new();
    assert_eq!(fake.destination(Ipv4Addr::new(198, 18, 3, 4)), None);
    assert!(FakeAddresses::in_range(Ipv4Addr::new(198, 19, 255, 254)));
    assert!(!FakeAddresses::in_range(Ipv4Addr::new(198, 20, 0, 1)));
    assert!(!FakeAddresses::in_range(Ipv4Addr::new(198, 17, 255, 255)));
}

#[test]
fn a_full_table_gives_no_address_and_keeps_those_given() {
    let mut fake = FakeAddresses::with_capacity(2);
    let a = fake.assign("a.example").unwrap();
    fake.assign("b.example").unwrap();
    assert_eq!(fake.assign("c.example"), None);
    assert_eq!(fake.assign("a.example"), Some(a));
}

#[test]
fn the_whole_range_is_handed_out_without_its_broadcast() {
    let mut fake = FakeAddresses::new();
    let mut last = None;
    let mut n = 0u32;
    while let Some(addr) = fake.assign(&format!("n{n}.example")) {
        last = Some(addr);
        n += 1;
    }
    assert_eq!(n, (1 << 17) - 4);
    assert_eq!(last, Some(Ipv4Addr::new(198, 19, 255, 254)));
}

#[test]
fn an_earlier_relay_s_addresses_are_restored_and_new_names_avoid_them() {
    let mut fake = FakeAddresses::new();
    let later = Ipv4Addr::new(198, 18, 0, 4);
    assert!(fake.restore("b.example.com", later));
    assert!(
        !fake.restore("b.example.com", Ipv4Addr::new(198, 18, 0, 5)),
        "named already"
    );
    assert!(!fake.restore("c.example.com", later), "taken already");
    assert!(
        !fake.restore("d.example.com", HOST_ADDRESS),
        "not handed out"
    );
    assert!(
        !fake.restore("d.example.com", Ipv4Addr::new(10, 0, 0, 1)),
        "not of the range"
    );
    assert!(
        !fake.restore("d.example.com", Ipv4Addr::new(198, 19, 255, 255)),
        "the broadcast"
    );
    let a = fake.assign("a.example.com").unwrap();
    let c = fake.assign("c.example.com").unwrap();
    assert!(
        a != later && c != later && a != c,
        "a new name never gets a taken address"
    );
    assert_eq!(
        fake.destination(later),
        Some(Destination::Name("b.example.com".into()))
    );
}
