//! The unit tests of `unit`, by concern.

mod errors;
mod source_map;
mod valid;
mod values;
