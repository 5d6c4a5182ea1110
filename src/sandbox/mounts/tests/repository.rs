//! The repositories a checkout borrows objects from: covered by an empty tmpfs of keel's own
//! wherever the host's view shows them, their object directories bound back into it, nothing
//! else of them in sight.

use super::checkout::{hosted, overlay, refused, with_checkout};
use crate::sandbox::mounts::tests::{dir, p, pivot_index, printed};
use crate::sandbox::mounts::*;

fn veiled(objects: &str, repositories: &[&str]) -> SandboxLayout {
    let mut layout = with_checkout(overlay(), objects);
    if let Some(c) = &mut layout.checkout {
        c.repositories = repositories.iter().map(|r| p(r)).collect();
    }
    layout
}

fn position(ops: &[String], line: &str) -> usize {
    ops.iter()
        .position(|o| o == line)
        .unwrap_or_else(|| panic!("{line} not in\n{}", ops.join("\n")))
}

#[test]
fn the_main_repository_is_covered_and_only_its_objects_bound_back() {
    let layout = veiled("/srv/app/.git/objects", &["/srv/app", "/srv/app/.git"]);
    let ops = plan(&layout, &hosted());
    let text = printed(&ops);
    let at = |line: &str| position(&text, line);
    let srv = at("rbind         /srv -> <root>/srv");
    let veil = at("tmpfs         <root>/srv/app size=1M mode=0755 nosuid,nodev,noexec");
    let git = at("mkdir         <root>/srv/app/.git 0755");
    let point =
        at("mountpoint    <root>/srv/app/.git/objects (dir or file, like /srv/app/.git/objects)");
    let objects = at("rbind         /srv/app/.git/objects -> <root>/srv/app/.git/objects");
    assert!(srv < veil && veil < git && git < point && point < objects);
    assert!(objects < pivot_index(&ops));
    // The git directory lies in the covered work tree: nothing more is mounted for it.
    let tmpfs_on_repo: Vec<&String> = text
        .iter()
        .filter(|o| o.starts_with("tmpfs         <root>/srv"))
        .collect();
    assert_eq!(tmpfs_on_repo.len(), 1, "{tmpfs_on_repo:?}");
    // Read-only like the rest: no setattr clears anything under /srv.
    assert!(!text.iter().any(|o| o.starts_with("setattr       /srv")));
}

#[test]
fn a_bare_repository_and_one_it_borrows_from_are_covered_each() {
    let mut layout = veiled(
        "/srv/app.git/objects",
        &["/srv/app.git", "/srv/shared/.git"],
    );
    if let Some(c) = &mut layout.checkout {
        c.objects.push(p("/srv/shared/.git/objects"));
    }
    let text = printed(&plan(&layout, &hosted()));
    for repo in ["/srv/app.git", "/srv/shared/.git"] {
        let veil = position(
            &text,
            &format!("tmpfs         <root>{repo} size=1M mode=0755 nosuid,nodev,noexec"),
        );
        let objects = position(
            &text,
            &format!("rbind         {repo}/objects -> <root>{repo}/objects"),
        );
        assert!(veil < objects);
    }
}

#[test]
fn a_repository_nothing_shows_gets_no_cover() {
    // Under keel's /tmp: the objects get a mountpoint there, nothing covers anything.
    let layout = veiled("/tmp/app/.git/objects", &["/tmp/app", "/tmp/app/.git"]);
    let text = printed(&plan(&layout, &hosted()));
    assert!(!text
        .iter()
        .any(|o| o.starts_with("tmpfs         <root>/tmp/app")));
    position(
        &text,
        "rbind         /tmp/app/.git/objects -> <root>/tmp/app/.git/objects",
    );
    // At the top of the host's /: not bound at all, its objects' path made in the root tmpfs.
    let layout = veiled("/app/.git/objects", &["/app", "/app/.git"]);
    let mut host = hosted();
    host.push(dir("app"));
    let text = printed(&plan(&layout, &host));
    assert!(!text.iter().any(|o| o.contains("/app -> <root>/app")));
    assert!(!text
        .iter()
        .any(|o| o.starts_with("tmpfs         <root>/app")));
    position(&text, "mkdir         <root>/app 0755");
    position(
        &text,
        "rbind         /app/.git/objects -> <root>/app/.git/objects",
    );
}

#[test]
fn a_workdir_inside_the_repository_is_made_in_its_cover() {
    let mut layout = veiled("/srv/app/.git/objects", &["/srv/app", "/srv/app/.git"]);
    layout.workdir = p("/srv/app/work");
    let text = printed(&plan(&layout, &hosted()));
    let veil = position(
        &text,
        "tmpfs         <root>/srv/app size=1M mode=0755 nosuid,nodev,noexec",
    );
    let mkdir = position(&text, "mkdir         <root>/srv/app/work 0755");
    assert!(veil < mkdir);
    position(&text, "setattr       /srv/app/work -rdonly");
}

#[test]
fn a_repository_path_the_planner_cannot_honour_is_refused() {
    let layout = veiled("/srv/app/.git/objects", &["srv/app"]);
    let message = refused(&layout);
    assert!(
        message.contains("a repository of the checkout must be an absolute path"),
        "{message}"
    );
    let layout = veiled("/srv/app/.git/objects", &["/"]);
    assert!(refused(&layout).contains("a repository of the checkout cannot be /"));
}

#[test]
fn a_failing_cover_names_the_repository() {
    let layout = veiled("/srv/app/.git/objects", &["/srv/app"]);
    let ops = plan(&layout, &hosted());
    let i = ops
        .iter()
        .position(|op| matches!(op, MountOp::Tmpfs { target, .. } if target.ends_with("srv/app")))
        .unwrap();
    let mut mounter = RecordingMounter::failing_at(i, libc::ENOENT);
    let message = build(&layout, &hosted(), &mut mounter)
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("cannot hide the repository /srv/app from the sandbox"),
        "{message}"
    );
}

#[test]
fn a_veiled_home_is_covered_and_the_tasks_objects_inside_it_bound_back() {
    // A rootless daemon's user's home: covered; the repository in it veiled as usual, its
    // objects bound on top.
    let mut layout = veiled("/home/u/app/.git/objects", &["/home/u/app"]);
    layout.veiled = vec![p("/home/u")];
    let ops = plan(&layout, &super::host());
    let text = printed(&ops);
    let at = |line: &str| position(&text, line);
    let home = at("rbind         /home -> <root>/home");
    let veil = at("tmpfs         <root>/home/u size=1M mode=0755 nosuid,nodev,noexec");
    let objects = at("rbind         /home/u/app/.git/objects -> <root>/home/u/app/.git/objects");
    assert!(home < veil && veil < objects && objects < pivot_index(&ops));
    // Nothing refuses it: the objects are the task's own, not a hidden path's.
    assert!(crate::sandbox::mounts::validate::validate(&layout, &super::host()).is_ok());
}
