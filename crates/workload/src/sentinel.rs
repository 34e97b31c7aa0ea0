//! A Sentinel client, as the benchmarks' writers use one: ask which primary a Sentinel names,
//! and follow its `+switch-master` announcements.

use std::net::SocketAddr;
use std::time::Duration;

use resp::Frame;
use tokio::sync::watch;

use crate::client::Client;

/// How long a connection to a Sentinel may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// `SENTINEL get-master-addr-by-name master` of one Sentinel.
pub(crate) async fn ask_master(
    sentinel: SocketAddr,
    master: &str,
) -> anyhow::Result<Option<SocketAddr>> {
    let mut client = Client::connect(sentinel).await?;
    let reply =
        client.command(&[b"SENTINEL", b"get-master-addr-by-name", master.as_bytes()]).await?;
    Ok(master_addr(&reply))
}

/// The address in a `get-master-addr-by-name` reply (`[ip, port]`).
pub(crate) fn master_addr(reply: &Frame) -> Option<SocketAddr> {
    let Frame::Array(parts) = reply else { return None };
    let [Frame::Bulk(ip), Frame::Bulk(port)] = parts.as_slice() else { return None };
    format!("{}:{}", String::from_utf8_lossy(ip), String::from_utf8_lossy(port)).parse().ok()
}

/// The new primary in a `+switch-master` message (`<name> <old ip> <old port> <new ip> <new
/// port>`).
pub(crate) fn switched_to(message: &[u8]) -> Option<SocketAddr> {
    let text = std::str::from_utf8(message).ok()?;
    let words: Vec<&str> = text.split_whitespace().collect();
    let [_, _, _, ip, port] = words.as_slice() else { return None };
    format!("{ip}:{port}").parse().ok()
}

/// Subscribes to `+switch-master` on one Sentinel (again after any error) and publishes each
/// primary it names.
pub(crate) async fn follow_switches(
    sentinel: SocketAddr,
    named: watch::Sender<Option<SocketAddr>>,
    mut stop: watch::Receiver<bool>,
) {
    while !*stop.borrow() {
        tokio::select! {
            _ = subscribe(sentinel, &named) => {}
            _ = stop.changed() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// One subscription to `+switch-master`, until an error.
async fn subscribe(
    sentinel: SocketAddr,
    named: &watch::Sender<Option<SocketAddr>>,
) -> anyhow::Result<()> {
    let mut client = tokio::time::timeout(CONNECT_TIMEOUT, Client::connect(sentinel)).await??;
    client.command(&[b"SUBSCRIBE", b"+switch-master"]).await?;
    loop {
        if let Frame::Array(parts) = client.reply().await?
            && let [Frame::Bulk(kind), Frame::Bulk(_), Frame::Bulk(message)] = parts.as_slice()
            && kind.as_ref() == b"message"
            && let Some(addr) = switched_to(message)
        {
            named.send_replace(Some(addr));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_replies_parse() {
        let reply = Frame::Array(vec![Frame::bulk("127.0.0.1"), Frame::bulk("6380")]);
        assert_eq!(master_addr(&reply), Some("127.0.0.1:6380".parse().unwrap()));
        assert_eq!(master_addr(&Frame::NullArray), None);
        assert_eq!(
            switched_to(b"bench 127.0.0.1 6379 198.19.0.2 6380"),
            Some("198.19.0.2:6380".parse().unwrap())
        );
        assert_eq!(switched_to(b"bench 127.0.0.1 6379"), None);
    }
}
