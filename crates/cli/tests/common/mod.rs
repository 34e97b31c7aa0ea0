//! What the integration tests of the real `redoguard` binary share: servers started as child
//! processes (and killed however the test ends), Redis clients with timeouts, raw sockets, a
//! small HTTP client for the admin API, and a watchdog that turns a hang into a failure.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use workload::process::ServerProcess;

pub fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_redoguard"))
}

/// What must be undone even if the watchdog aborts the test process (drops do not run then).
enum Cleanup {
    Kill(u32),
    Unmount(PathBuf),
}

static CLEANUPS: Mutex<Vec<Cleanup>> = Mutex::new(Vec::new());

fn register(cleanup: Cleanup) {
    CLEANUPS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(cleanup);
}

/// A child process (a client library's script, say) the watchdog kills if the test hangs.
pub fn register_kill(pid: u32) {
    register(Cleanup::Kill(pid));
}

/// The child `pid` has been reaped: the watchdog must no longer signal its number.
pub fn unregister_kill(pid: u32) {
    unregister(|cleanup| matches!(cleanup, Cleanup::Kill(p) if *p == pid));
}

fn unregister(matches: impl Fn(&Cleanup) -> bool) {
    CLEANUPS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).retain(|c| !matches(c));
}

fn clean_up_everything() {
    let cleanups = std::mem::take(&mut *CLEANUPS.lock().unwrap_or_else(|p| p.into_inner()));
    for cleanup in cleanups.iter() {
        if let Cleanup::Kill(pid) = cleanup {
            // SAFETY: a signal to a child this process started and has not reaped yet.
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
        }
    }
    for cleanup in cleanups.iter() {
        if let Cleanup::Unmount(path) = cleanup {
            let _ = Command::new("umount").arg("-l").arg(path).status();
        }
    }
}

/// Aborts the test process if the test is still running after `limit`: a hang is a failure.
/// Before aborting it kills the servers and unmounts the file systems the tests started.
pub struct Watchdog {
    done: Arc<(Mutex<bool>, Condvar)>,
}

impl Watchdog {
    pub fn new(limit: Duration, what: &'static str) -> Watchdog {
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let watching = done.clone();
        std::thread::spawn(move || {
            let (lock, changed) = &*watching;
            let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
            let (guard, _) = changed
                .wait_timeout_while(guard, limit, |done| !*done)
                .unwrap_or_else(|p| p.into_inner());
            if !*guard {
                eprintln!(
                    "watchdog: {what} still running after {limit:?}; aborting (a hang is a failure)"
                );
                clean_up_everything();
                std::process::abort();
            }
        });
        Watchdog { done }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (lock, changed) = &*self.done;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        changed.notify_all();
    }
}

/// A `redoguard server` child process; killed (SIGKILL) when dropped.
pub struct Server {
    process: ServerProcess,
    pid: u32,
}

impl Server {
    /// Starts a server on `data_dir` (ports 0), with `config` if given, appending its log
    /// (stderr) to `log`.
    pub fn start(data_dir: &Path, config: Option<&Path>, log: &Path) -> Server {
        let mut args = vec!["--data-dir", data_dir.to_str().expect("UTF-8 path")];
        if let Some(config) = config {
            args.extend(["--config", config.to_str().expect("UTF-8 path")]);
        }
        let process = ServerProcess::start(binary(), &args, log)
            .unwrap_or_else(|error| panic!("starting the server: {error:#}"));
        let pid = process.pid().expect("a running child");
        register(Cleanup::Kill(pid));
        Server { process, pid }
    }

