//! The main repository from inside a task (issue 17, the red team's finding): the checkout
//! borrows its objects, and that is all the task may see of it — not its `config` (a remote
//! URL with a credential in it), its hooks, or the files of its work tree — while git in
//! `/work` works as before (log, status, diff, commit, objects of main read by id) and the
//! harvest brings the task's branch home; so is a repository whose objects main borrows
//! (`git clone --shared`), and an agent of another uid. Checked on every path a start can take: the
//! daemon's clone with templates on and off (`KEEL_NO_SANDBOX_TEMPLATES`: a checkout builds
//! the whole plan either way), and a spare shim (`KEEL_NO_SPARE` turns spares off) with
//! templates on and off. The repository lies under /var/tmp, which the sandbox shows from
//! the host (its `/tmp` is its own, where nothing of the host would show anyway).

mod checkout_support;
mod common;
use checkout_support::{git, init_repo};
use common::sandbox::*;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

/// What the main repository's config holds: never connected to (`.invalid`, RFC 6761).
const CREDENTIAL_URL: &str = "https://user:s3cret@example.invalid/x.git";

/// A repository on `main` with a tracked file, an untracked one, a credential in a remote
/// URL and a hook; its HEAD commit.
fn make_repo(repo: &Path) -> String {
    init_repo(repo);
    git(repo, &["remote", "add", "origin", CREDENTIAL_URL]);
    std::fs::write(repo.join("tracked.txt"), "main work tree\n").unwrap();
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "first"]);
    std::fs::write(repo.join("untracked.txt"), "not committed\n").unwrap();
    let hook = repo.join(".git/hooks/post-commit");
    std::fs::write(
        &hook,
        "#!/bin/sh\ntouch \"$(dirname \"$0\")/../../hook-ran\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    git(repo, &["rev-parse", "HEAD"])
}

/// How the daemon starts tasks.
#[derive(Clone, Copy, Debug)]
enum StartPath {
    /// The daemon's clone, templates on.
    Templates,
    /// The daemon's clone, `KEEL_NO_SANDBOX_TEMPLATES=1`.
    NoTemplates,
    /// A spare shim, templates on.
    Spare,
    /// A spare shim, `KEEL_NO_SANDBOX_TEMPLATES=1`.
    SpareNoTemplates,
}

impl StartPath {
    fn daemon(self, tag: &str) -> Daemon {
        let (templates, spares) = match self {
            StartPath::Templates => (true, false),
            StartPath::NoTemplates => (false, false),
            StartPath::Spare => (true, true),
            StartPath::SpareNoTemplates => (false, true),
        };
        common::sandbox::daemon_starting(tag, templates, spares)
    }

    /// Assert that `unit`'s start went this way.
    fn check_taken(self, d: &Daemon, unit: &str) {
        let log = std::fs::read_to_string(d.task_dir(unit).join("run/shim.log")).unwrap();
        let on_spare = format!("spare shim took attempt 2 of {unit}");
        match self {
            StartPath::Templates | StartPath::NoTemplates => {
                assert!(!log.contains("spare"), "{self:?}: {log}")
            }
            // A checkout has no template: the spare builds the whole plan.
            StartPath::Spare | StartPath::SpareNoTemplates => assert!(
                log.contains(&format!("{on_spare} (its sandbox built in full)")),
                "{self:?}: {log}"
            ),
        }
    }
}

