//! The observer's web page (`[observer] http`): the configuration as every member reports it
//! (the broker's report, gathered from the first member that answers) and the members as this
//! observer sees them, rendered on the server and refreshed by the browser every two seconds.
//! Read-only, like a member's page (`docs/web.md`): `GET /`, `GET /report` (JSON), and the
//! members' style sheet.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use broker::Configuration;
use roles::fast_start::Time;
use serde::Deserialize;

use crate::ObserverConfig;
use crate::decide::Shared;

/// A gathered report is served again for this long (every open page asks every 2 s).
const FRESH_FOR: Duration = Duration::from_millis(900);

struct Page {
    config: ObserverConfig,
    shared: Arc<Shared>,
    /// The last report gathered (or why none could be), and when. An async mutex, held across
    /// the gathering on purpose: one gathering at a time, whatever the number of pages open.
    last: tokio::sync::Mutex<Option<(Instant, Result<Configuration, String>)>>,
}

/// Binds `address` and serves the page until the task is aborted; returns the bound address.
pub async fn serve(
    address: &str,
    config: ObserverConfig,
    shared: Arc<Shared>,
) -> anyhow::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| anyhow::anyhow!("cannot listen for the web page on {address}: {error}"))?;
    let bound = listener.local_addr()?;
    let page = Arc::new(Page { config, shared, last: tokio::sync::Mutex::new(None) });
    let app = Router::new()
        .route("/", get(page_html))
        .route("/report", get(report_json))
        .route(
            "/web/page.css",
            get(|| async { ([(header::CONTENT_TYPE, "text/css")], admin::page::PAGE_CSS) }),
        )
        .with_state(page);
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "the observer's web page stopped");
        }
    });
    Ok((bound, task))
}

/// The configuration, from the first member whose admin API answers.
async fn report(page: &Page) -> Result<Configuration, String> {
    let mut last = page.last.lock().await;
    if let Some((at, report)) = last.as_ref()
        && at.elapsed() < FRESH_FOR
    {
        return report.clone();
    }
    let admins: Vec<String> =
        page.config.replication.members.iter().map(|member| member.admin.clone()).collect();
    let gathered = tokio::task::spawn_blocking(move || {
        let mut errors = Vec::new();
        for admin in &admins {
            match broker::gather(admin) {
                Ok(report) => return Ok(report),
                Err(error) => errors.push(format!("{admin}: {error:#}")),
            }
        }
        Err(format!("no member answered: {}", errors.join("; ")))
    })
    .await
    .unwrap_or_else(|error| Err(error.to_string()));
    *last = Some((Instant::now(), gathered.clone()));
    gathered
}

async fn report_json(State(page): State<Arc<Page>>) -> Response {
    match report(&page).await {
        Ok(report) => axum::Json(report).into_response(),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")).into_response(),
    }
}

#[derive(Debug, Deserialize)]
struct PageQuery {
    lag_threshold_s: Option<f64>,
}

async fn page_html(State(page): State<Arc<Page>>, Query(query): Query<PageQuery>) -> Response {
    let report = report(&page).await;
    let html = render(&page, report.as_ref(), query.lag_threshold_s);
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, "default-src 'self'"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn seconds(value: Option<f64>) -> String {
    value.map_or("-".to_string(), |value| format!("{value:.3} s"))
}

fn render(page: &Page, report: Result<&Configuration, &String>, threshold: Option<f64>) -> String {
    let config = &page.config;
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"2\"><title>redoguard observer {name}</title>\
         <link rel=\"stylesheet\" href=\"/web/page.css\"></head><body>\n<header><div class=\"title\">\
         <span class=\"brand\">redoguard observer</span> {name}</div><div class=\"facts\">\
         configuration <b>{configuration}</b> · {members} members · fast-start failover threshold \
         <b>{threshold:.1} s</b>{insecure}</div><div class=\"updated\">refreshed every 2 s</div></header>\n",
        insecure = if config.observer.insecure && !config.exposure().is_empty() {
            " · <b class=\"bad\">INSECURE: protected mode off (--insecure)</b>"
        } else {
            ""
        },
        name = escape(&config.observer.name),
        configuration = escape(&config.replication.name),
        members = config.replication.members.len(),
        threshold = config.replication.fast_start_failover.threshold.as_secs_f64(),
    );
    match report {
        Ok(report) => render_configuration(&mut out, report, threshold),
        Err(error) => {
            let _ = writeln!(
                out,
                "<section class=\"panel\"><h2>Configuration</h2><ul id=\"warnings\"><li>{}</li></ul></section>",
                escape(error)
            );
        }
    }
    render_observer_view(&mut out, &page.shared);
    out.push_str("<footer>Read-only. The members' own pages, with charts, are at the root of each admin port.</footer></body></html>\n");
    out
}

