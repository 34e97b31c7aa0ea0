//! A link that outlives the command that brought it up: `redoguard linkemu up` starts a
//! background process that holds the link, records it in a state file and listens on a
//! Unix socket for `set`, `status` and `down`.
//!
//! Files, per link name, under `/run/redoguard-linkemu/links/`: `<name>.json` (the state:
//! pid, namespaces, addresses), `<name>.sock` (control: one JSON request line, one JSON
//! response line) and `<name>.log` (the background process's log).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::{Error, Link, LinkConfig, LinkStats, Side, namespace, sysctl};

/// The base name `linkemu up` uses unless told otherwise.
pub const DEFAULT_NAME: &str = "rglink";
/// Longest control request or response line.
const CONTROL_LINE_BYTES_MAX: u64 = 64 * 1024;

/// Where a link's files live.
pub fn links_dir() -> PathBuf {
    sysctl::state_dir().join("links")
}

fn state_path(name: &str) -> PathBuf {
    links_dir().join(format!("{name}.json"))
}

fn socket_path(name: &str) -> PathBuf {
    links_dir().join(format!("{name}.sock"))
}

/// The log file of a link's background process.
pub fn log_path(name: &str) -> PathBuf {
    links_dir().join(format!("{name}.log"))
}

/// What `linkemu up` records about a running link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkInfo {
    pub name: String,
    pub pid: u32,
    pub namespace_a: String,
    pub namespace_b: String,
    pub address_a: std::net::Ipv4Addr,
    pub address_b: std::net::Ipv4Addr,
    pub config: LinkConfig,
}

/// A change to a running link; absent fields stay as they are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinkChange {
    pub rtt: Option<Duration>,
    /// `Some(None)` removes the rate cap.
    pub rate_bits_per_s: Option<Option<u64>>,
    pub loss_ratio: Option<f64>,
    pub jitter: Option<Duration>,
    /// `Some(None)` returns to the default queue.
    pub queue_bytes: Option<Option<u64>>,
}

/// A control request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    Status,
    Set { change: LinkChange },
    Cut,
    Restore,
    Down,
}

/// A control response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub error: Option<String>,
    pub config: LinkConfig,
    pub stats: LinkStats,
    pub cut: bool,
}

/// Brings the link up and serves it until SIGTERM, SIGINT or a `down` request; calls
/// `ready` once the link is up (the CLI prints it for the parent that started it).
pub fn run_foreground(
    name: &str,
    config: LinkConfig,
    ready: impl FnOnce(&LinkInfo),
) -> Result<(), Error> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| Error::Io { what, source }
    };
    // Block the stop signals before any thread exists, so that every thread inherits the
    // mask and only our sigwait sees them.
    let signals = stop_signals();
    // SAFETY: pthread_sigmask with a valid set, no old set wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) };

    std::fs::create_dir_all(links_dir()).map_err(io("create the state directory"))?;
    refuse_if_running(name)?;
    let link = Link::up_named(name, config)?;
    let socket = socket_path(name);
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).map_err(io("listen on the control socket"))?;
    let info = LinkInfo {
        name: name.to_string(),
        pid: std::process::id(),
        namespace_a: link.namespace(Side::A).to_string(),
        namespace_b: link.namespace(Side::B).to_string(),
        address_a: link.address(Side::A),
        address_b: link.address(Side::B),
        config: link.config(),
    };
    let json = serde_json::to_string_pretty(&info).expect("LinkInfo serialises");
    std::fs::write(state_path(name), json).map_err(io("write the state file"))?;
    ready(&info);

    std::thread::scope(|scope| {
        let link = &link;
        scope.spawn(move || {
            for stream in listener.incoming().flatten() {
                let down = serve_control(link, stream);
                if down {
                    // SAFETY: sends a signal to our own process.
                    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
                    break;
                }
            }
        });
        let mut received: libc::c_int = 0;
        // SAFETY: waits for one of the blocked signals.
        unsafe { libc::sigwait(&signals, &mut received) };
        tracing::info!(signal = received, "linkemu: going down");
        // Wake the control thread if it is still waiting, so that the scope can end.
        let _ = UnixStream::connect(&socket)
            .and_then(|mut stream| stream.write_all(b"{\"op\":\"down\"}\n"));
    });
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(state_path(name));
    drop(link);
    Ok(())
}

fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        set
    }
}

