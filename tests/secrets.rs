//! `secrets` end to end, as root on the real kernel, through the real daemon: the agent's
//! environment holds a placeholder (fresh for every attempt), never the value, and nothing the
//! agent can see holds it; the sandbox trusts keel's CA through the bundle bound over the
//! host's and the CA variables; a secret file that is loose or missing defers the start (the
//! task stays queued, its restart budget untouched) until it is fixed.
//!
//! The relay's swap (TLS to a secret's hosts) is tested with the relay.

mod common;

use common::sandbox::*;
use common::wait::wait_for;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A value no file on this machine holds before the test writes it.
fn fresh_value() -> String {
    let hex: String = keel::secrets::placeholder()
        .trim_start_matches(keel::secrets::PLACEHOLDER_PREFIX)
        .to_string();
    format!("sk-test-{hex}")
}

fn write_secret(path: &Path, value: &str, mode: u32) {
    std::fs::write(path, format!("{value}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn secret_unit(script: &str, file: &Path, extra: &str) -> String {
    format!(
        r#"Unit(
    command: ["/bin/sh", "-c", {script:?}],
    secrets: {{"ANTHROPIC_API_KEY": Secret(file: {file:?}, hosts: ["api.anthropic.com"])}},
    sandbox: Sandbox(network: Allow(["api.anthropic.com"])),
    {extra}
)"#,
        file = file.display().to_string()
    )
}

/// The CA certificate sandboxes with secrets trust: the daemon's, when it made one (and its
/// bundle); otherwise one the test writes, with the bundle made as the daemon would.
fn ensure_ca(d: &Daemon) -> String {
    let state = d.state();
    let ca = state.join("network/ca/ca.pem");
    let bundle = keel::secrets::ca_bundle_path(&state);
    if !bundle.exists() {
        let pem = format!(
            "-----BEGIN CERTIFICATE-----\nS0VFTFRFU1RDQQ{}\n-----END CERTIFICATE-----\n",
            std::process::id()
        );
        std::fs::create_dir_all(ca.parent().unwrap()).unwrap();
        if !ca.exists() {
            std::fs::write(&ca, &pem).unwrap();
        }
        let pem = std::fs::read_to_string(&ca).unwrap();
        keel::secrets::write_ca_bundle(&state, &pem).unwrap();
    }
    std::fs::read_to_string(&ca).unwrap()
}

/// Every file under `dir` (not following symbolic links, not into the pseudo-filesystems and
/// the host's system trees, which hold nothing written after the test began) that holds
/// `needle`.
fn files_holding(dir: &Path, needle: &[u8], skip: &[&str], found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if !skip.iter().any(|s| path.ends_with(s)) {
                files_holding(&path, needle, skip, found);
            }
        } else if meta.is_file() && meta.len() <= 16 << 20 {
            if let Ok(bytes) = std::fs::read(&path) {
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    found.push(path);
                }
            }
        }
    }
}

