use super::*;

fn inside_root() -> KernelMounter {
    let mut mounter = KernelMounter::new(Path::new("/state/run/root"));
    mounter.in_root = true;
    mounter
}

#[test]
fn only_paths_made_of_its_own_creations_and_mounts_are_trusted() {
    let mut m = inside_root();
    for dir in ["usr", "dev", "dev/shm"] {
        m.known.insert(PathBuf::from(dir), Known::Created);
    }
    m.mounted(Path::new("usr"), Known::Mount);
    m.mounted(Path::new("dev/shm"), Known::Tmpfs);
    // The root tmpfs and what was made in it: trusted, and creatable in.
    assert!(m.trusted(Path::new("")) && m.creatable(Path::new("")));
    assert!(m.trusted(Path::new("dev")) && m.creatable(Path::new("dev")));
    assert!(m.creatable(Path::new("dev/shm")));
    // A bind of host content: its root is trusted, nothing below it, and nothing may
    // be created in it.
    assert!(m.trusted(Path::new("usr")) && !m.creatable(Path::new("usr")));
    assert!(!m.trusted(Path::new("usr/bin")) && !m.creatable(Path::new("usr/bin")));
    assert!(!m.trusted(Path::new("home/x")));
    // A mount over `dev` hides what was made below it.
    m.mounted(Path::new("dev"), Known::Mount);
    assert!(!m.trusted(Path::new("dev/shm")) && !m.creatable(Path::new("dev")));
    // Before the root tmpfs is the current directory, nothing is.
    m.in_root = false;
    assert!(!m.trusted(Path::new("")) && !m.creatable(Path::new("")));
}

#[test]
fn targets_outside_the_new_root_are_refused() {
    let mut m = inside_root();
    let err = m.place(Path::new("/etc")).err().unwrap();
    assert!(err.to_string().contains("refusing to touch the host"));
    let err = m
        .mkdir(Path::new("/state/run/rootless"), 0o755)
        .unwrap_err();
    assert!(err.to_string().contains("outside the sandbox root"));
}
