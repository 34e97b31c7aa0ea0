//! Malformed and hostile input against the real binary, while a well-behaved client keeps
//! working: wrong types, a 4 GB length field, half a frame then a disconnect, garbage, an
//! inline command too long, and 10 000 connection attempts. Each gets its exact error (or
//! is refused), and the server goes on serving everyone else.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Server, Watchdog};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CONNECTION_ATTEMPTS: usize = 10_000;
/// The server's default `server.max_connections`.
const MAX_CONNECTIONS: usize = 1000;
/// The server's default `limits.bulk_bytes_max` (64 MiB).
const BULK_BYTES_MAX: u64 = 64 << 20;

/// Sends `request` on a fresh connection and returns everything the server sent until it
/// closed the connection.
fn reply_then_close(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = common::raw(addr);
    stream.write_all(request).unwrap();
    common::read_to_close(&mut stream)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What the well-behaved client did.
struct Behaved {
    operations: u64,
    increments: i64,
}

/// SET, GET, INCR and PING in a loop until `stop`; every reply is checked. Any failure ends
/// the loop with an error.
fn well_behaved(addr: SocketAddr, stop: &AtomicBool) -> Result<Behaved, String> {
    let mut connection = common::redis_connection(addr);
    let mut behaved = Behaved { operations: 0, increments: 0 };
    let fail = |what: &str, error: redis::RedisError| format!("{what}: {error}");
    while !stop.load(Ordering::Acquire) {
        let n = behaved.operations;
        let key = format!("good:{n}");
        let value = format!("value {n}");
        redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .query::<()>(&mut connection)
            .map_err(|e| fail("SET", e))?;
        let read: String =
            redis::cmd("GET").arg(&key).query(&mut connection).map_err(|e| fail("GET", e))?;
        if read != value {
            return Err(format!("GET {key} returned {read:?}, not {value:?}"));
        }
        let counted: i64 = redis::cmd("INCR")
            .arg("good:counter")
            .query(&mut connection)
            .map_err(|e| fail("INCR", e))?;
        behaved.increments += 1;
        if counted != behaved.increments {
            return Err(format!("INCR returned {counted}, expected {}", behaved.increments));
        }
        let pong: String =
            redis::cmd("PING").query(&mut connection).map_err(|e| fail("PING", e))?;
        if pong != "PONG" {
            return Err(format!("PING returned {pong:?}"));
        }
        behaved.operations += 4;
    }
    Ok(behaved)
}

#[test]
fn hostile_input_leaves_the_server_serving() {
    let _watchdog = Watchdog::new(Duration::from_secs(150), "the hostile input test");
    common::raise_open_files_limit(CONNECTION_ATTEMPTS as u64 + 1024);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), None, &dir.path().join("server.log"));
    let addr = server.resp_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let good = {
        let stop = stop.clone();
        std::thread::spawn(move || well_behaved(addr, &stop))
    };
    let mut client = server.redis();

    // Wrong types and wrong commands: an error reply each, and the connection goes on.
    let _: () = redis::cmd("SET").arg("text").arg("abc").query(&mut client).unwrap();
    for (command, expected) in [
        (redis::cmd("INCR").arg("text").clone(), "value is not an integer or out of range"),
        (redis::cmd("INCRBY").arg("n").arg("x").clone(), "value is not an integer or out of range"),
        (
            redis::cmd("GET").arg("a").arg("b").clone(),
            "wrong number of arguments for 'get' command",
        ),
        (redis::cmd("NOSUCHCOMMAND").arg("a").clone(), "unknown command 'NOSUCHCOMMAND'"),
        (
            redis::cmd("SET").arg("k").arg("v").arg("EX").arg("0").clone(),
            "invalid expire time in 'set' command",
        ),
        (redis::cmd("EXEC").clone(), "EXEC without MULTI"),
    ] {
        let error = command.query::<redis::Value>(&mut client).unwrap_err().to_string();
        assert!(error.contains(expected), "{command:?}: {error}");
    }
    let value: String = redis::cmd("GET").arg("text").query(&mut client).unwrap();
    assert_eq!(value, "abc");
    // In a transaction, as in Redis: the command that fails fails alone.
    let mut stream = common::raw(addr);
    stream.write_all(b"MULTI\r\nINCR text\r\nSET after-multi 1\r\nEXEC\r\nPING\r\n").unwrap();
    let expected: &[u8] = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n-ERR value is not an integer or out of range\r\n+OK\r\n+PONG\r\n";
    let mut reply = vec![0u8; expected.len()];
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(text(&reply), text(expected));
    drop(stream);

    // Length fields far beyond the limits: refused the moment they are read, before any
    // byte is awaited or allocated; the connection is closed.
    assert_eq!(
        text(&reply_then_close(addr, b"*1\r\n$4294967296\r\n")),
        format!(
            "-ERR Protocol error: invalid bulk length (4294967296 bytes is more than the maximum of {BULK_BYTES_MAX})\r\n"
        )
    );
    assert_eq!(
        text(&reply_then_close(addr, b"*4294967296\r\n")),
        "-ERR Protocol error: invalid multibulk length (4294967296 arguments is more than the maximum of 1048576)\r\n"
    );
    // Malformed frames: the exact protocol error, then the connection is closed.
    for (request, expected) in [
        (&b"*abc\r\n"[..], "-ERR Protocol error: invalid multibulk length\r\n"),
        (b"*1\r\n:5\r\n", "-ERR Protocol error: expected '$', got ':'\r\n"),
        (b"*1\r\n$3\r\nabcXY", "-ERR Protocol error: expected '\\r\\n' after bulk string\r\n"),
        (b"SET \"unbalanced\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"),
    ] {
        assert_eq!(text(&reply_then_close(addr, request)), expected, "{}", text(request));
    }
    // An inline command longer than 64 KiB.
    let mut long = vec![b'A'; 70_000];
    long.extend_from_slice(b"\r\n");
    assert_eq!(
        text(&reply_then_close(addr, &long)),
        "-ERR Protocol error: too big inline request (more than 65536 bytes)\r\n"
    );

    // Half a frame, then a disconnect: nothing of it is applied.
    for half in [
        &b"*3\r\n$3\r\nSET\r\n$4\r\nhalf\r\n$100\r\nonly some of the value"[..],
        b"*3\r\n$3\r\nSET\r\n$4\r\nhalf\r\n$50000000\r\n",
        b"*3\r\n$3\r\nSET\r\n$4\r\nha",
        b"*3\r\n",
    ] {
        let mut stream = common::raw(addr);
        stream.write_all(half).unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(common::read_to_close(&mut stream), b"", "{}", text(half));
    }
    let exists: i64 = redis::cmd("EXISTS").arg("half").query(&mut client).unwrap();
    assert_eq!(exists, 0, "half a SET was applied");

    // Garbage: random bytes, seeded. Whatever the server answers is errors; it closes the
    // connection at the latest when the garbage ends.
    let seed = common::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    for round in 0..8 {
        let len = rng.random_range(1..200_000);
        let garbage: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let mut stream = common::raw(addr);
        // The server may close before reading it all: a write error is fine.
        let _ = stream.write_all(&garbage);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let reply = common::read_to_close(&mut stream);
        assert!(
            reply.is_empty() || reply.starts_with(b"-"),
            "seed {seed} round {round}: garbage answered {:?}",
            text(&reply[..reply.len().min(200)])
        );
    }

    // The old connection of the redis client still works.
    let pong: String = redis::cmd("PING").query(&mut client).unwrap();
    assert_eq!(pong, "PONG");
    drop(client);

    connection_flood(&server);

    // A fresh client is served once the flood is gone.
    let mut fresh = server.redis();
    let _: () = redis::cmd("SET").arg("after-flood").arg("1").query(&mut fresh).unwrap();
    let value: i64 = redis::cmd("GET").arg("after-flood").query(&mut fresh).unwrap();
    assert_eq!(value, 1);

    stop.store(true, Ordering::Release);
    let behaved = good.join().expect("the well-behaved client panicked");
    let behaved = behaved.unwrap_or_else(|error| {
        panic!("the well-behaved client failed: {error}\nserver log:\n{}", server.log_tail())
    });
    let counter: i64 = redis::cmd("GET").arg("good:counter").query(&mut fresh).unwrap();
    assert_eq!(counter, behaved.increments);
    assert!(behaved.operations > 0);
    println!(
        "the well-behaved client made {} operations, all answered correctly, throughout",
        behaved.operations
    );
    drop(fresh);
    let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
    assert!(!log.contains("panicked"), "the server panicked:\n{log}");
    server.stop();
}

