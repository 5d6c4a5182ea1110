//! Where a hook's program is looked for.

use super::*;

#[test]
fn a_path_is_tried_alone() {
    assert_eq!(
        candidates("/usr/bin/ntfy", Some("/x")),
        vec!["/usr/bin/ntfy"]
    );
    assert_eq!(candidates("./hook", Some("/x")), vec!["./hook"]);
}

#[test]
fn a_name_is_tried_in_each_directory_of_path() {
    assert_eq!(
        candidates("ntfy", Some("/usr/local/bin:/usr/bin/::/opt")),
        vec!["/usr/local/bin/ntfy", "/usr/bin/ntfy", "ntfy", "/opt/ntfy"]
    );
}

#[test]
fn without_path_the_usual_directories() {
    let paths = candidates("mail", None);
    assert!(paths.contains(&"/usr/bin/mail".to_string()), "{paths:?}");
    assert!(paths.contains(&"/usr/sbin/mail".to_string()), "{paths:?}");
}
