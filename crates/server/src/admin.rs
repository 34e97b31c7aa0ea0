//! The admin HTTP API: `/status` (JSON), `/metrics` (Prometheus), `/health`,
//! `POST /logswitch`, the role endpoints (`/configuration`, `/roles/...`, in
//! `role::http`), the run-time settings (`/settings...`, in `settings`), and the web page with its history (`/`, `/history`, `/report`, in `web`).
//!
//! Every request is checked by `admin_access` first (its Host, its Origin, and for a `POST`
//! the admin token, always); `GET`s need no token (docs/security.md says what they disclose). At most `admin_max_connections` are served
//! at once (one more is answered 503 and closed), a client has `admin_header_timeout` to send
//! its request's headers and, at every step, to take some of what is written to it (the TLS
//! handshake, the answer: `write_deadline`), and each connection serves one request. Over
//! HTTPS if `tls.admin`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

use crate::write_deadline::WriteDeadline;
use crate::{ServerState, stopped};

/// The longest an admin request may take, headers to answer: longer than any role change
/// waits (a switchover's target up to its `replication.switchover_wait`, at most an hour, then
/// its confirmation and opening; a reinstate may copy a database), so that no answer a broker
/// still waits for is cut off.
const REQUEST_TIME_MAX: Duration = Duration::from_secs(75 * 60);

/// Runs a change asked for by an admin request (a role change, a settings edit) to its end,
/// whatever becomes of the request. hyper drops a handler's future when its client goes away
/// (a DBA's Ctrl-C, the broker's step timeout, `REQUEST_TIME_MAX`), and a role change dropped
/// part way left the database closed with every request waiting (its reopen's open done, never
/// installed), or a standby with its receiver stopped. The change is a task of its own; the
/// handler only waits for its answer.
pub(crate) async fn to_the_end<T: Send + 'static>(
    change: impl std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
) -> anyhow::Result<T> {
    match tokio::spawn(change).await {
        Ok(outcome) => outcome,
        Err(error) => Err(anyhow::anyhow!("the change's task ended: {error}")),
    }
}

pub(crate) async fn serve_admin(
    state: Arc<ServerState>,
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let app = Router::new()
        .route("/api", get(index))
        .route("/status", get(status_json))
        .route("/metrics", get(prometheus))
        .route("/health", get(health))
        .route("/logswitch", axum::routing::post(log_switch))
        .merge(crate::role::http::routes())
        .merge(crate::settings::routes())
        .merge(crate::web::routes())
        .layer(axum::middleware::from_fn_with_state(state.clone(), require_token))
        .with_state(state.clone());
    let slots =
        Arc::new(tokio::sync::Semaphore::new(state.config.server.admin_max_connections as usize));
    let header_timeout = state.config.server.admin_header_timeout;
    let mut shutdown = state.shutdown.subscribe();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped(&mut shutdown) => return,
        };
        let Ok((stream, peer)) = accepted else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let mut stream = stream;
                let body = "too many admin API connections; try again\n";
                let answer = format!(
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tokio::time::timeout(
                    Duration::from_secs(1),
                    stream.write_all(answer.as_bytes()),
                )
                .await;
            });
            continue;
        };
        let (app, tls) = (app.clone(), tls.clone());
        // A client that takes nothing of what is written to it for `admin_header_timeout` is let
        // go: hyper would wait for it up to REQUEST_TIME_MAX, holding the slot.
        let stream = WriteDeadline::new(stream, header_timeout);
        tokio::spawn(async move {
            let served = async {
                match tls {
                    None => serve_connection(stream, app, header_timeout).await,
                    Some(acceptor) => {
                        match tokio::time::timeout(header_timeout, acceptor.accept(stream)).await {
                            Ok(Ok(stream)) => serve_connection(stream, app, header_timeout).await,
                            _ => tracing::debug!(%peer, "admin API: TLS handshake failed"),
                        }
                    }
                }
            };
            let _ = tokio::time::timeout(REQUEST_TIME_MAX, served).await;
            drop(permit);
        });
    }
}

