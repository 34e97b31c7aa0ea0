//! The web page of a member's admin port, in a real headless browser (Debian's `chromium`,
//! which `scripts/setup` installs), against real servers under load:
//!
//! - a primary and its SYNC standby on the two sides of a linkemu link: the charts fill with
//!   data (every chart, not only the page), the configuration shows the standby synchronized;
//!   the link is cut: the history and the page show the standby's lag rising past the page's
//!   threshold (its row changes colour); restored: the lag falls back and the row is well
//!   again. Screenshots of both moments are kept in `target/tmp/web-page/`.
//! - a configuration of named members: the page shows every member as the broker reports it
//!   (`/report`).
//!
//! The browser runs in its own process group, killed by its id when it ends or overruns.

mod common;
mod replication_support;
mod roles_support;

use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{Server, Watchdog};
use linkemu::{Link, LinkConfig, Side};
use replication_support::{Load, PairConfig};
use server::web::HistoryView;
use transport::Phase;

/// One test at a time: each runs a browser beside two servers on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// The page's threshold in these tests (`?lag_threshold_s=`): a cut of a few seconds passes it.
const THRESHOLD_S: f64 = 1.0;

/// Where the screenshots are kept (under `target/`).
fn artefacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("web-page");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Debian's chromium, or a failure that says how to get it.
fn chromium() -> PathBuf {
    for candidate in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if Path::new(candidate).exists() {
            return PathBuf::from(candidate);
        }
    }
    panic!("this test needs Debian's chromium: run ./scripts/setup (apt-get install chromium)");
}

/// Runs headless chromium on `url` (in `namespace`, if given) with `mode` (`--dump-dom`, or
/// `--screenshot=PATH`), letting the page run for `budget` of virtual time first; returns its
/// standard output. Killed (its whole process group) after 60 s.
fn browse(namespace: Option<&str>, url: &str, mode: &str, budget: Duration) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut command = match namespace {
        Some(namespace) => {
            let mut command = Command::new("ip");
            command.args(["netns", "exec", namespace]).arg(chromium());
            command
        }
        None => Command::new(chromium()),
    };
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--hide-scrollbars",
            "--window-size=1400,1100",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--virtual-time-budget={}", budget.as_millis()))
        .arg(mode)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command.spawn().unwrap_or_else(|error| panic!("starting chromium: {error}"));
    let group = child.id() as libc::pid_t;
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The browser's helpers (renderer, GPU, zygote) are in its group: none outlives the test.
    // SAFETY: a signal to the process group this test created, by its id.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let _ = child.wait();
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    match status {
        Some(status) if status.success() => stdout,
        Some(status) => panic!("chromium exited with {status}\n{stderr}"),
        None => panic!("chromium still running after 60 s; killed it\n{stderr}"),
    }
}

/// The value of `attribute` in the start tag that contains `marker` (`data-chart="lags"`).
fn attribute(dom: &str, marker: &str, attribute: &str) -> Option<String> {
    let at = dom.find(marker)?;
    let start = dom[..at].rfind('<')?;
    let end = at + dom[at..].find('>')?;
    let tag = &dom[start..end];
    let key = format!(" {attribute}=\"");
    let from = tag.find(&key)? + key.len();
    Some(tag[from..from + tag[from..].find('"')?].to_string())
}

fn number(dom: &str, marker: &str, name: &str) -> f64 {
    attribute(dom, marker, name)
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no number {name} on {marker} in the page:\n{dom}"))
}

/// A primary in side A of a link and its standby in side B (single-role configuration).
struct LinkedPair {
    primary: Server,
    _standby: Server,
    link: Link,
    root: tempfile::TempDir,
}

