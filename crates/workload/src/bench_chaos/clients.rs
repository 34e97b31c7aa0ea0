//! The clients of `bench chaos`, writing all through a campaign and recording every operation
//! in the history: some find the primary through the observers' Sentinel fronts (as Redis
//! client libraries do), some are connected directly to one member each, whatever its role
//! (an application that has an address configured: the one that would see a deposed primary
//! still acknowledging).
//!
//! Each client writes in a closed loop, one operation in flight, [`PACE`] between them: three
//! `SET key key` (every key unique) and one `INCR` of a counter shared by every client. One
//! more direct client per member writes only `SET`s on a connection in `COMMITMODE NOWAIT`
//! (acknowledged before the redo is durable: what a deposed primary must not do either). A
//! Sentinel client asks `SENTINEL get-master-addr-by-name` of the first observer that answers,
//! follows `+switch-master` on both, and after any error asks again; a direct client
//! reconnects to its member. An error reply that says the member did not run the command
//! (`-READONLY`, `-TRYAGAIN`, writes refused) is a failure; no reply within
//! [`COMMAND_TIMEOUT`], a connection lost with the command sent, or any other error (a commit
//! not confirmed) is indeterminate.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;
use resp::Frame;
use tokio::sync::watch;

use super::history::{History, Operation, Outcome, Request};
use crate::client::Client;
use crate::sentinel::{ask_master, follow_switches};

/// Clients that find the primary through Sentinel.
pub(crate) const SENTINEL_CLIENTS: usize = 4;
/// Counters every client increments.
pub(crate) const COUNTERS: usize = 2;
/// The pause between two operations of a client: the load is steady, not a flood (every
/// acknowledged key is read back after every round).
pub(crate) const PACE: Duration = Duration::from_millis(40);
/// A command not answered within this is given up: indeterminate.
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// The wait after an error before trying again.
const RETRY: Duration = Duration::from_millis(50);
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(500);

/// Whom the clients write to.
#[derive(Debug, Clone)]
pub(crate) struct Targets {
    /// The observers' Sentinel fronts, in order, and the master name.
    pub(crate) sentinels: Vec<SocketAddr>,
    pub(crate) master: String,
    /// Every member's name and client address: one direct client each.
    pub(crate) members: Vec<(String, SocketAddr)>,
    /// Every key and counter begins with this (unique per epoch).
    pub(crate) prefix: String,
}

impl Targets {
    fn member_at(&self, addr: SocketAddr) -> String {
        self.members
            .iter()
            .find(|(_, member)| *member == addr)
            .map_or_else(|| addr.to_string(), |(name, _)| name.clone())
    }

    pub(crate) fn counter(&self, number: usize) -> String {
        format!("{}:counter:{number}", self.prefix)
    }
}

