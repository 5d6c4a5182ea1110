//! What a task writes cannot act on the operator's terminal (issue 17, the red team's
//! terminal injection): an agent whose progress line retitles the terminal (`ESC ] 0 ; … BEL`),
//! clears it, moves the cursor up over a line and reverses the text after it (U+202E) is shown
//! with those characters escaped by `keel status` (the table, one task in full, `--watch`) and
//! `keel events`; `--json` keeps the exact strings. `keel logs` gives the bytes as they are
//! into a pipe, and escapes them on a terminal (a pseudo-terminal made by `script` from
//! util-linux), `-f` included, unless `--raw`.

mod common;
use common::*;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use wait::{wait_for, PATIENCE};

/// The line the agent writes, as the shell's printf spells it, as the bytes it becomes, and as
/// a terminal must be shown it.
const PRINTF: &str = r"working\033]0;pwned\007 \033[2J\033[1A hidden\342\200\256txt";
const FORGED: &str = "working\x1b]0;pwned\x07 \x1b[2J\x1b[1A hidden\u{202e}txt";
const SHOWN: &str = r"working\e]0;pwned\x07 \e[2J\e[1A hidden\u{202e}txt";

/// The characters that must never reach the terminal raw.
fn assert_no_raw(what: &str, text: &str) {
    for c in ['\x1b', '\x07', '\u{202e}'] {
        assert!(!text.contains(c), "{what} prints {c:?} raw:\n{text:?}");
    }
}

