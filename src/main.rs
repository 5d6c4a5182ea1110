//! `keel`: command-line parsing and dispatch only. Exit codes: 0 success, 1 the request
//! failed (one line on stderr naming what to fix), 2 usage error.

use clap::{Parser, Subcommand};
use keel::cli::{self, CliError};
use keel::protocol::Request;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "keel",
    version,
    about = "A process supervisor for unattended coding agents"
)]
struct Args {
    /// State directory (default: $KEEL_STATE_DIR, else /var/lib/keel for root).
    #[arg(long, global = true, value_name = "DIR")]
    state: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// `keel run`'s flags (docs/commands.md, "keel run").
#[derive(clap::Args)]
struct RunArgs {
    /// The unit's name (default: `run-<first word of the command>-<6 hex>`).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Work in a checkout of this repository, at BASE (default HEAD).
    #[arg(long, value_name = "PATH[@BASE]")]
    repo: Option<String>,
    /// CPU request, in cores (`resources.cpu`).
    #[arg(long, value_name = "CORES")]
    cpu: Option<f64>,
    /// Memory request (`resources.memory`: "512M", "2G").
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// A host the task may reach (`sandbox.network: Allow([...])`); repeatable.
    #[arg(long, value_name = "HOST")]
    allow: Vec<String>,
    /// Print the name and return once the unit is accepted.
    #[arg(long)]
    detach: bool,
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the supervisor in the foreground.
    Daemon {
        /// Units directory (default: STATE/units).
        #[arg(long, value_name = "DIR")]
        units: Option<PathBuf>,
        /// Capacity and scheduling settings (default: STATE/keel.ron; missing = defaults).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Name of keel's cgroup tree, created under the cgroup the daemon starts in (default:
        /// `keel` for /var/lib/keel, else `keel-<hash of the state directory>`).
        #[arg(long, value_name = "NAME")]
        cgroup_name: Option<String>,
        /// Serve the metrics (Prometheus text format) over HTTP at GET /metrics: a loopback
        /// address (127.0.0.1:9464, [::1]:9464) or a Unix socket (unix:/run/keel/metrics.sock).
        #[arg(long, value_name = "ADDR", value_parser = keel::metrics::address::parse)]
        metrics: Option<keel::metrics::address::Address>,
    },
    /// PID-1 mode: run and respawn the daemon, reap zombies, forward signals.
    Init {
        #[arg(long, value_name = "DIR")]
        units: Option<PathBuf>,
        /// Name of the daemon's cgroup tree (see `keel daemon --help`).
        #[arg(long, value_name = "NAME")]
        cgroup_name: Option<String>,
        /// A command to run next to the daemon, unsandboxed; when it exits, keel init shuts
        /// down and exits with its status (a kernel command line cannot pass a second `--`:
        /// the command may follow the options without one).
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "COMMAND"
        )]
        command: Vec<std::ffi::OsString>,
    },
    /// One line per task, what needs you coloured; with UNIT, that task in full.
    Status {
        /// Show this task in full.
        unit: Option<String>,
        /// The stable JSON structure (docs/commands.md, "JSON output").
        #[arg(long, conflicts_with = "watch")]
        json: bool,
        /// Redraw in place every SECS seconds (default 2) until Ctrl-C.
        #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "2",
              value_parser = parse_watch)]
        watch: Option<std::time::Duration>,
        /// Colours: `auto` (on a terminal, unless NO_COLOR is set), `always` or `never`.
        #[arg(long, value_name = "WHEN", default_value = "auto",
              value_parser = ["auto", "always", "never"])]
        color: String,
    },
    /// Validate a unit file and install it into the daemon's units directory.
    Add { file: PathBuf },
    /// Run one command as a task (a unit made of the flags), follow its output, exit with its
    /// status; Ctrl-C stops it.
    Run(RunArgs),
    /// What a task changed against its base: its commits, then what is uncommitted.
    Diff {
        unit: String,
        /// The summary only (commits and files), no patch.
        #[arg(long)]
        stat: bool,
        /// Colours: `auto` (on a terminal, unless NO_COLOR is set), `always` or `never`.
        #[arg(long, value_name = "WHEN", default_value = "auto",
              value_parser = ["auto", "always", "never"])]
        color: String,
        /// Do not mark the work shown as reviewed.
        #[arg(long)]
        no_mark: bool,
    },
    /// Stop a task and remove its unit; its checkout goes only if clean and harvested.
    Rm {
        unit: String,
        /// Remove the checkout even if it holds changes (it is harvested first).
        #[arg(long)]
        force: bool,
    },
    /// Bring a task's branch into the main repository now (fast-forward only).
    Harvest { unit: String },
    /// Remove the checkouts of finished tasks that are clean and harvested; print what was freed.
    Prune,
    /// Start a stopped, finished or failed task again.
    Start { unit: String },
    /// Stop a task (stop.signal, then SIGKILL after stop.timeout) and wait for it.
    Stop { unit: String },
    /// Stop a task and start it again with its current unit file.
    Restart { unit: String },
    /// Freeze a running task (its cgroup: the agent sees no signal) until `keel resume`; its
    /// liveness clocks and max_runtime stop meanwhile.
    Pause {
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        unit: Option<String>,
        /// Every running task (a maintenance window, a provider's rate-limit window).
        #[arg(long)]
        all: bool,
    },
    /// Thaw a paused task.
    Resume {
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        unit: Option<String>,
        /// Every paused task.
        #[arg(long)]
        all: bool,
    },
    /// Send a signal to a task's agent (default SIGKILL); the restart policy then applies.
    Kill {
        unit: String,
        #[arg(short, long, default_value = "SIGKILL")]
        signal: String,
    },
    /// The task's captured stdout and stderr (on a terminal, control characters but newline
    /// and tab are shown escaped; into a pipe, the bytes as they are).
    Logs {
        unit: String,
        #[arg(short = 'n', long = "lines")]
        lines: Option<usize>,
        #[arg(short, long)]
        follow: bool,
        /// The bytes as the task wrote them, even on a terminal (escape sequences act on it).
        #[arg(long)]
        raw: bool,
    },
    /// The journal of transitions.
    Events {
        unit: Option<String>,
        #[arg(short, long)]
        follow: bool,
        /// Only the last N events (default all; 10 with -f).
        #[arg(short = 'n', long = "lines")]
        lines: Option<usize>,
        #[arg(long)]
        json: bool,
    },
    /// Validate unit files offline; prints file:line:col for each error.
    Check {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The configuration whose named network lists (`"@name"` entries) the units may use
        /// (default: STATE/keel.ron; missing = no lists).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The daemon's units directory, whose units an `after` entry may name (default:
        /// STATE/units; `/etc/keel/units` under the shipped systemd unit).
        #[arg(long, value_name = "DIR")]
        units: Option<PathBuf>,
    },
    /// Exit 0 iff the daemon answers and its loop is live.
    Health,
    /// Print the daemon's metrics in the Prometheus text format (docs/metrics.md).
    Metrics,
    /// Re-read the units directory and keel.ron, and retry the cgroup setup.
    Reload,
    /// Stop every task (they resume at the next start) and end the daemon.
    Shutdown {
        /// Leave tasks running, to be re-adopted by the next daemon (upgrades).
        #[arg(long)]
        keep_tasks: bool,
    },
    #[command(hide = true)]
    Shim {
        #[arg(long)]
        spec: PathBuf,
    },
}

