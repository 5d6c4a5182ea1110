//! `keel run [--name N] [--repo PATH[@BASE]] [--cpu C] [--memory M] [--allow HOST]… [--detach]
//! -- COMMAND…`: a one-line task. The flags become a unit (a RON file whose every string is
//! written by RON's own serializer, so any argument round-trips), validated here as `keel check`
//! would — an error names the flag whose value caused it — then installed by the daemon through
//! `keel add`'s path (its checks too). Then the task's output is followed (as `keel logs -f`)
//! until it ends, and `keel run` exits with the command's status: its exit code, 128+N for a
//! signal N. `--detach` prints the name and returns once the unit is accepted.
//!
//! A run is one attempt: `restart: Never`, and a stall is only reported (`on_stall: Report`),
//! never killed: a person is watching. Ctrl-C while following stops the task (`keel stop`: its
//! `stop.signal`, SIGKILL after the timeout) and waits for it, as a foreground command would
//! stop; a second Ctrl-C leaves at once, the stop going on in the daemon. keel's own failures
//! (a refused unit, no daemon) exit 125, so that they are not mistaken for the command's.

use super::logs::{follow_until, Shown};
use super::{request, CliError};
use crate::protocol::{Request, Response, TaskInfo};
use crate::sandbox::spec::output_log_path;
use crate::state::StateDir;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// keel's own failure, told apart from the command's statuses (as `docker run` does).
pub const KEEL_FAILED: i32 = 125;

#[derive(Debug, Clone, Default)]
pub struct Options {
    pub name: Option<String>,
    /// `--repo PATH[@BASE]` as written.
    pub repo: Option<String>,
    pub cpu: Option<f64>,
    pub memory: Option<String>,
    pub allow: Vec<String>,
    pub detach: bool,
    pub command: Vec<String>,
}

/// A unit's text, and which flag wrote each of its lines (1-based), so that an error at a
/// line:col of the generated text is told as the flag's.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    pub text: String,
    pub lines: Vec<(usize, String)>,
}

impl Generated {
    fn push(&mut self, line: String, flag: &str) {
        self.text.push_str(&line);
        self.text.push('\n');
        let number = self.text.lines().count();
        self.lines.push((number, flag.to_string()));
    }

    /// The flag that wrote `line`.
    pub fn flag_of(&self, line: usize) -> Option<&str> {
        self.lines
            .iter()
            .find(|(n, _)| *n == line)
            .map(|(_, flag)| flag.as_str())
    }
}

/// A RON string literal of `text`, escaped by RON itself.
fn quoted(text: &str) -> String {
    ron::to_string(text).unwrap_or_else(|_| format!("{text:?}"))
}

/// `PATH[@BASE]`: the path (made absolute: the daemon's working directory is not ours) and the
/// base (default `HEAD`: what the repository has checked out). A path that exists as written
/// is a path, `@` and all.
pub fn split_repo(spec: &str, cwd: &Path) -> (PathBuf, String) {
    let absolute = |p: &str| {
        let path = Path::new(p);
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            cwd.join(path)
        }
    };
    if absolute(spec).exists() {
        return (absolute(spec), "HEAD".to_string());
    }
    match spec.rsplit_once('@') {
        Some((path, base)) if !path.is_empty() && !base.is_empty() => {
            (absolute(path), base.to_string())
        }
        _ => (absolute(spec), "HEAD".to_string()),
    }
}

/// The unit of a one-line run. Pure: `cwd` resolves a relative `--repo`.
pub fn unit_text(options: &Options, cwd: &Path) -> Generated {
    let mut unit = Generated {
        text: String::new(),
        lines: Vec::new(),
    };
    unit.push("Unit(".into(), "COMMAND");
    let argv: Vec<String> = options.command.iter().map(|a| quoted(a)).collect();
    unit.push(format!("    command: [{}],", argv.join(", ")), "COMMAND");
    unit.push("    restart: Never,".into(), "COMMAND");
    unit.push(
        "    liveness: Liveness(on_stall: Report),".into(),
        "COMMAND",
    );
    if let Some(spec) = &options.repo {
        let (path, base) = split_repo(spec, cwd);
        unit.push(
            format!(
                "    repo: Some(Repo(path: {}, base: {})),",
                quoted(&path.to_string_lossy()),
                quoted(&base)
            ),
            "--repo",
        );
    }
    if options.cpu.is_some() || options.memory.is_some() {
        unit.push("    resources: Resources(".into(), "--cpu/--memory");
        if let Some(cpu) = options.cpu {
            // `{:?}` keeps a decimal point (`1.0`): RON reads `1` as an integer.
            unit.push(format!("        cpu: {cpu:?},"), "--cpu");
        }
        if let Some(memory) = &options.memory {
            unit.push(format!("        memory: {},", quoted(memory)), "--memory");
        }
        unit.push("    ),".into(), "--cpu/--memory");
    }
    if !options.allow.is_empty() {
        unit.push("    sandbox: Sandbox(network: Allow([".into(), "--allow");
        for host in &options.allow {
            unit.push(
                format!("        {},", quoted(host)),
                &format!("--allow {host}"),
            );
        }
        unit.push("    ])),".into(), "--allow");
    }
    unit.push(")".into(), "COMMAND");
    unit
}

