//! The `Containerfile` under the real engines, Podman (with runc) and Docker (Debian's
//! docker.io), with no image registry: the runtime stage built from a locally imported base
//! (`mmdebstrap --variant=minbase bookworm`, cached) and fed a prebuilt static keel
//! (`--build-arg KEEL_BINARY`); then `run` with exactly the documented flags — plus only what
//! this host needs, each of which the recipe documents — a sandboxed shell agent that
//! heartbeats (`units/examples/shell-agent.ron`) runs, the HEALTHCHECK reports healthy, `stop`
//! ends the container with status 0 within its stop timeout, and `start` resumes the task
//! (attempt 2, `KEEL_RESUMED=1`). Everything the test made is removed by name at the end.

mod common;
mod engines_support;
use common::*;
use engines_support::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

const CONTAINERFILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/Containerfile");
const OPERATIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md");
const SHELL_AGENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/units/examples/shell-agent.ron"
);

/// What a hybrid-cgroup host needs (crun refuses it; runc runs it).
const HYBRID_FLAGS: &[&str] = &["--runtime", "runc"];
/// What Podman needs where the host withholds CAP_SYS_RESOURCE.
const ULIMIT_FLAGS: &[&str] = &[
    "--ulimit",
    "nofile=4096:4096",
    "--ulimit",
    "nproc=4096:4096",
];

/// The `podman run` command of a text: the line starting with `podman run` (after `prefix`)
/// and its continuation lines, as words.
fn run_command(text: &str, prefix: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let Some(line) = line.strip_prefix(prefix) else {
            inside = false;
            continue;
        };
        let line = line.trim();
        if !inside && !line.starts_with("podman run ") {
            continue;
        }
        inside = line.ends_with('\\');
        words.extend(
            line.trim_end_matches('\\')
                .split_whitespace()
                .map(String::from),
        );
        if !inside {
            return words;
        }
    }
    panic!("no `podman run` command in the text");
}

/// The documented command, the same in the Containerfile's header and in docs/operations.md
/// (the units directory's name aside).
fn documented_run() -> Vec<String> {
    let containerfile = std::fs::read_to_string(CONTAINERFILE).unwrap();
    let operations = std::fs::read_to_string(OPERATIONS).unwrap();
    let header = run_command(&containerfile, "#");
    let docs = run_command(&operations, "");
    let units_source = |w: &String| match w.split_once(":/etc/keel/units") {
        Some((_, rest)) => format!("UNITS:/etc/keel/units{rest}"),
        None => w.clone(),
    };
    assert_eq!(
        header.iter().map(units_source).collect::<Vec<_>>(),
        docs.iter().map(units_source).collect::<Vec<_>>(),
        "the Containerfile's header and docs/operations.md document different commands"
    );
    // Each host-specific addition is documented in both, with when it is needed.
    for extra in [HYBRID_FLAGS, ULIMIT_FLAGS] {
        let text = extra.join(" ");
        assert!(
            containerfile.contains(&text),
            "the Containerfile does not document {text}"
        );
        assert!(
            operations.contains(&text),
            "docs/operations.md does not document {text}"
        );
    }
    assert!(
        containerfile.contains("one capability per --cap-add")
            && operations.contains("one capability\nper `--cap-add`"),
        "the recipe no longer says Docker's --cap-add takes one capability"
    );
    header
}

fn hybrid_host() -> bool {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mountinfo.contains(" /sys/fs/cgroup/unified ") && mountinfo.contains(" - cgroup ")
}

fn has_cap_sys_resource() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap()
        .trim();
    // CAP_SYS_RESOURCE is capability 24 (linux/capability.h).
    u64::from_str_radix(eff, 16).unwrap() & (1 << 24) != 0
}

