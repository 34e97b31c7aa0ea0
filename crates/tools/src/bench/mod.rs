//! Benchmarks that belong to the toolkit (`redoguard bench net`): end-to-end figures with
//! the physical limit measured in the same run, JSON out, plus a plot; and what every
//! benchmark shares: its figure (`plot`, SVG with plotters) and its writer (`report`).

pub mod net;
pub mod plot;
pub mod report;
