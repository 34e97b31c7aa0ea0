//! The server's status as the admin API serves it: its types and how it is printed are the
//! `admin` crate's (`admin::status`), as is the client that fetches it.

pub use admin::client::{
    AdminClient, http_call, http_call_with_body, http_get, http_post, set_admin_client,
};
pub use admin::status::{
    ArchiveSummary, ReplicationStatus, ServerInfo, ServerStatus, now_text, render, time_us,
};
