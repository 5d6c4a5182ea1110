//! The systemd recipe: `scripts/install-systemd` against a temporary root (never the real
//! /etc), and `units/keel.service` as installed, checked offline by `systemd-analyze verify`.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install-systemd");

fn install(args: &[&str]) -> Output {
    Command::new(SCRIPT).args(args).output().unwrap()
}

fn install_into(root: &Path) -> Output {
    let out = install(&["--root", &path_str(root), "--binary", keel_bin()]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    out
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn install_lays_out_binary_unit_units_credentials_and_state() {
    let scratch = Scratch::new("install-systemd");
    let root = scratch.dir.join("root");
    std::fs::create_dir(&root).unwrap();
    let out = install_into(&root);
    let printed = stdout_of(&out);
    assert!(printed.contains("systemctl daemon-reload"), "{printed}");
    assert!(printed.contains("systemctl enable --now keel"), "{printed}");

    let binary = root.join("usr/local/bin/keel");
    assert_eq!(mode(&binary), 0o755);
    let version = Command::new(&binary).arg("--version").output().unwrap();
    assert!(stdout_of(&version).starts_with("keel "));
    let unit = root.join("etc/systemd/system/keel.service");
    assert_eq!(mode(&unit), 0o644);
    assert_eq!(
        std::fs::read_to_string(&unit).unwrap(),
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/units/keel.service"))
            .unwrap()
    );
    assert_eq!(mode(&root.join("etc/keel/units")), 0o700);
    assert_eq!(mode(&root.join("var/lib/keel")), 0o700);
    let env = root.join("etc/keel/env");
    assert_eq!(mode(&env), 0o600);

    // Again, as an upgrade: credentials, units and state are kept; the binary is replaced.
    std::fs::write(&env, "ANTHROPIC_API_KEY=secret\n").unwrap();
    std::fs::write(
        root.join("etc/keel/units/a.ron"),
        "Unit(command: [\"true\"])",
    )
    .unwrap();
    std::fs::write(root.join("var/lib/keel/events.jsonl"), "{}\n").unwrap();
    std::fs::write(&binary, "old").unwrap();
    install_into(&root);
    assert_eq!(
        std::fs::read_to_string(&env).unwrap(),
        "ANTHROPIC_API_KEY=secret\n"
    );
    assert!(root.join("etc/keel/units/a.ron").exists());
    assert!(root.join("var/lib/keel/events.jsonl").exists());
    assert_eq!(
        std::fs::read(&binary).unwrap(),
        std::fs::read(keel_bin()).unwrap()
    );
    // No temporary file of the renames is left.
    for dir in ["usr/local/bin", "etc/systemd/system"] {
        let names: Vec<String> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| !n.starts_with('.')),
            "{dir}: {names:?}"
        );
    }
}

#[test]
fn install_refuses_bad_input_and_writes_nothing() {
    let scratch = Scratch::new("install-bad");
    let root = scratch.dir.join("root");
    std::fs::create_dir(&root).unwrap();
    let missing = scratch.dir.join("no-such-keel");
    let out = install(&["--root", &path_str(&root), "--binary", &path_str(&missing)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("cargo build --release"),
        "{}",
        stderr_of(&out)
    );
    let not_keel = scratch.dir.join("not-keel");
    std::fs::write(&not_keel, "#!/bin/sh\nexit 3\n").unwrap();
    std::fs::set_permissions(&not_keel, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = install(&["--root", &path_str(&root), "--binary", &path_str(&not_keel)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("does not run"),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(
        std::fs::read_dir(&root).unwrap().count(),
        0,
        "nothing written"
    );

    let out = install(&["--root", &path_str(&scratch.dir.join("absent"))]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("no such directory"),
        "{}",
        stderr_of(&out)
    );
    let out = install(&["--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_of(&out).contains("usage:"), "{}", stderr_of(&out));
}

/// The systemd version `systemd-analyze --version` reports (`systemd 252 (252.38-1~deb12u1)`).
fn systemd_version() -> u32 {
    let out = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .unwrap();
    stdout_of(&out)
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn the_installed_unit_passes_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            !privileged_required(),
            "systemd-analyze is missing (Debian: systemd; .ci/run installs it)"
        );
        eprintln!("the_installed_unit_passes_systemd_analyze_verify: skipped: no systemd-analyze");
        return;
    }
    let scratch = Scratch::new("analyze");
    let root = scratch.dir.join("root");
    std::fs::create_dir(&root).unwrap();
    install_into(&root);
    // verify checks that the programs exist: point the unit at the temporary root's.
    let installed = std::fs::read_to_string(root.join("etc/systemd/system/keel.service")).unwrap();
    let inside = |path: &str| path_str(&root.join(path.trim_start_matches('/')));
    assert!(installed.contains("ExecStart=/usr/local/bin/keel daemon --units /etc/keel/units"));
    let unit = installed
        .replace("/usr/local/bin/keel", &inside("/usr/local/bin/keel"))
        .replace("/etc/keel/", &format!("{}/", inside("/etc/keel")));
    let file: PathBuf = scratch.dir.join("keel.service");
    std::fs::write(&file, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&file)
        .output()
        .unwrap();
    let problems: Vec<String> = stderr_of(&out)
        .lines()
        // DelegateSubgroup= came with systemd 254; older ones ignore it (docs/operations.md,
        // "systemd", says what then to do on cgroup v2).
        .filter(|l| !(systemd_version() < 254 && l.contains("Unknown key 'DelegateSubgroup'")))
        .map(str::to_string)
        .collect();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(problems.is_empty(), "systemd-analyze verify: {problems:#?}");
}
