//! A standby's client ports attacked while it follows its primary, on the real binaries: the
//! attacks of the security issue that used to take a standby out of a Maximum Availability
//! configuration (an unauthenticated `SHUTDOWN` on its Redis port, an HTTP POST carrying
//! commands from a web page, a crowd of connections that never authenticate, an admin POST
//! without the token). Each fails, the standby's redo and archive stay as they were, it goes on
//! applying, and the primary stays synchronized and serving.

mod common;
mod roles_support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Watchdog;
use roles_support::{Cluster, ClusterConfig};
use transport::Phase;

const PASSWORD: &str = "the-default-users-password";
const TOKEN: &str = "a-token-for-the-admin-api";

/// A connection authenticated as the `default` user.
fn authenticated(addr: std::net::SocketAddr) -> redis::Connection {
    let client = redis::Client::open(format!("redis://default:{PASSWORD}@{addr}/")).unwrap();
    let connection = client.get_connection_with_timeout(Duration::from_secs(10)).unwrap();
    connection.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    connection
}

#[test]
fn attacks_on_a_standbys_client_ports_leave_the_configuration_synchronized() {
    let _watchdog = Watchdog::new(Duration::from_secs(150), "the standby client ports test");
    let started = Instant::now();
    let cluster = Cluster::start(ClusterConfig {
        tls: true,
        admin_token: Some(TOKEN),
        auth_extra: format!("requirepass = \"{PASSWORD}\"\n"),
        ..ClusterConfig::pair()
    });
    let mut east = authenticated(cluster.resp_addr("east"));
    for index in 0..100 {
        redis::cmd("SET").arg(format!("before:{index}")).arg(index).query::<()>(&mut east).unwrap();
    }
    cluster.wait_applied("west", "east", Duration::from_secs(30));
    let west_pid = cluster.server("west").pid();
    let west_resp = cluster.resp_addr("west");
    let west_admin = cluster.server("west").admin_addr();
    let files_before = common::member_files(&cluster.data_dir("west"));
    let position = cluster.server("west").status().replication.standby.unwrap().received;

    // (a) SHUTDOWN, unauthenticated, on the standby's Redis port: NOAUTH, and nothing stops.
    let mut raw = common::raw(west_resp);
    assert_eq!(
        common::ask(&mut raw, "SHUTDOWN NOSAVE\r\n"),
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(
        common::ask(&mut raw, "*1\r\n$8\r\nSHUTDOWN\r\n"),
        "-NOAUTH Authentication required.\r\n"
    );
    assert!(common::ask(&mut raw, "AUTH default wrong-password\r\n").starts_with("-WRONGPASS"));
    drop(raw);

    // (b) A web page's POST to the Redis port, its body full of commands: closed at once, as
    // Redis does, with none of them run.
    let mut stream = common::raw(west_resp);
    stream
        .write_all(
            b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nContent-Length: 24\r\n\r\nSHUTDOWN\r\nFLUSHALL\r\nQUIT\r\n",
        )
        .unwrap();
    let answer = common::read_to_close(&mut stream);
    assert!(!String::from_utf8_lossy(&answer).contains("+OK"), "{answer:?}");

    // (c) A crowd of connections that never authenticate: the oldest are ended beyond the
    // limit (100), and an authenticated client is served meanwhile.
    let crowd: Vec<TcpStream> = (0..150).map(|_| common::raw(west_resp)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut west = authenticated(west_resp);
    let value: i64 = redis::cmd("GET").arg("before:99").query(&mut west).unwrap();
    assert_eq!(value, 99);
    drop(crowd);

    // (d) A role change without the admin token: refused, the role unchanged.
    let (code, body) = {
        let mut stream = common::raw(west_admin);
        stream
            .write_all(
                b"POST /roles/failover HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .unwrap();
        let text = String::from_utf8_lossy(&common::read_to_close(&mut stream)).into_owned();
        let code = text.split_whitespace().nth(1).and_then(|code| code.parse::<u16>().ok());
        (code, text)
    };
    assert_eq!(code, Some(401), "{body}");

    // The standby is the same process, still a standby, and nothing it held moved.
    assert!(cluster.is_running("west"));
    assert_eq!(cluster.server("west").pid(), west_pid);
    let west_status = cluster.server("west").status();
    assert_eq!(west_status.replication.standby.as_ref().unwrap().received, position);
    let roles = west_status.roles.as_ref().expect("west runs a member");
    assert_eq!((roles.role.as_str(), roles.fenced.is_none()), ("standby", true), "{roles:?}");
    let files_after = common::member_files(&cluster.data_dir("west"));
    common::assert_unchanged(&files_before, &files_after);

    // The primary was never disturbed: synchronized, and its redo reaches the standby.
    let status = cluster.server("east").status();
    let to_west = &status.replication.destinations[0];
    assert_eq!(to_west.phase, Phase::Synchronized, "{to_west:?}");
    assert_eq!(to_west.failures, 0, "{to_west:?}");
    for index in 0..100 {
        redis::cmd("SET").arg(format!("after:{index}")).arg(index).query::<()>(&mut east).unwrap();
    }
    cluster.wait_applied("west", "east", Duration::from_secs(30));
    let value: i64 = redis::cmd("GET").arg("after:99").query(&mut west).unwrap();
    assert_eq!(value, 99);
    println!("every attack on the standby's client ports failed; in {:.1?}", started.elapsed());
}
