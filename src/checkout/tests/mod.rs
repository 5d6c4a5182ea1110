//! The pure parts: names, keys, the git configuration, the harvest decision, the messages;
//! and the threaded base writer against libgit2's checkout (`write`).

mod write;

use super::create::{config_value, git_config};
use super::files::builder_pid;
use super::harvest::{decide, kept_name, Decision, Facts};
use super::*;
use git2::Oid;
use std::path::Path;

fn oid(n: u8) -> Oid {
    Oid::from_bytes(&[n; 20]).unwrap()
}

#[test]
fn branch_pin_and_base_names() {
    assert_eq!(default_branch("fix-net"), "keel/fix-net");
    assert_eq!(pin_ref("fix-net"), "refs/keel/base/fix-net");
    // Unit names a ref cannot carry are spelled in hex.
    assert_eq!(pin_ref("a..b"), "refs/keel/base/x-612e2e62");
    assert_eq!(pin_ref("x.lock"), "refs/keel/base/x-782e6c6f636b");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let key = base_key(Path::new("/srv/app/.git"), commit, None);
    assert_eq!(key.len(), 16 + 1 + 40);
    assert!(key.ends_with(commit));
    assert_eq!(key, base_key(Path::new("/srv/app/.git"), commit, None));
    assert_ne!(key, base_key(Path::new("/srv/other/.git"), commit, None));
    let owned = base_key(Path::new("/srv/app/.git"), commit, Some((1000, 100)));
    assert_eq!(owned, format!("{key}-u1000.100"));
    // Stable across builds and platforms: the blob id of the path, as
    // `printf /srv/app/.git | git hash-object --stdin` gives it.
    assert_eq!(&key[..16], "7044928c0274ff58");
}

#[test]
fn build_names_carry_the_builders_pid() {
    let dir = Path::new("/s/tasks/u");
    let name = files::build_path(dir, "checkout");
    let name = name.file_name().unwrap().to_str().unwrap();
    assert_eq!(builder_pid(name), Some(std::process::id() as i32));
    assert_eq!(builder_pid(".checkout.removing.tmp.42.7"), Some(42));
    assert_eq!(builder_pid("checkout"), None);
    assert_eq!(builder_pid(".checkout.tmp.x.1"), None);
    assert_eq!(builder_pid(".checkout.tmp.42"), None);
}

#[test]
fn git_config_quotes_what_it_must() {
    assert_eq!(config_value("Ann O'Neil"), "\"Ann O'Neil\"");
    assert_eq!(config_value("a \"b\" \\c\nd"), "\"a \\\"b\\\" \\\\c\\nd\"");
    let config = git_config("Keel ; # x", "k@example.com");
    assert!(config.contains("\tbare = false\n"));
    assert!(config.contains("\tname = \"Keel ; # x\"\n"));
    assert!(config.contains("[commit]\n\tgpgsign = false\n"));
}

fn facts(main_at: Option<Oid>) -> Facts {
    Facts {
        tip: oid(2),
        base: oid(1),
        main_at,
        tip_descends: false,
        main_descends: false,
        checked_out: false,
    }
}

#[test]
fn harvest_is_a_fast_forward_or_nothing_is_moved() {
    let nothing = Facts {
        tip: oid(1),
        ..facts(None)
    };
    assert_eq!(decide(&nothing), Decision::Nothing);
    assert_eq!(decide(&facts(None)), Decision::Update { from: None });
    assert_eq!(decide(&facts(Some(oid(2)))), Decision::UpToDate);
    let ahead_in_main = Facts {
        main_descends: true,
        ..facts(Some(oid(3)))
    };
    assert_eq!(decide(&ahead_in_main), Decision::UpToDate);
    let forward = Facts {
        tip_descends: true,
        ..facts(Some(oid(1)))
    };
    assert_eq!(decide(&forward), Decision::Update { from: Some(oid(1)) });
    assert!(matches!(
        decide(&facts(Some(oid(3)))),
        Decision::Keep { .. }
    ));
    let checked_out = Facts {
        checked_out: true,
        ..forward
    };
    let Decision::Keep { why } = decide(&checked_out) else {
        panic!("a checked-out branch moved");
    };
    assert!(why.contains("checked out"));
    assert_eq!(kept_name("keel/u", 3, 1), "keel/u@3");
    assert_eq!(kept_name("keel/u", 3, 2), "keel/u@3.2");
    assert!(git2::Reference::is_valid_name("refs/heads/keel/u@3.2"));
}

