//! The start of an attempt, one file per process that runs it (docs/architecture.md, "The
//! start path"), in the order they run:
//!
//! 1. [`daemon`] — the daemon: everything the start needs, resolved on the host before any
//!    fork ([`daemon::Launch`], [`daemon::resolve_launch`]).
//! 2. [`clone`] — the process that becomes the shim (the daemon's clone, or a spare shim
//!    that took the start), until its exec of `keel shim`: [`clone::launch_for_exec`],
//!    [`clone::start_agent`], [`clone::hand_over`].
//! 3. [`agent_child`] — the agent's child, forked by the clone: the sandbox entered, the
//!    agent exec'd ([`agent_child::fork_agent`]).
//!
//! The path only goes down: the clone forks the agent's child and both read what the daemon
//! resolved; nothing here calls back up, nor into the shim or the daemon's templates (which
//! the daemon hands in as a [`daemon::TemplateCache`]).
//!
//! Then the shim ([`crate::sandbox::shim`]) takes the agent over. What these processes hand
//! each other (descriptor numbers, exit codes, the shim's command line, the spare's messages)
//! is [`crate::sandbox::protocol`]; a spare shim ([`crate::sandbox::spare`]) runs the same
//! steps 2 and 3, its sandbox half made ahead.

pub mod agent_child;
pub mod clone;
pub mod daemon;
