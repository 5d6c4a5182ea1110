//! Everything that runs on the task's side of the fence: the shim and what it sets up.

pub mod agent;
pub mod host_view;
pub mod logs;
pub mod mounts;
pub mod ownership;
pub mod privileges;
pub mod protocol;
pub mod seccomp;
pub mod shim;
pub mod spare;
pub mod spec;
pub mod start;
pub mod templates;
