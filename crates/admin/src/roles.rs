//! What the admin API says about roles, and what its role-change and settings endpoints take
//! and answer (JSON): shared by the server and the `redoguard` commands, the broker and the
//! observer that call them.

use redo::{Fence, LogSeq, RedoAddr, Scn};
use roles::Branch;
use serde::{Deserialize, Serialize};

/// A member's role, as `/status` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoleStatus {
    /// The member this server runs (none in the single-role form).
    pub member: Option<String>,
    /// `primary` or `standby`: the database's own, durable role.
    pub role: String,
    pub incarnation: u32,
    /// A newer incarnation this database is not part of: it must be reinstated.
    pub fenced: Option<Fence>,
    /// Where each incarnation after the first began.
    pub history: Vec<Branch>,
    /// Whether it takes writes now, and if not why.
    pub gate: GateState,
    /// A standby built from a copy: the first log it needed.
    pub base_seq: LogSeq,
    /// The last role change, for a person.
    pub last_change: Option<String>,
    pub last_error: Option<String>,
    /// A switchover prepared on this (old) primary and not completed on its target.
    pub switchover_to: Option<String>,
    /// That switchover's id (0: recorded by a version before ids; the broker does not
    /// complete it).
    #[serde(default)]
    pub switchover_id: Option<u64>,
    /// The incarnation that switchover was prepared in (0: recorded by a version before it
    /// was kept; the broker does not complete it).
    #[serde(default)]
    pub switchover_incarnation: Option<u32>,
    /// Fast-start failover as this member sees it (none when it is not enabled).
    #[serde(default)]
    pub fast_start: Option<FastStartStatus>,
    /// A primary some standby has followed in its incarnation (durable, in its control
    /// file): restarted, it takes no write until a member has confirmed that it was not
    /// failed over meanwhile (its gate `Unconfirmed`).
    #[serde(default)]
    pub followed: bool,
    /// A failover target sealed this member, as its relay, below this incarnation (durable, in
    /// its control file; 0: never): it takes no redo of an older one. Above its own
    /// incarnation, a failover from that one has begun elsewhere: its pending switchover is
    /// void, and it is failed over to only with `--force`.
    #[serde(default)]
    pub sealed_below: u32,
    /// How long this member, as a switchover's target, waits for the old primary's redo
    /// before it refuses (`replication.switchover_wait`): the broker waits that long and a
    /// margin for its answer (none: a version that did not report it).
    #[serde(default)]
    pub switchover_wait_s: Option<f64>,
}

/// Fast-start failover, as a member sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FastStartStatus {
    pub threshold_s: f64,
    pub targets: Vec<String>,
    /// The observer this member takes decisions from (a primary names it; a standby knows it
    /// from its primary), and when the primary last heard from it.
    pub observer: Option<String>,
    pub observer_last_contact_s: Option<f64>,
    /// A primary: every target is synchronized; it waits for the observer's consent to go
    /// on without some target; it is isolated (takes no write); which targets are
    /// synchronized.
    pub synchronized: Option<bool>,
    pub wants_unsync: Option<bool>,
    pub isolated: Option<bool>,
    #[serde(default)]
    pub synchronized_targets: Option<Vec<String>>,
    /// `enabled`, or `observe-only` (the observer watches and decides nothing: `redoguard edit
    /// fast-start observe-only`).
    #[serde(default)]
    pub mode: Option<String>,
    /// The observers of the configuration whose pings this member refused in the last 10 s,
    /// and why (their settings are not this member's): `NAME: reason`, joined by `; `.
    #[serde(default)]
    pub observer_refused: Option<String>,
}

/// The old primary's answer to `POST /roles/switchover/prepare`: it is now a standby, and
/// this is where its redo ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwitchoverPrepared {
    /// The switchover's id, drawn by the old primary: its target never completes a switchover
    /// it refused once (0: an old primary of a version before ids).
    #[serde(default)]
    pub id: u64,
    pub end: RedoAddr,
    pub last_scn: Scn,
    pub incarnation: u32,
    pub elapsed_ms: u64,
    /// The old primary's fast-start failover record (its active observer, the targets it named
    /// one to), which the new primary takes over: a target still naming that observer must not
    /// see another become active at once. None without fast-start failover.
    #[serde(default)]
    pub fast_start: Option<roles::fast_start::PrimaryRecord>,
}

/// The new primary's answer to a promotion (switchover or failover).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Promoted {
    pub member: String,
    pub incarnation: u32,
    /// The first SCN it gives (the redo it had ends just before).
    pub first_scn: Scn,
    /// A failover: the newest SCN the old primary was last known to have handed out (from
    /// its heartbeats) and durable, and how many SCNs past the new primary's end that is (an
    /// upper bound on what may be lost; 0 when the standby had everything).
    pub old_primary_scn: Option<Scn>,
    pub old_primary_durable_scn: Option<Scn>,
    pub lost_scns_at_most: Option<u64>,
    /// The redo that was received and not yet applied when the command came (applied while
    /// opening).
    pub unapplied_scns: u64,
    /// A failover to a standby with delayed apply: its `delay`, when redo it had received was
    /// still held back by it (applied before opening, as the failover said).
    #[serde(default)]
    pub delay_released_s: Option<f64>,
    /// A failover behind a far sync (or a cascading standby): the tail it took from it, or
    /// that it opened without it (`--force`).
    #[serde(default)]
    pub relay_tail: Option<String>,
    /// A switchover's target opens unconfirmed (a failover may have come after the prepare):
    /// the destinations it still waited for when it answered, each with what would enable it;
    /// empty once it takes writes (`server::role::confirmation`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaiting: Vec<String>,
    pub elapsed_ms: u64,
}