/// `run-<first word of the command>-<6 hex>`: readable, and unique enough to retry on a clash.
pub fn generated_name(command: &[String], salt: u64) -> String {
    let first = command.first().map(String::as_str).unwrap_or("task");
    let base = Path::new(first)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let word: String = base
        .to_lowercase()
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' => c,
            _ => '-',
        })
        .collect::<String>()
        .trim_matches('-')
        .chars()
        .take(24)
        .collect();
    let word = match word.trim_end_matches('-') {
        "" => "task",
        w => w,
    };
    // A 64-bit mix of the salt (splitmix64's finaliser), 24 bits of it shown.
    let mut z = salt.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    format!("run-{word}-{:06x}", z & 0xff_ffff)
}

/// What an ended task's `last_exit` means as a process status: `exit:N` is N, `signal:NAME`
/// 128+N, `oom` 137 (the kernel's SIGKILL), `spawn-failed` 127 (as a shell's command not
/// found), anything else (`stalled`, `timeout`, `lost`, `disk`) 1.
pub fn exit_status(last_exit: Option<&str>) -> i32 {
    let Some(exit) = last_exit else {
        return 1;
    };
    if let Some(code) = exit.strip_prefix("exit:") {
        return code.parse().unwrap_or(1);
    }
    if let Some(name) = exit.strip_prefix("signal:") {
        return crate::unit::parse_signal(name).map_or(1, |n| 128 + n);
    }
    match exit {
        "oom" => 137,
        "spawn-failed" => 127,
        _ => 1,
    }
}

/// An error of the generated unit, told as the flag that caused it.
fn flag_error(generated: &Generated, file: &Path, message: &str) -> String {
    // `<file>:L:C: message`: the flag of line L.
    let prefix = format!("{}:", file.display());
    let located = message.strip_prefix(&prefix).and_then(|rest| {
        let mut parts = rest.splitn(3, ':');
        let line: usize = parts.next()?.parse().ok()?;
        let _col = parts.next()?;
        let what = parts.next()?.trim_start();
        Some((generated.flag_of(line)?.to_string(), what.to_string()))
    });
    match located {
        Some((flag, what)) => format!("{flag}: {what}"),
        None => message.to_string(),
    }
}

/// Run it. Returns the process's exit status.
pub fn run(state_dir: &Path, options: &Options) -> Result<i32, CliError> {
    if options.command.is_empty() {
        return Err(CliError(
            "no command: `keel run [OPTIONS] -- COMMAND [ARGS…]`".into(),
        ));
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let generated = unit_text(options, &cwd);
    // The file's name only shows in messages, which name the flag instead.
    let file = PathBuf::from("run.ron");
    let unit = crate::unit::check_unit(&file, &generated.text).map_err(|errors| {
        let lines: Vec<String> = errors
            .iter()
            .map(|e| flag_error(&generated, &file, &e.to_string()))
            .collect();
        CliError(lines.join("\n"))
    })?;
    let tasks = known_tasks(state_dir)?;
    let name = match &options.name {
        Some(name) => {
            crate::unit::validate_name(name).map_err(|e| CliError(format!("--name: {e}")))?;
            if tasks.iter().any(|t| t == name) {
                return Err(CliError(format!(
                    "--name: a unit {name:?} exists already: choose another name, or \
                     `keel rm {name}` first"
                )));
            }
            name.clone()
        }
        None => fresh_name(&options.command, &tasks),
    };
    if let Some(repo) = &unit.repo {
        // The daemon checks again; here the error can name the flag.
        crate::checkout::validate(repo, &name).map_err(|e| CliError(format!("--repo: {e}")))?;
    }
    let answer = request(
        state_dir,
        &Request::Add {
            name: name.clone(),
            text: generated.text.clone(),
        },
        Some(Duration::from_secs(30)),
    )?;
    match answer {
        Response::Ok { .. } => {}
        Response::Error { message } => {
            // `<units dir>/<name>.ron:L:C: …` (the daemon's copy of the file): told as the flag.
            let own = format!("{name}.ron:");
            let message = match message.find(&own) {
                Some(at) => format!("{}:{}", file.display(), &message[at + own.len()..]),
                None => message,
            };
            return Err(CliError(flag_error(&generated, &file, &message)));
        }
        other => {
            return Err(CliError(format!(
                "unexpected answer from the daemon: {other:?}"
            )))
        }
    }
    if options.detach {
        println!("{name}");
        return Ok(0);
    }
    if std::io::stderr().is_terminal() {
        eprintln!("keel: {name}: started; Ctrl-C stops it (`keel run --detach` leaves it running)");
    }
    follow(state_dir, &name)
}

/// The daemon's units, by name.
fn known_tasks(state_dir: &Path) -> Result<Vec<String>, CliError> {
    match request(
        state_dir,
        &Request::Status { unit: None },
        Some(Duration::from_secs(30)),
    )? {
        Response::Status(report) => Ok(report.tasks.into_iter().map(|t| t.unit).collect()),
        Response::Error { message } => Err(CliError(message)),
        other => Err(CliError(format!(
            "unexpected answer from the daemon: {other:?}"
        ))),
    }
}

fn fresh_name(command: &[String], taken: &[String]) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut salt = now ^ (u64::from(std::process::id()) << 40);
    loop {
        let name = generated_name(command, salt);
        if !taken.contains(&name) {
            return name;
        }
        salt = salt.wrapping_add(1);
    }
}

