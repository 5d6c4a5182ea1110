//! Placeholder: the shim (helper).