fn render_configuration(out: &mut String, report: &Configuration, threshold: Option<f64>) {
    let threshold = threshold.unwrap_or(report.lag_threshold_s);
    let over = |lag: Option<f64>| lag.is_some_and(|lag| lag > threshold);
    let verdict = if report.warnings.is_empty() { ("ok", "ALL WELL") } else { ("warn", "WARNING") };
    let _ = writeln!(
        out,
        "<section id=\"configuration\" class=\"panel\"><div class=\"panel-head\"><h2>Configuration</h2>\
         <span class=\"badge\">{mode}</span><span class=\"badge\">primary {primary}</span>\
         <span id=\"verdict\" class=\"badge {class}\">{verdict}</span></div>\
         <table id=\"members\"><thead><tr><th>member</th><th>role</th><th>transport</th><th>state</th>\
         <th>synchronized</th><th class=\"num\">transport lag</th><th class=\"num\">apply lag</th>\
         <th>last error / writes</th></tr></thead><tbody>",
        mode = serde_json::to_value(report.protection_mode)
            .ok()
            .and_then(|mode| mode.as_str().map(|mode| mode.replace('_', " ").to_uppercase()))
            .unwrap_or_default(),
        primary = escape(report.primary.as_deref().unwrap_or("(none)")),
        class = verdict.0,
        verdict = verdict.1,
    );
    for member in &report.members {
        let lagging = over(member.transport_lag_s) || over(member.apply_lag_s);
        let class = if !member.reachable || member.fenced.is_some() {
            "bad"
        } else if lagging || !member.warnings.is_empty() || member.synchronized == Some(false) {
            "warn"
        } else {
            "ok"
        };
        let standby = member.role.as_deref() == Some("standby");
        let role = match (&member.role, &member.fenced) {
            (None, _) => "UNREACHABLE",
            (Some(_), Some(_)) => "fenced",
            (Some(role), None) => role.as_str(),
        };
        let note = member
            .error
            .clone()
            .or_else(|| member.last_error.clone())
            .or_else(|| (!member.warnings.is_empty()).then(|| member.warnings.join("; ")))
            .or_else(|| member.writes.clone())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "<tr data-member=\"{name}\" class=\"{class}\" data-lagging=\"{lagging}\"><td>{name}</td><td>{role}</td>\
             <td>{transport}</td><td>{state}</td><td>{synchronized}</td>\
             <td class=\"num{transport_over}\">{transport_lag}</td><td class=\"num{apply_over}\">{apply_lag}</td>\
             <td class=\"error\">{note}</td></tr>",
            name = escape(&member.name),
            role = escape(role),
            transport = if standby { escape(&member.transport) } else { "-".into() },
            state = escape(member.state.as_deref().unwrap_or("-")),
            synchronized = match member.synchronized {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            },
            transport_over = if over(member.transport_lag_s) { " over" } else { "" },
            transport_lag = seconds(member.transport_lag_s),
            apply_over = if over(member.apply_lag_s) { " over" } else { "" },
            apply_lag = seconds(member.apply_lag_s),
            note = escape(&note),
        );
    }
    out.push_str("</tbody></table><ul id=\"warnings\">");
    for warning in &report.warnings {
        let _ = write!(out, "<li>{}</li>", escape(warning));
    }
    out.push_str("</ul></section>\n");
}

/// The members as this observer's pings see them, and what it last did.
fn render_observer_view(out: &mut String, shared: &Shared) {
    let state = shared.state.lock();
    let now = Time::now();
    let ready = state.ready(now);
    let _ = writeln!(
        out,
        "<section id=\"observer\" class=\"panel\"><div class=\"panel-head\"><h2>As this observer sees it</h2>\
         <span class=\"badge\">primary {primary}</span><span class=\"badge\">active observer {active}</span>\
         <span class=\"badge\" id=\"failover-ready\">fails over to {ready}</span></div>\
         <table><thead><tr><th>member</th><th>last answer</th><th>error</th></tr></thead><tbody>",
        primary = escape(state.primary().unwrap_or("(none known)")),
        active = escape(state.active().unwrap_or("(none named)")),
        ready = if state.active() != Some(shared.me.as_str()) {
            "no one (not the active observer)".to_string()
        } else if ready.is_empty() {
            "no one (not armed)".to_string()
        } else {
            escape(&ready.join(", "))
        },
    );
    for (name, view) in state.views() {
        let answered = view.answered_at.map(|at| now.since(at).as_secs_f64());
        let class = match answered {
            Some(seconds) if seconds < 2.0 && view.error.is_none() => "ok",
            Some(_) => "warn",
            None => "bad",
        };
        let _ = writeln!(
            out,
            "<tr data-observed=\"{name}\" class=\"{class}\"><td>{name}</td><td>{answered}</td><td class=\"error\">{error}</td></tr>",
            name = escape(name),
            answered =
                answered.map_or("never".to_string(), |seconds| format!("{seconds:.1} s ago")),
            error = escape(view.error.as_deref().unwrap_or("")),
        );
    }
    out.push_str("</tbody></table>");
    if let Some(event) = state.last_event() {
        let _ = write!(out, "<p>last event: {}</p>", escape(event));
    }
    out.push_str("</section>\n");
}
