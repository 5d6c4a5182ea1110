//! keel: a Linux process supervisor for unattended coding agents.
//!
//! The architecture is `../shared/DESIGN.md` made visible: [`unit`] files, durable [`state`],
//! the [`daemon`], its event loop and its [`config`] file, the shim in [`sandbox`], `keel init`
//! in [`init`], every raw syscall in [`sys`], and the figures people read (durations, sizes)
//! in [`fmt`], a leaf for all of them.

pub mod cgroup;
pub mod checkout;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod fmt;
pub mod init;
pub mod liveness;
pub mod logger;
pub mod metrics;
pub mod network;
pub mod notify;
pub mod protocol;
pub mod sandbox;
pub mod secrets;
pub mod state;
#[allow(unsafe_code)]
pub mod sys;
pub mod unit;
pub mod worker;
