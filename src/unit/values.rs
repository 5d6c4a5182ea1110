//! The scalar values of a unit file: durations, sizes, signals and capabilities written as
//! strings, and the argv of a command.

use super::suggest::did_you_mean;
use super::Command;
use serde::{Deserialize, Deserializer};
use std::time::Duration;

/// A duration written as a string with a unit: `"250ms"`, `"90s"`, `"5m"`, `"1h"`, `"1d"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

/// A size in bytes written as a string: `"512M"`, `"4G"`, `"100K"`, `"1024"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

/// A signal number, written by name: `"SIGTERM"` or `"TERM"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopSignal(pub i32);

/// Parse `"250ms"`, `"90s"`, `"5m"`, `"1h"`, `"1d"`, or a sum such as `"1h30m"` (a bare `"0"` is
/// zero). Units: `ms`, `s`, `m` (or `min`), `h`, `d`; the number may have a fraction (`"1.5s"`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("duration is empty: write e.g. \"90s\", \"5m\" or \"250ms\"".to_string());
    }
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.starts_with('-') {
        return Err(format!(
            "duration {text:?} is negative: write a positive one such as \"90s\""
        ));
    }
    let mut rest = t;
    let mut millis = 0.0_f64;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(split);
        if number.is_empty() {
            return Err(format!(
                "duration {text:?} does not start with a number: write e.g. \"90s\", \"5m\" or \"250ms\""
            ));
        }
        let value: f64 = number
            .parse()
            .map_err(|_| format!("duration {text:?} has a malformed number {number:?}"))?;
        let tail = tail.trim_start();
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
            .unwrap_or(tail.len());
        let (unit, after) = tail.split_at(unit_len);
        let millis_per_unit = match unit {
            "" => {
                return Err(format!(
                    "duration {text:?} has no unit: write e.g. \"{number}s\" or \"{number}m\" (units: ms, s, m, h, d)"
                ))
            }
            "ms" => 1.0,
            "s" => 1_000.0,
            "m" | "min" => 60_000.0,
            "h" => 3_600_000.0,
            "d" => 86_400_000.0,
            _ => {
                return Err(format!(
                    "duration {text:?} has unknown unit {unit:?}: use ms, s, m, h or d"
                ))
            }
        };
        millis += value * millis_per_unit;
        rest = after.trim_start();
    }
    if !millis.is_finite() || millis > 1e15 {
        return Err(format!("duration {text:?} is too large"));
    }
    Ok(Duration::from_micros((millis * 1000.0).round() as u64))
}

/// A duration as a unit file would write it: `"500ms"`, `"90s"`, `"5m"`, `"1h"`, `"2d"`.
/// `parse_duration(&format_duration(d))` gives back `d` (to the microsecond).
pub fn format_duration(duration: Duration) -> String {
    let micros = duration.as_micros();
    if micros == 0 {
        return "0s".to_string();
    }
    if !micros.is_multiple_of(1000) {
        return format!("{}ms", micros as f64 / 1000.0);
    }
    let millis = micros / 1000;
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if millis.is_multiple_of(size) {
            return format!("{}{unit}", millis / size);
        }
    }
    format!("{millis}ms")
}

/// Parse `"512M"`, `"4G"`, `"100K"`, `"1T"`, `"4096"` (binary multiples; `"4GiB"`, `"4GB"` and
/// lowercase `"512m"` are also accepted, and a fraction such as `"1.5G"`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("size is empty: write e.g. \"512M\" or \"4G\"".to_string());
    }
    if t.starts_with('-') {
        return Err(format!(
            "size {text:?} is negative: write a positive one such as \"512M\""
        ));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    if number.is_empty() {
        return Err(format!(
            "size {text:?} does not start with a number: write e.g. \"512M\" or \"4G\""
        ));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| format!("size {text:?} has a malformed number {number:?}"))?;
    let unit = unit.trim_start();
    let bare = unit.strip_suffix('B').unwrap_or(unit);
    let bare = bare.strip_suffix('i').unwrap_or(bare);
    let multiplier: u64 = match bare.to_ascii_uppercase().as_str() {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => {
            return Err(format!(
                "size {text:?} has unknown unit {unit:?}: use K, M, G or T (e.g. \"512M\")"
            ))
        }
    };
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("size {text:?} is too large"));
    }
    Ok(bytes.round() as u64)
}

