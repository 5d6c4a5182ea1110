//! keel: a Linux process supervisor for unattended coding agents.

pub mod sandbox;
pub mod state;
pub mod sys;
pub mod unit;