/// The agent's probe: one line per question, each answered by what it could do.
fn probe_script(repo: &Path, main_head: &str) -> String {
    let repo = repo.display();
    format!(
        r#"
        if out=$(cat {repo}/.git/config 2>&1); then echo "config READ: $out"; else echo "config refused"; fi
        if ls {repo}/.git/hooks >/dev/null 2>&1; then echo "hooks LISTED: $(ls {repo}/.git/hooks | tr '\n' ' ')"; else echo "hooks refused"; fi
        if cat {repo}/tracked.txt >/dev/null 2>&1; then echo "tracked READ"; else echo "tracked refused"; fi
        if cat {repo}/untracked.txt >/dev/null 2>&1; then echo "untracked READ"; else echo "untracked refused"; fi
        if cat {repo}/.git/HEAD >/dev/null 2>&1; then echo "head READ"; else echo "head refused"; fi
        if grep -rqs s3cret {repo}; then echo "secret FOUND"; else echo "secret unseen"; fi
        if touch {repo}/.git/objects/planted 2>/dev/null; then echo "objects WRITTEN"; else echo "objects read-only"; fi
        echo "uid $(id -u)"
        echo "main-commit $(git cat-file -p {main_head} | head -n 1 | cut -d' ' -f1)"
        echo "log-before $(git log --oneline | wc -l)"
        echo agent > agent.txt
        git add agent.txt && git commit -qm 'agent commit' && echo "commit done"
        echo "log-after $(git log --oneline | wc -l)"
        echo "status [$(git status --porcelain)]"
        echo "diff $(git diff --name-only HEAD~1 HEAD)"
        "#
    )
}

/// `extra`: more of the unit (its `sandbox`).
fn the_main_repository_shows_only_its_objects(path: StartPath, tag: &str, extra: &str) {
    if !checkout_support::ready(tag) {
        return;
    }
    let host = HostDir::new(tag);
    let repo = host.0.join("app");
    let main_head = make_repo(&repo);
    let d = path.daemon(tag);
    let script = probe_script(&repo, &main_head);
    // On a spare: the task's restart, the start a spare is made for
    // (common::sandbox::run_agent_on_spare).
    let on_spare = matches!(path, StartPath::Spare | StartPath::SpareNoTemplates);
    let (script, restart) = match on_spare {
        true => (
            common::sandbox::on_its_restart(&script),
            common::sandbox::RESTART_ON_SPARE,
        ),
        false => (script, "restart: Never"),
    };
    let unit = format!(
        r#"Unit(command: ["/bin/sh", "-c", {script:?}], repo: Some(Repo(path: {repo:?}, base: "main")), {restart}, {extra})"#,
        repo = repo.display().to_string(),
    );
    d.write_unit("agent", &unit);
    let task = match on_spare {
        true => common::sandbox::let_its_restart_take_a_spare(&d, "agent").0,
        false => d.wait_state("agent", "succeeded", Duration::from_secs(30)),
    };
    let out = std::fs::read_to_string(d.task_dir("agent").join("run/output.log")).unwrap();
    assert_eq!(task["last_exit"], "exit:0", "{path:?}: {task}\n{out}");
    path.check_taken(&d, "agent");
    // Nothing of the main repository but its objects.
    for (key, wanted) in [
        ("config ", "refused"),
        ("hooks ", "refused"),
        ("tracked ", "refused"),
        ("untracked ", "refused"),
        ("head ", "refused"),
        ("secret ", "unseen"),
        ("objects ", "read-only"),
    ] {
        assert_eq!(line(&out, key), wanted, "{path:?}: {key}\n{out}");
    }
    let uid = if extra.contains("1000:1000") {
        "1000"
    } else {
        "0"
    };
    assert_eq!(line(&out, "uid "), uid, "{path:?}: {out}");
    // Its objects, and git in /work as before.
    assert_eq!(line(&out, "main-commit "), "tree", "{path:?}: {out}");
    assert_eq!(line(&out, "log-before "), "1", "{path:?}: {out}");
    assert!(out.contains("commit done"), "{path:?}: {out}");
    assert_eq!(line(&out, "log-after "), "2", "{path:?}: {out}");
    assert_eq!(line(&out, "status "), "[]", "{path:?}: {out}");
    assert_eq!(line(&out, "diff "), "agent.txt", "{path:?}: {out}");
    // The harvest brought the branch home; main's hook never ran, main's objects are whole.
    let log = git(&repo, &["log", "--format=%s", "keel/agent"]);
    assert_eq!(log, "agent commit\nfirst", "{path:?}");
    assert!(!repo.join(".git/hook-ran").exists(), "{path:?}");
    assert!(!repo.join(".git/objects/planted").exists(), "{path:?}");
    git(&repo, &["fsck", "--no-progress"]);
}

