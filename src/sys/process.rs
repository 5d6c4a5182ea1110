//! Reserved for the shim's fork/exec helpers.
