//! The unit tests of `unit`, by concern.

mod errors;
mod sandbox_rules;
mod secrets;
mod source_map;
mod valid;
mod values;