impl LinkedPair {
    fn start() -> LinkedPair {
        if let Some(reason) = linkemu::unavailable_reason() {
            panic!("this test needs linkemu, which cannot run here: {reason}");
        }
        let link = Link::up(LinkConfig { rtt: Duration::from_millis(2), ..LinkConfig::default() })
            .unwrap_or_else(|error| panic!("bringing the link up: {error}"));
        let config = PairConfig {
            net_timeout: Duration::from_secs(2),
            // Log switches every few seconds, to see their marks.
            log_file_size: "1MiB",
            ..PairConfig::default()
        };
        let root = tempfile::tempdir().unwrap();
        // Beyond loopback, as protected mode wants it: redo over mutual TLS.
        let certs = root.path().join("certs");
        replication_support::make_certs(&certs);
        let config = PairConfig { tls: Some(certs), ..config };
        let standby_config = root.path().join("standby.toml");
        let listen = format!("{}:0", link.address(Side::B));
        std::fs::write(&standby_config, config.standby_text(&listen)).unwrap();
        let standby = link
            .run_in(Side::B, || {
                Server::start(
                    &root.path().join("standby"),
                    Some(&standby_config),
                    &root.path().join("standby.log"),
                )
            })
            .expect("enter side B");
        let redo = link
            .run_in(Side::B, || replication_support::redo_listener(&standby))
            .expect("enter side B");
        let primary_config = root.path().join("primary.toml");
        std::fs::write(&primary_config, config.primary_text(&redo.to_string())).unwrap();
        let primary = link
            .run_in(Side::A, || {
                Server::start(
                    &root.path().join("primary"),
                    Some(&primary_config),
                    &root.path().join("primary.log"),
                )
            })
            .expect("enter side A");
        LinkedPair { primary, _standby: standby, link, root }
    }

    fn history(&self) -> HistoryView {
        let admin = self.primary.admin_addr();
        let (code, body) =
            self.link.run_in(Side::A, || common::http_get(admin, "/history")).expect("side A");
        assert_eq!(code, 200, "/history: {body}");
        serde_json::from_str(&body).unwrap_or_else(|error| panic!("/history: {error}: {body}"))
    }

    /// The standby's newest transport lag as the primary's history has it.
    fn newest_lag(&self) -> Option<f64> {
        let history = self.history();
        let newest = history.samples.last()?;
        newest.lags.iter().find(|lag| lag.name == "standby1").map(|lag| lag.transport_lag_s)
    }

    fn wait_for(&self, what: &str, limit: Duration, condition: impl Fn(&Self) -> bool) {
        if !common::poll_until(limit, || condition(self)) {
            panic!("waited {limit:?} for {what}\n{}", self.logs());
        }
    }

    fn phase(&self) -> Phase {
        let status = self.link.run_in(Side::A, || self.primary.status()).expect("side A");
        replication_support::destination(&status).phase
    }

    /// The page of the primary, as the browser in side A has it after `budget`.
    fn page(&self, mode: &str, budget: Duration) -> String {
        let url = format!("http://{}/?lag_threshold_s={THRESHOLD_S}", self.primary.admin_addr());
        browse(Some(self.link.namespace(Side::A)), &url, mode, budget)
    }

    fn logs(&self) -> String {
        let log = |name: &str| common::tail(&self.root.path().join(name), 20);
        format!("--- primary:\n{}\n--- standby:\n{}", log("primary.log"), log("standby.log"))
    }
}