fn holds(bytes: &[u8], needle: &str) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn the_agent_holds_a_placeholder_and_nothing_it_can_see_holds_the_value() {
    if !require_root("the_agent_holds_a_placeholder_and_nothing_it_can_see_holds_the_value") {
        return;
    }
    let dir = HostDir::new("secrets-visible");
    let file = dir.0.join("anthropic");
    let value = fresh_value();
    write_secret(&file, &value, 0o600);
    let d = Daemon::start("secrets-visible");
    let ca = ensure_ca(&d);
    let ca_line = ca.lines().nth(1).unwrap().to_string();
    let script = format!(
        r#"
        echo "env $ANTHROPIC_API_KEY"
        echo "self $(grep -a -o 'ANTHROPIC_API_KEY=[a-z0-9-]*' /proc/self/environ)"
        # Every process it can see (its PID 1, the shim, is not shown it): the placeholder.
        for p in /proc/[0-9]*; do
            echo "pid ${{p#/proc/}} $(grep -a -o 'ANTHROPIC_API_KEY=[a-z0-9-]*' $p/environ 2>/dev/null)"
        done
        for v in SSL_CERT_FILE NODE_EXTRA_CA_CERTS REQUESTS_CA_BUNDLE CURL_CA_BUNDLE GIT_SSL_CAINFO; do
            eval "echo ca $v \$$v"
        done
        if grep -qF '{ca_line}' "$SSL_CERT_FILE"; then echo "bundle keel-ca"; else echo "bundle no-keel-ca"; fi
        echo "bundle lines $(grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE")"
        if cat {file} >/dev/null 2>&1; then echo "file readable"; else echo "file hidden"; fi
        echo "$ANTHROPIC_API_KEY" > /tmp/copy; echo "$ANTHROPIC_API_KEY" > "$HOME/copy"
        echo ready
        exec sleep 60
        "#,
        file = file.display()
    );
    d.write_unit("agent", &secret_unit(&script, &file, "restart: Never,"));
    let out =
        || std::fs::read_to_string(d.task_dir("agent").join("run/output.log")).unwrap_or_default();
    wait_for(Duration::from_secs(30), "the agent is ready", || {
        out().contains("ready\n").then_some(())
    });
    let out = out();
    let placeholder = line(&out, "env ").to_string();
    assert!(
        keel::secrets::is_placeholder(placeholder.as_bytes()),
        "{out}\n{}",
        d.daemon_log()
    );
    assert_eq!(
        line(&out, "self "),
        format!("ANTHROPIC_API_KEY={placeholder}"),
        "{out}"
    );
    let bundle = keel::secrets::ca_bundle_target().expect("the host has a CA bundle");
    for name in [
        "SSL_CERT_FILE",
        "NODE_EXTRA_CA_CERTS",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
    ] {
        assert_eq!(
            line(&out, &format!("ca {name} ")),
            bundle.display().to_string(),
            "{out}"
        );
    }
    assert_eq!(line(&out, "bundle "), "keel-ca", "{out}");
    let host_certs = std::fs::read_to_string(&bundle)
        .unwrap()
        .matches("BEGIN CERTIFICATE")
        .count();
    assert_eq!(
        line(&out, "bundle lines "),
        (host_certs + 1).to_string(),
        "the host's bundle and keel's CA: {out}"
    );
    assert_eq!(line(&out, "file "), "hidden", "{out}");
    let seen: Vec<&str> = out.lines().filter(|l| l.starts_with("pid ")).collect();
    assert!(!seen.is_empty(), "{out}");
    for l in &seen {
        let shown = l.split_whitespace().nth(2);
        assert!(
            shown.is_none_or(|s| s == format!("ANTHROPIC_API_KEY={placeholder}")),
            "{out}"
        );
    }

    // From the host: every process of the task's PID namespace (its PID 1 too), and every file
    // its mount namespace shows.
    let task = d.task("agent").unwrap();
    let shim = task["pid"].as_i64().unwrap() as i32;
    let members = namespace_members(shim)();
    assert!(members.len() >= 2, "{members:?}");
    let mut agent = None;
    for pid in &members {
        for what in ["environ", "cmdline"] {
            let bytes = std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default();
            assert!(!holds(&bytes, &value), "/proc/{pid}/{what} holds the value");
            if what == "environ" && holds(&bytes, &format!("ANTHROPIC_API_KEY={placeholder}")) {
                agent = Some(*pid);
            }
        }
    }
    let agent = agent.expect("the agent's environ holds the placeholder");
    let root = PathBuf::from(format!("/proc/{agent}/root"));
    let mut found = Vec::new();
    let skip = [
        "proc",
        "sys",
        "dev",
        "usr",
        "lib",
        "lib32",
        "lib64",
        "bin",
        "sbin",
        "boot",
        "snap",
        "nix",
        "opt/rustup",
        ".cargo",
        ".rustup",
        "target",
        ".git",
    ];
    files_holding(&root, value.as_bytes(), &skip, &mut found);
    assert!(found.is_empty(), "the agent can see the value in {found:?}");
    // The search reaches what the agent writes (its /tmp, its $HOME): its copies of the
    // placeholder are found there.
    let mut copies = Vec::new();
    files_holding(&root, placeholder.as_bytes(), &skip, &mut copies);
    assert!(copies.contains(&root.join("tmp/copy")), "{copies:?}");
    assert!(
        copies
            .iter()
            .any(|p| p.ends_with("copy") && !p.starts_with(root.join("tmp"))),
        "{copies:?}"
    );

    // Nor does anything keel shows or keeps: status, the journal, the logs.
    let status = d.keel(&["status", "--json"]);
    assert!(!holds(&status.stdout, &value));
    assert!(holds(&status.stdout, "agent"));
    let mut found = Vec::new();
    files_holding(&d.scratch.dir, value.as_bytes(), &[], &mut found);
    assert!(found.is_empty(), "keel's state holds the value: {found:?}");
    assert!(!d.daemon_log().contains(&value));
    d.keel(&["stop", "agent"]);
}

