//! How a process calls a server's admin API: one request per connection over HTTP/1.1 (hyper's
//! client connection), HTTPS when the process was given the CA (`tls.admin`), and the admin
//! token on every `POST`.
//!
//! The token is the one this process was given (`--token`, `REDOGUARD_TOKEN`, an observer's
//! `[observer] token`); without one, a `POST` to a server on this host uses the token the
//! server made in its data directory (`token`), found through the server's `/status`
//! (`server.admin_token_file`) and read only if it is a private file of this process's user.
//!
//! The calls are blocking (the broker, the observer and the commands call them from plain
//! threads); each runs on a small runtime on a thread the caller starts, so they may be called
//! from anywhere, a tokio worker included, and connect from the caller's network namespace.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs as _};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::header;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// The largest answer read (a `/status` of a busy server is tens of KiB; a `/report` of ten
/// members a few hundred).
const BODY_BYTES_MAX: usize = 64 << 20;

/// How this process calls admin APIs: the token its POSTs carry, and the CA to check servers
/// with over HTTPS.
#[derive(Debug, Clone, Default)]
pub struct AdminClient {
    pub token: Option<String>,
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

static ADMIN_CLIENT: RwLock<Option<AdminClient>> = RwLock::new(None);

/// Tokens found in local servers' data directories, by admin address.
static FOUND_TOKENS: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

/// Sets how this process reaches admin APIs (the broker and the observer included): once, at
/// start, by the command that runs.
pub fn set_admin_client(client: AdminClient) {
    *ADMIN_CLIENT.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(client);
}

fn admin_client() -> AdminClient {
    ADMIN_CLIENT.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone().unwrap_or_default()
}

/// GETs `path` from the admin API at `addr`; an answer other than 200 is an error naming it.
pub fn http_get(addr: &str, path: &str, timeout: Duration) -> anyhow::Result<String> {
    ok_body(addr, path, http_call(addr, "GET", path, timeout)?)
}

/// POSTs (with an empty body) to `path` of the admin API at `addr`.
pub fn http_post(addr: &str, path: &str, timeout: Duration) -> anyhow::Result<String> {
    ok_body(addr, path, http_call(addr, "POST", path, timeout)?)
}

fn ok_body(addr: &str, path: &str, (code, body): (u16, String)) -> anyhow::Result<String> {
    if code != 200 {
        anyhow::bail!("{addr}{path} answered {code}: {}", body.trim());
    }
    Ok(body)
}

/// One request with an empty body: the status code and the body, whatever the code.
pub fn http_call(
    addr: &str,
    method: &str,
    path: &str,
    timeout: Duration,
) -> anyhow::Result<(u16, String)> {
    http_call_with_body(addr, method, path, b"", timeout)
}

/// One request with a JSON body (or none, if empty).
pub fn http_call_with_body(
    addr: &str,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> anyhow::Result<(u16, String)> {
    let client = admin_client();
    let method = hyper::Method::from_bytes(method.as_bytes())
        .map_err(|_| anyhow::anyhow!("'{method}' is not an HTTP method"))?;
    let token = match (&client.token, method == hyper::Method::GET) {
        (Some(token), _) => Some(token.clone()),
        (None, true) => None,
        (None, false) => local_token(addr, &client, timeout),
    };
    let request = Request {
        addr: addr.to_string(),
        method,
        path: path.to_string(),
        body: Bytes::copy_from_slice(body),
        token,
        tls: client.tls.clone(),
    };
    run(request, timeout)
}

/// The token of a server on this host that made its own, if it says where it is and the file
/// is this user's and private. Remembered per address.
fn local_token(addr: &str, client: &AdminClient, timeout: Duration) -> Option<String> {
    if let Some(token) =
        FOUND_TOKENS.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_default().get(addr)
    {
        return Some(token.clone());
    }
    let status = Request {
        addr: addr.to_string(),
        method: hyper::Method::GET,
        path: "/status".to_string(),
        body: Bytes::new(),
        token: None,
        tls: client.tls.clone(),
    };
    let (code, body) = run(status, timeout).ok()?;
    if code != 200 {
        return None;
    }
    let status: serde_json::Value = serde_json::from_str(&body).ok()?;
    let file = status["server"]["admin_token_file"].as_str()?;
    let path = std::path::Path::new(file);
    if !path.is_absolute() || path.file_name()? != crate::token::FILE_NAME {
        return None;
    }
    let token = crate::token::read_checked(path).ok()?;
    FOUND_TOKENS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_default()
        .insert(addr.to_string(), token.clone());
    Some(token)
}

struct Request {
    addr: String,
    method: hyper::Method,
    path: String,
    body: Bytes,
    token: Option<String>,
    tls: Option<Arc<rustls::ClientConfig>>,
}

/// Runs one request on a thread of its own, started by the caller's thread (so it is in the
/// caller's network namespace: tests and benchmarks call members inside linkemu's namespaces),
/// with a runtime of its own (so the caller may be anywhere, a tokio worker included).
fn run(request: Request, timeout: Duration) -> anyhow::Result<(u16, String)> {
    let addr = request.addr.clone();
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("admin-client".into())
            .spawn_scoped(scope, move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|error| anyhow::anyhow!("a runtime for the admin client: {error}"))?;
                runtime.block_on(async {
                    match tokio::time::timeout(timeout, send(request)).await {
                        Ok(answer) => answer,
                        Err(_) => Err(anyhow::anyhow!(
                            "the admin API at {addr} did not answer within {timeout:?}"
                        )),
                    }
                })
            })
            .map_err(|error| anyhow::anyhow!("a thread for the admin client: {error}"))?
            .join()
            .map_err(|_| anyhow::anyhow!("the admin client's thread panicked"))?
    })
}

