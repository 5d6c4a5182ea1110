//! Helpers of `checkout_kernel`: scratch directories, generated repositories, and a
//! checkout mounted as the sandbox mounts it, in a child shell's private mount namespace.

#![allow(dead_code)]

use keel::checkout::{self, PrepareOptions, Prepared};
use keel::sandbox::spec::CheckoutFiles;
use keel::state::StateDir;
use keel::unit::Repo;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!(
            "keel-checkout-{name}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(dir.join("home")).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn ready(test: &str) -> bool {
    if !super::common::require_root(test) {
        return false;
    }
    if Command::new("git").arg("--version").output().is_err() {
        assert!(
            !super::common::privileged_required(),
            "{test}: needs the git command (apt-get install git)"
        );
        eprintln!("{test}: skipped: no git command");
        return false;
    }
    true
}

/// `git -C dir args…`, which must succeed; its stdout, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// An empty repository at `path` on branch `main`, with a committer of its own.
pub fn init_repo(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
    git(path, &["init", "-q", "-b", "main"]);
    git(path, &["config", "user.name", "Test Author"]);
    git(path, &["config", "user.email", "author@example.com"]);
}

/// A repository at `path` on branch `main` with `files` files in `commits` commits.
pub fn make_repo(path: &Path, files: usize, commits: usize) {
    init_repo(path);
    for c in 0..commits {
        for i in (c..files).step_by(commits) {
            let file = path.join(format!("d{}/f{i}.txt", i % 100));
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, format!("file {i}, commit {c}\n")).unwrap();
        }
        git(path, &["add", "-A"]);
        git(path, &["commit", "-q", "-m", &format!("commit {c}")]);
    }
}

pub fn repo_spec(path: &Path) -> Repo {
    Repo {
        path: path.display().to_string(),
        base: "main".into(),
        branch: None,
    }
}

/// Run `script` in a shell in a private mount namespace where the checkout is mounted at
/// `at` as the sandbox mounts it, the directories `readonly` made read-only, HOME empty.
pub fn inside(
    prepared: &Prepared,
    at: &Path,
    readonly: &[&Path],
    script: &str,
    home: &Path,
) -> Output {
    let files = match &prepared.mounts.files {
        CheckoutFiles::Overlay { lower, upper, work } => format!(
            "mount -t overlay overlay -o '{}' '{}'",
            keel::sandbox::mounts::overlay_data(lower, upper, work).unwrap(),
            at.display()
        ),
        CheckoutFiles::Bind(files) => {
            format!("mount --bind '{}' '{}'", files.display(), at.display())
        }
    };
    let mut setup = vec![
        "set -e".to_string(),
        files,
        format!(
            "mount --bind '{}' '{}/.git'",
            prepared.mounts.git_dir.display(),
            at.display()
        ),
    ];
    for path in readonly {
        let path = path.display();
        setup.push(format!("mount --bind '{path}' '{path}'"));
        setup.push(format!("mount -o remount,bind,ro '{path}'"));
    }
    setup.push(format!("cd '{}'", at.display()));
    let text = format!("{}\n{script}\n", setup.join("\n"));
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &text])
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap()
}

pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "in the sandbox: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Refs and object files of a repository: what must not change.
pub fn snapshot(git_dir: &Path) -> (String, Vec<String>) {
    let refs = git(
        git_dir,
        &["for-each-ref", "--format=%(refname) %(objectname)"],
    );
    let mut objects = Vec::new();
    let mut stack = vec![git_dir.join("objects")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                objects.push(entry.path().display().to_string());
            }
        }
    }
    objects.sort();
    (refs, objects)
}

pub struct Setup {
    pub scratch: Scratch,
    pub dirs: StateDir,
    pub main: PathBuf,
}

impl Setup {
    pub fn new(name: &str, files: usize, commits: usize) -> Setup {
        let scratch = Scratch::new(name);
        let main = scratch.0.join("repo");
        make_repo(&main, files, commits);
        let dirs = StateDir::new(scratch.0.join("state"));
        dirs.create().unwrap();
        Setup {
            scratch,
            dirs,
            main,
        }
    }

    pub fn prepare(&self, unit: &str, options: &PrepareOptions) -> Prepared {
        self.dirs.create_task_dirs(unit).unwrap();
        checkout::prepare(&self.dirs, unit, &repo_spec(&self.main), options)
            .unwrap_or_else(|e| panic!("{unit}: {e}"))
    }

    pub fn run(&self, unit: &str, prepared: &Prepared, script: &str) -> String {
        ok(self.try_run(unit, prepared, &[], script))
    }

    pub fn try_run(&self, unit: &str, p: &Prepared, readonly: &[&Path], script: &str) -> Output {
        // Outside the state directory (mode 0700), like the sandbox's `/work`: an agent that
        // is not root must be able to reach it.
        let at = self.scratch.0.join("mnt").join(unit);
        std::fs::create_dir_all(&at).unwrap();
        inside(p, &at, readonly, script, &self.scratch.0.join("home"))
    }
}

/// Run `f` in a thread and wait at most `secs` for it: a call that blocks (a FIFO opened
/// by libgit2) fails the test instead of hanging it. The thread is left behind if so.
pub fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs))
        .expect("the call did not return: blocked")
}

/// `harvest` of `unit`, in a thread, at most 30 s.
pub fn harvest_within(
    dirs: &StateDir,
    unit: &str,
) -> Result<checkout::Harvest, checkout::CheckoutError> {
    let (dirs, unit) = (dirs.clone(), unit.to_string());
    within(30, move || checkout::harvest(&dirs, &unit, 1))
}