#[test]
fn the_page_charts_a_pair_under_load_and_shows_a_cut_standby_lagging_then_catching_up() {
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _watchdog = Watchdog::new(Duration::from_secs(240), "the web page test");
    let started = Instant::now();
    chromium();
    let pair = LinkedPair::start();
    pair.wait_for("the standby to be synchronized", Duration::from_secs(30), |pair| {
        pair.phase() == Phase::Synchronized
    });
    let connections = pair
        .link
        .run_in(Side::A, || replication_support::connections(pair.primary.resp_addr(), 3))
        .expect("side A");
    let load = Load::start(connections, "web", common::seed());
    // Enough history for the charts: seconds with commits, and a log switch among them.
    pair.wait_for(
        "8 s of history with commits and a log switch",
        Duration::from_secs(40),
        |pair| {
            let samples = pair.history().samples;
            samples.iter().filter(|sample| sample.commits_per_s > 0.0).count() >= 8
                && samples.iter().any(|sample| sample.log_switches > 0)
        },
    );

    // The charts hold data, every one of them.
    let dom = pair.page("--dump-dom", Duration::from_secs(3));
    assert!(number(&dom, "<body", "data-samples") >= 8.0, "the page has too little history");
    for chart in ["commits", "redo", "latency", "lags", "waits"] {
        let marker = format!("data-chart=\"{chart}\"");
        assert!(number(&dom, &marker, "data-points") >= 8.0, "the {chart} chart is empty");
    }
    assert!(number(&dom, "data-chart=\"commits\"", "data-max") > 0.0);
    assert!(number(&dom, "data-chart=\"redo\"", "data-max") > 0.0);
    assert!(number(&dom, "data-chart=\"latency\"", "data-max") > 0.0);
    assert!(number(&dom, "data-chart=\"waits\"", "data-series") >= 1.0);
    assert!(dom.contains("log file sync"), "the top wait event is not named");
    assert_eq!(number(&dom, "data-chart=\"lags\"", "data-series"), 2.0, "transport and apply");
    assert_eq!(
        attribute(&dom, "data-member=\"standby1\"", "data-lagging").as_deref(),
        Some("false")
    );
    assert_eq!(attribute(&dom, "data-member=\"standby1\"", "class").as_deref(), Some("ok"));
    assert!(dom.contains("SYNCHRONIZED") && dom.contains("MAXIMUM AVAILABILITY"));
    let under_load = artefacts().join("under-load.png");
    pair.page(&format!("--screenshot={}", under_load.display()), Duration::from_secs(3));
    assert!(std::fs::metadata(&under_load).unwrap().len() > 10_000, "an empty screenshot");

    // Cut: the standby falls behind; the history and the page show its lag rising past the
    // threshold, and its row turns to a warning.
    pair.link.cut();
    pair.wait_for("the lag to pass 3 s in the history", Duration::from_secs(30), |pair| {
        pair.newest_lag().is_some_and(|lag| lag > 3.0)
    });
    let dom = pair.page("--dump-dom", Duration::from_secs(3));
    assert_eq!(
        attribute(&dom, "data-member=\"standby1\"", "data-lagging").as_deref(),
        Some("true")
    );
    assert_eq!(attribute(&dom, "data-member=\"standby1\"", "class").as_deref(), Some("warn"));
    assert!(number(&dom, "data-chart=\"lags\"", "data-last") > 3.0, "the chart does not show it");
    assert!(dom.contains("UNSYNCHRONIZED"), "the page says the primary is still synchronized");
    let cut = artefacts().join("link-cut.png");
    pair.page(&format!("--screenshot={}", cut.display()), Duration::from_secs(3));
    let peak = pair
        .history()
        .samples
        .iter()
        .flat_map(|sample| &sample.lags)
        .fold(0.0, |max: f64, lag| max.max(lag.transport_lag_s));

    // Restore: it catches up, and the lag falls back.
    pair.link.restore();
    pair.wait_for("the standby to be synchronized again", Duration::from_secs(30), |pair| {
        pair.phase() == Phase::Synchronized
    });
    pair.wait_for("the lag to fall under 0.5 s in the history", Duration::from_secs(20), |pair| {
        pair.newest_lag().is_some_and(|lag| lag < 0.5)
    });
    let history = pair.history();
    let lags: Vec<f64> = history
        .samples
        .iter()
        .filter_map(|sample| sample.lags.first().map(|lag| lag.transport_lag_s))
        .collect();
    let top = lags.iter().position(|lag| *lag > 3.0).expect("the history kept the cut");
    assert!(lags[top..].iter().any(|lag| *lag < 0.5), "the lag did not fall: {lags:?}");
    let dom = pair.page("--dump-dom", Duration::from_secs(3));
    assert_eq!(
        attribute(&dom, "data-member=\"standby1\"", "data-lagging").as_deref(),
        Some("false")
    );
    assert!(number(&dom, "data-chart=\"lags\"", "data-max") > 3.0, "the chart lost the cut");
    assert!(number(&dom, "data-chart=\"lags\"", "data-last") < 0.5, "the chart still shows lag");
    let restored = artefacts().join("restored.png");
    pair.page(&format!("--screenshot={}", restored.display()), Duration::from_secs(3));

    assert!(load.wait_for_more(50, Duration::from_secs(20)), "no commits after the restore");
    assert!(!load.any_stopped(), "a client failed\n{}", pair.logs());
    let logs = load.stop();
    for log in &logs {
        assert!(log.error.is_none(), "{:?}", log.error);
    }
    println!(
        "page checked under load, with the link cut (lag peaked at {peak:.1} s) and restored; \
         screenshots in {}; in {:.1?}",
        artefacts().display(),
        started.elapsed()
    );
}

