//! The admin API of a redoguard server as its callers see it: the client the `redoguard`
//! commands, the broker, the observer and the workload call it with (`client`), and the token
//! a server makes for itself when its configuration gives none (`token`).
//!
//! *Architecture Invariant*: this crate knows nothing of the server, the database or redo
//! transport; callers that need none of those link none of them through it.

pub mod client;
pub mod token;

pub use client::{
    AdminClient, http_call, http_call_with_body, http_get, http_post, set_admin_client,
};
