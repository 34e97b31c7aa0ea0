//! Redo transport under mutual TLS, attacked, on the real binary.
//!
//! - Strangers and impostors on a standby's redo port: a plaintext hello of the right database
//!   followed by forged redo (what anyone who read `/status` could send before TLS), a
//!   certificate from another CA claiming to be the primary, a certificate from the right CA
//!   for a name that is not a member, the same certificate claiming the primary's name, and a
//!   peer that finishes its TLS handshake and says nothing. Each fails, the standby's logs,
//!   archive and data stay as they were, and the primary stays synchronized and serving.
//! - Idle connections flooding a standby's redo port while its primary restarts: the primary
//!   synchronizes again anyway.
//! - A new standby that no primary has reached yet adopts no database id from a stranger.
//! - A certificate that is expired, for another name, or from a CA the configuration does not
//!   trust is refused, and the error says which.

mod common;
mod replication_support;
mod roles_support;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Server, Watchdog};
use proto::{Channel, ErrorCode, Hello, Message};
use replication_support::{Pair, PairConfig, destination};
use roles_support::{Cluster, ClusterConfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tls::certs::{TestCa, Validity};
use transport::Phase;
use transport::conn::{Conn, ConnError};

fn hello(database_id: u64, member: &str) -> Hello {
    Hello {
        version: proto::PROTOCOL_VERSION,
        version_min: proto::PROTOCOL_VERSION_MIN,
        database_id,
        incarnation: 1,
        thread: 1,
        channel: Channel::Control,
        destination: "west".to_string(),
        block_size: 4096,
        log_file_size: 2 << 20,
        groups: 3,
        primary_time_us: 0,
        member: member.to_string(),
        history: Vec::new(),
        relay_of: String::new(),
    }
}

/// Forged redo at the place a standby expects its next write.
fn forged_write(seq: u64, offset: u64) -> Message {
    Message::Write(proto::Write {
        write_id: 1,
        seq,
        offset,
        kind: proto::WriteKind::Units,
        ack: proto::AckWanted::Durable,
        primary_time_us: 0,
        last_scn: u64::MAX / 2,
        primary_durable_scn: u64::MAX / 2,
        bytes: vec![0xa5; 4096],
        zero_tail: 0,
    })
}

/// Sends `bytes` in plain TCP and reads until the listener closes; what came back.
fn plaintext_attack(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut stream = common::raw(addr);
    let _ = stream.write_all(bytes);
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return received,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => return received,
            Err(error) => panic!("the listener kept a plaintext peer's connection: {error}"),
        }
    }
}

/// A TLS identity made by hand, so that an attacker can present a certificate the
/// configuration's CA never signed (which `Material::load` would refuse to load).
fn identity(ca_pem: &str, cert_pem: &str, key_pem: &str, name: &str) -> tls::RedoTls {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(certificate.unwrap()).unwrap();
    }
    let material = tls::Material {
        roots: Arc::new(roots),
        chain: vec![CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap()],
        key: PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap(),
        name: name.to_string(),
        validity_warning: None,
    };
    tls::RedoTls::new(&material).unwrap()
}

/// Connects over TLS to the member `peer` at `addr` as `me`, sends `first`, and returns the
/// answer (or why there was none).
fn tls_attack(
    addr: SocketAddr,
    me: &tls::RedoTls,
    peer: &str,
    first: &Message,
) -> Result<Message, ConnError> {
    let mut conn = Conn::connect(&addr.to_string(), Duration::from_secs(5), None, 1 << 20)?
        .secure(Some(me), peer, Duration::from_secs(5))?;
    conn.send(first, Duration::from_secs(5))?;
    conn.recv(Some(Duration::from_secs(10)))
}

