use super::*;
use std::path::Path;

fn options(command: &[&str]) -> Options {
    Options {
        command: command.iter().map(|s| s.to_string()).collect(),
        ..Options::default()
    }
}

#[test]
fn every_argument_round_trips_through_the_unit() {
    let nasty = [
        "sh",
        "-c",
        "echo \"quoted\" 'single' \\back\\slash",
        "line one\nline two\r\n\ttab",
        "unicode: ünïcödé ✓ 日本 \u{202e}rtl",
        "\u{7}bell \u{1b}[31mred",
        "",
        "r#\"raw\"#",
    ];
    let generated = unit_text(&options(&nasty), Path::new("/"));
    let unit = crate::unit::parse_unit(Path::new("t.ron"), &generated.text)
        .unwrap_or_else(|e| panic!("{e}\n{}", generated.text));
    assert_eq!(unit.command.0, nasty.map(String::from).to_vec());
    assert_eq!(unit.restart, crate::unit::RestartPolicy::Never);
}

#[test]
fn flags_become_the_unit_fields() {
    let mut o = options(&["make", "test"]);
    o.cpu = Some(2.0);
    o.memory = Some("1G".into());
    o.allow = vec!["api.example.com".into(), "github.com:22".into()];
    o.repo = Some("rel/repo@feature".into());
    let generated = unit_text(&o, Path::new("/srv"));
    let unit = crate::unit::parse_unit(Path::new("t.ron"), &generated.text)
        .unwrap_or_else(|e| panic!("{e}\n{}", generated.text));
    assert_eq!(unit.resources.cpu, 2.0);
    assert_eq!(unit.resources.memory.0, 1 << 30);
    let repo = unit.repo.expect("a repo");
    assert_eq!(repo.path, "/srv/rel/repo");
    assert_eq!(repo.base, "feature");
    let text = format!("{:?}", unit.sandbox.network);
    assert!(
        text.contains("api.example.com") && text.contains("github.com:22"),
        "{text}"
    );
}

#[test]
fn an_error_is_told_as_the_flag_that_caused_it() {
    let mut o = options(&["true"]);
    o.memory = Some("lots".into());
    let generated = unit_text(&o, Path::new("/"));
    let file = Path::new("run-true.ron");
    let errors = crate::unit::check_unit(file, &generated.text).expect_err("lots is no size");
    let told = flag_error(&generated, file, &errors[0].to_string());
    assert!(told.starts_with("--memory: "), "{told}");
    assert!(!told.contains("run-true.ron"), "{told}");
}

#[test]
fn a_repo_without_base_is_at_head_and_an_at_in_an_existing_path_is_kept() {
    let dir = std::env::temp_dir().join(format!("keel-run-split-{}", std::process::id()));
    let odd = dir.join("a@b");
    std::fs::create_dir_all(&odd).unwrap();
    assert_eq!(
        split_repo(odd.to_str().unwrap(), Path::new("/")),
        (odd.clone(), "HEAD".into())
    );
    let at = format!("{}@main", odd.display());
    assert_eq!(
        split_repo(&at, Path::new("/")),
        (odd.clone(), "main".into())
    );
    assert_eq!(
        split_repo("r", Path::new("/x")),
        ("/x/r".into(), "HEAD".into())
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn generated_names_are_valid_readable_and_differ() {
    let command = ["/usr/bin/Claude_Code".to_string(), "-p".to_string()];
    let a = generated_name(&command, 1);
    let b = generated_name(&command, 2);
    assert!(a.starts_with("run-claude-code-"), "{a}");
    assert_ne!(a, b);
    for name in [a, b, generated_name(&["./--".to_string()], 3)] {
        crate::unit::validate_name(&name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert!(generated_name(&["日本".to_string()], 4).starts_with("run-task-"));
}

#[test]
fn exit_statuses_are_the_shells() {
    assert_eq!(exit_status(Some("exit:0")), 0);
    assert_eq!(exit_status(Some("exit:3")), 3);
    assert_eq!(exit_status(Some("signal:SIGTERM")), 143);
    assert_eq!(exit_status(Some("signal:SIGKILL")), 137);
    assert_eq!(exit_status(Some("oom")), 137);
    assert_eq!(exit_status(Some("spawn-failed")), 127);
    assert_eq!(exit_status(Some("stalled")), 1);
    assert_eq!(exit_status(None), 1);
}
