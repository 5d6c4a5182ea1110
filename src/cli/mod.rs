//! The client side of the command line: finding the daemon, one request, one answer.
//! Each verb lives in its own file.

pub mod add;
pub mod check;
pub mod diff;
pub mod events;
pub mod format;
pub mod health;
pub mod logs;
pub mod metrics;
pub mod rm;
pub mod run;
pub mod simple;
pub mod status;

use crate::protocol::{Request, Response};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A failed command: the message is printed as one line on stderr, the process exits 1.
#[derive(Debug)]
pub struct CliError(pub String);

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type CliResult = Result<(), CliError>;

/// `--state DIR`, else `$KEEL_STATE_DIR`, else `/var/lib/keel` (root) or
/// `$XDG_STATE_HOME/keel` / `~/.local/state/keel`.
pub fn resolve_state_dir(flag: Option<&Path>) -> PathBuf {
    if let Some(dir) = flag {
        return absolute(dir);
    }
    if let Some(dir) = std::env::var_os("KEEL_STATE_DIR").filter(|d| !d.is_empty()) {
        return absolute(Path::new(&dir));
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/keel");
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("keel");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    PathBuf::from(home).join(".local/state/keel")
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The state directory, if it has a task directory for `unit` (else the error naming it).
pub fn known_task(state_dir: &Path, unit: &str) -> Result<crate::state::StateDir, CliError> {
    // A name is a name, never a path: `../x` reaches nothing outside the tasks directory.
    if let Err(why) = crate::unit::validate_name(unit) {
        return Err(CliError(format!("{unit:?} is not a unit's name: {why}")));
    }
    let dirs = crate::state::StateDir::new(state_dir);
    if !dirs.task_dir(unit).exists() {
        return Err(CliError(format!(
            "unknown unit {unit:?}: no task directory in {}",
            dirs.tasks_dir().display()
        )));
    }
    Ok(dirs)
}

/// Send one request to the daemon of `state_dir` and read its answer. `timeout` bounds the
/// wait for the answer (`None`: wait as long as the daemon takes, as `stop` must).
pub fn request(
    state_dir: &Path,
    request: &Request,
    timeout: Option<Duration>,
) -> Result<Response, CliError> {
    let socket = state_dir.join("keel.sock");
    let not_running = |why: &dyn std::fmt::Display| {
        CliError(format!(
            "keel daemon is not running for state directory {} ({why}); start it with `keel daemon --state {}`",
            state_dir.display(),
            state_dir.display()
        ))
    };
    let mut stream = UnixStream::connect(&socket).map_err(|e| not_running(&e))?;
    stream
        .set_read_timeout(timeout)
        .map_err(|e| CliError(format!("control socket: {e}")))?;
    let mut line = serde_json::to_vec(request).map_err(|e| CliError(e.to_string()))?;
    line.push(b'\n');
    // A refused peer is answered and closed before it writes: read the answer even when
    // the write fails.
    let sent = stream.write_all(&line);
    let mut answer = String::new();
    let received = BufReader::new(stream).read_line(&mut answer);
    if let (Err(e), true) = (sent, answer.is_empty()) {
        return Err(CliError(format!(
            "cannot send the request to the daemon: {e}"
        )));
    }
    received.map_err(|e| CliError(format!("no answer from the daemon: {e}")))?;
    if answer.is_empty() {
        return Err(CliError(
            "the daemon closed the connection without answering (is it shutting down?)".into(),
        ));
    }
    serde_json::from_str(&answer)
        .map_err(|e| CliError(format!("unreadable answer from the daemon: {e}")))
}

/// Turn an `Ok`/`Error` response into a printed message or a failure.
pub fn print_outcome(response: Response) -> CliResult {
    match response {
        Response::Ok { message } => {
            // Lines the daemon wrote, naming units and paths: escaped but for the newlines.
            println!("{}", crate::fmt::printable_keeping(&message, &['\n']));
            Ok(())
        }
        Response::Error { message } => Err(CliError(message)),
        other => Err(CliError(format!(
            "unexpected answer from the daemon: {other:?}"
        ))),
    }
}
