//! The daemon's check of writable paths at each start: keel's directories and git directories.

use super::*;

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir =
            std::env::temp_dir().join(format!("keel-spec-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
    fn mkdir(&self, rel: &str) -> PathBuf {
        let path = self.0.join(rel);
        std::fs::create_dir_all(&path).unwrap();
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sandbox(writable: &[&Path], state: &Path, units: Option<&Path>) -> SandboxSpec {
    let run = state.join("tasks/t/run");
    SandboxSpec {
        workdir: "/work".into(),
        work_source: state.join("tasks/t/work"),
        checkout: None,
        new_root: sandbox_root_path(&run),
        progress_file: progress_path(&run),
        checkpoint_source: state.join("tasks/t/checkpoint"),
        hidden: vec![state.to_path_buf()],
        veiled: Vec::new(),
        writable: writable.iter().map(|p| p.to_path_buf()).collect(),
        capabilities: Vec::new(),
        user: None,
        network: SandboxNetwork::Host,
        findings: None,
        secrets: vec![],
        tmp_size: 1 << 20,
        home_size: 1 << 20,
        keel_dirs: KeelDirs {
            state: Some(state.to_path_buf()),
            units: units.map(Path::to_path_buf),
        },
        id_block: None,
    }
}

fn refused(spec: &SandboxSpec) -> String {
    spec.check_writable().expect_err("should be refused")
}

#[test]
fn keel_state_and_units_directories_are_never_writable() {
    let dir = Dir::new("keel-dirs");
    let state = dir.mkdir("state");
    let units = dir.mkdir("units");
    let other_task = dir.mkdir("state/tasks/other/work");
    for (path, needle) in [
        (&state, "is keel's state directory"),
        (&other_task, "lies inside keel's state directory"),
        (&dir.0, "covers keel's state directory"),
        (&units, "is keel's units directory"),
    ] {
        let why = refused(&sandbox(&[path], &state, Some(&units)));
        assert!(why.starts_with("sandbox.writable: "), "{why}");
        assert!(why.contains(needle), "{path:?}: {why}");
    }
    // Reached through a symlink, keel's directories are still theirs.
    let link = dir.0.join("state-link");
    std::os::unix::fs::symlink(&state, &link).unwrap();
    let why = refused(&sandbox(&[&other_task], &link, None));
    assert!(why.contains("lies inside keel's state directory"), "{why}");
    // Beside them is fine.
    let data = dir.mkdir("data");
    let spec = sandbox(&[&data, &dir.0.join("state-data")], &state, Some(&units));
    assert_eq!(spec.check_writable(), Ok(()));
}

#[test]
fn git_directories_are_never_writable() {
    let dir = Dir::new("git");
    let state = dir.mkdir("state");
    // A work tree (its .git a directory, or a file as in a linked worktree).
    let work_tree = dir.mkdir("proj");
    dir.mkdir("proj/.git/objects");
    let linked = dir.mkdir("linked");
    std::fs::write(linked.join(".git"), "gitdir: /elsewhere\n").unwrap();
    // A bare repository, by what git looks for.
    let bare = dir.mkdir("app.git");
    dir.mkdir("app.git/objects");
    std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    let hooks = dir.mkdir("app.git/hooks");
    for (path, needle) in [
        (work_tree.clone(), "covers the git repository"),
        (linked.clone(), "covers the git repository"),
        (work_tree.join(".git"), "lies in a git directory (.git)"),
        (bare.clone(), "is the git directory"),
        (hooks.clone(), "lies inside the git directory"),
    ] {
        let why = refused(&sandbox(&[&path], &state, None));
        assert!(why.contains(needle), "{path:?}: {why}");
        assert!(why.contains("hooks"), "says why: {why}");
    }
    // Inside a work tree (not its .git), or a directory that only looks like one: fine.
    let src = dir.mkdir("proj/src");
    let half = dir.mkdir("half");
    std::fs::write(half.join("HEAD"), "not a repository").unwrap();
    let spec = sandbox(&[&src, &half], &state, None);
    assert_eq!(spec.check_writable(), Ok(()));
}

#[test]
fn the_main_repositorys_git_directory_is_never_writable() {
    let dir = Dir::new("main-repo");
    let state = dir.mkdir("state");
    // As the checkout names them: the main repository's objects, and one it borrows from.
    let main_git = dir.0.join("srv/app/.git");
    let shared = dir.0.join("shared-objects");
    let mut spec = sandbox(&[], &state, None);
    spec.checkout = Some(CheckoutMounts {
        files: CheckoutFiles::Bind(state.join("tasks/t/checkout/files")),
        git_dir: state.join("tasks/t/checkout/git"),
        objects: vec![main_git.join("objects"), shared.clone()],
        repositories: vec![main_git.clone()],
    });
    for (path, needle) in [
        (dir.0.join("srv"), "covers"),
        (main_git.join("refs"), "lies inside"),
        (shared.join("pack"), "lies inside"),
    ] {
        spec.writable = vec![path.clone()];
        let why = refused(&spec);
        assert!(why.contains(needle), "{path:?}: {why}");
        assert!(why.contains("main repository"), "{why}");
    }
    spec.writable = vec![dir.0.join("srv/app-cache")];
    assert_eq!(spec.check_writable(), Ok(()));
}

#[test]
fn a_workers_findings_decide_the_check_of_writable_paths_without_reading_them() {
    let dir = Dir::new("findings");
    let repo = dir.mkdir("repo");
    dir.mkdir("repo/.git");
    let mut spec = sandbox(&[&repo], &dir.mkdir("state"), None);
    // Read here: the repository's work tree is refused.
    assert!(refused(&spec).contains("covers the git repository"));
    // A worker found nothing wrong (say, before the .git was made): its verdict stands, and
    // nothing is read here — a path on a filesystem that hangs is never touched by the loop.
    spec.findings = Some(PathFindings::default());
    assert_eq!(spec.check_writable(), Ok(()));
    spec.writable = vec![PathBuf::from("/nonexistent/never/read")];
    spec.findings = Some(PathFindings {
        writable: Some("sandbox.writable: as the worker found".into()),
        lines: Default::default(),
        secrets: vec![],
    });
    assert_eq!(refused(&spec), "sandbox.writable: as the worker found");
}

#[test]
fn a_spec_of_a_keel_before_secrets_reads_and_a_spec_never_holds_a_value() {
    let state = Path::new("/var/lib/keel");
    let mut spec = sandbox(&[], state, None);
    spec.findings = Some(PathFindings::default());
    let mut json: serde_json::Value = serde_json::to_value(&spec).unwrap();
    json.as_object_mut().unwrap().remove("secrets");
    json["findings"].as_object_mut().unwrap().remove("secrets");
    let read: SandboxSpec = serde_json::from_value(json).unwrap();
    assert!(read.secrets.is_empty());
    assert!(read.findings.unwrap().secrets.is_empty());

    spec.secrets = vec![crate::secrets::TaskSecret {
        name: "ANTHROPIC_API_KEY".into(),
        placeholder: crate::secrets::placeholder(),
        source: crate::secrets::SecretSource::File("/etc/keel/secrets/anthropic".into()),
        hosts: vec!["api.anthropic.com".into()],
        headers: vec!["x-api-key".into()],
    }];
    let text = serde_json::to_string(&spec).unwrap();
    let read: SandboxSpec = serde_json::from_str(&text).unwrap();
    assert_eq!(read.secrets, spec.secrets);
    assert!(
        text.contains("/etc/keel/secrets/anthropic"),
        "where, not what: {text}"
    );
}