/// The clients, on a thread of their own inside the clients' network namespace.
pub(crate) struct Clients {
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Clients {
    pub(crate) fn start(
        targets: Targets,
        history: Arc<History>,
        namespace: String,
    ) -> anyhow::Result<Clients> {
        let (stop, stopped) = watch::channel(false);
        let thread = std::thread::Builder::new().name("chaos-clients".into()).spawn(move || {
            let _inside =
                linkemu::namespace::enter(&namespace).context("entering the clients' site")?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the clients' runtime")?;
            runtime.block_on(run(targets, history, stopped));
            Ok(())
        })?;
        Ok(Clients { stop, thread: Some(thread) })
    }

    /// Stops every client (an operation in flight is recorded as indeterminate).
    pub(crate) fn stop(mut self) -> anyhow::Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        match self.thread.take() {
            Some(thread) => {
                thread.join().map_err(|_| anyhow::anyhow!("the clients' thread panicked"))?
            }
            None => Ok(()),
        }
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

async fn run(targets: Targets, history: Arc<History>, stop: watch::Receiver<bool>) {
    let (named, _) = watch::channel::<Option<SocketAddr>>(None);
    let mut followers = tokio::task::JoinSet::new();
    for &sentinel in &targets.sentinels {
        followers.spawn(follow_switches(sentinel, named.clone(), stop.clone()));
    }
    let targets = Arc::new(targets);
    let mut clients = tokio::task::JoinSet::new();
    let mut spawn = |name: String, direct: Option<SocketAddr>, nowait: bool, number: usize| {
        let client = OneClient {
            name,
            direct,
            nowait,
            number,
            targets: targets.clone(),
            history: history.clone(),
            named: named.subscribe(),
            stop: stop.clone(),
            sequence: 0,
        };
        clients.spawn(client.run());
    };
    for number in 0..SENTINEL_CLIENTS {
        spawn(format!("sentinel-{number}"), None, false, number);
    }
    for (number, (name, addr)) in targets.members.iter().enumerate() {
        spawn(format!("direct-{name}"), Some(*addr), false, SENTINEL_CLIENTS + number);
        spawn(format!("nowait-{name}"), Some(*addr), true, SENTINEL_CLIENTS + number);
    }
    while clients.join_next().await.is_some() {}
    followers.abort_all();
}

struct OneClient {
    name: String,
    /// A direct client's member; `None`: through Sentinel.
    direct: Option<SocketAddr>,
    /// Writes only `SET`s, in `COMMITMODE NOWAIT`.
    nowait: bool,
    number: usize,
    targets: Arc<Targets>,
    history: Arc<History>,
    named: watch::Receiver<Option<SocketAddr>>,
    stop: watch::Receiver<bool>,
    sequence: u64,
}

impl OneClient {
    async fn run(mut self) {
        let mut switched_to: Option<SocketAddr> = None;
        while !*self.stop.borrow() {
            let target = match (self.direct, switched_to.take()) {
                (Some(addr), _) => Some(addr),
                (None, Some(addr)) => Some(addr),
                (None, None) => self.primary().await,
            };
            if let Some(addr) = target {
                switched_to = self.write_to(addr).await;
            }
            if switched_to.is_none() {
                tokio::select! {
                    _ = tokio::time::sleep(RETRY) => {}
                    _ = self.stop.changed() => break,
                }
            }
        }
    }

    async fn primary(&self) -> Option<SocketAddr> {
        for &sentinel in &self.targets.sentinels {
            let asked =
                tokio::time::timeout(SENTINEL_TIMEOUT, ask_master(sentinel, &self.targets.master));
            if let Ok(Ok(Some(addr))) = asked.await {
                return Some(addr);
            }
        }
        None
    }

    /// The next request of this client.
    fn next_request(&mut self) -> Request {
        let sequence = self.sequence;
        self.sequence += 1;
        if sequence % 4 == 3 && !self.nowait {
            Request::Increment {
                counter: self.targets.counter((self.number + sequence as usize) % COUNTERS),
            }
        } else {
            let key = format!("{}:{}:{sequence}", self.targets.prefix, self.name);
            Request::Set { value: key.clone(), key, nowait: self.nowait }
        }
    }

    /// Writes to `addr` until an error or the stop; returns the primary a Sentinel named
    /// instead, if that is why it left.
    async fn write_to(&mut self, addr: SocketAddr) -> Option<SocketAddr> {
        let Ok(Ok(mut client)) = tokio::time::timeout(CONNECT_TIMEOUT, Client::connect(addr)).await
        else {
            return None;
        };
        if self.nowait {
            let mode =
                tokio::time::timeout(COMMAND_TIMEOUT, client.command(&[b"COMMITMODE", b"NOWAIT"]));
            if !matches!(mode.await, Ok(Ok(Frame::Simple(_)))) {
                return None;
            }
        }
        let member = self.targets.member_at(addr);
        loop {
            if *self.stop.borrow() {
                return None;
            }
            if self.direct.is_none()
                && let Some(named) = *self.named.borrow_and_update()
                && named != addr
            {
                return Some(named);
            }
            let request = self.next_request();
            let invoked_us = self.history.now_us();
            let reply = {
                let (first, second, third): (&[u8], &[u8], Option<&[u8]>) = match &request {
                    Request::Set { key, value, .. } => {
                        (b"SET", key.as_bytes(), Some(value.as_bytes()))
                    }
                    Request::Increment { counter } => (b"INCR", counter.as_bytes(), None),
                };
                let mut args = vec![first, second];
                args.extend(third);
                let command = tokio::time::timeout(COMMAND_TIMEOUT, client.command(&args));
                tokio::select! {
                    reply = command => Some(reply),
                    _ = self.stop.changed() => None,
                }
            };
            let (outcome, keep) = match reply {
                None => (Outcome::Indeterminate { reason: "the campaign stopped".into() }, false),
                Some(Err(_)) => (
                    Outcome::Indeterminate {
                        reason: format!("no reply within {COMMAND_TIMEOUT:?}"),
                    },
                    false,
                ),
                Some(Ok(Err(error))) => {
                    (Outcome::Indeterminate { reason: format!("{error:#}") }, false)
                }
                Some(Ok(Ok(frame))) => judge(&request, frame),
            };
            self.history.record(Operation {
                client: self.name.clone(),
                request,
                member: member.clone(),
                invoked_us,
                completed_us: self.history.now_us(),
                outcome,
            });
            if !keep {
                return None;
            }
            tokio::select! {
                _ = tokio::time::sleep(PACE) => {}
                _ = self.stop.changed() => return None,
            }
        }
    }
}

/// The outcome a reply means, and whether the connection may go on being used.
fn judge(request: &Request, frame: Frame) -> (Outcome, bool) {
    match (request, frame) {
        (Request::Set { .. }, Frame::Simple(_)) => (Outcome::Ok { value: None }, true),
        (Request::Increment { .. }, Frame::Integer(value)) => {
            (Outcome::Ok { value: Some(value) }, true)
        }
        (_, Frame::Error(message)) => {
            let message = String::from_utf8_lossy(&message).into_owned();
            if refused(&message) {
                (Outcome::Fail { reason: message }, false)
            } else {
                (Outcome::Indeterminate { reason: message }, false)
            }
        }
        (_, other) => {
            (Outcome::Indeterminate { reason: format!("unexpected reply {other:?}") }, false)
        }
    }
}

/// Whether an error reply says the command was not run: the write gate's refusals (a standby,
/// a fenced or isolated primary, a role change) and new redo refused.
pub(crate) fn refused(message: &str) -> bool {
    message.starts_with("READONLY")
        || message.starts_with("TRYAGAIN")
        || message.starts_with("ERR writes are refused")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_judged_as_done_not_done_or_unknown() {
        let set = Request::Set { key: "k".into(), value: "k".into(), nowait: false };
        let incr = Request::Increment { counter: "n".into() };
        assert_eq!(judge(&set, Frame::ok()), (Outcome::Ok { value: None }, true));
        assert_eq!(judge(&incr, Frame::Integer(7)), (Outcome::Ok { value: Some(7) }, true));
        for refusal in [
            "READONLY You can't write against a read only replica.",
            "TRYAGAIN this primary hears from neither its standby nor the observer",
            "ERR writes are refused: archiving failed",
        ] {
            let (outcome, keep) = judge(&set, Frame::error(refusal));
            assert!(matches!(outcome, Outcome::Fail { .. }) && !keep, "{refusal}");
        }
        let (outcome, _) = judge(
            &set,
            Frame::error(
                "ERR commit of SCN 9 not confirmed: fenced (the change may or may not be durable)",
            ),
        );
        assert!(matches!(outcome, Outcome::Indeterminate { .. }));
        assert!(matches!(judge(&set, Frame::Integer(1)).0, Outcome::Indeterminate { .. }));
    }

    #[test]
    fn requests_cycle_through_sets_and_a_shared_counter() {
        let (_, stop) = watch::channel(false);
        let (_, named) = watch::channel(None);
        let mut client = OneClient {
            name: "sentinel-1".into(),
            direct: None,
            nowait: false,
            number: 1,
            targets: Arc::new(Targets {
                sentinels: Vec::new(),
                master: "chaos".into(),
                members: vec![("east".into(), "198.19.0.1:7000".parse().unwrap())],
                prefix: "e1".into(),
            }),
            history: Arc::new(History::new(std::time::Instant::now())),
            named,
            stop,
            sequence: 0,
        };
        let requests: Vec<Request> = (0..8).map(|_| client.next_request()).collect();
        assert_eq!(
            requests[0],
            Request::Set {
                key: "e1:sentinel-1:0".into(),
                value: "e1:sentinel-1:0".into(),
                nowait: false
            }
        );
        assert_eq!(requests[3], Request::Increment { counter: "e1:counter:0".into() });
        assert_eq!(requests[7], Request::Increment { counter: "e1:counter:0".into() });
        assert_eq!(client.targets.member_at("198.19.0.1:7000".parse().unwrap()), "east");
        assert_eq!(client.targets.member_at("198.19.0.9:1".parse().unwrap()), "198.19.0.9:1");
    }
}
