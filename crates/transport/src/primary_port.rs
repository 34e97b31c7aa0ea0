//! The port a primary's redo listener serves: it takes no redo, but its peers still talk to
//! it there.
//!
//! - A hello (another member that believes it is primary and ships to this one): refused.
//!   If the sender's incarnation is older than this primary's, the refusal is
//!   `NewerIncarnation`: the sender has been failed over and learns it here (it fences
//!   itself). If it is newer, it is *this* primary that has been failed over: it reports
//!   `TransportEvent::Fenced` (the server stops its writes) and refuses as not a standby.
//! - A probe: this member's `RoleInfo`.
//! - A copy request: a consistent copy of the data for a new standby (`copy`).

use std::sync::Arc;

use proto::{CopyRequest, ErrorCode, ErrorMessage, Hello, RoleInfo};
use redo::Incarnation;

use crate::conn::Conn;
use crate::copy::CopyServer;
use crate::listener::{RedoPort, Refusals};
use crate::primary::{TransportEvent, TransportEvents};
use crate::receiver::RoleInfoSource;

pub struct PrimaryPort {
    pub member: String,
    pub incarnation: Incarnation,
    pub role_info: RoleInfoSource,
    pub events: TransportEvents,
    pub refusals: Arc<Refusals>,
    /// Serves copies (none: refused, e.g. while the primary is fenced).
    pub copy: Option<CopyServer>,
}

impl RedoPort for PrimaryPort {
    fn hello(&self, mut conn: Conn, hello: Hello) {
        let theirs = Incarnation(hello.incarnation);
        if theirs < self.incarnation {
            self.refusals.refuse(
                &mut conn,
                ErrorMessage {
                    code: ErrorCode::NewerIncarnation,
                    message: format!(
                        "'{}' is the primary in incarnation {}; '{}' of incarnation {} has been failed over and must not take writes (reinstate it as a standby)",
                        self.member, self.incarnation, hello.member, hello.incarnation
                    ),
                    incarnation: self.incarnation.0,
                    primary: self.member.clone(),
                },
            );
            return;
        }
        if theirs > self.incarnation {
            let reason = format!(
                "'{}' shipped redo of incarnation {} to this primary of incarnation {}: this primary has been failed over",
                hello.member, hello.incarnation, self.incarnation
            );
            (self.events)(TransportEvent::Fenced {
                incarnation: hello.incarnation,
                primary: hello.member.clone(),
                reason: reason.clone(),
            });
            self.refusals.refuse(
                &mut conn,
                ErrorMessage {
                    code: ErrorCode::NotAStandby,
                    message: format!(
                        "'{}' is a failed-over primary: reinstate it before it can follow",
                        self.member
                    ),
                    incarnation: self.incarnation.0,
                    primary: hello.member.clone(),
                },
            );
            return;
        }
        tracing::error!(peer = %conn.peer, sender = %hello.member, incarnation = %self.incarnation, "another member claims to be primary in this primary's own incarnation");
        self.refusals.refuse(
            &mut conn,
            ErrorMessage {
                code: ErrorCode::NotAStandby,
                message: format!(
                    "'{}' is the primary of incarnation {}; it takes no redo",
                    self.member, self.incarnation
                ),
                incarnation: self.incarnation.0,
                primary: self.member.clone(),
            },
        );
    }

    fn role_info(&self) -> RoleInfo {
        (self.role_info)()
    }

    fn copy(&self, mut conn: Conn, request: CopyRequest) {
        let Some(server) = &self.copy else {
            self.refusals.refuse(
                &mut conn,
                ErrorMessage::new(
                    ErrorCode::NotAStandby,
                    format!(
                        "'{}' cannot serve a copy now (it is fenced or changing its role)",
                        self.member
                    ),
                ),
            );
            return;
        };
        if let Err(reason) = server.serve(&mut conn, &request) {
            tracing::warn!(standby = %request.member, reason, "copy to a new standby failed");
            conn.refuse(ErrorMessage::new(ErrorCode::Internal, reason));
        }
    }
}
