//! The admin API of a redoguard server as its callers see it: what it answers (`status`: the
//! server's status and how a person reads it; `roles`: roles, the gate, role changes and
//! settings edits), the client the `redoguard` commands, the broker, the observer and the
//! workload call it with (`client`), the token a server makes for itself when its
//! configuration gives none (`token`), and what the member and observer pages share (`page`).
//!
//! *Architecture Invariant*: this crate knows nothing of the server: the broker, the observer,
//! the workload and the commands reach a server through it, without linking the server (they
//! see the database's, redo's and transport's status types, which these crates define).

pub mod client;
pub mod page;
pub mod roles;
pub mod status;
pub mod token;

pub use roles::GateState;
pub use status::ServerStatus;

pub use client::{
    AdminClient, http_call, http_call_with_body, http_get, http_post, set_admin_client,
};
