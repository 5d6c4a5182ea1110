//! `keel logs [-f] [-n N] UNIT`: the task's captured stdout/stderr, read straight from
//! `tasks/<unit>/run/` (works with the daemon down: the shim writes these files, not the
//! daemon).

use super::{CliError, CliResult};
use crate::sandbox::spec::output_log_path;
use crate::state::StateDir;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

pub fn run(state_dir: &Path, unit: &str, lines: Option<usize>, follow: bool) -> CliResult {
    let dirs = StateDir::new(state_dir);
    if !dirs.task_dir(unit).exists() {
        return Err(CliError(format!(
            "unknown unit {unit:?}: no task directory in {}",
            dirs.tasks_dir().display()
        )));
    }
    let path = output_log_path(&dirs.run_dir(unit));
    let wanted = lines.unwrap_or(if follow { 10 } else { usize::MAX });
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for line in crate::sandbox::logs::tail_lines(&path, wanted) {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
    if follow {
        follow_file(&path, &mut out)?;
    }
    Ok(())
}

/// Print what is appended to `path`, following it across rotations (a new inode or a
/// shorter file means it was rotated: start again from the top of the new one).
pub fn follow_file(path: &Path, out: &mut impl Write) -> CliResult {
    let open = |p: &Path| std::fs::File::open(p).ok();
    let mut file = open(path);
    let mut position = file
        .as_mut()
        .and_then(|f| f.seek(SeekFrom::End(0)).ok())
        .unwrap_or(0);
    let mut inode = std::fs::metadata(path).map(|m| m.ino()).unwrap_or(0);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if let Some(f) = file.as_mut() {
            loop {
                match f.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        position += n as u64;
                        out.write_all(&buf[..n])
                            .and_then(|_| out.flush())
                            .map_err(|_| CliError("output closed".into()))?;
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.ino() != inode || meta.len() < position {
                inode = meta.ino();
                file = open(path);
                position = 0;
            }
        }
    }
}