fn main() {
    // The shim is started for every attempt: skip the CLI parser on its path (the daemon
    // always calls it exactly so).
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if raw.len() >= 4 && raw[1] == "shim" && raw[2] == "--spec" {
        keel::logger::init("shim");
        let spec = std::path::Path::new(&raw[3]);
        let code = match keel::sandbox::protocol::Handed::parse(&raw[4..]) {
            Ok(handed) => keel::sandbox::shim::run(spec, handed),
            Err(message) => {
                log::error!("{message}");
                keel::sandbox::protocol::SETUP_FAILURE
            }
        };
        std::process::exit(code);
    }
    // `keel shim --spare STATE_DIR` (the state directory only says whose spare it is).
    if raw.len() == 4 && raw[1] == "shim" && raw[2] == "--spare" {
        keel::logger::init("shim");
        std::process::exit(keel::sandbox::spare::run_spare());
    }
    // `keel relay --spec FILE`: a task's network relay (keel::network::relay).
    if raw.len() == 4 && raw[1] == "relay" && raw[2] == "--spec" {
        keel::logger::init("relay");
        std::process::exit(keel::network::relay::run(std::path::Path::new(&raw[3])));
    }
    // `keel worker`: one job of the daemon's, its request on stdin (keel::worker).
    if raw.len() == 2 && raw[1] == "worker" {
        keel::logger::init("worker");
        std::process::exit(keel::worker::run());
    }
    let args = Args::parse();
    let state_dir = cli::resolve_state_dir(args.state.as_deref());
    let units_dir = |units: Option<PathBuf>| {
        units
            .map(|u| std::path::absolute(&u).unwrap_or(u))
            .unwrap_or_else(|| state_dir.join("units"))
    };
    let result: Result<(), CliError> = match args.command {
        Command::Daemon {
            units,
            config,
            cgroup_name,
            metrics,
        } => {
            keel::logger::init("daemon");
            let options = keel::daemon::Options {
                state_dir: state_dir.clone(),
                units_dir_explicit: units.is_some(),
                units_dir: units_dir(units),
                config_path: config.map(|c| std::path::absolute(&c).unwrap_or(c)),
                cgroup_name,
                metrics,
            };
            match keel::daemon::Daemon::new(options) {
                Ok(daemon) => std::process::exit(daemon.run()),
                Err(e) => Err(CliError(e.to_string())),
            }
        }
        Command::Init {
            units,
            cgroup_name,
            command,
        } => {
            keel::logger::init("init");
            let units = units.map(|u| std::path::absolute(&u).unwrap_or(u));
            std::process::exit(keel::init::run(&keel::init::Options {
                state_dir: &state_dir,
                units_dir: units.as_deref(),
                cgroup_name: cgroup_name.as_deref(),
                companion: &command,
            }));
        }
        Command::Shim { spec } => {
            keel::logger::init("shim");
            std::process::exit(keel::sandbox::shim::run(&spec, None));
        }
        Command::Status {
            unit,
            json,
            watch,
            color,
        } => cli::status::run(
            &state_dir,
            &cli::status::Options {
                unit: unit.as_deref(),
                json,
                watch,
                colour: &color,
            },
        ),
        Command::Add { file } => cli::add::run(&state_dir, &file),
        Command::Run(a) => {
            let options = cli::run::Options {
                name: a.name,
                repo: a.repo,
                cpu: a.cpu,
                memory: a.memory,
                allow: a.allow,
                detach: a.detach,
                command: a.command,
            };
            match cli::run::run(&state_dir, &options) {
                Ok(status) => std::process::exit(status),
                Err(e) => {
                    eprintln!("keel: {}", keel::fmt::printable_keeping(&e.0, &['\n']));
                    std::process::exit(cli::run::KEEL_FAILED);
                }
            }
        }
        Command::Diff {
            unit,
            stat,
            color,
            no_mark,
        } => cli::diff::run(
            &state_dir,
            &unit,
            &cli::diff::Options {
                stat,
                colour: &color,
                mark: !no_mark,
            },
        ),
        Command::Rm { unit, force } => cli::rm::run(&state_dir, &unit, force),
        Command::Harvest { unit } => cli::simple::run(&state_dir, Request::Harvest { unit }),
        Command::Prune => cli::simple::run(&state_dir, Request::Prune),
        Command::Start { unit } => cli::simple::run(&state_dir, Request::Start { unit }),
        Command::Stop { unit } => cli::simple::run(&state_dir, Request::Stop { unit }),
        Command::Restart { unit } => cli::simple::run(&state_dir, Request::Restart { unit }),
        // `--all` is `None` (clap refuses a unit with it).
        Command::Pause { unit, .. } => cli::simple::run(&state_dir, Request::Pause { unit }),
        Command::Resume { unit, .. } => cli::simple::run(&state_dir, Request::Resume { unit }),
        Command::Kill { unit, signal } => match keel::unit::parse_signal(&signal) {
            Ok(signal) => cli::simple::run(&state_dir, Request::Kill { unit, signal }),
            Err(e) => {
                eprintln!("keel: {}", keel::fmt::printable(&e.to_string()));
                std::process::exit(2);
            }
        },
        Command::Logs {
            unit,
            lines,
            follow,
            raw,
        } => cli::logs::run(
            &state_dir,
            &unit,
            &cli::logs::Options { lines, follow, raw },
        ),
        Command::Events {
            unit,
            follow,
            lines,
            json,
        } => cli::events::run(
            &state_dir,
            &cli::events::Options {
                unit: unit.as_deref(),
                json,
                follow,
                lines,
            },
        ),
        Command::Check {
            files,
            config,
            units,
        } => cli::check::run(
            &files,
            &state_dir,
            &config.unwrap_or_else(|| state_dir.join(keel::config::CONFIG_FILE)),
            units.as_deref(),
        ),
        Command::Health => cli::health::run(&state_dir),
        Command::Metrics => cli::metrics::run(&state_dir),
        Command::Reload => cli::simple::run(&state_dir, Request::Reload),
        Command::Shutdown { keep_tasks } => {
            cli::simple::run(&state_dir, Request::Shutdown { keep_tasks })
        }
    };
    if let Err(e) = result {
        // Messages name paths and units (the daemon's lines among them): escaped.
        eprintln!("keel: {}", keel::fmt::printable_keeping(&e.0, &['\n']));
        std::process::exit(1);
    }
}

/// `--watch SECS`: a period of at least 0.1 s.
fn parse_watch(text: &str) -> Result<std::time::Duration, String> {
    match text.parse::<f64>() {
        Ok(secs) if (0.1..=86_400.0).contains(&secs) => {
            Ok(std::time::Duration::from_secs_f64(secs))
        }
        Ok(_) => Err(format!(
            "{text}: the period is in seconds, from 0.1 to 86400"
        )),
        Err(_) => Err(format!(
            "{text:?} is not a number of seconds (a unit goes first: `keel status UNIT --watch`)"
        )),
    }
}
