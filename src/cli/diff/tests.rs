use super::*;
use crate::checkout::{Patch, Review, ReviewCommit, Uncommitted};

fn review(uncommitted: Uncommitted) -> Review {
    Review {
        branch: "keel/a".into(),
        base: "main".into(),
        base_commit: "0123456789abcdef0123456789abcdef01234567".into(),
        head: Some("fedcba9876543210fedcba9876543210fedcba98".into()),
        commits: vec![ReviewCommit {
            id: "fedcba9876543210fedcba9876543210fedcba98".into(),
            author: "agent\u{1b}]0;owned\u{7}".into(),
            time: 1_764_700_000,
            summary: "add \u{1b}[2Jnotes".into(),
            stat: " notes.txt | 1 +\n 1 file changed, 1 insertion(+)\n".into(),
        }],
        commit_count: 1,
        committed: Patch {
            files: 1,
            stat: String::new(),
            lines: vec![
                (
                    'F',
                    "diff --git a/notes.txt b/notes.txt\n+++ b/notes.txt\n".into(),
                ),
                ('H', "@@ -0,0 +1 @@\n".into()),
                ('+', "hello \u{1b}[31mred\r\n".into()),
            ],
        },
        uncommitted,
        fingerprint: "f".into(),
    }
}

#[test]
fn control_characters_from_the_task_are_escaped_everywhere() {
    let shown = Uncommitted::Shown {
        staged: Patch::default(),
        unstaged: Patch {
            files: 1,
            stat: " draft\u{1b}[8m.txt | 1 +\n".into(),
            lines: vec![('+', "wip\u{9b}31m\n".into())],
        },
    };
    for colour in [false, true] {
        let text = render("a", &review(shown.clone()), false, colour);
        // The only escapes left are keel's own colours.
        let bare = crate::cli::format::strip_ansi(&text);
        assert!(
            !bare.contains('\u{1b}') && !bare.contains('\u{7}') && !bare.contains('\u{9b}'),
            "{text:?}"
        );
        assert!(!bare.contains('\r'), "{text:?}");
        assert!(bare.contains("+hello "), "{bare}");
        assert!(bare.contains("uncommitted, not staged"), "{bare}");
        assert!(bare.contains("+wip"), "{bare}");
        assert_eq!(text.contains('\u{1b}'), colour, "{text:?}");
    }
}

#[test]
fn stat_leaves_the_patches_out_and_running_says_why() {
    let text = render("a", &review(Uncommitted::Running), true, false);
    assert!(
        text.contains("1 commit past its base main (0123456789ab)"),
        "{text}"
    );
    assert!(text.contains("notes.txt | 1 +"), "{text}");
    assert!(!text.contains("+hello"), "{text}");
    assert!(text.contains("not shown while the task runs"), "{text}");
    assert!(text.contains("Date:   2025-12-02T18:26:40Z"), "{text}");
}