    /// Starts `redoguard server ARGS` (which must give the data directory), its log in `log`.
    pub fn start_args(args: &[&str], log: &Path) -> Server {
        let process = ServerProcess::start(binary(), args, log)
            .unwrap_or_else(|error| panic!("starting the server: {error:#}"));
        let pid = process.pid().expect("a running child");
        register(Cleanup::Kill(pid));
        Server { process, pid }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn resp_addr(&self) -> SocketAddr {
        self.process.resp_addr
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.process.admin_addr
    }

    /// SIGKILL, as a crash: the server stops between two instructions.
    pub fn kill(mut self) {
        self.process.kill().expect("SIGKILL the server");
    }

    /// SIGTERM; the server must stop cleanly (exit status 0) within 60 s.
    pub fn stop(mut self) {
        self.process.stop().unwrap_or_else(|error| panic!("clean stop: {error:#}"));
    }

    pub fn redis(&self) -> redis::Connection {
        redis_connection(self.resp_addr())
    }

    pub fn status(&self) -> server::ServerStatus {
        let (code, body) = http_get(self.admin_addr(), "/status");
        assert_eq!(code, 200, "/status answered {code}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|error| panic!("/status: {error}: {body}"))
    }

    /// The server's log so far, for a failure message.
    pub fn log_tail(&self) -> String {
        tail(&self.process.log, 30)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let pid = self.pid;
        unregister(|cleanup| matches!(cleanup, Cleanup::Kill(p) if *p == pid));
    }
}

/// A child process other than a server (an observer, say), killed (SIGKILL) when dropped.
pub struct Service {
    child: std::process::Child,
    pub log: PathBuf,
}

impl Service {
    /// Starts `command` (stderr appended to `log`) and waits, 60 s at most, for a line on its
    /// stdout that contains `ready`.
    pub fn start(mut command: Command, ready: &str, log: &Path) -> Service {
        use std::io::BufRead;
        let log_file = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|error| panic!("starting {command:?}: {error}"));
        register(Cleanup::Kill(child.id()));
        let stdout = child.stdout.take().expect("piped");
        let (sender, receiver) = std::sync::mpsc::channel();
        let marker = ready.to_string();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            for line in lines.by_ref().map_while(Result::ok) {
                if line.contains(&marker) {
                    let _ = sender.send(line);
                    break;
                }
            }
            for _ in lines {}
        });
        if receiver.recv_timeout(Duration::from_secs(60)).is_err() {
            let _ = child.kill();
            panic!("{command:?} did not become ready:\n{}", tail(log, 20));
        }
        Service { child, log: log.to_path_buf() }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let pid = self.child.id();
        unregister(|cleanup| matches!(cleanup, Cleanup::Kill(p) if *p == pid));
    }
}

/// The last `lines` lines of a text file.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A Redis connection through the `redis` crate, with a connect timeout and 30 s read and
/// write timeouts, so that no call can hang the test.
pub fn redis_connection(addr: SocketAddr) -> redis::Connection {
    redis_connection_with_timeout(addr, Duration::from_secs(30))
}

pub fn redis_connection_with_timeout(addr: SocketAddr, timeout: Duration) -> redis::Connection {
    connect_redis(&format!("redis://{addr}/"), addr, timeout)
}

/// A connection to `addr` authenticated with `password` (the `default` user's), 30 s timeouts.
pub fn redis_connection_as(addr: SocketAddr, password: &str) -> redis::Connection {
    connect_redis(&format!("redis://:{password}@{addr}/"), addr, Duration::from_secs(30))
}

fn connect_redis(url: &str, addr: SocketAddr, timeout: Duration) -> redis::Connection {
    let client = redis::Client::open(url).expect("a redis URL");
    let connection = client
        .get_connection_with_timeout(Duration::from_secs(10))
        .unwrap_or_else(|error| panic!("connecting to {addr}: {error}"));
    connection.set_read_timeout(Some(timeout)).unwrap();
    connection.set_write_timeout(Some(timeout)).unwrap();
    connection
}

/// A raw TCP connection with 10 s timeouts.
pub fn raw(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .unwrap_or_else(|error| panic!("connecting to {addr}: {error}"));
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// Reads until the peer closes the connection; panics if it does not within the stream's
/// read timeout.
pub fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return received,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
            // A reset after the last reply is a close too (our unread bytes make the kernel
            // answer with RST).
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => return received,
            Err(error) => panic!(
                "the server did not close the connection ({error}); received so far: {:?}",
                String::from_utf8_lossy(&received)
            ),
        }
    }
}