/// A size as a unit file would write it: `"512M"`, `"4G"`, `"1536K"`, `"1000"`.
pub fn format_size(bytes: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// `cores` as millicores, rounded to the nearest (`0.1` → 100, not 100.00000000000001 → 101);
/// non-positive or NaN → 0 (validation refuses those before they get here).
pub fn cpu_millis(cores: f64) -> u64 {
    if cores.is_nan() || cores <= 0.0 {
        return 0;
    }
    // `as` saturates: an absurd share becomes u64::MAX, which never fits.
    ((cores * 1000.0).round() as u64).max(1)
}

/// Signal number from `"SIGTERM"` / `"TERM"` (any case).
pub fn parse_signal(text: &str) -> Result<i32, String> {
    use std::str::FromStr;
    let upper = text.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let full = format!("SIG{bare}");
    if !bare.is_empty() {
        if let Ok(signal) = nix::sys::signal::Signal::from_str(&full) {
            return Ok(signal as i32);
        }
    }
    let names: Vec<&str> = nix::sys::signal::Signal::iterator()
        .map(|s| s.as_str())
        .collect();
    let hint = match did_you_mean(&full, &names) {
        Some(name) => format!(" (did you mean {name:?}?)"),
        None => String::new(),
    };
    Err(format!(
        "unknown signal {text:?}{hint}: use a name such as SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 or SIGKILL"
    ))
}

/// Signals a unit may name as `stop.signal`.
pub const STOP_SIGNALS: [i32; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGKILL,
];

/// Linux capability names, indexed by number (see capabilities(7)).
const CAPABILITIES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// Capability number from `"CAP_NET_ADMIN"` / `"NET_ADMIN"` (any case), as the sandbox grants it.
pub fn parse_capability(text: &str) -> Result<u8, String> {
    let upper = text.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    if let Some(number) = CAPABILITIES.iter().position(|name| *name == bare) {
        return Ok(number as u8);
    }
    let hint = match did_you_mean(bare, &CAPABILITIES) {
        Some(name) => format!(" (did you mean \"CAP_{name}\"?)"),
        None => String::new(),
    };
    Err(format!(
        "unknown capability {text:?}{hint}: write a name from capabilities(7) such as \"CAP_NET_BIND_SERVICE\""
    ))
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_duration(&text)
            .map(Dur)
            .map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_size(&text)
            .map(Size)
            .map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for StopSignal {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_signal(&text)
            .map(StopSignal)
            .map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let argv = Vec::<String>::deserialize(deserializer)?;
        match check_argv(&argv) {
            Ok(()) => Ok(Command(argv)),
            Err((_, message)) => Err(serde::de::Error::custom(message)),
        }
    }
}

/// `Err((index of the bad argument, message))` for an argv keel cannot exec.
pub(super) fn check_argv(argv: &[String]) -> Result<(), (usize, String)> {
    match argv.first() {
        None => Err((
            0,
            "the list is empty: give the program and its arguments, e.g. [\"claude\", \"-p\", \"...\"]"
                .to_string(),
        )),
        Some(program) if program.trim().is_empty() => Err((
            0,
            "the program (the first element) is empty: give the program and its arguments, e.g. [\"claude\", \"-p\", \"...\"]"
                .to_string(),
        )),
        _ => match argv.iter().position(|arg| arg.contains('\0')) {
            Some(index) => Err((index, format!("argument {index} contains a NUL byte"))),
            None => Ok(()),
        },
    }
}
