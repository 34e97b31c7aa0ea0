//! Roles and incarnations: which member of a configuration is the primary, and how that
//! changes without ever letting two members take writes at once.
//!
//! - `history`: the incarnation history of a database (where each incarnation began), kept
//!   durably beside its redo, as PostgreSQL keeps timeline history files;
//! - `follow`: whether a standby may follow a primary of a given incarnation, must adopt a
//!   newer one, has diverged from it, or knows the primary to be stale (fenced).
//!
//! See `docs/roles.md` for the protocol and the argument for why it is safe.
//!
//! *Architecture Invariant*: this crate decides, it does not act: it does no network I/O
//! and starts no thread. The server applies its decisions; redo transport carries the facts
//! they are made from (a hello's incarnation history, a refusal naming a newer incarnation).

pub mod follow;
pub mod history;

pub use follow::{StandbyView, Verdict, decide};
pub use history::{Branch, HistoryError, IncarnationHistory};