/// GETs `path` from the admin API: the HTTP status code and the body.
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = raw(addr);
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap_or_else(|error| panic!("GET {path}: {error}"));
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("not HTTP: {text}"));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status code in {head}"));
    assert!(
        !head.to_ascii_lowercase().contains("transfer-encoding: chunked"),
        "a chunked answer to {path}; this client reads only plain bodies"
    );
    (code, body.to_string())
}

/// The value of `field` in an INFO reply.
pub fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|value| value.trim_end().to_string())
}

/// `INFO persistence`'s `recovered_records`.
pub fn recovered_records(connection: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("persistence").query(connection).unwrap();
    info_field(&info, "recovered_records")
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no recovered_records in INFO persistence: {info}"))
}

/// Runs `command` to its end or kills it after `limit`: exit success, stdout, stderr.
pub fn run_bounded(command: &mut Command, limit: Duration) -> (bool, String, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("starting {command:?}: {error}"));
    register(Cleanup::Kill(child.id()));
    let pid = child.id();
    // Drain both pipes on threads, so a chatty child never blocks on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    unregister(|cleanup| matches!(cleanup, Cleanup::Kill(p) if *p == pid));
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    let Some(status) = status else {
        panic!(
            "{command:?} still running after {limit:?}; killed it\nstdout: {stdout}\nstderr: {stderr}"
        )
    };
    (status.success(), stdout, stderr)
}

/// A tmpfs mounted for the length of a test; unmounted when dropped, even on a panic.
pub struct Tmpfs {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

/// Why a tmpfs could not be had.
pub enum NoTmpfs {
    /// There is no `mount` command on this machine: the test cannot run here.
    NoMountCommand(String),
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it). Panics if this process is
    /// not root or if mount fails.
    pub fn mount(size: &str) -> Result<Tmpfs, NoTmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tmpfs");
        std::fs::create_dir(&path).unwrap();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output();
        let output = match output {
            Ok(output) => output,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(NoTmpfs::NoMountCommand(format!("no `mount` command: {error}")));
            }
            Err(error) => panic!("running mount: {error}"),
        };
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            output.status.success(),
            "cannot mount a tmpfs on {} ({}; this test must run as root to fill a disk of its own): {}",
            path.display(),
            if root { "running as root" } else { "NOT running as root" },
            String::from_utf8_lossy(&output.stderr).trim()
        );
        register(Cleanup::Unmount(path.clone()));
        Ok(Tmpfs { path, _dir: dir })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(&self.path).status().is_ok_and(|s| s.success());
        if !unmounted {
            // Still busy (a server that has not quite exited): detach it now, freed once idle.
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
        let path = self.path.clone();
        unregister(|cleanup| matches!(cleanup, Cleanup::Unmount(p) if *p == path));
    }
}

/// Raises this process's limit of open files to at least `wanted` (raising the hard limit
/// too when root), or panics saying why it cannot.
pub fn raise_open_files_limit(wanted: u64) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur >= wanted {
            return;
        }
        limit.rlim_cur = wanted;
        limit.rlim_max = limit.rlim_max.max(wanted);
        assert_eq!(
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit),
            0,
            "cannot raise RLIMIT_NOFILE to {wanted}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Polls `condition` every 20 ms until it holds; panics with `what` after `limit`. For
/// states of another process that no event of ours announces.
pub fn wait_until(limit: Duration, what: &str, condition: impl FnMut() -> bool) {
    assert!(poll_until(limit, condition), "waited {limit:?} for {what}");
}