#[test]
fn each_attempt_has_a_placeholder_of_its_own() {
    if !require_root("each_attempt_has_a_placeholder_of_its_own") {
        return;
    }
    let dir = HostDir::new("secrets-attempts");
    let file = dir.0.join("anthropic");
    write_secret(&file, &fresh_value(), 0o600);
    let d = Daemon::start("secrets-attempts");
    let script = r#"echo "attempt $KEEL_ATTEMPT $ANTHROPIC_API_KEY"; [ "$KEEL_ATTEMPT" = 1 ] && exit 1; exit 0"#;
    d.write_unit(
        "agent",
        &secret_unit(
            script,
            &file,
            r#"restart: OnFailure, backoff: Backoff(initial: "100ms"),"#,
        ),
    );
    let task = d.wait_state("agent", "succeeded", Duration::from_secs(30));
    assert_eq!(task["attempt"], 2, "{task}");
    let out =
        std::fs::read_to_string(d.task_dir("agent").join("run/output.log")).unwrap_or_default();
    let first = line(&out, "attempt 1 ").to_string();
    let second = line(&out, "attempt 2 ").to_string();
    assert!(keel::secrets::is_placeholder(first.as_bytes()), "{out}");
    assert!(keel::secrets::is_placeholder(second.as_bytes()), "{out}");
    assert_ne!(first, second, "{out}");
}