#[test]
fn harvest_outcomes_read_well_in_the_journal() {
    let a = "a".repeat(40);
    let b = "b".repeat(40);
    let updated = Harvest::Updated {
        branch: "keel/u".into(),
        from: Some(a.clone()),
        to: b.clone(),
        commits: 3,
    };
    assert_eq!(
        updated.to_string(),
        "harvested keel/u: fast-forward aaaaaaaaaaaa..bbbbbbbbbbbb (3 new commits)"
    );
    let kept = Harvest::Kept {
        branch: "keel/u".into(),
        kept_as: "keel/u@2".into(),
        commit: b,
        main_at: a,
        why: "the branch there has commits the task's has not".into(),
    };
    assert_eq!(
        kept.to_string(),
        "keel/u not harvested over aaaaaaaaaaaa in the main repository (the branch there has \
         commits the task's has not): the task's bbbbbbbbbbbb is kept as keel/u@2, nothing \
         was forced"
    );
    assert!(kept.harvested());
    assert!(!Harvest::NoBranch {
        branch: "keel/u".into()
    }
    .harvested());
}

#[test]
fn a_state_says_what_removal_would_lose() {
    let mut state = CheckoutState {
        branch: "keel/u".into(),
        base_commit: "a".repeat(40),
        overlay: true,
        changes: vec!["src/a.rs".into(), "notes.txt".into()],
        change_count: 5,
        unread: Vec::new(),
        unread_count: 0,
        unharvested: vec!["keel/u".into(), "HEAD (detached)".into()],
        disk: DiskUsage::default(),
    };
    assert_eq!(
        state.losses(),
        [
            "5 uncommitted changes (src/a.rs, notes.txt and 3 more)",
            "commits not in the main repository on keel/u, HEAD (detached) (a forced \
             removal keeps them under refs/keel/kept/)"
        ]
    );
    let err = CheckoutError::NotRemovable {
        unit: "u".into(),
        reasons: state.losses(),
    };
    assert!(err
        .to_string()
        .ends_with("commit and harvest it (keel harvest u), or force the removal"));
    state.changes.clear();
    state.change_count = 0;
    state.unharvested.clear();
    assert!(state.clean() && state.harvested() && state.losses().is_empty());
}

#[test]
fn errors_name_the_fix() {
    let err = CheckoutError::BranchExists {
        repo: "/srv/app".into(),
        branch: "keel/u".into(),
        at: "c".repeat(40),
        base: "main".into(),
        base_commit: "d".repeat(40),
    };
    assert_eq!(
        err.to_string(),
        "branch keel/u already exists in /srv/app at cccccccccccc, not at base main \
         (dddddddddddd): the task would not start from it; delete the branch (git branch -D \
         keel/u) or set repo.branch to another name"
    );
    let err = CheckoutError::OtherOwner {
        unit: "u".into(),
        recorded: None,
        wanted: Some((1000, 1000)),
    };
    assert!(err
        .to_string()
        .contains("belongs to root, but the unit now runs as uid 1000"));
}

#[test]
fn borrowed_object_directories_are_all_shown() {
    let scratch = std::env::temp_dir().join(format!("keel-objdirs-{}", std::process::id()));
    let main = scratch.join("main/.git");
    let shared = scratch.join("shared/objects");
    for dir in [main.join("objects/info"), shared.join("info")] {
        std::fs::create_dir_all(dir).unwrap();
    }
    // Relative to the objects directory, as `git clone --reference` may write it, and a cycle.
    std::fs::write(
        main.join("objects/info/alternates"),
        "# comment\n../../../shared/objects\n",
    )
    .unwrap();
    std::fs::write(
        shared.join("info/alternates"),
        format!("{}\n", main.join("objects").display()),
    )
    .unwrap();
    let dirs = super::resolve::object_dirs(&main);
    std::fs::remove_dir_all(&scratch).unwrap();
    assert_eq!(dirs, [main.join("objects"), shared]);
}

