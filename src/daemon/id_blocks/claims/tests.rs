//! Tests of the host-wide claims: real OFD locks on a claims file in a directory of the
//! test's own, the directory's judge, and what the daemon's bookkeeping makes of them.

use super::*;
use crate::config::ID_BLOCK_SIZE;

fn block(first: u32) -> IdBlock {
    IdBlock {
        first,
        count: ID_BLOCK_SIZE,
    }
}

/// A claims directory of the test's own, removed at the end.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!(
            "keel-claims-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        // A directory below one that does not exist yet: made whole.
        Dir(dir.join("id-blocks"))
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

#[test]
fn a_claim_excludes_every_other_description_until_its_last_copy_closes() {
    let dir = Dir::new("excl");
    let file = ClaimsFile::open(&dir.0).unwrap();
    let mode = std::fs::metadata(&dir.0).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let mode = std::fs::metadata(file.path()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // Two daemons (or two tasks of one) open descriptions of their own: the second is refused.
    let first = file.try_claim(block(0x7000_0000)).unwrap().expect("free");
    let other = ClaimsFile::open(&dir.0).unwrap();
    assert!(other.try_claim(block(0x7000_0000)).unwrap().is_none());
    // A neighbour is free; a block off the grid sharing one id is not.
    let second = other.try_claim(block(0x7001_0000)).unwrap().expect("free");
    let straddling = IdBlock {
        first: 0x7000_8000,
        count: ID_BLOCK_SIZE,
    };
    assert!(file.try_claim(straddling).unwrap().is_none());
    drop(second);
    assert!(
        file.try_claim(straddling).unwrap().is_none(),
        "still half held"
    );
    // An inherited copy (a shim's) keeps the lock after the daemon's own descriptor closes.
    let shim_copy = first.file.try_clone().unwrap();
    drop(first);
    assert!(other.try_claim(block(0x7000_0000)).unwrap().is_none());
    drop(shim_copy);
    assert!(other.try_claim(block(0x7000_0000)).unwrap().is_some());
}

#[test]
fn a_directory_others_could_use_is_refused() {
    let path = Path::new("/run/keel/id-blocks");
    assert_eq!(judge_dir(path, true, 0, 0o40700, 0), Ok(()));
    let not_dir = judge_dir(path, false, 0, 0o120777, 0).unwrap_err();
    assert!(not_dir.contains("not a directory"), "{not_dir}");
    let theirs = judge_dir(path, true, 1000, 0o40700, 0).unwrap_err();
    assert!(theirs.contains("belongs to uid 1000"), "{theirs}");
    let wide = judge_dir(path, true, 0, 0o40777, 0).unwrap_err();
    assert!(wide.contains("chmod 0700"), "{wide}");
    assert!(judge_dir(path, true, 0, 0o40720, 0).is_err());
    // Read and search by others take nothing from anyone.
    assert_eq!(judge_dir(path, true, 0, 0o40755, 0), Ok(()));
}

#[test]
fn an_unusable_directory_says_what_to_set() {
    let dir = Dir::new("unusable");
    std::fs::create_dir_all(dir.0.parent().unwrap()).unwrap();
    // A file where the directory should be.
    std::fs::write(&dir.0, b"").unwrap();
    let message = ClaimsFile::open(&dir.0).unwrap_err();
    assert!(message.contains(CLAIMS_DIR_ENV), "{message}");
    assert!(message.contains(&dir.0.display().to_string()), "{message}");
}

fn task<'a>(unit: &'a str, first: u32, attempt_live: bool) -> TaskBlock<'a> {
    TaskBlock {
        unit,
        block: Some(block(first)),
        attempt_live,
    }
}

#[test]
fn a_restarted_daemon_trusts_a_live_shim_and_claims_once_it_has_ended() {
    let dir = Dir::new("restart");
    let host = ClaimsFile::open(&dir.0).unwrap();
    // The shim of a re-adopted attempt holds a's block on the old daemon's description.
    let shim = host.try_claim(block(0x7000_0000)).unwrap().unwrap();
    let mut claims = Claims::new(ClaimsFile::open(&dir.0).unwrap());
    claims.sync([task("a", 0x7000_0000, true), task("b", 0x7001_0000, false)]);
    assert!(claims.holds("a", block(0x7000_0000)), "held by its shim");
    assert!(claims.held("a").is_none(), "not by the daemon");
    assert_eq!(claims.held("b").map(Claim::block), Some(block(0x7001_0000)));
    // The attempt ends: the shim's copy closes, the daemon takes the claim.
    drop(shim);
    claims.sync([task("a", 0x7000_0000, false), task("b", 0x7001_0000, false)]);
    assert_eq!(claims.held("a").map(Claim::block), Some(block(0x7000_0000)));
    // Removed: its claim goes, and another daemon may take the block.
    claims.sync([task("b", 0x7001_0000, false)]);
    assert!(claims.held("a").is_none());
    assert!(host.try_claim(block(0x7000_0000)).unwrap().is_some());
    assert!(host.try_claim(block(0x7001_0000)).unwrap().is_none());
}

#[test]
fn a_block_taken_elsewhere_while_the_daemon_was_down_is_lost_and_another_chosen() {
    let dir = Dir::new("lost");
    let range = crate::config::IdRange {
        first_id: 0x7000_0000,
        blocks: 3,
    };
    // Another daemon's task took a's kept block while a had no shim.
    let elsewhere = ClaimsFile::open(&dir.0).unwrap();
    let theirs = elsewhere.try_claim(block(0x7000_0000)).unwrap().unwrap();
    let mut claims = Claims::new(ClaimsFile::open(&dir.0).unwrap());
    claims.sync([task("a", 0x7000_0000, false), task("b", 0x7001_0000, false)]);
    assert!(!claims.holds("a", block(0x7000_0000)));
    // a's start: not its kept block, not b's: the third, claimed.
    let others = [block(0x7001_0000)];
    let chosen = super::super::choose_block(&range, Some(block(0x7000_0000)), &others, |b| {
        claims.claim_for("a", b).unwrap()
    });
    assert_eq!(chosen, Ok(block(0x7002_0000)));
    assert_eq!(claims.held("a").map(Claim::block), Some(block(0x7002_0000)));
    assert!(elsewhere.try_claim(block(0x7002_0000)).unwrap().is_none());
    // Its lost claim is not looked at again while the record still says the old block.
    claims.sync([task("a", 0x7002_0000, false), task("b", 0x7001_0000, false)]);
    assert_eq!(claims.held("a").map(Claim::block), Some(block(0x7002_0000)));
    drop(theirs);
}