#[test]
fn the_main_repository_shows_only_its_objects_with_templates() {
    the_main_repository_shows_only_its_objects(StartPath::Templates, "rv-templates", "");
}

#[test]
fn the_main_repository_shows_only_its_objects_without_templates() {
    the_main_repository_shows_only_its_objects(StartPath::NoTemplates, "rv-no-templates", "");
}

#[test]
fn the_main_repository_shows_only_its_objects_from_a_spare() {
    the_main_repository_shows_only_its_objects(StartPath::Spare, "rv-spare", "");
}

#[test]
fn the_main_repository_shows_only_its_objects_from_a_spare_without_templates() {
    the_main_repository_shows_only_its_objects(StartPath::SpareNoTemplates, "rv-spare-full", "");
}

/// An agent that is not root passes through the cover (mode 0755) to the objects all the same.
#[test]
fn the_main_repository_shows_only_its_objects_to_an_agent_of_another_uid() {
    let user = r#"sandbox: Sandbox(user: Some("1000:1000"))"#;
    the_main_repository_shows_only_its_objects(StartPath::NoTemplates, "rv-user", user);
}

/// A main repository that borrows its objects (`git clone --shared`): the repository it
/// borrows from is covered as well, its objects bound back, and git in `/work` reads them.
#[test]
fn a_repository_the_main_one_borrows_objects_from_shows_only_its_objects() {
    let tag = "rv-borrowed";
    if !checkout_support::ready(tag) {
        return;
    }
    let host = HostDir::new(tag);
    let upstream = host.0.join("upstream");
    let upstream_head = make_repo(&upstream);
    let repo = host.0.join("app");
    git(&host.0, &["clone", "-q", "--shared", "upstream", "app"]);
    let alternates = std::fs::read_to_string(repo.join(".git/objects/info/alternates")).unwrap();
    assert!(alternates.contains("upstream"), "{alternates}");
    let d = StartPath::NoTemplates.daemon(tag);
    let up = upstream.display();
    let script = format!(
        r#"
        if cat {up}/.git/config >/dev/null 2>&1; then echo "upstream-config READ"; else echo "upstream-config refused"; fi
        if cat {up}/tracked.txt >/dev/null 2>&1; then echo "upstream-tracked READ"; else echo "upstream-tracked refused"; fi
        if grep -rqs s3cret {up}; then echo "upstream-secret FOUND"; else echo "upstream-secret unseen"; fi
        echo "upstream-commit $(git cat-file -p {upstream_head} | head -n 1 | cut -d' ' -f1)"
        echo "log $(git log --oneline | wc -l)"
        echo agent > agent.txt
        git add agent.txt && git commit -qm 'agent commit' && echo "commit done"
        "#
    );
    let unit = format!(
        r#"Unit(command: ["/bin/sh", "-c", {script:?}], repo: Some(Repo(path: {repo:?}, base: "main")), restart: Never)"#,
        repo = repo.display().to_string(),
    );
    d.write_unit("agent", &unit);
    let task = d.wait_state("agent", "succeeded", Duration::from_secs(30));
    let out = std::fs::read_to_string(d.task_dir("agent").join("run/output.log")).unwrap();
    assert_eq!(task["last_exit"], "exit:0", "{task}\n{out}");
    assert_eq!(line(&out, "upstream-config "), "refused", "{out}");
    assert_eq!(line(&out, "upstream-tracked "), "refused", "{out}");
    assert_eq!(line(&out, "upstream-secret "), "unseen", "{out}");
    assert_eq!(line(&out, "upstream-commit "), "tree", "{out}");
    assert_eq!(line(&out, "log "), "1", "{out}");
    assert!(out.contains("commit done"), "{out}");
    let log = git(&repo, &["log", "--format=%s", "keel/agent"]);
    assert_eq!(log, "agent commit\nfirst");
}
