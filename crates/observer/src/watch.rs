//! A watcher per member: a connection to its redo listener, kept open, a ping every tick
//! (carrying what `decide` wants that member told), and the answer recorded. A connection that
//! fails is made again at the next tick; a refused connection (nothing listens: the process is
//! gone) is recorded as such, for the fast path of a failover.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use proto::Message;
use transport::conn::{Conn, ConnError};

use crate::config::ObserverConfig;
use roles::fast_start::Outcome;

use crate::decide::Shared;

/// Largest frame the observer reads.
const PAYLOAD_MAX: usize = 1 << 20;
/// How long a ping that asks for a failover may take to be answered (the target applies what
/// it received and opens as the primary).
const FAILOVER_WAIT: Duration = Duration::from_secs(90);

/// Starts a watcher per member; over mutual TLS if `tls` is given.
pub fn start(
    config: &ObserverConfig,
    shared: Arc<Shared>,
    tls: Option<Arc<tls::RedoTls>>,
) -> Vec<JoinHandle<()>> {
    config
        .replication
        .members
        .iter()
        .map(|member| {
            let (name, address) = (member.name.clone(), member.redo.clone());
            let (shared, interval, threshold, tls) = (
                shared.clone(),
                config.interval(),
                config.replication.fast_start_failover.threshold,
                tls.clone(),
            );
            std::thread::Builder::new()
                .name(format!("observe-{name}"))
                .spawn(move || watch(&name, &address, interval, threshold, tls.as_deref(), &shared))
                .expect("a thread")
        })
        .collect()
}

fn watch(
    name: &str,
    address: &str,
    interval: Duration,
    threshold: Duration,
    tls: Option<&tls::RedoTls>,
    shared: &Shared,
) {
    let mut conn: Option<Conn> = None;
    // The member's last refusal and when it was logged: said when it starts or changes and
    // once a minute while it lasts (the watcher tries again every 20 ms).
    let mut refusal_logged: Option<(String, Instant)> = None;
    let answer_wait = (threshold / 2).max(Duration::from_millis(100));
    while !shared.stopped() {
        let tick = Instant::now();
        let mut failover_sent = false;
        if conn.is_none() {
            let connect_wait = answer_wait.min(Duration::from_secs(1));
            match Conn::connect(address, connect_wait, None, PAYLOAD_MAX)
                .and_then(|conn| conn.secure(tls, name, connect_wait))
            {
                Ok(connected) => conn = Some(connected),
                Err(error) => {
                    let refused = matches!(&error, ConnError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused);
                    shared.note(name, Outcome::Unreachable { refused, error: error.to_string() });
                }
            }
        }
        if let Some(open) = conn.as_mut() {
            let ping = shared.ping_for(name);
            failover_sent = ping.failover;
            let ping_failover = ping.failover;
            let wait = if ping.failover { FAILOVER_WAIT } else { answer_wait };
            let answered = open
                .send(&Message::ObserverPing(ping), answer_wait)
                .map_err(|error| error.to_string())
                .and_then(|()| match open.recv(Some(wait)) {
                    Ok(Message::ObserverPong(pong)) => Ok(pong),
                    Ok(Message::Error(error)) => Err(format!("refused: {}", error.message)),
                    Ok(other) => Err(format!("answered {:?}", other.kind())),
                    Err(error) => Err(error.to_string()),
                });
            match answered {
                Ok(pong) => shared.note(
                    name,
                    Outcome::Answered { pong: Box::new(pong), to_failover: ping_failover },
                ),
                Err(error) => {
                    if error.starts_with("refused: ")
                        && refusal_logged.as_ref().is_none_or(|(said, when)| {
                            *said != error || when.elapsed() >= Duration::from_secs(60)
                        })
                    {
                        tracing::error!(member = name, %error, "the member refuses this observer's pings: fast-start failover is not armed with it (logged once a minute while it lasts)");
                        refusal_logged = Some((error.clone(), Instant::now()));
                    }
                    shared.note(name, Outcome::Unreachable { refused: false, error });
                    conn = None;
                }
            }
        }
        // After a failure, try again soon: a refused connection twice in a row is the fast path
        // of a failover. After a failover's answer, soon too: the new primary waits for this
        // observer's lease.
        let quickly = conn.is_none() || failover_sent;
        let next = if quickly { interval.min(Duration::from_millis(20)) } else { interval };
        let spent = tick.elapsed();
        if spent < next {
            std::thread::sleep(next - spent);
        }
    }
}