/// Answers one request; returns whether it asked the link to go down.
fn serve_control(link: &Link, stream: UnixStream) -> bool {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut line = String::new();
    let mut reader = BufReader::new(Read::take(&stream, CONTROL_LINE_BYTES_MAX));
    if reader.read_line(&mut line).is_err() {
        return false;
    }
    let mut down = false;
    let error = match serde_json::from_str::<Request>(&line) {
        Err(error) => Some(format!("not a linkemu request: {error}")),
        Ok(Request::Status) => None,
        Ok(Request::Cut) => {
            link.cut();
            None
        }
        Ok(Request::Restore) => {
            link.restore();
            None
        }
        Ok(Request::Down) => {
            down = true;
            None
        }
        Ok(Request::Set { change }) => link
            .change(|config| {
                if let Some(rtt) = change.rtt {
                    config.rtt = rtt;
                }
                if let Some(rate) = change.rate_bits_per_s {
                    config.rate_bits_per_s = rate;
                }
                if let Some(loss) = change.loss_ratio {
                    config.loss_ratio = loss;
                }
                if let Some(jitter) = change.jitter {
                    config.jitter = jitter;
                }
                if let Some(queue) = change.queue_bytes {
                    config.queue_bytes = queue;
                }
            })
            .err()
            .map(|error| error.to_string()),
    };
    let response =
        Response { error, config: link.config(), stats: link.stats(), cut: link.is_cut() };
    let mut text = serde_json::to_string(&response).expect("Response serialises");
    text.push('\n');
    let _ = (&stream).write_all(text.as_bytes());
    down
}

/// Refuses a name whose link is up (its process alive).
pub fn refuse_if_running(name: &str) -> Result<(), Error> {
    match read_state(name) {
        Some(existing) if crate::process_alive(existing.pid) => Err(Error::Config {
            field: "name",
            reason: format!(
                "link '{name}' is already up (pid {}); `redoguard linkemu down --name {name}` first",
                existing.pid
            ),
        }),
        _ => Ok(()),
    }
}

fn read_state(name: &str) -> Option<LinkInfo> {
    serde_json::from_str(&std::fs::read_to_string(state_path(name)).ok()?).ok()
}

/// Sends a request to a running link.
pub fn request(name: &str, request: &Request) -> Result<Response, Error> {
    let io = |what: String| move |source| Error::Io { what, source };
    let path = socket_path(name);
    let mut stream = UnixStream::connect(&path)
        .map_err(io(format!("reach link '{name}' at {} (is it up?)", path.display())))?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(io("set a timeout".into()))?;
    let mut line = serde_json::to_string(request).expect("Request serialises");
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(io(format!("send to link '{name}'")))?;
    let mut answer = String::new();
    BufReader::new(stream.take(CONTROL_LINE_BYTES_MAX))
        .read_line(&mut answer)
        .map_err(io(format!("read the answer of link '{name}'")))?;
    let response: Response = serde_json::from_str(&answer).map_err(|error| Error::Command {
        command: format!("linkemu request to '{name}'"),
        reason: format!("unreadable answer: {error}"),
    })?;
    if let Some(reason) = &response.error {
        return Err(Error::Command {
            command: format!("linkemu set on '{name}'"),
            reason: reason.clone(),
        });
    }
    Ok(response)
}

/// Takes a link down: asks its process to stop and waits for it (up to 10 s); if the
/// process is gone already, removes what it left (its namespaces, its files) and restores
/// the socket buffer limits if no other link holds them.
pub fn down(name: &str) -> Result<(), Error> {
    let state = read_state(name);
    if state.is_none() && !socket_path(name).exists() {
        return Err(Error::Config {
            field: "name",
            reason: format!("no link '{name}' is up (nothing in {})", links_dir().display()),
        });
    }
    let asked = request(name, &Request::Down).is_ok();
    if let Some(state) = &state {
        let alive = || crate::process_alive(state.pid);
        let deadline = Instant::now() + Duration::from_secs(10);
        while asked && alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive() {
            return Err(Error::Command {
                command: format!("linkemu down --name {name}"),
                reason: format!(
                    "process {} did not stop; see {}",
                    state.pid,
                    log_path(name).display()
                ),
            });
        }
        for namespace in [&state.namespace_a, &state.namespace_b] {
            if namespace::exists(namespace) {
                namespace::delete(namespace);
            }
        }
    }
    let _ = std::fs::remove_file(socket_path(name));
    let _ = std::fs::remove_file(state_path(name));
    let _ = std::fs::remove_file(log_path(name));
    sysctl::tidy()?;
    Ok(())
}

/// Links recorded as up on this machine.
pub fn list() -> Vec<LinkInfo> {
    let Ok(entries) = std::fs::read_dir(links_dir()) else { return Vec::new() };
    let mut links: Vec<LinkInfo> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            read_state(name.strip_suffix(".json")?)
        })
        .collect();
    links.sort_by(|a, b| a.name.cmp(&b.name));
    links
}
