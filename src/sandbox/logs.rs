//! Placeholder: output log capture (helper).