pub(crate) async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    app: Router,
    header_timeout: Duration,
) {
    let service = hyper_util::service::TowerToHyperService::new(app);
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// The admin API's TLS, if `tls.admin` asks for it.
pub(crate) fn tls_acceptor(
    config: &crate::ServerConfig,
) -> anyhow::Result<Option<tokio_rustls::TlsAcceptor>> {
    let Some(tls) = config.tls.as_ref().filter(|tls| tls.admin) else {
        return Ok(None);
    };
    let material = tls::Material::load(tls, &config.tls_name().unwrap_or_default())?;
    Ok(Some(tokio_rustls::TlsAcceptor::from(tls::redo::server_only(&material)?)))
}

/// Every request passes `admin_access`: its Host, its Origin, and for a `POST` the token.
async fn require_token(
    State(state): State<Arc<ServerState>>,
    request: Request,
    next: Next,
) -> Response {
    match state.admin_access.check(request.method(), request.headers()) {
        None => next.run(request).await,
        Some(refusal) => refusal,
    }
}

async fn index() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "redoguard admin API\n  GET  /               the web page: live charts and the configuration (docs/web.md)\n  GET  /history        the last minutes, one sample a second (JSON)\n  GET  /report         the configuration as every member reports it (JSON)\n  GET  /status         everything, as JSON\n  GET  /metrics        Prometheus text format\n  GET  /health         200 while the database accepts writes\n  GET  /configuration  the members of the configuration (JSON)\n  POST /logswitch      switch logs now (the current log is archived)\n  POST /roles/...      role changes (redoguard switchover, failover, reinstate; see docs/roles.md)\n",
    )
}