/// What a reinstate set aside: the logs from the failover point on, as this member had them,
/// and the records among them that the new primary never had (its divergent tail).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetAside {
    /// Where it is kept: the logs as they were, and the divergent records (`divergent.redo`
    /// byte for byte, `divergent.resp` as Redis commands; `server::role::divergent`).
    pub dir: String,
    pub logs: Vec<LogSeq>,
    /// The divergent records, if any: their SCN range and count.
    pub first_scn: Option<Scn>,
    pub last_scn: Option<Scn>,
    pub records: u64,
    /// Why not all of the divergent redo could be read, if it could not (the count is then
    /// of what could).
    #[serde(default)]
    pub unreadable: Option<String>,
}

/// The answer to `POST /roles/reinstate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reinstated {
    pub member: String,
    pub primary: String,
    pub incarnation: u32,
    pub set_aside: SetAside,
    /// The data files held changes past the failover point: they were set aside too, and
    /// the database was rebuilt from a copy of the new primary's.
    pub rebuilt: bool,
    pub elapsed_ms: u64,
}

/// The gate's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum GateState {
    Open,
    Unconfirmed {
        members: Vec<String>,
    },
    Quiesced {
        to: String,
    },
    Changing {
        reason: String,
    },
    /// A primary under fast-start failover that hears from neither its SYNC target nor the
    /// observer: a failover may be under way on the other side.
    Isolated,
    Fenced {
        incarnation: u32,
        primary: String,
        primary_resp: Option<String>,
    },
    Standby {
        primary: Option<String>,
        primary_resp: Option<String>,
    },
    /// The database could not be opened in its role (the reason says why).
    Unavailable {
        reason: String,
    },
}

impl GateState {
    /// Whether a write waits at this gate (it may open again soon).
    pub fn waits(&self) -> bool {
        matches!(
            self,
            GateState::Unconfirmed { .. } | GateState::Quiesced { .. } | GateState::Changing { .. }
        )
    }

    /// What a write is told at this gate: the error reply's text, its code first
    /// (`READONLY`, `TRYAGAIN`, `ERR`).
    pub fn refusal_text(&self) -> String {
        const READONLY: &str = "READONLY You can't write against a read only replica.";
        match self {
            GateState::Open => "ERR the gate is open".to_string(),
            GateState::Unconfirmed { members } => format!(
                "TRYAGAIN this primary (restarted, or just made primary by a switchover) takes writes only once every standby it ships to has confirmed that no failover happened meanwhile ({} did not answer yet; one gone for good and never made primary is taken out with `redoguard edit destination NAME state=defer`)",
                members.join(", ")
            ),
            GateState::Quiesced { to } => format!(
                "TRYAGAIN a switchover to '{to}' is in progress: retry, the primary is moving"
            ),
            GateState::Changing { reason } => format!("TRYAGAIN {reason}: retry"),
            GateState::Isolated => "TRYAGAIN this primary hears from neither its standby nor the fast-start failover observer: it takes no write until one answers (a failover may be under way)".to_string(),
            GateState::Fenced { incarnation, primary, primary_resp } => format!(
                "{READONLY} This database was failed over: '{primary}' is the primary (incarnation {incarnation}){}; reinstate this one as its standby",
                primary_resp.as_ref().map_or(String::new(), |address| format!(" at {address}"))
            ),
            GateState::Standby { primary, primary_resp } => match primary {
                Some(primary) => format!(
                    "{READONLY} The primary is '{primary}'{}.",
                    primary_resp.as_ref().map_or(String::new(), |address| format!(" at {address}"))
                ),
                None => READONLY.to_string(),
            },
            GateState::Unavailable { reason } => {
                format!("ERR the database is not open: {reason}")
            }
        }
    }
}

/// What `GET /configuration` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigurationView {
    /// The member this server runs.
    pub member: Option<String>,
    pub protection_mode: transport::ProtectionMode,
    pub members: Vec<transport::MemberConfig>,
}

/// What a run-time settings change did on a member (`POST /settings/...`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Edited {
    pub member: Option<String>,
    /// Whether this member is a primary whose redo transport took the change at once.
    pub applied: bool,
    /// The destinations its transport changed, and how (`InPlace`, `Reconnect`).
    pub changes: Vec<(String, String)>,
    pub protection_mode: transport::ProtectionMode,
    /// The destination edited, as it is now in effect.
    pub destination: Option<transport::DestinationConfig>,
    /// Where the change is kept.
    pub file: String,
    /// Whether fast-start failover is observe-only on this member now.
    #[serde(default)]
    pub fast_start_observe_only: bool,
}
