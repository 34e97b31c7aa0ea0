//! The Redis-protocol listener: accepts clients (bounded), and serves each connection on its
//! own task: reads commands, hands them to the session and the executor, writes replies.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use resp::{Connection, ConnectionError, Frame, Session};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::{ServerState, execute, stopped};

pub(crate) async fn accept_clients(state: Arc<ServerState>, listener: TcpListener) {
    let slots = Arc::new(Semaphore::new(state.config.server.max_connections as usize));
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
                let state = state.clone();
                tokio::spawn(async move {
                    state.connected.fetch_add(1, Ordering::Relaxed);
                    serve_client(&state, stream, peer).await;
                    state.connected.fetch_sub(1, Ordering::Relaxed);
                    drop(permit);
                });
            }
            Err(_) => {
                state.rejected.incr();
                tokio::spawn(async move {
                    use tokio::io::AsyncWriteExt;
                    let mut stream = stream;
                    let _ = tokio::time::timeout(
                        Duration::from_secs(1),
                        stream.write_all(b"-ERR max number of clients reached\r\n"),
                    )
                    .await;
                });
            }
        }
    }
}

async fn serve_client(state: &ServerState, stream: TcpStream, peer: SocketAddr) {
    let id = state.next_client_id.fetch_add(1, Ordering::Relaxed);
    let mut connection = Connection::new(stream, state.config.limits.clone());
    let mut session = Session::new(id, &state.config.limits);
    let idle = state.config.server.idle_timeout;
    let mut shutdown = state.shutdown.subscribe();
    loop {
        let read = async {
            if idle.is_zero() {
                Ok(connection.read_command().await)
            } else {
                tokio::time::timeout(idle, connection.read_command()).await
            }
        };
        let read = tokio::select! {
            read = read => read,
            _ = stopped(&mut shutdown) => {
                let _ = connection.write_reply(&Frame::error("ERR the server is shutting down"), session.protocol()).await;
                let _ = connection.shutdown().await;
                return;
            }
        };
        let parsed = match read {
            Err(_elapsed) => {
                tracing::debug!(client = id, %peer, "closing a connection idle for {idle:?}");
                let _ = connection.shutdown().await;
                return;
            }
            Ok(Ok(None)) => return,
            Ok(Ok(Some(parsed))) => parsed,
            Ok(Err(ConnectionError::Protocol(error))) => {
                tracing::info!(client = id, %peer, %error, "protocol error; closing the connection");
                let _ = connection.write_reply(&error.to_frame(), session.protocol()).await;
                let _ = connection.shutdown().await;
                return;
            }
            Ok(Err(error)) => {
                tracing::debug!(client = id, %peer, %error, "connection ended");
                return;
            }
        };
        let outcome = match session.handle(parsed, &state.facts) {
            resp::Action::Reply(frame) => execute::Outcome::Reply(frame),
            resp::Action::ReplyAndClose(frame) => {
                let _ = connection.write_reply(&frame, session.protocol()).await;
                let _ = connection.shutdown().await;
                return;
            }
            resp::Action::Execute(command) => {
                execute::run(state, &session, vec![command], false).await
            }
            resp::Action::ExecuteTransaction(commands) => {
                execute::run(state, &session, commands, true).await
            }
        };
        match outcome {
            execute::Outcome::Reply(frame) => {
                if connection.write_reply(&frame, session.protocol()).await.is_err() {
                    return;
                }
            }
            execute::Outcome::Shutdown => {
                tracing::info!(client = id, %peer, "SHUTDOWN");
                let _ = connection.shutdown().await;
                state.request_shutdown();
                return;
            }
        }
    }
}
