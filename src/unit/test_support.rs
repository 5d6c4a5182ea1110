//! Helpers shared by the unit tests of this module.

use super::*;

pub(super) fn parse(text: &str) -> Unit {
    parse_unit(Path::new("units/t.ron"), text).unwrap_or_else(|e| panic!("{e}"))
}

/// A fresh directory under the system temp directory.
pub(super) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-unit-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The full example of DESIGN.md, "Unit files (`.ron`)", verbatim.
pub(super) const DESIGN_EXAMPLE: &str = r#"Unit(
    command: ["claude", "-p", "Fix the flaky test in tests/net.rs"],
    resume_command: Some(["claude", "--continue", "-p", "Continue where you stopped."]),
    env: {"RUST_LOG": "info"},
    repo: Some(Repo(path: "/srv/repos/app", base: "main")),   // branch defaults to "keel/<unit>"
    restart: OnFailure,                                        // Always | OnFailure | Never
    backoff: Backoff(initial: "1s", max: "5m", factor: 2.0, reset_after: "10m"),
    restart_limit: RestartLimit(count: 5, within: "1h"),       // then the task is `failed`
    resources: Resources(cpu: 2.0, memory: "4G", pids: 1024), // reservation AND enforced limit
    priority: 0,
    liveness: Liveness(heartbeat_timeout: "5m", progress_timeout: "30m", startup_grace: "2m",
                       on_stall: Restart,                      // Restart | Kill | Report
                       signals: [Heartbeat, Output, Cpu]),     // which evidence counts as working
    workdir: "/work",                                          // where the checkout appears
    sandbox: Sandbox(network: Host, user: None, capabilities: [], writable: [], hidden: []),
    stop: Stop(signal: "SIGTERM", timeout: "30s"),
    essential: false,                                          // under `keel init`: its final failure ends the container
)"#;

pub(super) fn secs(n: u64) -> Dur {
    Dur(Duration::from_secs(n))
}

pub(super) fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}