async fn status_json(State(state): State<Arc<ServerState>>) -> impl IntoResponse {
    let status = tokio::task::spawn_blocking(move || state.status()).await;
    match status {
        Ok(Ok(status)) => (StatusCode::OK, axum::Json(status)).into_response(),
        Ok(Err(error)) => (StatusCode::SERVICE_UNAVAILABLE, format!("{error:#}\n")).into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

async fn prometheus(State(state): State<Arc<ServerState>>) -> impl IntoResponse {
    let status = tokio::task::spawn_blocking(move || state.status()).await;
    let Ok(Ok(status)) = status else {
        return (StatusCode::SERVICE_UNAVAILABLE, "status unavailable\n".to_string())
            .into_response();
    };
    let mut text = status.metrics.to_prometheus();
    let redo = &status.database.redo;
    let gauges = [
        ("redoguard_next_scn", "SCN the next commit will get.", redo.next_scn.0 as f64),
        (
            "redoguard_durable_scn",
            "Every commit at or below this SCN is durable.",
            redo.durable_scn.0 as f64,
        ),
        (
            "redoguard_checkpoint_scn",
            "The data files hold every change at or below this SCN.",
            status.database.checkpoint_scn.0 as f64,
        ),
        ("redoguard_keys", "Keys in the database.", status.database.keys as f64),
        (
            "redoguard_unwritten_bytes",
            "Changes not yet in the data files.",
            status.database.unwritten_bytes as f64,
        ),
        (
            "redoguard_row_filter_bytes",
            "Memory of the data files' row filter (0 until it is built).",
            status.database.row_filter.as_ref().map_or(0.0, |filter| filter.bytes as f64),
        ),
        (
            "redoguard_row_filter_ruled_out",
            "Lookups the row filter answered without a search of the data files, since the open.",
            status.database.row_filter.as_ref().map_or(0.0, |filter| filter.ruled_out as f64),
        ),
        (
            "redoguard_row_cache_bytes",
            "Memory of the data files' key rows kept in memory.",
            status.database.row_cache.bytes as f64,
        ),
        (
            "redoguard_row_cache_hits",
            "Key row lookups the row cache answered without the data files, since the open.",
            status.database.row_cache.hits as f64,
        ),
        (
            "redoguard_row_cache_misses",
            "Key row lookups the row cache did not answer (searched in the data files), since the open.",
            status.database.row_cache.misses as f64,
        ),
        (
            "redoguard_connected_clients",
            "Client connections.",
            status.server.connected_clients as f64,
        ),
        (
            "redoguard_archive_peak_bytes_per_second",
            "Highest redo rate of an archived log.",
            status.archive.peak_bytes_per_s,
        ),
        (
            "redoguard_writes_refused",
            "1 while writes are refused (full disk, failing archiving).",
            f64::from(u8::from(status.server.writes_refused.is_some())),
        ),
        (
            "redoguard_log_writer_stalled",
            "1 while a failure holds a log switch up (commits are answered 'not durable yet'; their redo is written when it goes on).",
            f64::from(u8::from(redo.stall.is_some())),
        ),
        (
            "redoguard_synchronized",
            "1 while a SYNC standby protects every commit (a primary with standbys).",
            f64::from(u8::from(status.replication.synchronized.unwrap_or(false))),
        ),
        (
            "redoguard_standby_transport_lag_seconds",
            "On a standby: how far the redo received trails the primary.",
            status.replication.standby.as_ref().map_or(0.0, |standby| standby.transport_lag_s),
        ),
        (
            "redoguard_standby_apply_delay_seconds",
            "On a standby: the configured apply delay (delay): redo is applied once this old.",
            status.replication.standby.as_ref().map_or(0.0, |standby| standby.apply_delay_s),
        ),
        (
            "redoguard_standby_apply_lag_seconds",
            "On a standby: how far apply trails the redo received.",
            status.replication.standby.as_ref().map_or(0.0, |standby| standby.apply_lag_s),
        ),
    ];
    for (name, help, value) in gauges {
        text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"));
    }
    for destination in &status.replication.destinations {
        let name = &destination.name;
        text.push_str(&format!(
            "redoguard_destination_transport_lag_seconds{{destination=\"{name}\"}} {}\nredoguard_destination_synchronized{{destination=\"{name}\"}} {}\n",
            destination.transport_lag_s,
            u8::from(destination.phase == transport::Phase::Synchronized)
        ));
    }
    let counters: [(&str, &str, CounterOf); 2] = [
        (
            "redoguard_destination_redo_bytes_total",
            "Redo bytes sent to the destination, as in the log files.",
            |destination| destination.bytes_sent,
        ),
        (
            "redoguard_destination_wire_bytes_total",
            "Bytes of frames sent to the destination: headers included, writes without their zero tail, compressed; before TLS.",
            |destination| destination.wire_bytes_sent,
        ),
    ];
    for (name, help, value) in counters {
        let rows = status.replication.destinations.iter().map(|destination| {
            (format!("{{destination=\"{}\"}}", destination.name), value(destination) as f64)
        });
        push_counter(&mut text, name, help, rows);
    }
    compression_metrics(&status, &mut text);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// Reads one counter of a destination's status as a metric value.
type CounterOf = fn(&transport::DestinationStatus) -> u64;

/// Reads one counter of `CompressionCounts` as a metric value.
type CountOf = fn(&transport::CompressionCounts) -> f64;

/// One counter family: its help and type, then a line per (labels, value); nothing without rows.
fn push_counter(
    text: &mut String,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (String, f64)>,
) {
    let mut rows = rows.into_iter().peekable();
    if rows.peek().is_none() {
        return;
    }
    text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n"));
    for (labels, value) in rows {
        text.push_str(&format!("{name}{labels} {value}\n"));
    }
}

/// Redo compression's counters: per destination on a primary (compressing), and on a standby
/// (decompressing).
fn compression_metrics(status: &crate::ServerStatus, text: &mut String) {
    let destinations: Vec<(String, transport::CompressionCounts)> = status
        .replication
        .destinations
        .iter()
        .filter_map(|destination| {
            let compression = destination.compression.as_ref()?;
            let labels =
                format!("{{destination=\"{}\",codec=\"{}\"}}", destination.name, compression.codec);
            Some((labels, compression.counts))
        })
        .collect();
    let standby: Vec<(String, transport::CompressionCounts)> = status
        .replication
        .standby
        .iter()
        .map(|standby| (String::new(), standby.decompression))
        .collect();
    for (prefix, rows) in [
        ("redoguard_destination_compression", destinations),
        ("redoguard_standby_decompression", standby),
    ] {
        let fields: [(&str, &str, CountOf); 4] = [
            ("frames_total", "Redo frames through the codec.", |c| c.frames as f64),
            ("uncompressed_bytes_total", "Their payload bytes uncompressed.", |c| {
                c.bytes_uncompressed as f64
            }),
            ("wire_bytes_total", "Their payload bytes on the wire.", |c| c.bytes_wire as f64),
            ("cpu_seconds_total", "Thread CPU time spent in the codec.", |c| c.cpu_s),
        ];
        for (suffix, help, value) in fields {
            let values = rows.iter().map(|(labels, counts)| (labels.clone(), value(counts)));
            push_counter(text, &format!("{prefix}_{suffix}"), help, values);
        }
    }
}

/// POST /logswitch: switches logs now (as ALTER SYSTEM SWITCH LOGFILE): the current log is
/// closed and archived, here and on the standbys.
async fn log_switch(State(state): State<Arc<ServerState>>) -> impl IntoResponse {
    let Some(running) = state.roles.current_or_wait().await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the database is not open\n".to_string());
    };
    let db = running.db.clone();
    match tokio::task::spawn_blocking(move || db.redo().switch_logfile()).await {
        Ok(Ok(seq)) => (StatusCode::OK, format!("{{\"current_seq\":{seq}}}\n")),
        Ok(Err(error)) => (StatusCode::CONFLICT, format!("{error}\n")),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
    }
}

/// GET /health: 200 while the database accepts writes (a primary whose gate is open and
/// whose disk takes writes); 503 with the reason otherwise.
async fn health(State(state): State<Arc<ServerState>>) -> impl IntoResponse {
    let Some(running) = state.roles.current() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "writes refused: the role is changing\n".to_string(),
        );
    };
    let gate = state.roles.gate.state();
    if gate != crate::role::gate::GateState::Open {
        let refusal = gate.refusal_text();
        return (StatusCode::SERVICE_UNAVAILABLE, format!("writes refused: {refusal}\n"));
    }
    match running.db.writes_refused() {
        None => (StatusCode::OK, "ok\n".to_string()),
        Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("writes refused: {reason}\n")),
    }
}