/// 10 000 connection attempts while one client is connected: the first ones up to
/// `max_connections` are served, every later one gets "max number of clients reached" and
/// is closed; afterwards the server is back to one connection.
fn connection_flood(server: &Server) {
    let addr = server.resp_addr();
    let connected = || server.status().server.connected_clients;
    common::wait_until(Duration::from_secs(30), "the earlier connections to close", || {
        connected() == 1
    });
    let rejected_before = server.status().server.rejected_connections;
    let started = Instant::now();
    let threads = 4;
    let per_thread = CONNECTION_ATTEMPTS / threads;
    let attempts: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                let mut streams = Vec::with_capacity(per_thread);
                let mut failed = Vec::new();
                for _ in 0..per_thread {
                    match TcpStream::connect_timeout(&addr, Duration::from_millis(250)) {
                        Ok(stream) => streams.push(stream),
                        Err(error) => failed.push(error.to_string()),
                    }
                }
                (streams, failed)
            })
        })
        .collect();
    let mut streams = Vec::new();
    let mut failed = Vec::new();
    for attempt in attempts {
        let (mut s, mut f) = attempt.join().unwrap();
        streams.append(&mut s);
        failed.append(&mut f);
    }
    let connect_time = started.elapsed();
    // Refused connections get their message at once; served ones hear nothing until they
    // speak. Sort them out until exactly the free slots are left silent.
    let served_expected = MAX_CONNECTIONS - 1;
    let refusal: &[u8] = b"-ERR max number of clients reached\r\n";
    let mut silent: Vec<TcpStream> = streams;
    let mut rejected = 0usize;
    for stream in &silent {
        stream.set_nonblocking(true).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut still = Vec::with_capacity(silent.len());
        for mut stream in silent {
            let mut buffer = [0u8; 64];
            match stream.read(&mut buffer) {
                Ok(n) if n > 0 => {
                    assert_eq!(text(&buffer[..n]), text(refusal), "a refused connection's reply");
                    rejected += 1;
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => still.push(stream),
                Ok(_) => panic!("a connection was closed without the max-clients message"),
                Err(error) => panic!("a flooded connection failed: {error}"),
            }
        }
        silent = still;
        if silent.len() <= served_expected || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        silent.len(),
        served_expected,
        "served connections (rejected {rejected}, failed to connect {})",
        failed.len()
    );
    // Every served one is really served, while the server is full.
    for stream in &mut silent {
        stream.set_nonblocking(false).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.write_all(b"PING\r\n").unwrap();
        let mut pong = [0u8; 7];
        stream.read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"+PONG\r\n");
    }
    let status = server.status().server;
    assert_eq!(status.connected_clients as usize, MAX_CONNECTIONS);
    assert!(status.rejected_connections - rejected_before >= rejected as u64);
    assert!(
        failed.len() < CONNECTION_ATTEMPTS / 10,
        "{} of {CONNECTION_ATTEMPTS} connection attempts failed: {:?}",
        failed.len(),
        failed.first()
    );
    println!(
        "{CONNECTION_ATTEMPTS} connection attempts in {connect_time:.1?}: {} served, {rejected} refused with the max-clients error, {} failed to connect",
        silent.len(),
        failed.len()
    );
    drop(silent);
    common::wait_until(Duration::from_secs(30), "the flood's connections to close", || {
        connected() == 1
    });
}