#[test]
fn the_page_shows_every_member_of_a_configuration_as_the_broker_reports_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the web page configuration test");
    chromium();
    let cluster = roles_support::Cluster::start(roles_support::ClusterConfig::pair());
    let admin: SocketAddr = cluster.addr_of("east").parse().unwrap();
    let (code, body) = common::http_get(admin, "/report");
    assert_eq!(code, 200, "/report: {body}");
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["primary"], "east", "{report}");
    // The page of the standby shows both members, from the report.
    let url = format!("http://{}/", cluster.addr_of("west"));
    let dom = browse(None, &url, "--dump-dom", Duration::from_secs(3));
    assert_eq!(attribute(&dom, "data-member=\"east\"", "class").as_deref(), Some("ok"), "{dom}");
    assert_eq!(attribute(&dom, "data-member=\"west\"", "class").as_deref(), Some("ok"), "{dom}");
    assert!(dom.contains("ALL WELL"), "{dom}");
    // Read-only: the page's routes take no POST, even with the admin token.
    let token = std::fs::read_to_string(cluster.data_dir("east").join("admin-token")).unwrap();
    let token = token.lines().next().unwrap();
    for path in ["/", "/history", "/report"] {
        let (code, _) = post(admin, path, token);
        assert_eq!(code, 405, "POST {path}");
    }
}

fn post(addr: SocketAddr, path: &str, token: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = common::raw(addr);
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let code = response.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap();
    (code, response)
}

#[test]
fn the_observer_page_shows_the_configuration_and_a_lost_primary() {
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the observer page test");
    let mut cluster =
        roles_support::Cluster::start(roles_support::ClusterConfig::pair_with_observer());
    // The observer again, now with its page on a port of its own.
    cluster.kill_observer("obs1");
    let port = workload::ports::free_port().unwrap();
    let path = cluster.config_path("obs1");
    let text = std::fs::read_to_string(&path).unwrap();
    let with_page = text.replacen(
        "[observer]\nname = \"obs1\"\n",
        &format!("[observer]\nname = \"obs1\"\nhttp = \"127.0.0.1:{port}\"\n"),
        1,
    );
    assert_ne!(with_page, text, "the observer's file changed shape:\n{text}");
    std::fs::write(&path, with_page).unwrap();
    cluster.start_observer("obs1");
    let page: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let html = || {
        let (code, body) = common::http_get(page, "/");
        assert_eq!(code, 200, "{body}");
        body
    };
    let row = |html: &str, marker: &str| attribute(html, marker, "class");
    let healthy = common::poll_until(Duration::from_secs(30), || {
        let html = html();
        row(&html, "data-member=\"east\"").as_deref() == Some("ok")
            && row(&html, "data-member=\"west\"").as_deref() == Some("ok")
            && row(&html, "data-observed=\"east\"").as_deref() == Some("ok")
            && html.contains("fails over to west")
    });
    assert!(healthy, "the page never showed both members well:\n{}", html());
    assert!(html().contains("primary east"));
    let (code, report) = common::http_get(page, "/report");
    assert_eq!(code, 200, "{report}");
    assert!(report.contains("\"primary\":\"east\""), "{report}");

    // The primary is lost: its row turns red, and the observer says it no longer answers.
    cluster.kill("east");
    let lost = common::poll_until(Duration::from_secs(30), || {
        let html = html();
        row(&html, "data-member=\"east\"").as_deref() == Some("bad")
            && row(&html, "data-observed=\"east\"").as_deref() != Some("ok")
    });
    assert!(lost, "the page did not show the primary lost:\n{}", html());
    for path in ["/", "/report"] {
        assert_eq!(post(page, path, "the observer page needs none").0, 405, "POST {path}");
    }
}
