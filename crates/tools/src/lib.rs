//! The measurement toolkit: what a DBA runs before (and while) building a standby.

pub mod advise;
pub mod bench;
pub mod fileio;
pub mod iotest;
pub mod nettest;
pub mod units;