/// Polls `condition` every 20 ms until it holds (true) or `limit` passes (false).
pub fn poll_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !condition() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Stops process `pid` (a child the test started) with SIGSTOP and returns once every one of
/// its threads is stopped. `kill` returns before that: the kernel wakes one thread to take
/// the signal, and only when it runs does it stop the others. Until then, on a loaded
/// machine for milliseconds, the rest go on running (a standby's receiver acknowledging
/// redo sent after the "freeze", say).
pub fn freeze(pid: u32) {
    // SAFETY: a signal to a child this test started.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
    wait_until(Duration::from_secs(10), &format!("process {pid} to stop"), || {
        workload::process::all_threads_stopped(pid)
    });
}

/// Lets a process stopped by [`freeze`] run again.
pub fn thaw(pid: u32) {
    // SAFETY: a signal to a child this test started.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
}

/// The seed of a test's randomness: `REDOGUARD_TEST_SEED` if set (to replay a failure),
/// else the clock. The test prints it.
pub fn seed() -> u64 {
    std::env::var("REDOGUARD_TEST_SEED").ok().and_then(|seed| seed.parse().ok()).unwrap_or_else(
        || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos() as u64)
        },
    )
}

/// One reply line to `request` on an open raw connection.
pub fn ask(stream: &mut TcpStream, request: &str) -> String {
    stream.write_all(request.as_bytes()).unwrap();
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "closed after {reply:?}");
        reply.push(byte[0]);
    }
    String::from_utf8(reply).unwrap()
}

/// Sends `request` again and again without reading a reply, until the peer has taken nothing
/// for half a second (its buffers and ours are full: it waits for us to read). Returns the
/// bytes sent; panics if the peer closes the connection meanwhile.
pub fn send_until_stalled(stream: &mut TcpStream, request: &[u8]) -> usize {
    let chunk = request.repeat(65_536 / request.len());
    stream.set_nonblocking(true).unwrap();
    let mut stalled_since: Option<Instant> = None;
    let mut sent = 0usize;
    while stalled_since.is_none_or(|since| since.elapsed() < Duration::from_millis(500)) {
        match stream.write(&chunk) {
            Ok(written) => {
                sent += written;
                stalled_since = None;
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                stalled_since.get_or_insert_with(Instant::now);
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) => panic!("the peer closed after {sent} bytes: {error}"),
        }
    }
    stream.set_nonblocking(false).unwrap();
    sent
}

/// Whether the kernel holds an established TCP connection from local port `port` to remote
/// port `peer` (IPv4, from `/proc/net/tcp`): the server's side of a client's connection.
pub fn tcp_established(port: u16, peer: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port_of =
        |field: &str| field.rsplit(':').next().and_then(|hex| u16::from_str_radix(hex, 16).ok());
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.len() > 3
            && port_of(fields[1]) == Some(port)
            && port_of(fields[2]) == Some(peer)
            && fields[3] == "01"
    })
}

/// Every file under a member's redo directory and archive, with its bytes; but the control
/// file, which the member's own checkpoints rewrite (compare its identity and position
/// through its status instead).
pub fn member_files(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    for sub in ["redo", "archive"] {
        for entry in std::fs::read_dir(dir.join(sub)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() && path.file_name().is_some_and(|name| name != "control") {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// Panics, naming them, if files of `member_files` changed between `before` and `after`.
pub fn assert_unchanged(
    before: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
    after: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
) {
    let changed: Vec<&PathBuf> = before
        .keys()
        .chain(after.keys())
        .filter(|path| before.get(*path) != after.get(*path))
        .collect();
    assert!(changed.is_empty(), "the standby's redo or archive changed: {changed:?}");
}

/// Runs `command` (a benchmark, say) to its end, its output captured. Bounded: past `limit` it
/// gets SIGTERM (so that it cleans up what it made), `grace` later SIGKILL, and the test fails
/// naming `what`.
pub fn run_with_cleanup_bound(
    command: &mut Command,
    limit: Duration,
    grace: Duration,
    what: &str,
) -> std::process::Output {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            // SAFETY: a signal to our own child, not yet reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            std::thread::sleep(grace);
            let _ = child.kill();
            panic!("{what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}