fn refused_with(answer: Result<Message, ConnError>, code: ErrorCode, says: &str, what: &str) {
    match answer {
        Ok(Message::Error(error)) => {
            assert_eq!(error.code, code, "{what}: {error:?}");
            assert!(error.message.contains(says), "{what}: {error:?}, not '{says}'");
        }
        other => panic!("{what}: expected an error naming why, got {other:?}"),
    }
}

#[test]
fn strangers_and_impostors_on_a_standby_redo_port_change_nothing_under_tls() {
    let _watchdog = Watchdog::new(Duration::from_secs(150), "the redo impostors test");
    let started = Instant::now();
    let mut cluster = Cluster::start(ClusterConfig {
        tls: true,
        admin_token: Some("a-token-for-the-admin-api"),
        ..ClusterConfig::pair()
    });
    let mut east = cluster.server("east").redis();
    for index in 0..100 {
        redis::cmd("SET").arg(format!("before:{index}")).arg(index).query::<()>(&mut east).unwrap();
    }
    cluster.wait_applied("west", "east", Duration::from_secs(30));
    let west_dir = cluster.data_dir("west");
    let west_status = cluster.server("west").status();
    let database_id = west_status.database.redo.identity.database_id.0;
    let position = west_status.replication.standby.as_ref().unwrap().received;
    let files_before = common::member_files(&west_dir);
    let log_start = replication_support::file_len(&cluster.log_path("west"));
    let west: SocketAddr = format!("127.0.0.1:{}", cluster.ports["west"].redo).parse().unwrap();
    let certs = cluster.certs_dir();
    let ca_pem = std::fs::read_to_string(certs.join("ca.pem")).unwrap();

    // (a) The injection of the issue: a plaintext hello of the right database, then forged
    // redo where the standby expects its next write. The listener wants a TLS handshake.
    let mut bytes = Message::Hello(hello(database_id, "east")).to_frame();
    bytes.extend_from_slice(&forged_write(position.seq.0, position.offset).to_frame());
    let answer = plaintext_attack(west, &bytes);
    assert!(
        proto::Decoder::default().decode(&answer).is_err() || answer.is_empty(),
        "(a) a plaintext peer got a redo transport answer: {answer:?}"
    );

    // (b) A certificate from another CA, claiming to be the primary.
    let rogue_ca = TestCa::named("rogue CA").unwrap();
    let rogue = rogue_ca.issue(&["east".to_string()], Validity::Long).unwrap();
    let rogue = identity(&ca_pem, &rogue.cert_pem, &rogue.key_pem, "east");
    let answer = tls_attack(west, &rogue, "west", &Message::Hello(hello(database_id, "east")));
    assert!(
        matches!(&answer, Err(ConnError::Tls(reason)) if reason.contains("refused this process's certificate")),
        "(b) a certificate from another CA: {answer:?}"
    );

    // (c) A certificate from the configuration's CA for a name that is no member: refused as
    // itself, and when it claims the primary's name.
    let ca_key = std::fs::read_to_string(certs.join("ca-key.pem")).unwrap();
    let intruder = TestCa::from_key_pem(&ca_key)
        .unwrap()
        .issue(&["intruder".to_string()], Validity::Long)
        .unwrap();
    let intruder = identity(&ca_pem, &intruder.cert_pem, &intruder.key_pem, "intruder");
    refused_with(
        tls_attack(west, &intruder, "west", &Message::Hello(hello(database_id, "intruder"))),
        ErrorCode::Unauthenticated,
        "'intruder' is not a member",
        "(c) a non-member",
    );
    refused_with(
        tls_attack(west, &intruder, "west", &Message::Hello(hello(database_id, "east"))),
        ErrorCode::Unauthenticated,
        "is not for 'east'",
        "(c) a non-member claiming the primary's name",
    );
    // (d) A peer that finishes its handshake and says nothing is closed within the handshake
    // timeout (5 s).
    let idle_started = Instant::now();
    let mut conn = Conn::connect(&west.to_string(), Duration::from_secs(5), None, 1 << 20)
        .and_then(|conn| conn.secure(Some(&intruder), "west", Duration::from_secs(5)))
        .unwrap();
    let closed = conn.recv(Some(Duration::from_secs(20)));
    assert!(
        matches!(closed, Err(ConnError::Closed | ConnError::Io(_) | ConnError::Tls(_))),
        "(d) {closed:?}"
    );
    assert!(
        idle_started.elapsed() < Duration::from_secs(9),
        "(d) held {:.1?}",
        idle_started.elapsed()
    );

    // The standby said why each time, and nothing of its redo, archive or position moved.
    let said = replication_support::log_since(&cluster.log_path("west"), log_start);
    for expected in [
        "TLS handshake failed",
        "is not signed by the CA",
        "'intruder' is not a member",
        "is not for 'east'",
    ] {
        assert!(said.contains(expected), "the standby did not log '{expected}':\n{said}");
    }
    let west_status = cluster.server("west").status();
    assert_eq!(west_status.replication.standby.as_ref().unwrap().received, position);
    assert_eq!(west_status.database.redo.identity.database_id.0, database_id);
    common::assert_unchanged(&files_before, &common::member_files(&west_dir));

    // The primary was never disturbed: synchronized, serving, and its redo reaches west.
    let status = cluster.server("east").status();
    let to_west = &status.replication.destinations[0];
    assert_eq!(to_west.phase, Phase::Synchronized, "{to_west:?}");
    assert_eq!(to_west.failures, 0, "{to_west:?}");
    for index in 0..100 {
        redis::cmd("SET").arg(format!("after:{index}")).arg(index).query::<()>(&mut east).unwrap();
    }
    cluster.wait_applied("west", "east", Duration::from_secs(30));
    let mut west_client = cluster.server("west").redis();
    let value: i64 = redis::cmd("GET").arg("after:99").query(&mut west_client).unwrap();
    assert_eq!(value, 99);

    // (e) Idle connections flood the standby's redo port while the primary restarts (kill -9):
    // the primary synchronizes again, and takes writes.
    drop(east);
    cluster.kill("east");
    let flooding = Arc::new(AtomicBool::new(true));
    let flood = {
        let flooding = flooding.clone();
        std::thread::spawn(move || {
            let mut open = std::collections::VecDeque::new();
            let mut opened = 0u64;
            while flooding.load(Ordering::Acquire) {
                if let Ok(stream) =
                    std::net::TcpStream::connect_timeout(&west, Duration::from_secs(1))
                {
                    open.push_back(stream);
                    opened += 1;
                }
                if open.len() > 40 {
                    open.pop_front();
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            opened
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let restarted = Instant::now();
    cluster.start_member("east");
    let synchronized = common::poll_until(Duration::from_secs(40), || {
        cluster.server("east").status().replication.destinations[0].phase == Phase::Synchronized
    });
    let mut east = cluster.server("east").redis();
    let written = redis::cmd("SET").arg("after:restart").arg(1).query::<()>(&mut east);
    flooding.store(false, Ordering::Release);
    let opened = flood.join().unwrap();
    assert!(
        synchronized,
        "the restarted primary never synchronized under the flood\n{}",
        cluster.logs()
    );
    written.unwrap();
    println!(
        "stranger and impostors refused; the primary resynchronized {:.1?} after its restart under a flood of {opened} idle connections; in {:.1?}",
        restarted.elapsed(),
        started.elapsed()
    );
}

#[test]
fn a_new_standby_adopts_no_database_id_from_a_stranger() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "the new standby test");
    let certs = tempfile::tempdir().unwrap();
    replication_support::make_certs(certs.path());
    let config = PairConfig { tls: Some(certs.path().to_path_buf()), ..PairConfig::default() };
    let root = tempfile::tempdir().unwrap();
    let standby_config = root.path().join("standby.toml");
    std::fs::write(&standby_config, config.standby_text("127.0.0.1:0")).unwrap();
    let standby_dir = root.path().join("standby");
    let log = root.path().join("standby.log");
    let standby = Server::start(&standby_dir, Some(&standby_config), &log);
    let redo = replication_support::redo_listener(&standby);
    let made_up = 0x0bad_cafe_dead_beef;
    plaintext_attack(redo, &Message::Hello(hello(made_up, "primary")).to_frame());
    let ca_pem = std::fs::read_to_string(certs.path().join("ca.pem")).unwrap();
    let rogue =
        TestCa::named("rogue CA").unwrap().issue(&["primary".into()], Validity::Long).unwrap();
    let rogue = identity(&ca_pem, &rogue.cert_pem, &rogue.key_pem, "primary");
    let answer = tls_attack(redo, &rogue, "standby1", &Message::Hello(hello(made_up, "primary")));
    assert!(answer.is_err(), "a certificate from another CA: {answer:?}");
    let status = standby.status();
    assert_ne!(
        status.database.redo.identity.database_id.0, made_up,
        "the new standby adopted a stranger's database id"
    );
    // (The peer has its alert before the standby's log has the line.)
    let mut said = String::new();
    let logged = common::poll_until(Duration::from_secs(10), || {
        said = common::tail(&log, 40);
        said.contains("TLS handshake failed")
    });
    assert!(logged, "{said}");
    drop(standby);
}

/// Writes `[tls]` for `name` with the files in `dir` (`name.pem`, `name-key.pem`, `ca.pem`).
fn tls_section(dir: &Path, name: &str) -> String {
    format!(
        "[tls]\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\nname = \"{name}\"\n",
        dir.join("ca.pem").display(),
        dir.join(format!("{name}.pem")).display(),
        dir.join(format!("{name}-key.pem")).display()
    )
}

fn write_issued(dir: &Path, name: &str, issued: &tls::certs::Issued) {
    std::fs::write(dir.join(format!("{name}.pem")), &issued.cert_pem).unwrap();
    std::fs::write(dir.join(format!("{name}-key.pem")), &issued.key_pem).unwrap();
}

/// Waits until the primary's destination reports an error containing every one of `says`.
fn wait_refused(pair: &Pair, says: &[&str], what: &str) -> String {
    let mut last = String::new();
    let found = common::poll_until(Duration::from_secs(30), || {
        last = destination(&pair.primary().status()).last_error.clone().unwrap_or_default();
        says.iter().all(|part| last.contains(part))
    });
    assert!(found, "{what}: the primary's last error is '{last}', not {says:?}\n{}", pair.logs());
    last
}

#[test]
fn a_wrong_expired_or_untrusted_certificate_is_refused_naming_which() {
    let _watchdog = Watchdog::new(Duration::from_secs(150), "the wrong certificates test");
    let certs = tempfile::tempdir().unwrap();
    replication_support::make_certs(certs.path());
    let config = PairConfig { tls: Some(certs.path().to_path_buf()), ..PairConfig::default() };
    let mut pair = Pair::start(config.clone());
    pair.wait_for_phase(Phase::Synchronized, Duration::from_secs(30));
    let mut primary = pair.primary().redis();
    for index in 0..50 {
        redis::cmd("SET").arg(format!("key:{index}")).arg(index).query::<()>(&mut primary).unwrap();
    }
    drop(primary);
    block_until_applied(&pair);
    pair.kill_primary();
    let files_before = common::member_files(&pair.standby_dir);
    let ca_key = std::fs::read_to_string(certs.path().join("ca-key.pem")).unwrap();
    let redo = pair.redo_addr.to_string();
    let real_primary_text = std::fs::read_to_string(&pair.primary_config).unwrap();

    // An expired certificate (from the right CA): the primary starts (and says so), the
    // standby refuses it, and both name the expiry.
    let expired_dir = tempfile::tempdir().unwrap();
    std::fs::copy(certs.path().join("ca.pem"), expired_dir.path().join("ca.pem")).unwrap();
    let expired = TestCa::from_key_pem(&ca_key)
        .unwrap()
        .issue(&["primary".into()], Validity::Expired)
        .unwrap();
    write_issued(expired_dir.path(), "primary", &expired);
    let text = PairConfig { tls: Some(expired_dir.path().to_path_buf()), ..config.clone() }
        .primary_text(&redo);
    std::fs::write(&pair.primary_config, text).unwrap();
    let log_start = replication_support::file_len(&pair.standby_log());
    pair.start_primary();
    let error = wait_refused(&pair, &["refused this process's certificate", "expired"], "expired");
    println!("expired: {error}");
    let mut said = String::new();
    let logged = common::poll_until(Duration::from_secs(10), || {
        said = replication_support::log_since(&pair.standby_log(), log_start);
        said.contains("TLS handshake failed") && said.contains("has expired")
    });
    assert!(logged, "{said}");
    let primary_said = common::tail(&pair.primary_log(), 200);
    assert!(primary_said.contains("will be refused by its peers"), "{primary_said}");
    pair.kill_primary();

    // A primary whose CA is not the configuration's: it refuses the standby's certificate (and
    // the standby would refuse its own), naming the CA.
    let rogue_dir = tempfile::tempdir().unwrap();
    let rogue_ca = TestCa::named("rogue CA").unwrap();
    std::fs::write(rogue_dir.path().join("ca.pem"), rogue_ca.cert_pem()).unwrap();
    write_issued(
        rogue_dir.path(),
        "primary",
        &rogue_ca.issue(&["primary".into()], Validity::Long).unwrap(),
    );
    let text = PairConfig { tls: Some(rogue_dir.path().to_path_buf()), ..config.clone() }
        .primary_text(&redo);
    std::fs::write(&pair.primary_config, text).unwrap();
    pair.start_primary();
    let error = wait_refused(
        &pair,
        &["standby1", "is not signed by the CA this configuration trusts"],
        "untrusted",
    );
    println!("untrusted: {error}");
    pair.kill_primary();
    common::assert_unchanged(&files_before, &common::member_files(&pair.standby_dir));

    // A standby whose certificate is for another name than the primary's destination says.
    std::fs::write(&pair.primary_config, &real_primary_text).unwrap();
    pair.kill_standby();
    let other =
        TestCa::from_key_pem(&ca_key).unwrap().issue(&["standby2".into()], Validity::Long).unwrap();
    write_issued(certs.path(), "standby2", &other);
    let real_standby_text = std::fs::read_to_string(&pair.standby_config).unwrap();
    let text = PairConfig { tls: None, ..config.clone() }.standby_text(&redo)
        + &tls_section(certs.path(), "standby2");
    std::fs::write(&pair.standby_config, text).unwrap();
    pair.start_standby();
    pair.start_primary();
    let error =
        wait_refused(&pair, &["standby1", "is not a certificate for 'standby1'"], "wrong name");
    println!("wrong name: {error}");
    pair.kill_primary();
    pair.kill_standby();

    // With the right certificates again, the pair synchronizes and nothing was lost.
    std::fs::write(&pair.standby_config, real_standby_text).unwrap();
    pair.start_standby();
    pair.start_primary();
    pair.wait_for_phase(Phase::Synchronized, Duration::from_secs(30));
    let mut primary = pair.primary().redis();
    let value: i64 = redis::cmd("GET").arg("key:49").query(&mut primary).unwrap();
    assert_eq!(value, 49);
    redis::cmd("SET").arg("after").arg(1).query::<()>(&mut primary).unwrap();
    pair.stop();
}

fn block_until_applied(pair: &Pair) {
    replication_support::block_on(workload::demo::wait_applied_all_received(
        pair.standby().admin_addr(),
        Duration::from_secs(30),
    ))
    .unwrap();
}
