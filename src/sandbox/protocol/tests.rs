use super::*;

fn args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

#[test]
fn shim_arguments_parse_or_say_what_is_wrong() {
    assert_eq!(Handed::parse(&[]), Ok(None));
    assert_eq!(
        Handed::parse(&args(&["--agent", "2", "--started-ms", "17"])),
        Ok(Some(Handed::Agent {
            pid: 2,
            started_ms: 17
        }))
    );
    assert_eq!(
        Handed::parse(&args(&["--launch-error", "no pipe"])),
        Ok(Some(Handed::LaunchError("no pipe".into())))
    );
    assert!(Handed::parse(&args(&["--agent", "x", "--started-ms", "1"]))
        .unwrap_err()
        .contains("bad --agent"));
    assert!(Handed::parse(&args(&["--agent", "2"]))
        .unwrap_err()
        .contains("unexpected"));
}

#[test]
fn the_spares_command_line_names_its_state_directory() {
    let argv = spare_argv(Path::new("/var/lib/keel")).unwrap();
    let text: Vec<&str> = argv.iter().map(|a| a.to_str().unwrap()).collect();
    assert_eq!(text, ["keel", "shim", "--spare", "/var/lib/keel"]);
    assert!(spare_argv(Path::new("a\0b")).is_err());
}

#[test]
fn a_shim_inherits_neither_the_crash_point_nor_the_secrets_variables() {
    let vars = [
        ("PATH", "/usr/bin"),
        ("KEEL_CRASH_AT", "after-spawn"),
        ("KEEL_SECRET_ANTHROPIC", "sk-real"),
        ("KEEL_LOG", "debug"),
    ]
    .map(|(k, v)| (std::ffi::OsString::from(k), std::ffi::OsString::from(v)));
    let kept: Vec<String> = shim_env_of(vars.into_iter())
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    assert_eq!(kept, ["PATH", "KEEL_LOG"]);
}