/// The documented `run` arguments (after `podman run`) for this test's names, with `extra`
/// (what the host needs) and `--pull=never` before the image; for Docker
/// (`one_cap_per_flag`), the capabilities one per `--cap-add`, as the recipe says.
fn run_args(
    documented: &[String],
    container: &str,
    volume: &str,
    (units, secrets): (&Path, &Path),
    image: &str,
    extra: &[&str],
    one_cap_per_flag: bool,
) -> Vec<String> {
    assert_eq!(documented[..2], ["podman", "run"]);
    let mut args: Vec<String> = Vec::new();
    let words = &documented[2..];
    let (last, words) = words.split_last().unwrap();
    assert_eq!(last, "keel", "the documented command's image is `keel`");
    for (i, word) in words.iter().enumerate() {
        let previous = if i > 0 { words[i - 1].as_str() } else { "" };
        if let (Some(list), true) = (word.strip_prefix("--cap-add="), one_cap_per_flag) {
            // Docker: one capability per --cap-add, as the recipe says.
            args.extend(list.split(',').map(|c| format!("--cap-add={c}")));
            continue;
        }
        args.push(match previous {
            "--name" => container.to_string(),
            "-v" if word.starts_with("keel-state:") => word.replacen("keel-state", volume, 1),
            "-v" if word.contains(":/etc/keel/units") => {
                let (_, rest) = word.split_once(':').unwrap();
                format!("{}:{rest}", units.display())
            }
            "-v" if word.contains(":/etc/keel/secrets") => {
                let (_, rest) = word.split_once(':').unwrap();
                format!("{}:{rest}", secrets.display())
            }
            _ => word.clone(),
        });
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push("--pull=never".into());
    args.push(image.to_string());
    args
}

/// The task `unit` as `keel status --json` inside the container shows it.
fn task(engine: &Engine, container: &str, unit: &str) -> Value {
    let out = engine.output(&["exec", container, "keel", "status", "--json"]);
    let status: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (status["tasks"].as_array())
        .and_then(|tasks| tasks.iter().find(|t| t["unit"] == unit).cloned())
        .unwrap_or_default()
}

fn logs(engine: &Engine, container: &str) -> String {
    let out = engine.output(&["logs", container]);
    format!("{}{}", stdout_of(&out), stderr_of(&out))
}

fn the_recipe_under(engine: &Engine, scratch: &Scratch) {
    let name = engine.name();
    let tag = std::process::id().to_string();
    eprintln!("{name}: {}", engine.versions());
    let documented = documented_run();
    let stop_timeout: u64 = (documented.iter())
        .find_map(|w| w.strip_prefix("--stop-timeout="))
        .expect("the documented command sets --stop-timeout")
        .parse()
        .unwrap();
    let made = Made {
        engine,
        container: format!("keel-test-engines-{name}-{tag}"),
        volume: format!("keel-test-engines-{name}-{tag}-state"),
        images: vec![
            engine.image("keel-test-engines-base", &tag),
            engine.image("keel-test-engines-binary", &tag),
            engine.image("keel-test-engines", &tag),
        ],
    };
    let [base, binary, image] = &made.images[..] else {
        unreachable!()
    };
    let container = made.container.as_str();

    // The base image and the static keel, imported (no registry).
    let started = Instant::now();
    engine.ok(&["import", &path_str(&base_tar()), base]);
    let context = scratch.dir.join("context");
    let bin = scratch.dir.join("bin");
    std::fs::create_dir_all(&context).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(static_keel(), bin.join("keel")).unwrap();
    let keel_tar = scratch.dir.join("keel.tar");
    let tar = std::process::Command::new("tar")
        .arg("-C")
        .arg(&bin)
        .arg("-cf")
        .arg(&keel_tar)
        .arg("keel")
        .status()
        .unwrap();
    assert!(tar.success());
    engine.ok(&["import", &path_str(&keel_tar), binary]);
    eprintln!("{name}: base and keel imported in {:?}", started.elapsed());

    // The Containerfile's runtime stage on them (its apt-get from Debian's mirrors).
    let started = Instant::now();
    let mut build = vec!["build"];
    build.extend(engine.build_flags());
    let base_arg = format!("KEEL_BASE={base}");
    let binary_arg = format!("KEEL_BINARY={binary}");
    build.extend(["-t", image, "-f", CONTAINERFILE]);
    build.extend(["--build-arg", &base_arg, "--build-arg", &binary_arg]);
    let context_arg = path_str(&context);
    build.push(&context_arg);
    engine.ok(&build);
    eprintln!("{name}: image built in {:?}", started.elapsed());

    // The units: the shell agent example (default sandbox: network Allow([]), its own user
    // namespace), with steps enough to outlast the test.
    let units = scratch.dir.join("units");
    let example = std::fs::read_to_string(SHELL_AGENT).unwrap();
    let unit = example.replace(r#""STEPS": "20""#, r#""STEPS": "1000""#);
    assert_ne!(
        unit, example,
        "shell-agent.ron's STEPS changed: update this test"
    );
    std::fs::write(units.join("shell-agent.ron"), unit).unwrap();

    let mut extra: Vec<&str> = Vec::new();
    if engine.kind == Kind::Podman && hybrid_host() {
        extra.extend(HYBRID_FLAGS);
    }
    if engine.kind == Kind::Podman && !has_cap_sys_resource() {
        extra.extend(ULIMIT_FLAGS);
    }
    // The secrets directory the recipe mounts: root's, 0700, a 0600 file in it.
    let secrets = scratch.dir.join("secrets");
    std::fs::create_dir(&secrets).unwrap();
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o700)).unwrap();
    let secret = secrets.join("anthropic");
    std::fs::write(&secret, "sk-test-engines\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();

    let docker = engine.kind == Kind::Docker;
    let args = run_args(
        &documented,
        container,
        &made.volume,
        (&units, &secrets),
        image,
        &extra,
        docker,
    );
    eprintln!("{name}: run {}", args.join(" "));
    let mut run = vec!["run"];
    run.extend(args.iter().map(String::as_str));
    let started = Instant::now();
    engine.ok(&run);

    // The sandboxed agent runs and reports progress.
    let mut seen = Value::Null;
    wait_until(
        Duration::from_secs(60),
        "the shell agent to finish a step",
        || {
            seen = task(engine, container, "shell-agent");
            seen["state"] == "running"
                && seen["progress"]
                    .as_str()
                    .is_some_and(|p| p.ends_with(" done"))
        },
    );
    eprintln!(
        "{name}: a step done {:?} after run: {seen}",
        started.elapsed()
    );
    assert_eq!(seen["attempt"], 1, "{seen}\n{}", logs(engine, container));
    let log = logs(engine, container);
    // Without the optional NET_RAW, as the recipe says: no sniffer, a warning, the task runs.
    assert!(
        log.contains("no packet sniffer in the task's network namespace"),
        "{log}"
    );
    if hybrid_host() {
        assert!(
            log.contains("mounted one at /sys/fs/cgroup/unified"),
            "keel init should have mounted a cgroup2 on this hybrid host:\n{log}"
        );
    }

    // The secrets as keel inside sees them: still root's and 0600, as the recipe says.
    let mode = engine.ok(&[
        "exec",
        container,
        "stat",
        "-c",
        "%u %a",
        "/etc/keel/secrets/anthropic",
    ]);
    assert_eq!(mode.trim(), "0 600", "the mounted secret file");

    // The HEALTHCHECK.
    let started = Instant::now();
    match engine.kind {
        Kind::Podman => {
            // A systemd timer runs it periodically where systemd runs; once, here, by hand.
            engine.ok(&["healthcheck", "run", container]);
        }
        Kind::Docker => {}
    }
    wait_until(
        Duration::from_secs(90),
        "the HEALTHCHECK to report healthy",
        || engine.health(container) == "healthy",
    );
    eprintln!("{name}: healthy {:?} after asking", started.elapsed());

    // `stop`: SIGTERM to keel init, an orderly stop, exit 0 within the stop timeout.
    let started = Instant::now();
    engine.ok(&["stop", container]);
    let took = started.elapsed();
    let exit = engine.ok(&["inspect", "--format", "{{.State.ExitCode}}", container]);
    let log = logs(engine, container);
    eprintln!("{name}: stop took {took:?}, exit {}", exit.trim());
    assert_eq!(exit.trim(), "0", "{log}");
    assert!(
        took < Duration::from_secs(stop_timeout),
        "stop took {took:?}"
    );
    assert!(
        log.contains("shell-agent: attempt 1 ended: signal:SIGTERM"),
        "{log}"
    );
    assert!(log.contains("daemon stopped (exit 0)"), "{log}");

    // `start`: the same container on the same volume; the task resumes.
    let started = Instant::now();
    engine.ok(&["start", container]);
    wait_until(
        Duration::from_secs(60),
        "the task to resume (attempt 2)",
        || {
            seen = task(engine, container, "shell-agent");
            seen["state"] == "running" && seen["attempt"] == 2
        },
    );
    let mut output = String::new();
    wait_until(
        Duration::from_secs(30),
        "the resumed attempt's first line",
        || {
            output = stdout_of(&engine.output(&["exec", container, "keel", "logs", "shell-agent"]));
            output.contains("attempt 2: resuming after step")
        },
    );
    eprintln!(
        "{name}: resumed {:?} after start: {seen}",
        started.elapsed()
    );
    // That line is the KEEL_RESUMED=1 branch of the example, told how attempt 1 ended.
    assert!(
        output.contains("(previous attempt: signal:SIGTERM)"),
        "{output}"
    );
    assert_eq!(seen["restarts"], 0, "a stop is not a restart: {seen}");

    let started = Instant::now();
    engine.ok(&["stop", container]);
    let exit = engine.ok(&["inspect", "--format", "{{.State.ExitCode}}", container]);
    assert_eq!(exit.trim(), "0", "{}", logs(engine, container));
    eprintln!("{name}: second stop took {:?}", started.elapsed());
}

#[test]
fn podman_runs_the_containerfile_recipe() {
    let test = "podman_runs_the_containerfile_recipe";
    if !require_root(test)
        || !require_tools(
            test,
            &[
                ("podman", "podman"),
                ("runc", "runc"),
                ("mmdebstrap", "mmdebstrap"),
            ],
        )
        || !require_musl(test)
    {
        return;
    }
    let scratch = Scratch::new("engines-podman");
    let engine = Engine::podman();
    the_recipe_under(&engine, &scratch);
}

#[test]
fn docker_runs_the_containerfile_recipe() {
    let test = "docker_runs_the_containerfile_recipe";
    if !require_root(test)
        || !require_tools(
            test,
            &[
                ("dockerd", "docker.io"),
                ("/usr/bin/docker", "docker.io"),
                ("containerd", "containerd"),
                ("runc", "runc"),
                ("mmdebstrap", "mmdebstrap"),
            ],
        )
        || !require_musl(test)
    {
        return;
    }
    let scratch = Scratch::new("engines-docker");
    let engine = Engine::docker(&scratch.dir);
    the_recipe_under(&engine, &scratch);
}
