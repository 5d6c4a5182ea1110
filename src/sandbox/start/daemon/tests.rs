use super::*;

#[test]
fn home_is_roots_or_the_users_existing_home() {
    let passwd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:n:/nonexistent:/bin/false\nme:x:1000:1000::/usr:/bin/sh\ntmp:x:1001:1001::/tmp:/bin/sh\n";
    assert_eq!(home_for(None, passwd), Path::new("/root"));
    assert_eq!(home_for(Some(65534), passwd), Path::new("/root"));
    assert_eq!(home_for(Some(1000), passwd), Path::new("/usr"));
    assert_eq!(home_for(Some(1001), passwd), Path::new("/root"));
    assert_eq!(home_for(Some(4242), passwd), Path::new("/root"));
}
