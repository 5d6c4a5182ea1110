//! The Kubernetes recipe (`deploy/kubernetes/`): the manifests parsed (PyYAML) and held to the
//! invariants that matter — `keel init` with the state directory on the PersistentVolumeClaim,
//! `keel health` as the liveness probe, requests matching the capacity in keel.ron, the
//! Containerfile's capability set, units that pass `keel check` — and rendered by
//! `kubectl kustomize` where kubectl is installed (it is not a Debian package), and held to
//! the Kubernetes API's own schemas offline by `kubernetes-validate --strict`.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes");

/// Every document of every manifest, as JSON.
fn documents() -> Vec<Value> {
    let mut files: Vec<String> = std::fs::read_dir(DIR)
        .unwrap()
        .map(|e| path_str(&e.unwrap().path()))
        .filter(|p| p.ends_with(".yaml"))
        .collect();
    files.sort();
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml\n\
             docs = [d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d]\n\
             print(json.dumps(docs))",
        ])
        .args(&files)
        .output()
        .expect("python3 (with PyYAML: Debian python3-yaml) parses the manifests");
    assert!(
        out.status.success(),
        "the manifests do not parse: {}",
        stderr_of(&out)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// Kubernetes quantities as used here: `8500m`, `8`, `17Gi`.
fn cpu(quantity: &Value) -> f64 {
    let q = quantity
        .as_str()
        .map(str::to_string)
        .unwrap_or(quantity.to_string());
    match q.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().unwrap() / 1000.0,
        None => q.parse().unwrap(),
    }
}

fn bytes(quantity: &Value) -> u64 {
    let q = quantity.as_str().unwrap();
    let (number, unit) = q.split_at(q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len()));
    let scale = match unit {
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "" => 1,
        other => panic!("unit {other} of {q}"),
    };
    number.parse::<u64>().unwrap() * scale
}

/// `capacity: Capacity(cpu: 8.0, memory: "16G", …)` of a keel.ron (G is GiB in keel).
fn capacity(keel_ron: &str) -> (f64, u64) {
    let field = |name: &str| {
        let at = keel_ron.find(&format!("{name}: ")).unwrap() + name.len() + 2;
        keel_ron[at..]
            .split([',', ')'])
            .next()
            .unwrap()
            .trim()
            .trim_matches('"')
            .to_string()
    };
    let memory = field("memory");
    let gib: u64 = memory.strip_suffix('G').unwrap().parse().unwrap();
    (field("cpu").parse().unwrap(), gib << 30)
}

/// The Containerfile's `--cap-add=` set.
fn containerfile_capabilities() -> Vec<String> {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Containerfile")).unwrap();
    let mut caps: Vec<String> = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("--cap-add="))
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    caps.sort();
    caps
}

#[test]
fn the_statefulset_runs_keel_init_on_its_claim_with_the_documented_privileges() {
    let docs = documents();
    let set = find(&docs, "StatefulSet", "keel");
    let spec = &set["spec"];
    assert_eq!(spec["replicas"], 1, "one keel per pod, its units its own");
    assert_eq!(find(&docs, "Service", "keel")["spec"]["clusterIP"], "None");
    assert_eq!(spec["serviceName"], "keel");
    let pod = &spec["template"]["spec"];
    assert_eq!(
        pod["enableServiceLinks"], false,
        "agents inherit keel's env"
    );
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let keel = &containers[0];

    // keel init as PID 1, state on the claim, units from their ConfigMap.
    let command: Vec<&str> = keel["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(&command[..2], ["/usr/local/bin/keel", "init"]);
    let arg = |flag: &str| command[command.iter().position(|a| *a == flag).unwrap() + 1];
    let mounts = keel["volumeMounts"].as_array().unwrap();
    let mount_at = |path: &str| {
        mounts
            .iter()
            .find(|m| m["mountPath"] == path)
            .unwrap_or_else(|| panic!("nothing mounted at {path}"))
    };
    let claims = spec["volumeClaimTemplates"].as_array().unwrap();
    let state = mount_at(arg("--state"));
    assert!(
        claims
            .iter()
            .any(|c| c["metadata"]["name"] == state["name"]),
        "the state directory is not on a PersistentVolumeClaim"
    );
    assert_ne!(state["readOnly"], true);
    let units = mount_at(arg("--units"));
    let volume = |name: &Value| {
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| &v["name"] == name)
            .unwrap()
            .clone()
    };
    let units_map = volume(&units["name"])["configMap"]["name"].clone();
    let config = mount_at(&format!("{}/keel.ron", arg("--state")));
    assert_eq!(config["subPath"], "keel.ron");
    let config_map = volume(&config["name"])["configMap"]["name"].clone();

    // The probe is `keel health`.
    assert_eq!(
        keel["livenessProbe"]["exec"]["command"],
        serde_json::json!(["/usr/local/bin/keel", "health"])
    );

    // Requests = limits = keel.ron's capacity + keel's own 0.5 CPU and 1 GiB.
    let keel_ron = find(&docs, "ConfigMap", config_map.as_str().unwrap())["data"]["keel.ron"]
        .as_str()
        .unwrap()
        .to_string();
    let (cap_cpu, cap_memory) = capacity(&keel_ron);
    let resources = &keel["resources"];
    assert_eq!(resources["requests"], resources["limits"]);
    assert_eq!(cpu(&resources["requests"]["cpu"]), cap_cpu + 0.5);
    assert_eq!(
        bytes(&resources["requests"]["memory"]),
        cap_memory + (1 << 30)
    );

    // Exactly the Containerfile's capabilities; the profiles that would refuse mounts off.
    let security = &keel["securityContext"];
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let mut added: Vec<String> = security["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    added.sort();
    assert_eq!(added, containerfile_capabilities());
    assert_ne!(security["privileged"], true);
    assert_eq!(security["seccompProfile"]["type"], "Unconfined");
    assert_eq!(security["appArmorProfile"]["type"], "Unconfined");

    // The units shipped in the ConfigMap pass `keel check`, and the grace period covers
    // their stop timeouts.
    let scratch = Scratch::new("k8s-units");
    let data = find(&docs, "ConfigMap", units_map.as_str().unwrap())["data"]
        .as_object()
        .unwrap();
    assert!(!data.is_empty());
    let mut files = Vec::new();
    for (name, text) in data {
        assert!(name.ends_with(".ron"), "{name}");
        let file = scratch.dir.join(name);
        std::fs::write(&file, text.as_str().unwrap()).unwrap();
        files.push(file);
    }
    let out = Command::new(keel_bin())
        .arg("check")
        .args(&files)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap() >= 60);
}

