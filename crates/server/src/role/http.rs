//! The role endpoints of the admin API. What a member does in a role change is `change`;
//! these only parse the request and say what happened (409 with the reason when a change is
//! refused and nothing changed, 500 when it failed part way).
//!
//! - `GET /configuration`: the members of the configuration, as this member's file names them.
//! - `POST /roles/switchover/prepare?to=NAME`: on the primary.
//! - `POST /roles/switchover/complete?from=NAME&id=ID&incarnation=I&end_seq=S&end_offset=O&last_scn=N[&active=OBSERVER][&announced=A,B]`:
//!   on its target, with the switchover's id and the old primary's incarnation (both from the
//!   prepare's answer; refused without them) and fast-start failover record (which it takes
//!   over).
//! - `POST /roles/switchover/abort[?id=ID]`: on the old primary, if the target refused
//!   switchover ID (refused if another is pending; without `id`, whichever is).
//! - `POST /roles/failover[?immediate=true][&force=true]`: on a standby.
//! - `POST /roles/fence?incarnation=N&primary=NAME`: on a primary that has been failed over.
//! - `POST /roles/reinstate?primary=NAME`: on a fenced member.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use redo::{LogSeq, RedoAddr, Scn};
use serde::{Deserialize, Serialize};

use super::change::{Handover, Refused};
use crate::ServerState;
use crate::admin::to_the_end;

pub use admin::roles::ConfigurationView;

pub fn routes() -> Router<Arc<ServerState>> {
    Router::new()
        .route("/configuration", get(configuration))
        .route("/roles/switchover/prepare", post(prepare_switchover))
        .route("/roles/switchover/complete", post(complete_switchover))
        .route("/roles/switchover/abort", post(abort_switchover))
        .route("/roles/failover", post(failover))
        .route("/roles/fence", post(fence))
        .route("/roles/reinstate", post(reinstate))
}

fn answer<T: Serialize>(outcome: anyhow::Result<T>) -> Response {
    match outcome {
        Ok(value) => (StatusCode::OK, axum::Json(value)).into_response(),
        Err(error) if error.is::<Refused>() => {
            (StatusCode::CONFLICT, format!("{error}\n")).into_response()
        }
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error:#}\n")).into_response(),
    }
}

async fn configuration(State(state): State<Arc<ServerState>>) -> impl IntoResponse {
    let replication = state.roles.settings.replication();
    axum::Json(ConfigurationView {
        member: replication.member.clone(),
        protection_mode: replication.protection_mode,
        members: replication.members.clone(),
    })
}

#[derive(Deserialize)]
struct To {
    to: String,
}

async fn prepare_switchover(
    State(state): State<Arc<ServerState>>,
    Query(query): Query<To>,
) -> Response {
    let roles = state.roles.clone();
    answer(to_the_end(async move { roles.prepare_switchover(&query.to).await }).await)
}

#[derive(Deserialize)]
struct Complete {
    from: String,
    /// Required: optional here only so that a request without them is refused naming them.
    #[serde(default)]
    id: Option<u64>,
    #[serde(default)]
    incarnation: Option<u32>,
    end_seq: u64,
    end_offset: u64,
    last_scn: u64,
    /// The old primary's fast-start failover record, if it had one: its active observer and
    /// the targets it named one to (comma-separated).
    #[serde(default)]
    active: Option<String>,
    #[serde(default)]
    announced: Option<String>,
}

async fn complete_switchover(
    State(state): State<Arc<ServerState>>,
    Query(query): Query<Complete>,
) -> Response {
    let end = RedoAddr { seq: LogSeq(query.end_seq), offset: query.end_offset };
    let handed = (query.active.is_some() || query.announced.is_some()).then(|| {
        roles::fast_start::PrimaryRecord {
            active: query.active.clone().filter(|name| !name.is_empty()),
            announced_to: query
                .announced
                .iter()
                .flat_map(|names| names.split(','))
                .filter(|name| !name.is_empty())
                .map(str::to_string)
                .collect(),
        }
    });
    let (Some(id), Some(incarnation)) = (query.id, query.incarnation) else {
        let missing = if query.id.is_none() { "id" } else { "incarnation" };
        return answer::<()>(Err(Refused(format!(
            "the switchover's `{missing}` is missing (a broker of a version before switchover ids?): the complete needs `id` and `incarnation` from the old primary's prepare"
        ))
        .into()));
    };
    let handover = Handover {
        from: query.from,
        id,
        incarnation,
        end,
        last_scn: Scn(query.last_scn),
        fast_start: handed,
    };
    let roles = state.roles.clone();
    answer(to_the_end(async move { roles.complete_switchover(handover).await }).await)
}

#[derive(Deserialize)]
struct Abort {
    id: Option<u64>,
}

async fn abort_switchover(
    State(state): State<Arc<ServerState>>,
    Query(query): Query<Abort>,
) -> Response {
    let roles = state.roles.clone();
    answer(to_the_end(async move { roles.abort_switchover(query.id).await }).await)
}

#[derive(Deserialize)]
struct Failover {
    #[serde(default)]
    immediate: bool,
    #[serde(default)]
    force: bool,
}

async fn failover(
    State(state): State<Arc<ServerState>>,
    Query(query): Query<Failover>,
) -> Response {
    let roles = state.roles.clone();
    answer(to_the_end(async move { roles.failover(query.immediate, query.force).await }).await)
}

#[derive(Deserialize)]
struct Fence {
    incarnation: u32,
    primary: String,
}

async fn fence(State(state): State<Arc<ServerState>>, Query(query): Query<Fence>) -> Response {
    let roles = state.roles.clone();
    answer(
        to_the_end(async move {
            roles.fence(query.incarnation, &query.primary, "told by the broker").await
        })
        .await,
    )
}

#[derive(Deserialize)]
struct Reinstate {
    primary: String,
}

async fn reinstate(
    State(state): State<Arc<ServerState>>,
    Query(query): Query<Reinstate>,
) -> Response {
    let roles = state.roles.clone();
    answer(to_the_end(async move { roles.reinstate(&query.primary).await }).await)
}
