//! The broker (Data Guard's DGMGRL): one place to see a configuration and to move the primary
//! role between its members. It needs the admin API address of any one member: the member
//! names the others (`GET /configuration`), and each answers for itself (`GET /status`).
//!
//! - `client`: calls to one member's admin API;
//! - `report`: the configuration as every member reports it (`redoguard show configuration`,
//!   `show database`), with warnings;
//! - `edit`: run-time changes of destinations and the protection mode, on every member;
//! - `validate`: is a standby ready to become primary, and if not, what is missing;
//! - `transitions`: switchover, failover and reinstate, each a sequence of member-local steps
//!   (`docs/roles.md` says in which order and why that order is safe).
//!
//! *Architecture Invariant*: the broker holds no state of its own and changes no member
//! directly: every change is a member's own step, refused by the member when it does not hold.

pub mod client;
pub mod edit;
pub mod report;
pub mod transitions;
pub mod validate;

pub use client::{Admin, CallError};
pub use report::{Configuration, MemberReport, gather};
pub use validate::{Validation, validate};