/// YAML documents (a stream on stdin) as JSON, through PyYAML.
fn parse_yaml_stream(text: &str) -> Vec<Value> {
    let mut python = Command::new("python3");
    python.args([
        "-c",
        "import json, sys, yaml\n\
         print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d]))",
    ]);
    let what = "python3 (with PyYAML: Debian python3-yaml)";
    let out = output_with_input(&mut python, text.as_bytes(), what);
    assert!(
        out.status.success(),
        "not YAML: {}\n{text}",
        stderr_of(&out)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (kind, name) of each document but the kustomization itself, sorted.
fn kinds_and_names(docs: &[Value]) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = docs
        .iter()
        .filter(|d| d["kind"] != "Kustomization")
        .map(|d| {
            let field = |v: &Value| v.as_str().unwrap_or("").to_string();
            (field(&d["kind"]), field(&d["metadata"]["name"]))
        })
        .collect();
    found.sort();
    found
}

/// Without kubectl: `kubectl apply -k` takes exactly the manifests there are.
#[test]
fn the_kustomization_lists_every_manifest() {
    let mut manifests: Vec<String> = std::fs::read_dir(DIR)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    manifests.sort();
    let kustomization = std::fs::read_to_string(Path::new(DIR).join("kustomization.yaml")).unwrap();
    let docs = parse_yaml_stream(&kustomization);
    assert_eq!(docs.len(), 1, "{docs:?}");
    assert_eq!(docs[0]["kind"], "Kustomization");
    let mut resources: Vec<String> = docs[0]["resources"]
        .as_array()
        .expect("a resources list")
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    resources.sort();
    assert_eq!(resources, manifests, "kustomization.yaml's resources");
}

/// With kubectl: `kubectl kustomize` renders every object of the manifests, and only those.
#[test]
fn kubectl_renders_the_kustomization_where_it_is_installed() {
    let kubectl = Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output();
    if let Err(e) = kubectl {
        // kubectl is no Debian package: where it cannot be run, only this rendering is
        // skipped (the checks above need no kubectl), and the reason is printed.
        let under_ci = if privileged_required() {
            " (under CI: install kubectl from its upstream release to run it)"
        } else {
            ""
        };
        eprintln!(
            "kubectl_renders_the_kustomization_where_it_is_installed: skipped: \
             cannot run kubectl ({e}){under_ci}"
        );
        return;
    }
    // `kubectl apply --dry-run=client` needs a cluster's API discovery; `kustomize` renders
    // offline.
    let out = Command::new("kubectl")
        .args(["kustomize", DIR])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let rendered = parse_yaml_stream(&stdout_of(&out));
    let expected = kinds_and_names(&documents());
    assert!(expected.len() >= 3, "{expected:?}");
    assert_eq!(kinds_and_names(&rendered), expected);
}

/// The Kubernetes version the manifests are held to (`kubernetes-validate -k`).
const KUBERNETES_VERSION: &str = "1.37.0";

/// `kubernetes-validate --strict` (PyPI; `.ci/run` installs it) on `files`.
fn validate(files: &[String]) -> std::io::Result<std::process::Output> {
    Command::new("kubernetes-validate")
        .args(["--strict", "-k", KUBERNETES_VERSION])
        .args(files)
        .output()
}

/// Every manifest (the kustomization, which is kustomize's and not the API's, aside) passes
/// the API's own schemas offline, unknown fields refused; and the validator refuses a
/// manifest with a field the API does not have (it is not one that passes anything).
#[test]
fn the_manifests_pass_the_kubernetes_apis_schemas_strictly() {
    let mut files: Vec<String> = std::fs::read_dir(DIR)
        .unwrap()
        .map(|e| path_str(&e.unwrap().path()))
        .filter(|p| p.ends_with(".yaml") && !p.ends_with("/kustomization.yaml"))
        .collect();
    files.sort();
    let out = match validate(&files) {
        Ok(out) => out,
        Err(e) if !privileged_required() => {
            eprintln!(
                "the_manifests_pass_the_kubernetes_apis_schemas_strictly: skipped: cannot run \
                 kubernetes-validate ({e}): python3 -m pip install kubernetes-validate"
            );
            return;
        }
        Err(e) => panic!("kubernetes-validate (.ci/run installs it from PyPI): {e}"),
    };
    let said = format!("{}{}", stdout_of(&out), stderr_of(&out));
    assert!(out.status.success(), "{said}");
    let passed = said
        .lines()
        .filter(|l| l.contains(" passed for resource "))
        .count();
    let resources = (documents().iter())
        .filter(|d| d["kind"] != "Kustomization")
        .count();
    assert_eq!(passed, resources, "every document validated: {said}");

    // A field the StatefulSet's spec does not have: refused under --strict.
    let statefulset = std::fs::read_to_string(format!("{DIR}/statefulset.yaml")).unwrap();
    let bad = statefulset.replacen("spec:\n", "spec:\n  replicass: 2\n", 1);
    assert_ne!(bad, statefulset);
    let dir = std::env::temp_dir().join(format!("keel-k8s-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad_file = dir.join("statefulset.yaml");
    std::fs::write(&bad_file, bad).unwrap();
    let out = validate(&[path_str(&bad_file)]).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        !out.status.success(),
        "an unknown field passed: {}{}",
        stdout_of(&out),
        stderr_of(&out)
    );
}

/// The units directory as the kubelet keeps a ConfigMap volume: each key a symlink through
/// `..data`, itself a symlink to a timestamped directory, an update swapping `..data` by a
/// rename. keel follows it without a restart: new keys start, edits are noticed.
#[test]
fn a_configmap_volume_of_units_is_followed_as_the_kubelet_updates_it() {
    if !require_root("a_configmap_volume_of_units_is_followed_as_the_kubelet_updates_it") {
        return;
    }
    let d = Daemon::prepare("configmap");
    let units = d.units();
    let unit = |word: &str| {
        format!(
            r#"Unit(command: ["/bin/sh", "-c", "echo {word}; exec sleep 600"], resources: Resources(cpu: 0.1, memory: "32M", pids: 16))"#
        )
    };
    let version = |name: &str, files: &[(&str, String)]| {
        let dir = units.join(name);
        std::fs::create_dir(&dir).unwrap();
        for (file, text) in files {
            std::fs::write(dir.join(file), text).unwrap();
        }
    };
    version("..2026_01_01_v1", &[("hello.ron", unit("v1"))]);
    std::os::unix::fs::symlink("..2026_01_01_v1", units.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/hello.ron", units.join("hello.ron")).unwrap();
    let mut d = d;
    d.spawn();
    let first = d.wait_state("hello", "running", std::time::Duration::from_secs(10));
    // The kubelet's update: a new version, `..data` swapped by a rename, the new key linked,
    // the old version removed.
    version(
        "..2026_01_02_v2",
        &[("hello.ron", unit("v2")), ("new.ron", unit("new"))],
    );
    std::os::unix::fs::symlink("..2026_01_02_v2", units.join("..data_tmp")).unwrap();
    std::fs::rename(units.join("..data_tmp"), units.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/new.ron", units.join("new.ron")).unwrap();
    std::fs::remove_dir_all(units.join("..2026_01_01_v1")).unwrap();
    d.wait_state("new", "running", std::time::Duration::from_secs(10));
    wait_until(
        std::time::Duration::from_secs(10),
        "the edit noticed",
        || d.task("hello").unwrap()["unit_changed"] == true,
    );
    let hello = d.task("hello").unwrap();
    assert_eq!(
        hello["pid"], first["pid"],
        "an edit applies at the next start"
    );
    assert!(d.status()["invalid_units"].as_array().unwrap().is_empty());
    let out = d.keel(&["restart", "hello"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    wait_until(std::time::Duration::from_secs(10), "v2 runs", || {
        std::fs::read_to_string(d.task_dir("hello").join("run/output.log"))
            .unwrap_or_default()
            .contains("v2")
    });
}