/// The task waits, queued, with `start deferred: secret ANTHROPIC_API_KEY: …` holding
/// `needle` and a `start-deferred` entry in the journal; nothing spent of its attempts.
fn assert_waits_for_its_secret(d: &Daemon, needle: &str) {
    let task = wait_for(Duration::from_secs(20), "the start deferred", || {
        d.task("agent").filter(|t| {
            t["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("start deferred: secret ANTHROPIC_API_KEY: "))
        })
    });
    let reason = task["reason"].as_str().unwrap();
    assert!(reason.contains(needle), "{reason}");
    assert_eq!(task["state"], "queued", "{task}");
    assert_eq!(task["attempt"], 0, "{task}");
    let deferred = d
        .events(Some("agent"))
        .into_iter()
        .filter(|e| e["event"] == "start-deferred")
        .count();
    assert!(deferred >= 1, "{:?}", d.events(Some("agent")));
    assert!(
        !d.events(Some("agent"))
            .iter()
            .any(|e| e["event"] == "failed"),
        "{:?}",
        d.events(Some("agent"))
    );
}

#[test]
fn a_loose_secret_file_is_refused_by_check_and_waited_for_until_fixed() {
    if !require_root("a_loose_secret_file_is_refused_by_check_and_waited_for_until_fixed") {
        return;
    }
    let dir = HostDir::new("secrets-loose");
    let file = dir.0.join("anthropic");
    write_secret(&file, &fresh_value(), 0o644);
    let d = Daemon::start("secrets-loose");
    let text = secret_unit("echo started", &file, "restart: Never,");
    let unit_file = dir.0.join("agent.ron");
    std::fs::write(&unit_file, &text).unwrap();
    let check = d.keel(&["check", &path_str(&unit_file)]);
    assert!(!check.status.success(), "{}", stdout_of(&check));
    let errors = stderr_of(&check);
    assert!(
        errors.contains(&format!("chmod 600 {}", file.display())),
        "{errors}"
    );
    assert!(
        errors.contains("secrets[\"ANTHROPIC_API_KEY\"].file"),
        "{errors}"
    );
    assert!(
        errors.contains("agent.ron:3:"),
        "at the file's line: {errors}"
    );

    // keel add refuses it the same way, before the daemon sees it.
    let add = d.keel(&["add", &path_str(&unit_file)]);
    assert!(!add.status.success(), "{}", stdout_of(&add));
    assert!(
        stderr_of(&add).contains(&format!("chmod 600 {}", file.display())),
        "{}",
        stderr_of(&add)
    );
    assert!(d.task("agent").is_none());

    d.write_unit("agent", &text);
    assert_waits_for_its_secret(&d, "chmod 600");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let task = d.wait_state("agent", "succeeded", Duration::from_secs(40));
    assert_eq!(task["attempt"], 1, "the restart budget untouched: {task}");
}

#[test]
fn a_missing_secret_file_is_waited_for_until_it_is_there() {
    if !require_root("a_missing_secret_file_is_waited_for_until_it_is_there") {
        return;
    }
    let dir = HostDir::new("secrets-missing");
    let file = dir.0.join("anthropic");
    let d = Daemon::start("secrets-missing");
    let text = secret_unit("echo started", &file, "restart: Never,");
    let unit_file = dir.0.join("agent.ron");
    std::fs::write(&unit_file, &text).unwrap();
    let check = d.keel(&["check", &path_str(&unit_file)]);
    assert!(
        check.status.success(),
        "a missing file is a warning: {}",
        stderr_of(&check)
    );
    assert!(
        stderr_of(&check).contains("warning: "),
        "{}",
        stderr_of(&check)
    );

    d.write_unit("agent", &text);
    assert_waits_for_its_secret(&d, "does not exist: create it (mode 0600, owned by root)");
    write_secret(&file, &fresh_value(), 0o600);
    let task = d.wait_state("agent", "succeeded", Duration::from_secs(40));
    assert_eq!(task["attempt"], 1, "the restart budget untouched: {task}");
    let out =
        std::fs::read_to_string(d.task_dir("agent").join("run/output.log")).unwrap_or_default();
    assert!(out.contains("started"), "{out}");
}

#[test]
fn an_env_secret_missing_from_keels_environment_is_waited_for() {
    if !require_root("an_env_secret_missing_from_keels_environment_is_waited_for") {
        return;
    }
    let name = format!("KEEL_SECRET_TEST_{}", std::process::id());
    let mut d = Daemon::start("secrets-env");
    d.write_unit(
        "agent",
        &format!(
            r#"Unit(
    command: ["/bin/sh", "-c", "echo \"got $ANTHROPIC_API_KEY\""],
    secrets: {{"ANTHROPIC_API_KEY": Secret(env: "{name}", hosts: ["api.anthropic.com"])}},
    sandbox: Sandbox(network: Allow(["api.anthropic.com"])),
    restart: Never,
)"#
        ),
    );
    assert_waits_for_its_secret(&d, &format!("{name} is not set in keel's environment"));
    // Set in keel's environment (here: the daemon started again with it), the task runs.
    d.shutdown();
    let value = fresh_value();
    d.env.push((name, value.clone()));
    d.spawn();
    let task = d.wait_state("agent", "succeeded", Duration::from_secs(40));
    assert_eq!(task["attempt"], 1, "the restart budget untouched: {task}");
    let out =
        std::fs::read_to_string(d.task_dir("agent").join("run/output.log")).unwrap_or_default();
    let got = line(&out, "got ");
    assert!(keel::secrets::is_placeholder(got.as_bytes()), "{out}");
    assert!(!out.contains(&value));
}
