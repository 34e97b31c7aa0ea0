//! The web page a person watches a member on: served at `/` of the admin port, with its
//! assets built into the binary (nothing is fetched from elsewhere), and the JSON it reads.
//!
//! - `GET /`: the page (`assets/index.html`, `page.js`, `page.css`, and uPlot, MIT, vendored
//!   in `assets/` with its licence);
//! - `GET /history[?since=MS]`: the samples of the last minutes (`history`), newer than `since`
//!   (milliseconds since the Unix epoch);
//! - `GET /report`: the configuration as every member reports it (the broker's report, when
//!   the binary provides it: see `StartOptions::report`); 404 without one.
//!
//! Everything here is read-only (GET) and discloses nothing that `/status` and
//! `/configuration` do not: names, addresses, roles, lags, wait events, last errors. No token
//! or other secret is ever put in the page.

pub mod history;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};

use crate::ServerState;

/// Lags beyond this are a warning, on the page as in `redoguard show configuration` (Data
/// Guard's default threshold). The page takes `?lag_threshold_s=` to watch a tighter one.
/// The page's style, which the observer's page shares, is the `admin` crate's too.
pub use admin::page::{LAG_THRESHOLD_S, PAGE_CSS};

/// How long a gathered report is served again before asking the members anew: every open
/// page asks each second, and the members should not be asked more often than that.
const REPORT_FRESH_FOR: Duration = Duration::from_millis(900);

/// Gathers the configuration as every member reports it, from the member whose admin API is
/// at the given address (the broker's `gather`, which this crate cannot name: the broker
/// depends on it). Blocking.
pub type ReportSource = fn(&str) -> anyhow::Result<serde_json::Value>;

/// The last report gathered, and when.
#[derive(Default)]
pub struct ReportCache {
    last: tokio::sync::Mutex<Option<(Instant, Result<serde_json::Value, String>)>>,
}

pub fn routes() -> Router<Arc<ServerState>> {
    Router::new()
        .route("/", get(page))
        .route("/web/page.js", get(|| asset("text/javascript", PAGE_JS)))
        .route("/web/page.css", get(|| asset("text/css", PAGE_CSS)))
        .route("/web/uPlot.iife.min.js", get(|| asset("text/javascript", UPLOT_JS)))
        .route("/web/uPlot.min.css", get(|| asset("text/css", UPLOT_CSS)))
        .route("/history", get(history_json))
        .route("/report", get(report_json))
}

const INDEX_HTML: &str = include_str!("assets/index.html");
const PAGE_JS: &str = include_str!("assets/page.js");
const UPLOT_JS: &str = include_str!("assets/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("assets/uPlot.min.css");

async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // Nothing but this member's own admin API: no script, style or connection elsewhere.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'",
            ),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX_HTML,
    )
}

async fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "max-age=3600")], body)
        .into_response()
}

#[derive(Debug, Deserialize)]
struct HistoryQuery {
    #[serde(default)]
    since: u64,
}

/// What `GET /history` answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HistoryView {
    /// This member's name in its configuration, if it has one.
    pub member: Option<String>,
    pub interval_ms: u64,
    pub capacity: usize,
    pub lag_threshold_s: f64,
    pub samples: Vec<history::Sample>,
}

async fn history_json(
    State(state): State<Arc<ServerState>>,
    Query(query): Query<HistoryQuery>,
) -> impl IntoResponse {
    let (capacity, samples) = {
        let history = state.history.lock();
        (history.capacity(), history.since(query.since))
    };
    (
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(HistoryView {
            member: state.config.replication.member.clone(),
            interval_ms: history::INTERVAL.as_millis() as u64,
            capacity,
            lag_threshold_s: LAG_THRESHOLD_S,
            samples,
        }),
    )
}

async fn report_json(State(state): State<Arc<ServerState>>) -> Response {
    let Some(source) = state.report_source else {
        return (StatusCode::NOT_FOUND, "this server gathers no configuration report\n")
            .into_response();
    };
    // One gathering at a time, whatever the number of pages open; a fresh one is reused. (An
    // async mutex: held across the gathering's await on purpose, so that callers queue.)
    let mut last = state.report_cache.last.lock().await;
    let fresh = last.as_ref().is_some_and(|(at, _)| at.elapsed() < REPORT_FRESH_FOR);
    if !fresh {
        let addr = state.admin_addr.to_string();
        let gathered = tokio::task::spawn_blocking(move || source(&addr)).await;
        let outcome = match gathered {
            Ok(Ok(report)) => Ok(report),
            Ok(Err(error)) => Err(format!("{error:#}")),
            Err(error) => Err(error.to_string()),
        };
        *last = Some((Instant::now(), outcome));
    }
    match &last.as_ref().expect("just gathered").1 {
        Ok(report) => {
            ([(header::CACHE_CONTROL, "no-store")], axum::Json(report.clone())).into_response()
        }
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page loads only what this module serves: every script and style it names is a
    /// route here, and nothing points to another host.
    #[test]
    fn the_page_names_only_its_own_assets() {
        for asset in
            ["/web/page.js", "/web/page.css", "/web/uPlot.iife.min.js", "/web/uPlot.min.css"]
        {
            assert!(INDEX_HTML.contains(asset), "the page does not load {asset}");
        }
        for text in [INDEX_HTML, PAGE_JS, PAGE_CSS] {
            assert!(!text.contains("http://") && !text.contains("https://"), "an outside URL");
        }
        assert!(UPLOT_JS.len() > 10_000, "uPlot is vendored whole");
    }
}
