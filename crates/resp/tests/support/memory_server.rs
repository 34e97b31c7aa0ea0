//! A small in-memory key-value server built on the resp crate, the way the real server uses it:
//! Connection + Session, with a BTreeMap where the database would be. Shared by the integration
//! tests (tests/server.rs) and the example (examples/memory_server.rs) so that real clients such
//! as redis-cli and redis-benchmark can be pointed at the protocol layer alone.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use resp::{
    Action, Command, Connection, ConnectionError, Frame, Limits, Op, ServerFacts, Session,
    SetCondition,
};
use tokio::net::{TcpListener, TcpStream};

type Store = Arc<Mutex<BTreeMap<Bytes, Bytes>>>;

/// Accepts connections forever, one task each.
pub async fn serve(listener: TcpListener, limits: Limits) {
    let facts = Arc::new(ServerFacts::new(&limits));
    let store = Store::default();
    let mut next_id = 1;
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let (limits, facts, store) = (limits.clone(), facts.clone(), store.clone());
        let id = next_id;
        next_id += 1;
        tokio::spawn(async move {
            let _ = serve_connection(stream, id, limits, &facts, &store).await;
        });
    }
}

async fn serve_connection(
    stream: TcpStream,
    id: u64,
    limits: Limits,
    facts: &ServerFacts,
    store: &Store,
) -> Result<(), ConnectionError> {
    stream.set_nodelay(true)?;
    let mut connection = Connection::new(stream, limits.clone());
    let mut session = Session::new(id, &limits);
    loop {
        let parsed = match connection.read_command().await {
            Ok(Some(parsed)) => parsed,
            Ok(None) => break,
            Err(ConnectionError::Protocol(error)) => {
                connection.write_reply(&error.to_frame(), session.protocol()).await?;
                break;
            }
            Err(error) => return Err(error),
        };
        let reply = match session.handle(parsed, facts) {
            Action::Reply(reply) => reply,
            Action::ReplyAndClose(reply) => {
                connection.write_reply(&reply, session.protocol()).await?;
                break;
            }
            Action::Close => break,
            // This server requires no password, so sessions never ask.
            Action::Authenticate { .. } => session.authenticated(None, None, facts),
            Action::Execute(command) => execute(&mut store.lock().unwrap(), command),
            Action::UnwatchAndReply(reply) => reply,
            Action::ExecuteTransaction(commands) => {
                let mut store = store.lock().unwrap();
                Frame::Array(
                    commands.into_iter().map(|command| execute(&mut store, command)).collect(),
                )
            }
        };
        connection.write_reply(&reply, session.protocol()).await?;
    }
    connection.shutdown().await
}

fn execute(store: &mut BTreeMap<Bytes, Bytes>, command: Command) -> Frame {
    // Keys and values are slices of the read buffer: copy them before keeping them.
    let own = |bytes: Bytes| Bytes::copy_from_slice(&bytes);
    if let Some(reply) = command.local_reply() {
        return reply;
    }
    match command {
        Command::Data { op: Op::Get { key }, .. } => {
            store.get(&key).cloned().map_or(Frame::Null, Frame::Bulk)
        }
        Command::Data { op: Op::Set { key, value, condition, .. }, .. } => {
            let exists = store.contains_key(&key);
            match (condition, exists) {
                (SetCondition::IfAbsent, true) | (SetCondition::IfPresent, false) => Frame::Null,
                _ => {
                    store.insert(own(key), own(value));
                    Frame::ok()
                }
            }
        }
        Command::Data { op: Op::Del { keys }, .. } => {
            Frame::Integer(keys.iter().filter(|key| store.remove(*key).is_some()).count() as i64)
        }
        Command::Data { op: Op::Exists { keys }, .. } => {
            Frame::Integer(keys.iter().filter(|key| store.contains_key(*key)).count() as i64)
        }
        Command::Data { op: Op::IncrBy { key, increment: by }, .. } => increment(store, key, by),
        Command::Data { op: Op::MSet { pairs }, .. } => {
            for (key, value) in pairs {
                store.insert(own(key), own(value));
            }
            Frame::ok()
        }
        Command::Data { op: Op::MGet { keys }, .. } => Frame::Array(
            keys.iter()
                .map(|key| store.get(key).cloned().map_or(Frame::Null, Frame::Bulk))
                .collect(),
        ),
        Command::DbSize => Frame::Integer(store.len() as i64),
        Command::Keys { pattern } => Frame::Array(
            store
                .keys()
                .filter(|key| resp::glob::matches(&pattern, key))
                .map(|key| Frame::Bulk(key.clone()))
                .collect(),
        ),
        Command::Scan { cursor, pattern, count, .. } => {
            // The cursor is the number of keys already visited, in key order.
            let count = count.unwrap_or(10) as usize;
            let start = cursor as usize;
            let visited: Vec<&Bytes> = store.keys().skip(start).take(count).collect();
            let next = if start + visited.len() >= store.len() { 0 } else { start + visited.len() };
            let keys = visited
                .into_iter()
                .filter(|key| {
                    pattern.as_ref().is_none_or(|pattern| resp::glob::matches(pattern, key))
                })
                .map(|key| Frame::Bulk(key.clone()))
                .collect();
            Frame::Array(vec![Frame::bulk(next.to_string()), Frame::Array(keys)])
        }
        Command::Info { .. } => {
            Frame::bulk("# Server\r\nredis_version:7.2.0\r\nredoguard_test_server:1\r\n")
        }
        other => {
            Frame::error(format!("ERR '{}' is not available in the test server", other.name()))
        }
    }
}

fn increment(store: &mut BTreeMap<Bytes, Bytes>, key: Bytes, by: i64) -> Frame {
    let current = match store.get(&key) {
        None => 0,
        Some(value) => {
            match std::str::from_utf8(value).ok().and_then(|text| text.parse::<i64>().ok()) {
                Some(number) => number,
                None => return Frame::error("ERR value is not an integer or out of range"),
            }
        }
    };
    let Some(next) = current.checked_add(by) else {
        return Frame::error("ERR increment or decrement would overflow");
    };
    store.insert(Bytes::copy_from_slice(&key), Bytes::from(next.to_string()));
    Frame::Integer(next)
}
