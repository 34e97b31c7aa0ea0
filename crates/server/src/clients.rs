//! The Redis-protocol listener: accepts clients (bounded), and serves each connection on its
//! own task: reads commands, hands them to the session and the executor, writes replies.
//!
//! What a client that has not authenticated can hold is bounded (with a password required):
//! `unauthenticated_max` such connections at once (when they are all taken, a newcomer ends the
//! oldest rather than being refused, so idle strangers cannot keep clients out), each for at
//! most `auth_timeout`, each request at most 64 KiB; and every connection's partly received
//! request counts against the shared `request_buffer_total`. A request that looks like HTTP
//! closes the connection at once. Every deadline holds while the server writes as well:
//! replies are buffered and written out by the read that runs under the deadline
//! (`resp::Connection::read_request`), so a client that never reads them is waited for only
//! until `auth_timeout` or `idle_timeout`, and a close waits 2 s at most.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use resp::{Connection, ConnectionError, Frame, Limits, Session};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use transport::log_limit::LogLimit;

use crate::{ServerState, execute, stopped};

/// Lines a stranger can cause at will, limited (`transport::log_limit`).
static HANDSHAKES_LOGGED: LogLimit = LogLimit::new();
static PROTOCOL_ERRORS_LOGGED: LogLimit = LogLimit::new();
static UNAUTHENTICATED_LOGGED: LogLimit = LogLimit::new();

/// The limits of a connection that has not authenticated yet: enough for AUTH and HELLO.
fn unauthenticated_limits(limits: &Limits) -> Limits {
    Limits {
        bulk_bytes_max: 16 << 10,
        arguments_max: 16,
        inline_bytes_max: 16 << 10,
        request_bytes_max: 64 << 10,
        ..limits.clone()
    }
}

/// Accepts clients on `listener`; over TLS if `tls` is given (the `tls.resp_port`).
pub(crate) async fn accept_clients(
    state: Arc<ServerState>,
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let slots = state.client_slots.clone();
    let mut shutdown = state.shutdown.subscribe();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped(&mut shutdown) => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors (EMFILE/ENFILE) or a connection reset before accept:
                // keep serving everyone else.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        state.total_connections.incr();
        let _ = stream.set_nodelay(true);
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                let (state, tls) = (state.clone(), tls.clone());
                tokio::spawn(async move {
                    state.connected.fetch_add(1, Ordering::Relaxed);
                    // Its place among the connections that have not authenticated is taken
                    // now, before a TLS handshake: a stranger's silent handshakes otherwise
                    // held every slot for `auth_timeout`, none of them ever ended to make room.
                    let arrival = Arrival::new(&state);
                    match tls {
                        None => serve_client(&state, stream, peer, arrival).await,
                        Some(acceptor) => {
                            let evicted = arrival.evicted.clone();
                            let handshake = tokio::select! {
                                handshake = tokio::time::timeout(
                                    state.config.server.auth_timeout,
                                    acceptor.accept(stream),
                                ) => Some(handshake),
                                () = evicted.notified() => None,
                            };
                            match handshake {
                                Some(Ok(Ok(stream))) => {
                                    serve_client(&state, stream, peer, arrival).await
                                }
                                Some(Ok(Err(error))) => {
                                    if let Some(left_out) = HANDSHAKES_LOGGED.admit() {
                                        tracing::info!(%peer, %error, left_out, "RESP over TLS: handshake failed")
                                    }
                                }
                                Some(Err(_)) => {
                                    if let Some(left_out) = HANDSHAKES_LOGGED.admit() {
                                        tracing::info!(%peer, left_out, "RESP over TLS: handshake timed out")
                                    }
                                }
                                None => {
                                    if let Some(left_out) = UNAUTHENTICATED_LOGGED.admit() {
                                        tracing::info!(
                                            %peer,
                                            left_out,
                                            "RESP over TLS: ended in its handshake to make room for a newer connection (unauthenticated_max)"
                                        )
                                    }
                                }
                            }
                        }
                    }
                    state.connected.fetch_sub(1, Ordering::Relaxed);
                    drop(permit);
                });
            }
            // On the TLS port a plain-text error would only read as a TLS failure: closed.
            Err(_) if tls.is_some() => state.rejected.incr(),
            Err(_) => {
                state.rejected.incr();
                resp::turn_away(stream);
            }
        }
    }
}

