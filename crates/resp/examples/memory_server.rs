//! The protocol layer alone, serving a BTreeMap: `cargo run -p resp --release --example
//! memory_server -- 6399`, then point redis-cli or redis-benchmark at port 6399.

#[path = "../tests/support/memory_server.rs"]
mod memory_server;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args().nth(1).and_then(|port| port.parse().ok()).unwrap_or(6399);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    eprintln!("memory_server: listening on 127.0.0.1:{port}");
    memory_server::serve(listener, resp::Limits::default()).await;
    Ok(())
}
