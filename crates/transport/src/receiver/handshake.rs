//! A primary's connection from its hello on: the hello's checks (database, protocol version,
//! log layout), the incarnation check (`roles::follow`: follow, adopt, or refuse and fence),
//! the welcome, and which primary is connected while it is served.

use std::sync::atomic::Ordering;
use std::time::Instant;

use proto::{ErrorCode, ErrorMessage, Hello, LocalIdentity, Message};
use redo::types::now_unix_us;
use redo::{DatabaseId, Fence, Incarnation, Scn};
use roles::{Branch, StandbyView, Verdict};

use super::Inner;
use crate::conn::Conn;

/// The primary whose redo a hello brings: the sender, or the one it forwards (cascading).
pub(super) fn primary_of(hello: &Hello) -> &str {
    if hello.relay_of.is_empty() { &hello.member } else { &hello.relay_of }
}

impl Inner {
    fn refuse(&self, conn: &mut Conn, error: ErrorMessage) {
        self.refusals.refuse(conn, error);
    }

    /// Whether this standby may follow the hello's primary (see `roles::follow`); records a
    /// newer incarnation it follows, or the fence of one it cannot, before answering.
    fn check_incarnation(&self, hello: &Hello) -> Result<(), ErrorMessage> {
        let _following = self.following.write();
        let control = self.redo.control();
        let mut history = self.history.lock();
        let theirs: Vec<Branch> = hello.history.iter().map(Branch::from_wire).collect();
        let view = StandbyView {
            incarnation: control.incarnation,
            history: &history,
            next: self.redo.standby_position().next,
            fenced_by: control.fenced.as_ref().map(|fence| fence.incarnation),
            data_through: control.checkpoint_scn,
        };
        match roles::decide(&view, Incarnation(hello.incarnation), &theirs) {
            Verdict::Follow => Ok(()),
            Verdict::Adopt(branches) => {
                // (Oldest first: where the first incarnation it enters began.)
                let first_scn = branches.first().map_or(Scn(u64::MAX), |branch| branch.first_scn);
                let mut adopted = history.clone();
                for branch in branches {
                    adopted
                        .push(branch)
                        .map_err(|reason| ErrorMessage::new(ErrorCode::Internal, reason))?;
                }
                let newest = adopted.newest();
                adopted
                    .save(self.storage.as_ref(), &self.redo.config().dir)
                    .map_err(|error| ErrorMessage::new(ErrorCode::Internal, error.to_string()))?;
                *history = adopted;
                self.redo
                    .adopt_incarnation(newest, first_scn)
                    .map_err(|error| ErrorMessage::new(ErrorCode::Internal, error.to_string()))?;
                self.newest_known.fetch_max(newest.0, Ordering::AcqRel);
                tracing::info!(primary = %hello.member, %newest, "standby: follows its primary into a new incarnation");
                Ok(())
            }
            Verdict::StalePrimary { newest } => {
                let primary = self
                    .heard
                    .lock()
                    .primary_member
                    .clone()
                    .or_else(|| control.fenced.as_ref().map(|fence| fence.by.clone()))
                    .or_else(|| history.branch(newest).map(|branch| branch.member.clone()))
                    .unwrap_or_default();
                Err(ErrorMessage {
                    code: ErrorCode::NewerIncarnation,
                    message: format!(
                        "this standby follows incarnation {newest}{}; the primary '{}' of incarnation {} has been failed over and must not take writes (reinstate it as a standby)",
                        if primary.is_empty() {
                            String::new()
                        } else {
                            format!(" of primary '{primary}'")
                        },
                        primary_of(hello),
                        hello.incarnation
                    ),
                    incarnation: newest.0,
                    primary,
                })
            }
            Verdict::Diverged(reason) => {
                // It can follow no primary of this incarnation or older: refuse the old
                // branch's primary from now on too, even across restarts.
                if let Err(error) = self.redo.fence(Fence {
                    incarnation: Incarnation(hello.incarnation),
                    by: primary_of(hello).to_string(),
                }) {
                    tracing::error!(%error, "standby: cannot record the fence");
                }
                self.newest_known.fetch_max(hello.incarnation, Ordering::AcqRel);
                Err(ErrorMessage {
                    code: ErrorCode::Diverged,
                    message: format!(
                        "this standby cannot follow '{}': {reason}",
                        primary_of(hello)
                    ),
                    incarnation: hello.incarnation,
                    primary: primary_of(hello).to_string(),
                })
            }
        }
    }

