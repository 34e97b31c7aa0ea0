//! One module per subcommand.

pub mod bench;
pub mod demo;
pub mod iotest;
pub mod nettest;
