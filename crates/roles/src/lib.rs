//! Roles and incarnations: which member of a configuration is the primary, and how that
//! changes without ever letting two members take writes at once.
//!
//! - `history`: the incarnation history of a database (where each incarnation began), kept
//!   durably beside its redo, as PostgreSQL keeps timeline history files;
//! - `confirmation`: whether a restarted primary may take writes again (every enabled
//!   destination welcomed it in its incarnation), or whom it still waits for;
//! - `follow`: whether a standby may follow a primary of a given incarnation, must adopt a
//!   newer one, has diverged from it, or knows the primary to be stale (fenced);
//! - `fast_start`: fast-start failover's decisions: the observer's, the primary's (lease,
//!   grants, the active observer, whether a write may be acknowledged) and a target's (whether
//!   it takes a failover), and what the observer and the primary keep on disk;
//! - `relay`: a failover through a far sync: which relay the target may seal, what a sealed
//!   relay still takes, and when the target holds the relay's whole tail;
//! - `switchover`: whether a switchover's target, by its routes, sees every failover that may
//!   come while the switchover is half done.
//!
//! See `docs/roles.md` and `docs/fast-start-failover.md` for the protocols and the argument
//! for why they are safe; `tests/model.rs` model-checks fast-start failover with stateright,
//! `tests/model_relay.rs` a failover through a far sync, `tests/model_restart.rs` a manual
//! failover with restarts and the confirmation rule.
//!
//! *Architecture Invariant*: this crate decides, it does not act: it does no network I/O,
//! starts no thread and reads no clock (but `fast_start::Time::now`, for its callers). The server applies its decisions; redo transport carries the facts
//! they are made from (a hello's incarnation history, a refusal naming a newer incarnation).

pub mod confirmation;
pub mod fast_start;
pub mod follow;
pub mod history;
pub mod relay;
pub mod switchover;

pub use follow::{StandbyView, Verdict, decide};
pub use history::{Branch, HistoryError, IncarnationHistory};