#[test]
fn the_repositories_objects_are_borrowed_from_are_named_by_their_real_paths() {
    let scratch = std::env::temp_dir().join(format!("keel-repopaths-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    // A work tree's .git, a bare repository, and a plain object store (no git directory).
    let (work, bare, store) = (
        scratch.join("app"),
        scratch.join("lib.git"),
        scratch.join("store/objects"),
    );
    for dir in [
        work.join(".git/objects"),
        bare.join("objects"),
        store.clone(),
    ] {
        std::fs::create_dir_all(dir).unwrap();
    }
    for git in [work.join(".git"), bare.clone()] {
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    }
    // The unit names the repository through a symlink.
    let link = scratch.join("link");
    std::os::unix::fs::symlink(&work, &link).unwrap();
    let objects = [
        work.join(".git/objects"),
        bare.join("objects"),
        store.clone(),
        scratch.join("gone/.git/objects"),
    ];
    let found = super::resolve::repository_paths(&link, &objects);
    let real = std::fs::canonicalize(&scratch).unwrap();
    std::fs::remove_dir_all(&scratch).unwrap();
    assert_eq!(
        found,
        [
            real.join("app"),
            real.join("app/.git"),
            real.join("lib.git")
        ]
    );
}

/// A submodule as the main repository: its objects are in the superproject's
/// `.git/modules/<name>`, so that `.git` (its config and hooks) and its work tree are covered.
#[test]
fn a_submodules_superproject_is_covered_too() {
    let scratch = std::env::temp_dir().join(format!("keel-submodule-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let module = scratch.join("super/.git/modules/sub");
    std::fs::create_dir_all(module.join("objects")).unwrap();
    std::fs::write(module.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::create_dir_all(scratch.join("super/sub")).unwrap();
    let found =
        super::resolve::repository_paths(&scratch.join("super/sub"), &[module.join("objects")]);
    let real = std::fs::canonicalize(&scratch).unwrap();
    std::fs::remove_dir_all(&scratch).unwrap();
    assert_eq!(
        found,
        [
            real.join("super/sub"),
            real.join("super/.git/modules/sub"),
            real.join("super/.git"),
            real.join("super"),
        ]
    );
}

#[test]
fn an_unreadable_tasks_directory_lists_no_checkouts_and_removes_no_base() {
    let scratch = std::env::temp_dir().join(format!("keel-records-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let dirs = crate::state::StateDir::new(&scratch);
    // No tasks directory at all: no checkouts.
    assert_eq!(super::record::all(&dirs), Some(Vec::new()));
    // A tasks directory that cannot be read (ENOTDIR here; EMFILE, ENOMEM alike): unknown.
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(dirs.tasks_dir(), "not a directory").unwrap();
    assert_eq!(super::record::all(&dirs), None);
    // …and then no base tree is removed on the strength of it.
    let key = "0123456789abcdef-0123456789abcdef0123456789abcdef01234567";
    let base = super::base::base_dir(&dirs, key);
    std::fs::create_dir_all(base.join("tree")).unwrap();
    assert_eq!(super::base::remove_if_unused(&dirs, key).unwrap(), 0);
    assert_eq!(prune_bases(&dirs).unwrap(), 0);
    assert!(base.join("tree").is_dir());
    std::fs::remove_dir_all(&scratch).unwrap();
}

#[test]
fn harvest_limits_are_sizes_each_with_its_default() {
    assert_eq!(
        HarvestLimits::default(),
        HarvestLimits {
            max_object_bytes: 100 << 20,
            max_pack_bytes: 1 << 30
        }
    );
    let read = |text: &str| ron::from_str::<HarvestLimits>(text);
    assert_eq!(
        read("HarvestLimits(max_object_bytes: \"200M\")").unwrap(),
        HarvestLimits {
            max_object_bytes: 200 << 20,
            ..Default::default()
        }
    );
    assert_eq!(read("(max_pack_bytes: 4096)").unwrap().max_pack_bytes, 4096);
    assert_eq!(read("()").unwrap(), HarvestLimits::default());
    let err = read("(max_object_bytes: \"lots\")")
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not start with a number"), "{err}");
    assert!(read("(max_objects: 1)").is_err());
}

#[test]
fn a_refused_harvest_says_what_and_how_to_raise_the_limit() {
    let err = CheckoutError::HarvestTooBig {
        unit: "u".into(),
        object: "blob logs/big.bin in commit 0123456789ab (object 89abcdef0123)".into(),
        object_bytes: 300 << 20,
        size: 1536 << 20,
        limit: 1 << 30,
        setting: "max_pack_bytes",
    };
    let message = err.to_string();
    assert!(
        message.starts_with(
            "u: harvest refused: the branch's new objects add up to 1.5G (the largest: blob \
             logs/big.bin in commit 0123456789ab (object 89abcdef0123), 300M), past \
             harvest_limits.max_pack_bytes (1G)"
        ),
        "{message}"
    );
    assert!(
        message.contains("HarvestLimits(max_pack_bytes: \"1536M\")"),
        "{message}"
    );
}

#[test]
fn the_pack_builder_is_held_to_small_deltas_and_a_bounded_window() {
    let scratch = std::env::temp_dir().join(format!("keel-packcfg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let repo = git2::Repository::init_bare(scratch.join("repo.git")).unwrap();
    let guard = super::limits::bound_packing(&repo, &scratch).unwrap();
    let config = repo.config().unwrap().snapshot().unwrap();
    assert_eq!(config.get_i64("pack.windowMemory").unwrap(), 64 << 20);
    assert_eq!(config.get_i64("pack.deltaCacheSize").unwrap(), 16 << 20);
    drop(guard);
    // Nothing left behind, and the repository's own configuration untouched.
    let left: Vec<_> = std::fs::read_dir(&scratch).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "{left:?}");
    let own = std::fs::read_to_string(scratch.join("repo.git/config")).unwrap();
    assert!(!own.contains("windowMemory"), "{own}");
    std::fs::remove_dir_all(&scratch).unwrap();
}
