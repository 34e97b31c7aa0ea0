//! End to end over TCP on port 0: raw RESP bytes in, exact reply bytes out, against the small
//! in-memory server in tests/support (Connection + Session + a BTreeMap).

mod support {
    pub mod memory_server;
}

use std::time::Duration;

use resp::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn start(limits: Limits) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(support::memory_server::serve(listener, limits));
    address
}

struct Client {
    stream: TcpStream,
}

impl Client {
    async fn connect(address: std::net::SocketAddr) -> Client {
        Client { stream: TcpStream::connect(address).await.unwrap() }
    }

    /// Sends raw bytes and reads exactly `expected.len()` bytes back, then checks them.
    async fn exchange(&mut self, request: &[u8], expected: &[u8]) {
        self.stream.write_all(request).await.unwrap();
        let mut reply = vec![0u8; expected.len()];
        tokio::time::timeout(Duration::from_secs(10), self.stream.read_exact(&mut reply))
            .await
            .expect("reply in time")
            .unwrap();
        assert_eq!(reply.escape_ascii().to_string(), expected.escape_ascii().to_string());
    }

    /// Reads until the server closes the connection; returns what came.
    async fn read_to_close(&mut self) -> Vec<u8> {
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), self.stream.read_to_end(&mut rest))
            .await
            .expect("closed in time")
            .unwrap();
        rest
    }
}

#[tokio::test]
async fn ping_inline_and_multibulk() {
    let mut client = Client::connect(start(Limits::default()).await).await;
    client.exchange(b"PING\r\n", b"+PONG\r\n").await;
    client.exchange(b"*1\r\n$4\r\nPING\r\n", b"+PONG\r\n").await;
    client.exchange(b"*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n", b"$2\r\nhi\r\n").await;
    client.exchange(b"ECHO \"a b\"\n", b"$3\r\na b\r\n").await;
}

#[tokio::test]
async fn strings_and_errors() {
    let mut client = Client::connect(start(Limits::default()).await).await;
    client.exchange(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n5\r\n", b"+OK\r\n").await;
    client.exchange(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", b"$1\r\n5\r\n").await;
    client.exchange(b"INCRBY k 10\r\n", b":15\r\n").await;
    client.exchange(b"SET k v NX\r\n", b"$-1\r\n").await;
    client.exchange(b"GET nosuch\r\n", b"$-1\r\n").await;
    client.exchange(b"GET\r\n", b"-ERR wrong number of arguments for 'get' command\r\n").await;
    client
        .exchange(
            b"FOO a b\r\n",
            b"-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n",
        )
        .await;
    client.exchange(b"INCRBY k x\r\n", b"-ERR value is not an integer or out of range\r\n").await;
    client.exchange(b"SET k v EX\r\n", b"-ERR syntax error\r\n").await;
    client
        .exchange(b"MSET a 1 b 2\r\nMGET a b c\r\n", b"+OK\r\n*3\r\n$1\r\n1\r\n$1\r\n2\r\n$-1\r\n")
        .await;
    client.exchange(b"KEYS [ab]\r\n", b"*2\r\n$1\r\na\r\n$1\r\nb\r\n").await;
    client.exchange(b"DEL a b c\r\nDBSIZE\r\n", b":2\r\n:1\r\n").await;
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let mut client = Client::connect(start(Limits::default()).await).await;
    let mut pipeline = Vec::new();
    let mut expected = Vec::new();
    for n in 0..100 {
        pipeline.extend_from_slice(
            format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\n{n:03}\r\n").as_bytes(),
        );
        pipeline.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
        expected.extend_from_slice(format!("+OK\r\n$3\r\n{n:03}\r\n").as_bytes());
    }
    client.exchange(&pipeline, &expected).await;
}

#[tokio::test]
async fn hello_3_switches_replies_to_resp3() {
    let mut client = Client::connect(start(Limits::default()).await).await;
    client.stream.write_all(b"HELLO 3\r\n").await.unwrap();
    let mut head = [0u8; 4];
    client.stream.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"%7\r\n");
    // Drain the rest of the HELLO map, then check that nulls are now RESP3's.
    let mut rest = Vec::new();
    while !rest.ends_with(b"+modules\r\n*0\r\n") {
        let mut byte = [0u8; 1];
        client.stream.read_exact(&mut byte).await.unwrap();
        rest.push(byte[0]);
    }
    client.exchange(b"GET nosuch\r\n", b"_\r\n").await;
    client.exchange(b"CONFIG GET save\r\n", b"%1\r\n$4\r\nsave\r\n$0\r\n\r\n").await;
}

#[tokio::test]
async fn multi_exec_and_commit_mode() {
    let mut client = Client::connect(start(Limits::default()).await).await;
    client
        .exchange(
            b"MULTI\r\nSET a 1\r\nINCR a\r\nPING\r\n",
            b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n",
        )
        .await;
    client.exchange(b"EXEC\r\n", b"*3\r\n+OK\r\n:2\r\n+PONG\r\n").await;
    client.exchange(b"MULTI\r\nNOPE\r\nEXEC\r\n", b"+OK\r\n-ERR unknown command 'NOPE', with args beginning with: \r\n-EXECABORT Transaction discarded because of previous errors.\r\n").await;
    client.exchange(b"COMMITMODE\r\n", b"$14\r\nWAIT IMMEDIATE\r\n").await;
    client
        .exchange(b"COMMITMODE nowait batch\r\nCOMMITMODE\r\n", b"+OK\r\n$12\r\nNOWAIT BATCH\r\n")
        .await;
}

#[tokio::test]
async fn a_4_gb_length_field_gets_a_protocol_error_and_the_connection_closes() {
    let address = start(Limits::default()).await;
    let mut client = Client::connect(address).await;
    client.stream.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4294967296\r\n").await.unwrap();
    let reply = client.read_to_close().await;
    assert_eq!(
        reply.escape_ascii().to_string(),
        "-ERR Protocol error: invalid bulk length (4294967296 bytes is more than the maximum of 536870912)\\r\\n"
    );
    // Every other client is unaffected.
    let mut other = Client::connect(address).await;
    other.exchange(b"PING\r\n", b"+PONG\r\n").await;
}

#[tokio::test]
async fn too_many_arguments_and_bad_framing_close_the_connection() {
    let address = start(Limits { arguments_max: 8, ..Limits::default() }).await;
    let mut client = Client::connect(address).await;
    client.stream.write_all(b"*9\r\n").await.unwrap();
    assert_eq!(
        client.read_to_close().await,
        b"-ERR Protocol error: invalid multibulk length (9 arguments is more than the maximum of 8)\r\n"
    );
    let mut client = Client::connect(address).await;
    client.stream.write_all(b"PING\r\n*1\r\n:1\r\n").await.unwrap();
    assert_eq!(
        client.read_to_close().await,
        b"+PONG\r\n-ERR Protocol error: expected '$', got ':'\r\n"
    );
}

#[tokio::test]
async fn half_a_frame_then_disconnect_leaves_the_server_serving() {
    let address = start(Limits::default()).await;
    let mut client = Client::connect(address).await;
    client.stream.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nab").await.unwrap();
    drop(client);
    let mut other = Client::connect(address).await;
    other.exchange(b"GET k\r\n", b"$-1\r\n").await;
}

#[tokio::test]
async fn quit_replies_then_closes() {
    let mut client = Client::connect(start(Limits::default()).await).await;
    client.stream.write_all(b"QUIT\r\n").await.unwrap();
    assert_eq!(client.read_to_close().await, b"+OK\r\n");
}
