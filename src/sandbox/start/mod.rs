//! The start of an attempt, one file per process that runs it (docs/architecture.md, "The
//! start path").

pub mod agent_child;
