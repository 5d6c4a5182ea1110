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

fn hook(user: Option<HookUser>, env: &[(&str, &str)]) -> Hook {
    Hook {
        on: vec![crate::config::notify::EventKind::Failed],
        command: vec!["ntfy".into()],
        user,
        timeout: std::time::Duration::from_secs(10),
        coalesce: std::time::Duration::from_secs(20),
        units: None,
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn daemon_env(name: &str) -> Option<String> {
    let vars = [
        ("PATH", "/opt/bin:/usr/bin"),
        ("HOME", "/root"),
        ("USER", "root"),
        ("LANG", "C.UTF-8"),
        ("KEEL_SECRET_OPENAI", "sk-daemon-only"),
        ("ANTHROPIC_API_KEY", "sk-ant-daemon-only"),
        ("KEEL_CRASH_AT", "after-persist"),
        ("NOTIFY_SOCKET", "/run/systemd/notify"),
    ];
    vars.iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

fn as_strings(vars: Vec<CString>) -> Vec<String> {
    vars.into_iter().map(|v| v.into_string().unwrap()).collect()
}

#[test]
fn a_hook_gets_none_of_the_daemons_secrets_or_switches() {
    let told = [("KEEL_EVENT_UNIT", "agent-1".to_string())];
    let vars = as_strings(environment_from(&hook(None, &[]), &told, daemon_env));
    assert_eq!(
        vars,
        vec![
            "PATH=/opt/bin:/usr/bin",
            "LANG=C.UTF-8",
            "HOME=/root",
            "USER=root",
            "KEEL_EVENT_UNIT=agent-1"
        ]
    );
}

#[test]
fn a_hooks_env_and_user_are_its_own() {
    let user = HookUser {
        name: "alerts".into(),
        uid: 990,
        gid: 990,
        groups: vec![990],
        home: "/var/lib/alerts".into(),
    };
    let h = hook(
        Some(user),
        &[("TOPIC", "agents"), ("PATH", "/srv/hooks/bin")],
    );
    let vars = as_strings(environment_from(&h, &[], |_| None));
    assert_eq!(
        vars,
        vec![
            "HOME=/var/lib/alerts",
            "USER=alerts",
            "LOGNAME=alerts",
            "PATH=/srv/hooks/bin",
            "TOPIC=agents"
        ]
    );
    // Without a PATH of its own or the daemon's: the usual directories.
    let vars = as_strings(environment_from(&hook(None, &[]), &[], |_| None));
    assert_eq!(vars, vec![format!("PATH={DEFAULT_PATH}")]);
}
