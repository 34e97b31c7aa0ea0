//! The Redis Sentinel front: the part of the Sentinel protocol that client libraries use to
//! find the primary (redis-py's `Sentinel`, ioredis, Jedis, go-redis), with the
//! configuration's `name` as the master name.
//!
//! `HELLO 2|3`, `AUTH`, `PING`, `ROLE`, `INFO`, `SENTINEL get-master-addr-by-name | masters |
//! master | replicas | slaves | sentinels | myid`, `SUBSCRIBE`/`PSUBSCRIBE` (a `+switch-master
//! <name> <old ip> <old port> <new ip> <new port>` message after every failover), `CLIENT
//! SETNAME | GETNAME | SETINFO | ID`, `QUIT` (`session`; what they say about the configuration:
//! `replies`). Anything else gets `-ERR unknown command`. With `[observer] requirepass`, a
//! client authenticates first (`AUTH password` or `HELLO 3 AUTH default password`), as with a
//! Redis Sentinel's `requirepass`.
//!
//! What a client can hold: one of 256 connections; before it has authenticated, 10 s from
//! when it connected, requests of 4 KiB, and one of 64 places (a newcomer ends the oldest
//! connection that has not authenticated rather than being refused, so idle strangers cannot
//! keep clients out); after, 10 minutes idle (from its last request or the last bytes it
//! took) and requests of 64 KiB; 64 subscriptions. One
//! more than 256 is told `-ERR max number of clients reached`. The deadlines hold while a
//! client does not read its replies too: they are written out by the read that runs under
//! the deadline (`resp::Connection::read_request`).

mod replies;
mod session;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use resp::waiting::Waiting;
use resp::{Connection, Limits};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};

use crate::config::ObserverConfig;
use crate::decide::Shared;
use session::{Session, Step};

const CONNECTIONS_MAX: usize = 256;
/// An authenticated connection idle this long is closed.
const IDLE: Duration = Duration::from_secs(600);
/// A connection that has not authenticated this long after it connected is closed.
const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections that have not authenticated at once (with `requirepass`).
const UNAUTHENTICATED_MAX: usize = 64;

pub async fn serve(listener: TcpListener, config: ObserverConfig, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    let config = Arc::new(config);
    let ids = Arc::new(AtomicU64::new(1));
    let waiting = Arc::new(Waiting::default());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            resp::turn_away(stream);
            continue;
        };
        let (config, shared, waiting) = (config.clone(), shared.clone(), waiting.clone());
        let id = ids.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            connection(stream, id, &config, &shared, &waiting).await;
            waiting.leave(id);
            drop(permit);
        });
    }
}

fn limits(authenticated: bool) -> Limits {
    if authenticated {
        Limits { bulk_bytes_max: 16 << 10, request_bytes_max: 64 << 10, ..Limits::default() }
    } else {
        Limits {
            bulk_bytes_max: 1 << 10,
            arguments_max: 16,
            inline_bytes_max: 4 << 10,
            request_bytes_max: 4 << 10,
            ..Limits::default()
        }
    }
}

async fn connection(
    stream: TcpStream,
    id: u64,
    config: &ObserverConfig,
    shared: &Shared,
    waiting: &Waiting,
) {
    let _ = stream.set_nodelay(true);
    let mut session = Session::new(id, config.observer.requirepass.as_deref());
    let evicted = (!session.authenticated()).then(|| waiting.enter(id, UNAUTHENTICATED_MAX).0);
    serve_session(stream, &mut session, config, shared, waiting, id, evicted).await;
    let (library, version) = session.library();
    tracing::debug!(client = id, ?library, ?version, "Sentinel client disconnected");
}

async fn serve_session(
    stream: TcpStream,
    session: &mut Session,
    config: &ObserverConfig,
    shared: &Shared,
    waiting: &Waiting,
    id: u64,
    evicted: Option<Arc<Notify>>,
) {
    let mut conn = Connection::new(stream, limits(session.authenticated()));
    let evicted = evicted.unwrap_or_default();
    let mut evicted = std::pin::pin!(evicted.notified());
    let mut switches = shared.switches.subscribe();
    let knowledge = replies::Observed { config, shared };
    let auth_deadline = tokio::time::Instant::now() + AUTH_TIMEOUT;
    // The idle time runs from the last request, or from when the client last took part of a
    // long reply (a subscriber that is sent a switch message is not idle; one that hears
    // nothing for 10 minutes is closed, as before: the front has no TCP keepalive, and a
    // subscriber whose host vanished would otherwise hold its slot for good).
    let mut last_request = tokio::time::Instant::now();
    let active = |conn: &Connection<TcpStream>, last_request: tokio::time::Instant| {
        conn.last_taken().map_or(last_request, |taken| taken.max(last_request))
    };
    loop {
        let deadline = if session.authenticated() {
            active(&conn, last_request) + IDLE
        } else {
            auth_deadline
        };
        let request = tokio::select! {
            request = tokio::time::timeout_at(deadline, conn.read_request()) => request,
            // Only until it authenticates: a place taken from it meanwhile freed the place;
            // the client it has become stays.
            () = &mut evicted, if !session.authenticated() => {
                tracing::debug!(client = id, "Sentinel client ended before it authenticated, to make room for a newer one");
                return;
            }
            switch = switches.recv(), if session.subscribed() => {
                let Ok(switch) = switch else { continue };
                let Some(message) = session.switch_message(&switch) else { continue };
                // Written out by the next read, under its deadline; a subscriber sent one is
                // not idle.
                conn.buffer_reply(&message, session.protocol());
                last_request = tokio::time::Instant::now();
                continue;
            }
        };
        let request = match request {
            Ok(Ok(Some(request))) => request,
            Ok(Err(resp::ConnectionError::Protocol(error))) => {
                conn.close(Some(&error.to_frame()), session.protocol()).await;
                return;
            }
            // The client took some of its replies meanwhile: it is reading, not idle.
            Err(_elapsed)
                if session.authenticated()
                    && active(&conn, last_request) + IDLE > tokio::time::Instant::now() =>
            {
                continue;
            }
            _ => return,
        };
        last_request = tokio::time::Instant::now();
        let was_authenticated = session.authenticated();
        match session.handle(request.args(), &knowledge) {
            // Written out by the next read, under its deadline (`Connection::read_request`): a
            // client that sends and never reads is not waited for beyond it.
            Step::Reply(frames) => {
                for frame in &frames {
                    conn.buffer_reply(frame, session.protocol());
                }
            }
            Step::ReplyAndClose(frame) => {
                conn.close(Some(&frame), session.protocol()).await;
                return;
            }
            Step::Close => return,
        }
        if session.authenticated() != was_authenticated {
            conn.set_limits(limits(session.authenticated()));
            waiting.leave(id);
        }
    }
}
