use super::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

#[test]
fn data_names_the_three_layers_and_the_options() {
    let layers = |in_user_namespace| {
        overlay_data_in(
            Path::new("/var/lib/keel/bases/ab-12/tree"),
            Path::new("/var/lib/keel/tasks/t/checkout/upper"),
            Path::new("/var/lib/keel/tasks/t/checkout/ovl-work"),
            in_user_namespace,
        )
        .unwrap()
    };
    assert_eq!(
        layers(false),
        "lowerdir=/var/lib/keel/bases/ab-12/tree,upperdir=/var/lib/keel/tasks/t/checkout/upper,\
             workdir=/var/lib/keel/tasks/t/checkout/ovl-work,redirect_dir=on,index=off"
    );
    // In a user namespace: no trusted xattrs, so no redirects.
    assert_eq!(
        layers(true),
        "lowerdir=/var/lib/keel/bases/ab-12/tree,upperdir=/var/lib/keel/tasks/t/checkout/upper,\
             workdir=/var/lib/keel/tasks/t/checkout/ovl-work,userxattr,index=off"
    );
}

#[test]
fn separators_and_escapes_are_refused_by_name() {
    let ok = Path::new("/s/ok");
    for (bad, named) in [("/s/a,b", "','"), ("/s/a:b", "':'"), ("/s/a\\b", "'\\\\'")] {
        let err = overlay_data(Path::new(bad), ok, ok).unwrap_err();
        assert!(err.starts_with(bad), "{err}");
        assert!(err.contains(named), "{err}");
        let err = overlay_data(ok, ok, Path::new(bad)).unwrap_err();
        assert!(err.contains("cannot carry"), "{err}");
    }
    let both = overlay_path_problem(Path::new("/s/a,b:c")).unwrap();
    assert!(both.contains("',' and ':'"), "{both}");
    assert!(overlay_path_problem(Path::new("/s/with space/é")).is_none());
    let latin1 = Path::new(OsStr::from_bytes(b"/s/\xe9"));
    assert!(overlay_path_problem(latin1).unwrap().contains("not UTF-8"));
    assert!(overlay_data(Path::new("rel"), ok, ok)
        .unwrap_err()
        .contains("absolute"));
}
