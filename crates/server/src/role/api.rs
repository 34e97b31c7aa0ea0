//! What the admin API says about roles, and what its role-change endpoints take and answer: the
//! `admin` crate's types (`admin::roles`), shared with the commands that call them.

pub use admin::roles::{
    FastStartStatus, Promoted, Reinstated, RoleStatus, SetAside, SwitchoverPrepared,
};