/// What the daemon says of the task.
enum Seen {
    Task(Box<TaskInfo>),
    /// It answered an error (the unit was removed): following ends.
    Gone(String),
    /// It did not answer (restarting?): asked again.
    Silent(String),
}

fn task(state_dir: &Path, name: &str) -> Seen {
    let asked = Request::Status {
        unit: Some(name.to_string()),
    };
    match request(state_dir, &asked, Some(Duration::from_secs(30))) {
        Ok(Response::Status(report)) => match report.tasks.into_iter().find(|t| t.unit == name) {
            Some(task) => Seen::Task(Box::new(task)),
            None => Seen::Gone(format!("{name} is not in the daemon's answer")),
        },
        Ok(Response::Error { message }) => Seen::Gone(message),
        Ok(other) => Seen::Gone(format!("unexpected answer from the daemon: {other:?}")),
        Err(e) => Seen::Silent(e.0),
    }
}

fn ended(task: &TaskInfo) -> bool {
    matches!(task.state.as_str(), "succeeded" | "failed" | "stopped")
}

/// Follow the task's output until it ends; its status.
fn follow(state_dir: &Path, name: &str) -> Result<i32, CliError> {
    let interrupted = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&interrupted))
        .map_err(|e| CliError(format!("cannot catch Ctrl-C: {e}")))?;
    let path = output_log_path(&StateDir::new(state_dir).run_dir(name));
    let stdout = std::io::stdout();
    let mut shown = Shown::new(stdout.is_terminal());
    let mut out = stdout.lock();
    let mut last: Option<TaskInfo> = None;
    let mut told: Option<String> = None;
    let mut stopping = false;
    let mut silent = false;
    let mut gone = false;
    let mut done = || {
        if interrupted.swap(false, Ordering::SeqCst) {
            if stopping {
                eprintln!("keel: {name}: left stopping (`keel status {name}`)");
                return true;
            }
            stopping = true;
            eprintln!("keel: {name}: stopping (Ctrl-C again leaves it stopping)");
            let dir = state_dir.to_path_buf();
            let unit = name.to_string();
            std::thread::spawn(move || {
                let _ = request(&dir, &Request::Stop { unit }, None);
            });
        }
        let now = match task(state_dir, name) {
            Seen::Task(task) => *task,
            Seen::Gone(why) => {
                eprintln!(
                    "keel: {name}: no longer followed: {}",
                    crate::fmt::printable(&why)
                );
                gone = true;
                return true;
            }
            Seen::Silent(why) => {
                // Said once until it answers again; the task goes on meanwhile.
                if !silent {
                    eprintln!(
                        "keel: {name}: still following: {}",
                        crate::fmt::printable(&why)
                    );
                }
                silent = true;
                return false;
            }
        };
        silent = false;
        // A start that waits (blocked, deferred): said once, on stderr.
        if now.state == "queued" && now.reason.is_some() && told != now.reason {
            told = now.reason.clone();
            let reason = told.as_deref().unwrap_or_default();
            eprintln!("keel: {name}: queued: {}", crate::fmt::printable(reason));
        }
        let finished = ended(&now);
        last = Some(now);
        finished
    };
    follow_until(&path, false, &mut shown, &mut out, &mut done)?;
    drop(out);
    let Some(task) = last.filter(ended) else {
        // Left while it stops (a second Ctrl-C), or the unit went away.
        return Ok(if gone { KEEL_FAILED } else { 130 });
    };
    let status = exit_status(task.last_exit.as_deref());
    let exit = task.last_exit.as_deref().unwrap_or("-");
    if !exit.starts_with("exit:") {
        eprintln!(
            "keel: {name}: {} ({})",
            task.state,
            crate::fmt::printable(task.reason.as_deref().unwrap_or(exit))
        );
    }
    Ok(status)
}

#[cfg(test)]
mod tests;