/// A unit running `script` under /bin/sh, never restarted.
fn unit(script: &str) -> String {
    let quoted = script.replace('\\', r"\\").replace('"', "\\\"");
    format!(r#"Unit(command: ["/bin/sh", "-c", "{quoted}"], restart: Never)"#)
}

/// `keel ARGS` with its stdout a pseudo-terminal: what the terminal receives (its line
/// discipline turns each `\n` into `\r\n`).
fn on_terminal(d: &Daemon, args: &str) -> Command {
    let mut command = Command::new("script");
    command
        .args(["-qec"])
        .arg(format!(
            "exec '{}' --state '{}' {args}",
            keel_bin(),
            path_str(&d.state())
        ))
        .arg("/dev/null")
        .env("SHELL", "/bin/sh")
        .stdin(Stdio::null());
    command
}

fn script_available() -> bool {
    let found = Command::new("script").arg("--version").output().is_ok();
    if !found && privileged_required() {
        panic!("terminal_escapes: needs `script` (util-linux) for a pseudo-terminal");
    }
    if !found {
        eprintln!("terminal_escapes: skipped: no `script` (util-linux)");
    }
    found
}

#[test]
fn a_forged_progress_line_prints_escaped_in_status_and_exact_in_json() {
    if !require_root("terminal_escapes_status") {
        return;
    }
    let d = Daemon::start("escapes-status");
    d.write_unit(
        "forger",
        &unit(&format!("printf '{PRINTF}\\n' > \"$KEEL_PROGRESS\"")),
    );
    d.wait_state("forger", "succeeded", PATIENCE);

    // The table: the note is cut to the table's width, escaped.
    let out = d.keel(&["status"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let table = stdout_of(&out);
    assert_no_raw("keel status", &table);
    assert!(table.contains(r"“working\e]0;pwned\x07"), "{table}");
    // Coloured, the only escape sequences are keel's own colours.
    let coloured = stdout_of(&d.keel(&["status", "--color", "always"]));
    assert_no_raw(
        "keel status --color always",
        &coloured.replace("\x1b[", "CSI"),
    );
    for sequence in coloured.split("\x1b[").skip(1) {
        let end = sequence.find('m').expect("a colour ends in m");
        assert!(
            sequence[..end]
                .chars()
                .all(|c| c.is_ascii_digit() || c == ';'),
            "not a colour: {sequence:?}"
        );
    }

    // In full: the whole line.
    let full = stdout_of(&d.keel(&["status", "forger"]));
    assert_no_raw("keel status forger", &full);
    assert!(full.contains(&format!("progress     “{SHOWN}”")), "{full}");

    // JSON: the same string, nothing raw in the bytes.
    let out = d.keel(&["status", "--json"]);
    let json = stdout_of(&out);
    assert_no_raw("keel status --json", &json);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["tasks"][0]["progress"], FORGED, "{json}");

    // The watch view, into a pipe.
    let mut watch = KillOnDrop(
        Command::new(keel_bin())
            .arg("--state")
            .arg(d.state())
            .args(["status", "forger", "--watch", "0.2"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let seen = collect(watch.stdout.take().unwrap());
    wait_for(PATIENCE, "a watch frame with the progress line", || {
        seen.text().contains(SHOWN).then_some(())
    });
    watch.kill().unwrap();
    watch.wait().unwrap();
    assert_no_raw("keel status --watch", &seen.text());
}

#[test]
fn a_unit_file_named_to_forge_shows_escaped_in_events_and_status() {
    if !require_root("terminal_escapes_events") {
        return;
    }
    let d = Daemon::start("escapes-events");
    let name = "bad\x1b]0;pwned\x07\u{202e}.ron";
    std::fs::write(d.units().join(name), "Unit(").unwrap();
    wait_for(PATIENCE, "the invalid unit journaled", || {
        d.events(None)
            .iter()
            .any(|e| e["event"] == "invalid-unit" && e["unit"] == name)
            .then_some(())
    });
    let shown = r"bad\e]0;pwned\x07\u{202e}.ron";
    let out = d.keel(&["events"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let events = stdout_of(&out);
    assert_no_raw("keel events", &events);
    assert!(
        events
            .lines()
            .any(|l| l.contains("invalid-unit") && l.contains(shown)),
        "{events}"
    );
    let json = stdout_of(&d.keel(&["events", "--json"]));
    assert_no_raw("keel events --json", &json);
    let exact = json
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .any(|e| e["unit"] == name);
    assert!(exact, "{json}");
    let status = stdout_of(&d.keel(&["status"]));
    assert_no_raw("keel status", &status);
    assert!(status.replace("\n  ", "").contains(shown), "{status}");
}

#[test]
fn logs_are_the_bytes_into_a_pipe_and_escaped_on_a_terminal() {
    if !require_root("terminal_escapes_logs") || !script_available() {
        return;
    }
    let d = Daemon::start("escapes-logs");
    d.write_unit(
        "talker",
        &unit(&format!(
            "printf 'out: {PRINTF}\\tend\\n'; \
             while [ ! -e /run/keel/checkpoint/go ]; do sleep 0.05; done; \
             printf 'later: {PRINTF}\\n'; \
             while [ ! -e /run/keel/checkpoint/end ]; do sleep 0.05; done"
        )),
    );
    d.wait_state("talker", "running", PATIENCE);
    let raw_line = format!("out: {FORGED}\tend\n");
    let piped = wait_for(PATIENCE, "the first line in the log", || {
        let out = d.keel(&["logs", "talker"]);
        let text = String::from_utf8(out.stdout).unwrap();
        text.contains("out: ").then_some(text)
    });
    assert_eq!(piped, raw_line, "into a pipe: the bytes the agent wrote");

    // On a terminal: escaped, the tab kept.
    let out = on_terminal(&d, "logs talker").output().unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let terminal = stdout_of(&out);
    assert_eq!(terminal, format!("out: {SHOWN}\tend\r\n"));
    let raw = stdout_of(&on_terminal(&d, "logs --raw talker").output().unwrap());
    assert_eq!(raw, raw_line.replace('\n', "\r\n"), "--raw: the bytes");

    // Followed on a terminal: what comes later is escaped too.
    let mut follow = KillOnDrop(
        on_terminal(&d, "logs -f -n 0 talker")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let follower = wait_for(PATIENCE, "keel logs -f under script", || {
        first_child(follow.id() as i32)
    });
    let seen = collect(follow.stdout.take().unwrap());
    // The follower reads from the end of the file: wait until it has opened it.
    wait_for(PATIENCE, "keel logs -f following the log", || {
        std::fs::read_dir(format!("/proc/{follower}/fd"))
            .ok()?
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .any(|target| target.ends_with("output.log"))
            .then_some(())
    });
    std::fs::write(d.task_dir("talker").join("checkpoint/go"), "").unwrap();
    let later = format!("later: {SHOWN}\r\n");
    wait_for(PATIENCE, "the later line, followed", || {
        seen.text().contains(&later).then_some(())
    });
    assert_no_raw("keel logs -f on a terminal", &seen.text());
    follow.kill().unwrap();
    follow.wait().unwrap();
    // The follower goes with its terminal (SIGHUP, or EIO on its next write); by pid if not.
    let gone = || !std::path::Path::new(&format!("/proc/{follower}")).exists();
    if !wait_for_or_not(&gone) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(follower),
            nix::sys::signal::Signal::SIGKILL,
        );
        panic!("keel logs -f (pid {follower}) outlived its terminal");
    }
    std::fs::write(d.task_dir("talker").join("checkpoint/end"), "").unwrap();
    d.wait_state("talker", "succeeded", PATIENCE);
}

/// Whether `check` becomes true within [`PATIENCE`].
fn wait_for_or_not(check: &dyn Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + PATIENCE;
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    check()
}

/// Everything `stream` gives, gathered on a thread of its own.
struct Collected(Arc<Mutex<Vec<u8>>>);

impl Collected {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn collect(mut stream: impl Read + Send + 'static) -> Collected {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = stream.read(&mut buf) {
            into.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    Collected(seen)
}
