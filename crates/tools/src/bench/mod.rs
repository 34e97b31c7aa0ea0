//! Benchmarks that belong to the toolkit (`redoguard bench net`): end-to-end figures with
//! the physical limit measured in the same run, JSON out, plus a plot.

pub mod net;
pub mod svg;
