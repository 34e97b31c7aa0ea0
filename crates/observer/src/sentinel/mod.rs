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
//! What a client can hold: one of 256 connections; before it has authenticated, 10 s and
//! requests of 4 KiB; after, 10 minutes idle and requests of 64 KiB; 64 subscriptions.

mod replies;
mod session;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use resp::{Connection, Limits};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::config::ObserverConfig;
use crate::decide::Shared;
use session::{Session, Step};

const CONNECTIONS_MAX: usize = 256;
/// An authenticated connection idle this long is closed.
const IDLE: Duration = Duration::from_secs(600);
/// A connection that has not authenticated this long after its last request is closed.
const AUTH_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn serve(listener: TcpListener, config: ObserverConfig, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    let config = Arc::new(config);
    let ids = Arc::new(AtomicU64::new(1));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else { continue };
        let (config, shared) = (config.clone(), shared.clone());
        let id = ids.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            connection(stream, id, &config, &shared).await;
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

async fn connection(stream: TcpStream, id: u64, config: &ObserverConfig, shared: &Shared) {
    let _ = stream.set_nodelay(true);
    let mut session = Session::new(id, config.observer.requirepass.as_deref());
    serve_session(stream, &mut session, config, shared).await;
    let (library, version) = session.library();
    tracing::debug!(client = id, ?library, ?version, "Sentinel client disconnected");
}

async fn serve_session(
    stream: TcpStream,
    session: &mut Session,
    config: &ObserverConfig,
    shared: &Shared,
) {
    let mut conn = Connection::new(stream, limits(session.authenticated()));
    let mut switches = shared.switches.subscribe();
    let knowledge = replies::Observed { config, shared };
    loop {
        let timeout = if session.authenticated() { IDLE } else { AUTH_TIMEOUT };
        let request = tokio::select! {
            request = tokio::time::timeout(timeout, conn.read_request()) => request,
            switch = switches.recv(), if session.subscribed() => {
                let Ok(switch) = switch else { continue };
                let Some(message) = session.switch_message(&switch) else { continue };
                if conn.write_reply(&message, session.protocol()).await.is_err() {
                    return;
                }
                continue;
            }
        };
        let request = match request {
            Ok(Ok(Some(request))) => request,
            Ok(Err(resp::ConnectionError::Protocol(error))) => {
                let _ = conn.write_reply(&error.to_frame(), session.protocol()).await;
                return;
            }
            _ => return,
        };
        let was_authenticated = session.authenticated();
        match session.handle(request.args(), &knowledge) {
            Step::Reply(frames) => {
                for frame in &frames {
                    conn.buffer_reply(frame, session.protocol());
                }
                if conn.flush().await.is_err() {
                    return;
                }
            }
            Step::ReplyAndClose(frame) => {
                let _ = conn.write_reply(&frame, session.protocol()).await;
                return;
            }
            Step::Close => return,
        }
        if session.authenticated() != was_authenticated {
            conn.set_limits(limits(session.authenticated()));
        }
    }
}