/// A connection's place among those that have not authenticated, until it does or ends.
struct Unauthenticated<'a>(Option<(&'a ServerState, u64)>);

impl<'a> Unauthenticated<'a> {
    /// Takes a place for connection `id`, ending the oldest waiting one if all are taken;
    /// returns the signal that ends this one.
    fn enter(state: &'a ServerState, id: u64) -> (Unauthenticated<'a>, Arc<Notify>) {
        let (evicted, ended) =
            state.unauthenticated.enter(id, state.config.server.unauthenticated_max as usize);
        if ended {
            state.rejected.incr();
        }
        (Unauthenticated(Some((state, id))), evicted)
    }

    fn authenticated(&mut self) {
        if let Some((state, id)) = self.0.take() {
            state.unauthenticated.leave(id);
        }
    }
}

impl Drop for Unauthenticated<'_> {
    fn drop(&mut self) {
        self.authenticated();
    }
}

/// A connection as it is accepted: its id, when it came, and (with a password required) its
/// place among those that have not authenticated, with the signal that ends it.
struct Arrival<'a> {
    id: u64,
    connected: tokio::time::Instant,
    place: Unauthenticated<'a>,
    evicted: Arc<Notify>,
}

impl<'a> Arrival<'a> {
    fn new(state: &'a ServerState) -> Arrival<'a> {
        let id = state.next_client_id.fetch_add(1, Ordering::Relaxed);
        let (place, evicted) = if state.users.required() {
            Unauthenticated::enter(state, id)
        } else {
            (Unauthenticated(None), Arc::new(Notify::new()))
        };
        Arrival { id, connected: tokio::time::Instant::now(), place, evicted }
    }
}

/// Forgets a connection's watched keys when it ends.
struct Unwatch<'a> {
    state: &'a ServerState,
    id: u64,
}

impl Drop for Unwatch<'_> {
    fn drop(&mut self) {
        if let Some(running) = self.state.roles.current() {
            running.db.unwatch(self.id);
        }
    }
}

