//! Human units on the command line; the parsers live in the `units` crate so that
//! configuration files and every tool read sizes and durations the same way.

pub use units::*;