async fn send(request: Request) -> anyhow::Result<(u16, String)> {
    let addr = request.addr.clone();
    let target: SocketAddr = addr
        .to_socket_addrs()
        .map_err(|error| anyhow::anyhow!("cannot resolve {addr}: {error}"))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{addr} resolves to no address"))?;
    let stream = tokio::net::TcpStream::connect(target).await.map_err(|error| {
        anyhow::anyhow!(
            "cannot connect to the admin API at {addr}: {error} (is the server running, and is this its --admin-port?)"
        )
    })?;
    match request.tls.clone() {
        None => exchange(stream, request).await.map_err(|error| {
            // Nothing, or a TLS alert: an HTTPS port spoken to in plain HTTP.
            if error.to_string().contains("connection closed before message completed")
                || error.to_string().contains("invalid HTTP version")
            {
                anyhow::anyhow!(
                    "{addr} did not answer HTTP; if its admin API speaks HTTPS (tls.admin), give --ca FILE (or REDOGUARD_CA)"
                )
            } else {
                error
            }
        }),
        Some(config) => {
            let host = addr.rsplit_once(':').map_or(addr.as_str(), |(host, _)| host);
            let name =
                rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                    .map_err(|_| anyhow::anyhow!("{addr}: '{host}' is not a host name for TLS"))?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await
                .map_err(|error| anyhow::anyhow!("TLS with the admin API at {addr}: {error}"))?;
            exchange(stream, request).await
        }
    }
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    request: Request,
) -> anyhow::Result<(u16, String)> {
    let addr = request.addr.clone();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|error| anyhow::anyhow!("HTTP with {addr}: {error}"))?;
    let driver = tokio::spawn(connection);
    let mut builder = hyper::Request::builder()
        .method(request.method)
        .uri(&request.path)
        .header(header::HOST, &request.addr)
        .header(header::ACCEPT, "application/json")
        .header(header::CONNECTION, "close");
    if !request.body.is_empty() {
        builder = builder.header(header::CONTENT_TYPE, "application/json");
    }
    if let Some(token) = &request.token {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let http_request = builder
        .body(Full::new(request.body))
        .map_err(|error| anyhow::anyhow!("a request to {addr}: {error}"))?;
    let response = sender
        .send_request(http_request)
        .await
        .map_err(|error| anyhow::anyhow!("{addr}: {error}"))?;
    let code = response.status().as_u16();
    let body = Limited::new(response.into_body(), BODY_BYTES_MAX)
        .collect()
        .await
        .map_err(|error| anyhow::anyhow!("reading the answer from {addr}: {error}"))?
        .to_bytes();
    driver.abort();
    Ok((code, String::from_utf8_lossy(&body).into_owned()))
}
