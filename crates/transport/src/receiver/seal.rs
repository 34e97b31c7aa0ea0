//! The seal a failover target puts on the member it receives from (its far sync, or a
//! cascading standby): "I fail over from this primary; take no more of its redo, and tell me
//! where yours ends" (`RelaySeal`, docs/roles.md, "Failover through a far sync").
//!
//! Order, and why it is enough: the seal is set first; then the receiver takes `following`
//! exclusively, which every write received holds while it is checked and written, so no write
//! of the sealed incarnation is written after; then what was received is synced, and that
//! durable end is the answer. A relay acknowledges a write (SYNC AFFIRM) only once it is
//! durable, so every write the old primary counted as acknowledged by this relay is at or
//! before that end, and none after it is ever acknowledged (each connection of the old
//! incarnation is ended at its next message, and its hellos are refused). What a connection
//! received and had not yet handed on is handed to the forwarder as it ends: the target gets
//! all of it.
//!
//! The seal is in the control file (`ControlData::sealed_below`) before it is answered: a
//! restart of this member keeps it, so the old primary, if alive behind a partition, can never
//! again count this member's acknowledgement once the target may have opened.

use std::sync::atomic::Ordering;
use std::time::Duration;

use proto::{ErrorCode, ErrorMessage, Hello, Message, RelaySeal};

use super::Inner;
use super::handshake::primary_of;
use crate::conn::Conn;

impl Inner {
    /// Why this hello's redo is no longer taken, if a seal covers its incarnation.
    pub(super) fn sealed(&self, hello: &Hello) -> Option<ErrorMessage> {
        let sealed_below = self.sealed_below.load(Ordering::Acquire);
        let sealed = !roles::relay::takes_redo(
            redo::Incarnation(sealed_below),
            redo::Incarnation(hello.incarnation),
        );
        sealed.then(|| {
            ErrorMessage::new(
                ErrorCode::ShuttingDown,
                format!(
                    "this member is sealed: a failover target took its redo of incarnation {} and fails over from '{}'; it takes no more of that incarnation",
                    sealed_below - 1,
                    primary_of(hello)
                ),
            )
        })
    }

    /// Serves a `RelaySeal`: checks who asks, seals, syncs, and answers with this member's
    /// `RoleInfo` at its durable end.
    pub(super) fn serve_seal(&self, mut conn: Conn, seal: RelaySeal) {
        match self.seal(&seal) {
            Ok(info) => {
                let _ = conn.send(&Message::RoleInfo(info), Duration::from_secs(10));
                conn.shutdown();
            }
            Err(error) => self.refusals.refuse(&mut conn, error),
        }
    }

    fn seal(&self, seal: &RelaySeal) -> Result<proto::RoleInfo, ErrorMessage> {
        let refuse = |code: ErrorCode, reason: String| {
            Err(ErrorMessage::new(
                code,
                format!("'{}' asks for the tail of '{}': {reason}", seal.member, seal.primary),
            ))
        };
        if self.shutdown.load(Ordering::Acquire) {
            return refuse(ErrorCode::ShuttingDown, "this member is changing its role".into());
        }
        let Some(cascade) = &self.cascade else {
            return refuse(ErrorCode::NotAStandby, "this member has no redo routes".into());
        };
        // The primary this member receives from: the one named, or (a target that has heard
        // from no primary since it started names none) the one it knows.
        let heard = self.heard.lock().primary_member.clone();
        let primary = match (seal.primary.as_str(), heard) {
            ("", Some(heard)) => heard,
            ("", None) => {
                return refuse(
                    ErrorCode::NotAStandby,
                    "neither it nor this member knows which primary it fails over from".into(),
                );
            }
            (named, Some(heard)) if heard != named => {
                return refuse(
                    ErrorCode::NotAStandby,
                    format!("this member receives the redo of '{heard}', not of '{named}'"),
                );
            }
            (named, _) => named.to_string(),
        };
        // Only the member the routes under that primary give its redo from this one.
        let replication = &cascade.context().replication;
        let me = replication.member.clone().unwrap_or_default();
        let source = replication
            .route_tree(&primary)
            .and_then(|tree| tree.source_of(&seal.member).map(str::to_string));
        if source.as_deref() != Some(me.as_str()) {
            return refuse(
                ErrorCode::Unauthenticated,
                format!(
                    "the redo routes under '{primary}' do not give '{}' its redo from '{me}'",
                    seal.member
                ),
            );
        }
        let incarnation = self.redo.control().incarnation.0;
        if incarnation != seal.incarnation {
            return refuse(
                ErrorCode::NotAStandby,
                format!(
                    "this member is in incarnation {incarnation}, not {}: it holds no tail of that incarnation to give",
                    seal.incarnation
                ),
            );
        }
        let sealing = |below: u32| {
            roles::relay::seal(redo::Incarnation(below), redo::Incarnation(seal.incarnation))
        };
        let before = self
            .sealed_below
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |below| Some(sealing(below).0))
            .unwrap_or_else(|below| below);
        let below = sealing(before);
        // No write of the sealed incarnation is being written once this is held.
        drop(self.following.write());
        // On disk before it is answered: a restart of this member must not let the old
        // primary acknowledge through it again once the target has opened.
        self.redo.seal_below(below).map_err(|error| {
            ErrorMessage::new(ErrorCode::Internal, format!("recording the seal: {error}"))
        })?;
        let end = self.redo.sync_received().map_err(|error| {
            ErrorMessage::new(ErrorCode::Internal, format!("syncing the standby logs: {error}"))
        })?;
        // Its forwarder may not run (this member restarted, and no primary said hello since:
        // the forwarder starts at a primary's hello), or wait to reconnect to the target: the
        // tail goes now.
        cascade.follow(&primary, &self.upstream);
        cascade.connect_now(&seal.member);
        tracing::warn!(target_member = %seal.member, %primary, incarnation = seal.incarnation, end = %end, "relay sealed: a failover target takes this member's redo; no more of that incarnation is taken");
        let mut info = (self.role_info)();
        info.primary = primary;
        info.position.current_seq = end.seq.0;
        info.position.current_offset = end.offset;
        Ok(info)
    }
}
