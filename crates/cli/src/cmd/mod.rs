//! One module per subcommand.

pub mod advise;
pub mod bench;
pub mod certs;
pub mod demo;
pub mod edit;
pub mod iotest;
pub mod linkemu;
pub mod logswitch;
pub mod nettest;
pub mod observer;
pub mod passwd;
pub mod roles;
pub mod server;
pub mod status;