async fn serve_client<S: AsyncRead + AsyncWrite + Unpin>(
    state: &ServerState,
    stream: S,
    peer: SocketAddr,
    arrival: Arrival<'_>,
) {
    let Arrival { id, connected, place: mut unauthenticated, evicted } = arrival;
    let limits = &state.config.limits;
    let required = state.users.required();
    let mut connection = Connection::new(
        stream,
        if required { unauthenticated_limits(limits) } else { limits.clone() },
    )
    .with_budget(state.request_budget.clone());
    let mut session = if required {
        Session::requiring_auth(id, limits)
    } else {
        // Without a password a client reads and writes, and nothing more: SHUTDOWN, CONFIG and
        // FLUSHALL need the admin permission, which only a password gives (unless
        // `auth.open_permission` says otherwise).
        let mut session = Session::new(id, limits);
        let open = resp::User {
            permission: state.config.auth.open_permission(),
            ..resp::User::default_open()
        };
        session.authenticated(Some(open), None, &state.facts);
        session
    };
    // However the connection ends, its watched keys are forgotten.
    let _unwatch = Unwatch { state, id };
    let idle = state.config.server.idle_timeout;
    let mut shutdown = state.shutdown.subscribe();
    // The timer, the eviction and the shutdown signal are set up once per connection, not per
    // request: re-arming a timer and registering two waiters for every command was a few
    // percent of a durable SET's CPU at 50 clients. Each command only notes when it was done
    // (the idle time runs from there, or from when the client last took part of a long reply,
    // as in Redis); the timer is moved on when it fires early.
    let mut last_request = connected;
    let deadline = |session: &Session, last_request: tokio::time::Instant| match session.user() {
        // Until it authenticates, a client has `auth_timeout` from when it connected.
        None => Some(connected + state.config.server.auth_timeout),
        Some(_) if idle.is_zero() => None,
        Some(_) => Some(last_request + idle),
    };
    let far = connected + Duration::from_secs(86_400 * 365);
    let timer = tokio::time::sleep_until(deadline(&session, last_request).unwrap_or(far));
    let mut timer = std::pin::pin!(timer);
    let mut evicted = std::pin::pin!(evicted.notified());
    let mut stop = std::pin::pin!(stopped(&mut shutdown));
    // Requests read while a blocking pop waited, to run once it is done.
    let mut stashed = std::collections::VecDeque::new();
    loop {
        let read = tokio::select! {
            // The read first: when a request is there, the other three are not polled (a
            // `Notified` and a `watch` poll each, a few hundred instructions of every
            // command). Nothing starves: a client that never stops sending still runs out of
            // its task's budget (tokio's cooperative scheduling makes the read return
            // `Pending`), and then the others are polled.
            biased;
            read = async { match stashed.pop_front() {
                Some(request) => Ok(Some(resp::Command::parse(request))),
                None => connection.read_command().await,
            } } => Ok(read),
            () = &mut timer => {
                let active = connection.last_taken().map_or(last_request, |taken| taken.max(last_request));
                match deadline(&session, active) {
                    Some(due) if due <= tokio::time::Instant::now() => Err(()),
                    due => {
                        timer.as_mut().reset(due.unwrap_or(far));
                        continue;
                    }
                }
            }
            // Only until it authenticates: a place taken from it while its password was being
            // checked freed the place; the client it has become stays.
            () = &mut evicted, if session.user().is_none() => {
                if let Some(left_out) = UNAUTHENTICATED_LOGGED.admit() {
                    tracing::info!(client = id, %peer, left_out, "closing a connection that has not authenticated, to make room for a newer one");
                }
                connection.close(Some(&Frame::error("ERR too many connections that have not authenticated; this one was the oldest")), session.protocol()).await;
                return;
            }
            () = &mut stop => {
                connection.close(Some(&Frame::error("ERR the server is shutting down")), session.protocol()).await;
                return;
            }
        };
        let parsed = match read {
            Err(()) => {
                if session.user().is_none() {
                    if let Some(left_out) = UNAUTHENTICATED_LOGGED.admit() {
                        tracing::info!(client = id, %peer, left_out, "closing a connection that did not authenticate in time");
                    }
                } else {
                    tracing::debug!(client = id, %peer, "closing a connection idle for {idle:?}");
                }
                connection.close(None, session.protocol()).await;
                return;
            }
            Ok(Ok(None)) => return,
            Ok(Ok(Some(parsed))) => parsed,
            Ok(Err(ConnectionError::Protocol(error))) => {
                if let Some(left_out) = PROTOCOL_ERRORS_LOGGED.admit() {
                    tracing::info!(client = id, %peer, %error, left_out, "protocol error; closing the connection");
                }
                connection.close(Some(&error.to_frame()), session.protocol()).await;
                return;
            }
            Ok(Err(error @ ConnectionError::BudgetExhausted { .. })) => {
                tracing::warn!(client = id, %peer, %error, "request buffers full; closing the connection");
                connection.close(Some(&Frame::error(error.to_string())), session.protocol()).await;
                return;
            }
            Ok(Err(error)) => {
                tracing::debug!(client = id, %peer, %error, "connection ended");
                return;
            }
        };
        // HELLO says the role the database holds now (`master`, or `replica` on a standby).
        let facts = match &parsed {
            Ok(resp::Command::Hello { .. }) => state.facts_now(),
            _ => &state.facts,
        };
        let outcome = match session.handle(parsed, facts) {
            resp::Action::Reply(frame) => execute::Outcome::Reply(frame),
            resp::Action::ReplyAndClose(frame) => {
                connection.close(Some(&frame), session.protocol()).await;
                return;
            }
            resp::Action::Close => {
                if let Some(left_out) = PROTOCOL_ERRORS_LOGGED.admit() {
                    tracing::warn!(client = id, %peer, left_out, "possible SECURITY ATTACK: an HTTP request on the Redis port (a web page posting to it?); connection closed");
                }
                connection.close(None, session.protocol()).await;
                return;
            }
            resp::Action::Authenticate { username, password, hello } => {
                let user = state.users.check(&username, &password).await;
                if user.is_none() {
                    tracing::info!(client = id, %peer, user = %String::from_utf8_lossy(&username), "authentication failed");
                }
                let was_anonymous = session.user().is_none();
                let reply = session.authenticated(user, hello, state.facts_now());
                if was_anonymous && session.user().is_some() {
                    unauthenticated.authenticated();
                    connection.set_limits(limits.clone());
                }
                execute::Outcome::Reply(reply)
            }
            resp::Action::Execute(command @ resp::Command::Block { .. }) => {
                // While it waits, the client is read on, as in Redis: one that goes away ends
                // the wait (nothing is popped for a connection that is gone), the replies
                // before the pop go out (the read writes them before it waits), and the
                // requests it sends meanwhile wait for the pop's reply. What they hold is
                // bounded: reading stops at STASH_REQUESTS_MAX requests or STASH_BYTES_MAX.
                let pop = execute::run(state, &mut session, vec![command], false);
                let mut pop = std::pin::pin!(pop);
                let mut stash_bytes = stashed.iter().map(request_bytes).sum::<usize>();
                loop {
                    let room = stashed.len() < STASH_REQUESTS_MAX && stash_bytes < STASH_BYTES_MAX;
                    tokio::select! {
                        outcome = &mut pop => break outcome,
                        read = connection.read_request(), if room => match read {
                            Ok(Some(request)) => {
                                stash_bytes += request_bytes(&request);
                                stashed.push_back(request);
                            }
                            _ => {
                                tracing::debug!(client = id, %peer, "a blocked client went away");
                                return;
                            }
                        },
                    }
                }
            }
            resp::Action::Execute(command) => execute::run_one(state, &mut session, command).await,
            resp::Action::ExecuteTransaction(commands) => {
                execute::run(state, &mut session, commands, true).await
            }
            resp::Action::UnwatchAndReply(frame) => {
                if let Some(running) = state.roles.current() {
                    running.db.unwatch(id);
                }
                execute::Outcome::Reply(frame)
            }
        };
        match outcome {
            // Written out by the next read, under the idle timeout (`Connection::read_request`):
            // a client that sends and never reads is not waited for beyond it.
            execute::Outcome::Reply(frame) => connection.buffer_reply(&frame, session.protocol()),
            execute::Outcome::Shutdown => {
                tracing::info!(client = id, %peer, "SHUTDOWN");
                connection.close(None, session.protocol()).await;
                state.request_shutdown();
                return;
            }
        }
        last_request = tokio::time::Instant::now();
    }
}

/// Requests a client may send while its blocking pop waits before the server stops reading
/// it (and stops noticing that it went away) until the pop ends.
const STASH_REQUESTS_MAX: usize = 1024;
/// The same in bytes of their arguments: one request may pass it, then reading stops.
const STASH_BYTES_MAX: usize = 1 << 20;

fn request_bytes(request: &resp::Request) -> usize {
    request.args().iter().map(|arg| arg.len()).sum()
}

/// The RESP listener's TLS, if `tls.resp_port` asks for it.
pub(crate) fn tls_acceptor(
    config: &crate::ServerConfig,
) -> anyhow::Result<Option<tokio_rustls::TlsAcceptor>> {
    let Some(tls) = config.tls.as_ref().filter(|tls| tls.resp_port.is_some()) else {
        return Ok(None);
    };
    let material = tls::Material::load(tls, &config.tls_name().unwrap_or_default())?;
    Ok(Some(tokio_rustls::TlsAcceptor::from(tls::redo::server_only(&material)?)))
}