    /// One connection from the primary, after its hello.
    pub(super) fn serve(&self, mut conn: Conn, hello: Hello) {
        if self.shutdown.load(Ordering::Acquire) {
            conn.refuse(ErrorMessage::new(
                ErrorCode::ShuttingDown,
                "the standby is stopping or changing its role",
            ));
            return;
        }
        let config = self.redo.config();
        let local = LocalIdentity {
            database_id: self.redo.identity().database_id.0,
            block_size: config.block_size,
            log_file_size: config.log_file_size,
        };
        if let Err(error) = proto::check_hello(&hello, &local) {
            self.refuse(&mut conn, error);
            return;
        }
        // Forwarded redo (cascading) only from the member the routes under its primary name,
        // checked before the incarnation check can adopt anything of it.
        if !hello.relay_of.is_empty() {
            let accepted = match &self.cascade {
                Some(cascade) => cascade.context().accepts_relay(&hello.relay_of, &hello.member),
                None => Err("this standby has no redo routes: it takes redo from its primary only"
                    .to_string()),
            };
            if let Err(reason) = accepted {
                self.refuse(
                    &mut conn,
                    ErrorMessage::new(
                        ErrorCode::Unauthenticated,
                        format!(
                            "this standby refuses the redo of '{}' forwarded by '{}': {reason}",
                            hello.relay_of, hello.member
                        ),
                    ),
                );
                return;
            }
        }
        if let Some(refusal) = self.sealed(&hello) {
            self.refuse(&mut conn, refusal);
            return;
        }
        if let Err(error) = self.check_incarnation(&hello) {
            self.refuse(&mut conn, error);
            return;
        }
        // A new standby adopts an identity only from a peer that has proved itself: by its
        // certificate (TLS), or else as the primary reached at its configured address.
        if local.database_id == 0
            && let Some(vouch) = &self.vouch
            && let Err(reason) = vouch(&hello, conn.peer)
        {
            self.refuse(
                &mut conn,
                ErrorMessage::new(
                    ErrorCode::Unauthenticated,
                    format!(
                        "this new standby adopts no database identity from this peer: {reason}"
                    ),
                ),
            );
            return;
        }
        if let Err(error) = self.redo.adopt_identity(DatabaseId(hello.database_id)) {
            // A database closing (a role change, a stop) writes nothing more: not a wrong one.
            let code = if matches!(error, redo::RedoError::Shutdown) {
                ErrorCode::ShuttingDown
            } else {
                ErrorCode::WrongDatabase
            };
            self.refuse(&mut conn, ErrorMessage::new(code, error.to_string()));
            return;
        }
        if hello.channel == proto::Channel::Control && self.redo.config().groups < hello.groups {
            tracing::warn!(
                standby_groups = self.redo.config().groups,
                primary_groups = hello.groups,
                "standby: fewer standby log groups than the primary's groups; receiving may wait for the archiver"
            );
        }
        let welcome = Message::Welcome(proto::Welcome {
            version: proto::PROTOCOL_VERSION,
            database_id: hello.database_id,
            position: self.position(),
            standby_time_us: now_unix_us(),
        });
        if conn.send(&welcome, crate::listener::HELLO_TIMEOUT).is_err() {
            return;
        }
        conn.count_decompression(self.decompression.clone());
        tracing::info!(peer = %conn.peer, primary = %primary_of(&hello), sender = %hello.member, destination = %hello.destination, channel = ?hello.channel, "standby: primary connected");
        // An archive connection carries whole logs only: it says nothing of the primary's
        // clock or progress, and is not the primary's address in status.
        let archive = hello.channel == proto::Channel::Archive;
        if !archive {
            let mut heard = self.heard.lock();
            heard.peers.push(conn.peer);
            if !hello.relay_of.is_empty() {
                heard.relayed.push(conn.peer);
            }
            heard.at = Some(Instant::now());
            heard.primary_time_us = hello.primary_time_us;
            if !hello.member.is_empty() {
                heard.primary_member = Some(primary_of(&hello).to_string());
                heard.source_member = (!hello.relay_of.is_empty()).then(|| hello.member.clone());
            }
            // A new session (a primary restarted, or another one after a switchover): what the
            // last one said of this standby's observer and whether it is synchronized is not
            // this one's word, nor is what it said for the targets behind this member (a relay
            // passes on only its current session's word), nor a relay's silence of its
            // primary. Its heartbeats say them again. (Kept when a session ends without a new
            // one: a failover needs the last primary's word.)
            if hello.channel == proto::Channel::Control {
                heard.observer = None;
                heard.caught_up = false;
                heard.relay_targets.clear();
                heard.relay_silence = None;
            }
        }
        // What this member receives from the primary goes on along its routes.
        if hello.channel == proto::Channel::Control
            && !hello.member.is_empty()
            && let Some(cascade) = &self.cascade
        {
            cascade.follow(primary_of(&hello), &self.upstream);
        }
        let result = self.receive(&mut conn, &hello);
        {
            let mut heard = self.heard.lock();
            if let Some(at) = heard.relayed.iter().position(|peer| *peer == conn.peer) {
                heard.relayed.remove(at);
            }
            if let Some(at) = heard.peers.iter().position(|peer| *peer == conn.peer) {
                heard.peers.remove(at);
            }
            if let Err(reason) = &result {
                heard.last_error = Some(reason.clone());
            }
        }
        match result {
            Ok(()) => tracing::info!(peer = %conn.peer, "standby: primary disconnected"),
            Err(reason) => {
                tracing::warn!(peer = %conn.peer, primary = %primary_of(&hello), sender = %hello.member, channel = ?hello.channel, reason, "standby: connection from the primary ended")
            }
        }
    }
}
