//! Drives redoguard the way its users do: over the Redis protocol, against real server
//! processes. The demo and the database benchmarks live here.

pub mod bench_apply;
pub mod bench_batch;
pub mod bench_chaos;
pub mod bench_commit;
pub mod bench_external;
pub mod bench_failover;
pub mod bench_figures;
pub mod bench_resp;
pub mod bench_ship;
pub mod bench_transport;
pub mod client;
pub mod demo;
pub mod interrupt;
mod network;
pub mod placement;
pub mod ports;
pub mod process;
pub mod sentinel;
pub mod thread_time;
