//! `aedb-queue serve` against real clusters: the built binary is started
//! with `--listen 127.0.0.1:0`, its "listening on" line read, and pages,
//! actions and /metrics fetched over real HTTP (a minimal HTTP/1.1 client
//! below, `Connection: close`). Set-up runs as the application roles;
//! assertions about what changed read the database from another
//! connection.
//!
//! Most tests share one cluster that preloads aedb_queue (counters), each
//! on queues of its own; the pages list every queue of the database, so
//! assertions look at their own queue's row. Tests that need exact label
//! sets use a database of their own; the not-preloaded and the stopped
//! database get a cluster of their own.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use aedb_queue_itests::*;
use support::*;

const PRELOAD: &str =
    "shared_preload_libraries = 'pg_cron,aedb_queue'\naedb_queue.reaper_interval = 0";

fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start_with(PRELOAD))
}

// ---------------------------------------------------------------------------
// The server and a small HTTP client
// ---------------------------------------------------------------------------

struct Server {
    _child: Running,
    addr: String,
}

/// `aedb-queue serve --listen 127.0.0.1:0 ARGS` (as app_admin unless ARGS
/// has a --dsn), once it printed its address. The overview is read for
/// every request (`--max-age 0`) unless ARGS say otherwise, so that what a
/// test just did shows.
fn serve(cluster: &Cluster, args: &[&str]) -> Server {
    let mut all = vec!["serve", "--listen", "127.0.0.1:0", "--refresh", "0"];
    if !args.contains(&"--max-age") {
        all.extend(["--max-age", "0"]);
    }
    // Without a users file, the no-login mode (the connection's own role).
    if !args.contains(&"--users") {
        all.push("--no-login");
    }
    all.extend_from_slice(args);
    let mut child = spawn(cluster, &all);
    let line = child.stdout_line("listening on", |l| l.starts_with("listening on http://"));
    let addr = line
        .trim_start_matches("listening on http://")
        .trim()
        .to_string();
    Server {
        _child: child,
        addr,
    }
}

fn serve_as(cluster: &Cluster, role: &str, args: &[&str]) -> Server {
    let dsn = cluster.dsn(role);
    let mut all = vec!["--dsn", dsn.as_str()];
    all.extend_from_slice(args);
    serve(cluster, &all)
}

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    #[track_caller]
    fn ok(self) -> Resp {
        assert_eq!(self.status, 200, "expected 200: {}", self.body);
        self
    }

    /// The `name=value` of the flash cookie this response sets.
    fn flash_cookie(&self) -> Option<String> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
            .map(|(_, v)| v.split(';').next().unwrap_or("").to_string())
            .find(|c| c.starts_with("aedb_queue_flash=") && c.len() > "aedb_queue_flash=".len())
    }
}

fn form_encode(fields: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                b' ' => "+".to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A path segment percent-encoded as the pages encode queue names (as
/// encodeURIComponent does).
fn seg(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~!'()*".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl Server {
    fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
        self.request_to(Some(&self.addr), method, path, headers, body)
    }

    /// A request carrying `Host: host` (None: no Host header at all).
    fn request_to(
        &self,
        host: Option<&str>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Resp {
        let s = TcpStream::connect(&self.addr).expect("connect to the server");
        self.request_on(s, host, method, path, headers, body)
    }

    /// A request from the loopback address `from` (127.0.0.2, say).
    fn request_from(&self, from: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let s = rt
            .block_on(async {
                let sock = tokio::net::TcpSocket::new_v4()?;
                sock.bind(format!("{from}:0").parse().unwrap())?;
                sock.connect(self.addr.parse().unwrap()).await
            })
            .expect("connect from another address");
        let s = s.into_std().unwrap();
        s.set_nonblocking(false).unwrap();
        self.request_on(s, Some(&self.addr), "GET", path, headers, "")
    }

    fn request_on(
        &self,
        mut s: TcpStream,
        host: Option<&str>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Resp {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        if let Some(h) = host {
            req.push_str(&format!("Host: {h}\r\n"));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if method == "POST" {
            req.push_str(&format!(
                "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        req.push_str("\r\n");
        req.push_str(body);
        s.write_all(req.as_bytes()).expect("send the request");
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).expect("read the response");
        let text = String::from_utf8(raw).expect("a UTF-8 response");
        let (head, rest) = text.split_once("\r\n\r\n").expect("a response head");
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|c| c.parse().ok())
            .expect("a status line");
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let chunked = headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
        let body = if chunked {
            dechunk(rest)
        } else {
            rest.to_string()
        };
        Resp {
            status,
            headers,
            body,
        }
    }

    fn get(&self, path: &str) -> Resp {
        self.request("GET", path, &[], "")
    }

    fn get_with_cookie(&self, path: &str, cookie: &str) -> Resp {
        self.request("GET", path, &[("Cookie", cookie)], "")
    }

    fn post(&self, path: &str, fields: &[(&str, &str)]) -> Resp {
        self.request("POST", path, &[], &form_encode(fields))
    }

    fn post_from(&self, path: &str, origin: &str, fields: &[(&str, &str)]) -> Resp {
        self.request("POST", path, &[("Origin", origin)], &form_encode(fields))
    }

    /// The CSRF token the server embeds in its pages.
    fn csrf(&self) -> String {
        let page = self.get("/").ok().body;
        attr_of(&page, "<meta name=\"csrf-token\"", "content").expect("a csrf-token meta tag")
    }

    fn metrics(&self) -> String {
        let r = self.get("/metrics").ok();
        assert!(
            r.header("content-type")
                .unwrap_or("")
                .starts_with("text/plain; version=0.0.4"),
            "{:?}",
            r.headers
        );
        r.body
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

// ---------------------------------------------------------------------------
// Reading the HTML (the hooks of the dashboard contract)
// ---------------------------------------------------------------------------

/// Escaped as maud escapes text and attribute values.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The element whose opening tag starts with `needle` (`<tr data-queue="q"`)
/// or contains it (`id="dead"`), up to the first closing tag of its name
/// (the dashboard does not nest elements of one name inside each other).
fn element<'a>(html: &'a str, needle: &str) -> Option<&'a str> {
    let at = html.find(needle)?;
    let i = if needle.starts_with('<') {
        at
    } else {
        html[..at].rfind('<')?
    };
    let name: String = html[i + 1..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    let close = format!("</{name}>");
    let j = html[i..].find(&close)? + i + close.len();
    Some(&html[i..j])
}

#[track_caller]
fn must<'a>(html: &'a str, start: &str) -> &'a str {
    element(html, start).unwrap_or_else(|| panic!("no {start} in\n{html}"))
}

/// The text of a fragment: tags dropped, entities decoded.
fn text(fragment: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for ch in fragment.chars() {
        match ch {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
        .trim()
        .to_string()
}

/// The text of the element with `data-field="F"` (a td or dd) inside a
/// fragment.
#[track_caller]
fn field(fragment: &str, f: &str) -> String {
    let at = fragment
        .find(&format!("data-field=\"{f}\""))
        .unwrap_or_else(|| panic!("no data-field={f} in\n{fragment}"));
    let open = fragment[..at].rfind('<').unwrap();
    let name: String = fragment[open + 1..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    let close = format!("</{name}>");
    let end = fragment[open..]
        .find(&close)
        .unwrap_or_else(|| panic!("no {close} in {fragment}"))
        + open;
    text(&fragment[open..end])
}

/// An attribute of the first tag that starts with `start`.
fn attr_of(html: &str, start: &str, attr: &str) -> Option<String> {
    let i = html.find(start)?;
    let tag_end = html[i..].find('>')? + i;
    let tag = &html[i..tag_end];
    let k = tag.find(&format!("{attr}=\""))? + attr.len() + 2;
    let v = &tag[k..];
    Some(v[..v.find('"')?].to_string())
}

fn queue_row<'a>(page: &'a str, queue: &str) -> &'a str {
    must(page, &format!("<tr data-queue=\"{}\"", esc(queue)))
}

/// The value of a sample line `name{labels}` (labels exactly as written).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l[series.len()..].trim().parse().ok())
}

#[track_caller]
fn must_sample(metrics: &str, series: &str) -> f64 {
    sample(metrics, series).unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
}

/// Polls `f` until it holds (the sampler runs on its own clock).
#[track_caller]
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "not within 20 s: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------
// Seeding
// ---------------------------------------------------------------------------

fn sql(
    c: &mut Client,
    statement: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> Vec<postgres::Row> {
    c.query(statement, params)
        .unwrap_or_else(|e| panic!("{statement}: {}", describe(&e)))
}

/// A queue with 3 ready, 1 in flight (owner worker-7), 1 scheduled and 1
/// dead task ("boom"). Returns (in flight id, scheduled id, dead id).
fn seed(queue: &str) -> (i64, i64, i64) {
    let mut producer = cluster().connect_as(PRODUCER);
    let mut worker = cluster().connect_as(WORKER);
    let doomed = enqueue_with(
        &mut producer,
        queue,
        Some(&json!({"n": 0})),
        &EnqueueOpts::default().max_attempts(1),
    )
    .task_id;
    let claimed = claim_one(&mut worker, queue, "worker-0", "5 minutes").expect("a task");
    assert_eq!(claimed.task_id, doomed);
    assert_eq!(
        fail(&mut worker, queue, doomed, claimed.fencing_token, "boom"),
        Outcome::Applied
    );
    let busy = enqueue(&mut producer, queue, &json!({"n": 1})).task_id;
    claim_one(&mut worker, queue, "worker-7", "5 minutes").expect("a task");
    for n in 2..5 {
        enqueue(&mut producer, queue, &json!({ "n": n }));
    }
    let later = enqueue_with(
        &mut producer,
        queue,
        Some(&json!({"n": 9})),
        &EnqueueOpts::default().delay("1 hour"),
    )
    .task_id;
    (busy, later, doomed)
}

// ---------------------------------------------------------------------------
// Pages
// ---------------------------------------------------------------------------

#[test]
fn the_overview_shows_each_queues_figures_rates_and_sparklines() {
    let q = unique_queue("srv_overview");
    let paused = unique_queue("srv_paused");
    seed(&q);
    let mut admin = cluster().connect_as(ADMIN);
    let mut producer = cluster().connect_as(PRODUCER);
    enqueue(&mut producer, &paused, &json!(1));
    sql(&mut admin, "SELECT aedb_queue.queue_pause($1)", &[&paused]);

    let server = serve(cluster(), &["--sample-every", "0.2"]);
    let page = server.get("/").ok().body;
    assert!(page.contains("<title>aedb_queue"), "{page}");
    assert!(
        page.contains("<form id=\"search\" action=\"/search\" method=\"get\""),
        "{page}"
    );
    must(&page, "<nav");
    must(&page, "<table id=\"queues\"");
    must(&page, "id=\"estimates-legend\"");
    assert!(
        !page.contains("id=\"counters-unavailable\""),
        "counters are there: {page}"
    );

    // The policy: no inline script, no framing; the script is served.
    let r = server.get("/");
    let csp = r.header("content-security-policy").unwrap_or("");
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert!(
        page.contains("<script src=\"/assets/app.js\"></script>"),
        "{page}"
    );
    assert!(!page.contains("<script>"), "no inline script: {page}");
    let js = server.get("/assets/app.js").ok();
    assert!(js
        .header("content-type")
        .unwrap_or("")
        .starts_with("text/javascript"));
    assert!(js.body.contains("data-confirm"), "{}", js.body);

    let row = queue_row(&page, &q);
    for (f, v) in [
        ("ready", "3"),
        ("in_flight", "1"),
        ("scheduled", "1"),
        ("dead", "1"),
        ("waiting", "0"),
        ("blocked", "0"),
        ("expired_leases", "0"),
    ] {
        assert_eq!(field(row, f), v, "{f} in {row}");
    }
    assert_eq!(field(row, "paused"), "no");
    assert_eq!(field(queue_row(&page, &paused), "paused"), "paused");
    assert!(
        row.contains(&format!("href=\"/queues/{}\"", seg(&q))),
        "{row}"
    );
    assert!(
        row.contains("<svg class=\"sparkline\" data-series=\"ready\""),
        "{row}"
    );
    assert!(
        row.contains("<svg class=\"sparkline\" data-series=\"completed\""),
        "{row}"
    );
    assert!(
        !row.contains("class=\"estimate\""),
        "small counts are exact: {row}"
    );

    // Completions show up as throughput once the sampler has seen them.
    let mut worker = cluster().connect_as(WORKER);
    for _ in 0..2 {
        let t = claim_one(&mut worker, &q, "worker-1", "5 minutes").expect("a ready task");
        assert_eq!(
            complete(&mut worker, &q, t.task_id, t.fencing_token),
            Outcome::Applied
        );
    }
    let mut last = String::new();
    eventually("throughput above 0", || {
        let page = server.get("/").ok().body;
        last = field(queue_row(&page, &q), "throughput");
        last.ends_with("/min") && last != "0.0/min"
    });
    // The failure happened before the server started: 0 of the 2 settled since.
    let page = server.get("/").ok().body;
    assert_eq!(
        field(queue_row(&page, &q), "failure_rate"),
        "0.0%",
        "{last}"
    );
    assert!(
        queue_row(&page, &q).contains("<polyline"),
        "a sparkline with points"
    );
}

#[test]
fn the_queue_page_shows_charts_tasks_by_state_schedules_keys_and_actions() {
    let q = unique_queue("srv_queue");
    let (busy, later, doomed) = seed(&q);
    let mut admin = cluster().connect_as(ADMIN);
    let mut producer = cluster().connect_as(PRODUCER);
    sql(
        &mut admin,
        "SELECT name FROM aedb_queue.queue_schedule_upsert($1, 'nightly', '0 3 * * *')",
        &[&q],
    );
    let kq = unique_queue("srv_keys");
    sql(&mut producer, "SELECT task_id FROM aedb_queue.queue_enqueue($1, '{}'::jsonb, concurrency_key => 'tenant-1')", &[&kq]);

    let server = serve(cluster(), &["--sample-every", "0.2"]);
    let page = server.get(&format!("/queues/{}", seg(&q))).ok().body;
    assert!(page.contains("<title>aedb_queue"), "{page}");
    assert_eq!(text(must(&page, "<h1")), q);
    assert!(
        must(&page, "<section id=\"depth\"").contains("<svg"),
        "{page}"
    );
    assert!(
        must(&page, "<section id=\"throughput\"").contains("<svg"),
        "{page}"
    );

    let in_flight = must(&page, "<section id=\"in-flight\"");
    let row = must(in_flight, &format!("<tr data-task-id=\"{busy}\""));
    assert_eq!(field(row, "owner"), "worker-7");
    let lease = field(row, "lease_left");
    assert!(
        lease.starts_with("4m") || lease.starts_with("5m"),
        "lease left {lease:?}"
    );
    must(
        must(&page, "<section id=\"scheduled\""),
        &format!("<tr data-task-id=\"{later}\""),
    );
    let dead = must(&page, "<section id=\"dead\"");
    assert_eq!(
        field(
            must(dead, &format!("<tr data-task-id=\"{doomed}\"")),
            "last_error"
        ),
        "boom"
    );
    assert!(
        text(must(&page, "<section id=\"schedules\"")).contains("nightly"),
        "{page}"
    );
    assert!(
        !page.contains("<section id=\"keys\""),
        "no keys in this queue: {page}"
    );

    // An administrator gets every action.
    for action in ["pause", "retry-dead-all", "retry", "cancel", "purge"] {
        assert!(
            page.contains(&format!("data-action=\"{action}\"")),
            "{action} in {page}"
        );
    }
    assert!(!page.contains("data-action=\"resume\""));
    let purge = must(&page, "<form class=\"actions\" method=\"post\"");
    assert!(
        purge.contains("<select name=\"state\">") && purge.contains("name=\"confirm\" required"),
        "{purge}"
    );

    let keys = server.get(&format!("/queues/{}", seg(&kq))).ok().body;
    assert!(
        text(must(&keys, "<section id=\"keys\"")).contains("tenant-1"),
        "{keys}"
    );
    assert!(!keys.contains("<section id=\"schedules\""), "{keys}");

    // The charts fill in as samples come.
    eventually("a depth line", || {
        let page = server.get(&format!("/queues/{}", seg(&q))).ok().body;
        must(&page, "<section id=\"depth\"").contains("<polyline")
    });

    assert_eq!(
        server
            .get(&format!("/queues/{}", seg(&unique_queue("srv_none"))))
            .status,
        404
    );
}

#[test]
fn the_task_page_shows_every_field_payload_error_and_parents() {
    let q = unique_queue("srv_task");
    let mut producer = cluster().connect_as(PRODUCER);
    let mut worker = cluster().connect_as(WORKER);
    let key = format!("order-{q}");
    let t = enqueue_with(
        &mut producer,
        &q,
        Some(&json!({"to": "ada@example.com"})),
        &EnqueueOpts::default().key(&key).max_attempts(3),
    )
    .task_id;
    let c = claim_one(&mut worker, &q, "worker-3", "5 minutes").unwrap();
    assert_eq!(
        heartbeat(
            &mut worker,
            &q,
            t,
            c.fencing_token,
            "5 minutes",
            Some(&json!({"step": 2}))
        ),
        Outcome::Applied
    );
    let child: i64 = sql(&mut producer, "SELECT task_id FROM aedb_queue.queue_enqueue($1, '{}'::jsonb, wait_for => ARRAY[$2::int8])", &[&q, &t])[0].get(0);

    let server = serve(cluster(), &[]);
    let page = server.get(&format!("/tasks/{t}")).ok().body;
    let dl = must(&page, "<dl id=\"task\"");
    for (f, v) in [
        ("id", t.to_string()),
        ("queue", q.clone()),
        ("state", "in_flight".into()),
        ("attempts", "1".into()),
        ("max_attempts", "3".into()),
        ("fencing_token", c.fencing_token.to_string()),
        ("owner", "worker-3".into()),
        ("progress", "{\"step\": 2}".into()),
        ("idempotency_key", key.clone()),
    ] {
        assert_eq!(field(dl, f), v, "{f}");
    }
    for f in ["lease_until", "due_at", "created_at"] {
        assert!(field(dl, f).starts_with("20"), "{f}: {dl}");
    }
    assert!(field(dl, "lease_until").contains("left"), "{dl}");
    assert!(
        text(must(&page, "<pre id=\"payload\"")).contains("\"to\": \"ada@example.com\""),
        "{page}"
    );
    assert!(page.contains("data-action=\"cancel\""), "{page}");
    assert!(!page.contains("data-action=\"retry\""), "not dead: {page}");

    // A child lists its parent, the parent its child; a dead task every
    // error it met and a retry.
    let child_page = server.get(&format!("/tasks/{child}")).ok().body;
    must(
        must(&child_page, "<section id=\"dependencies\""),
        &format!("<tr data-task-id=\"{t}\""),
    );
    must(
        must(&page, "<table data-linked=\"child\""),
        &format!("<tr data-task-id=\"{child}\""),
    );
    assert_eq!(
        fail_with(
            &mut worker,
            &q,
            t,
            c.fencing_token,
            "smtp timeout",
            &FailOpts {
                retry_in: Some("0".into()),
                ..Default::default()
            }
        ),
        Outcome::Applied
    );
    let c = claim_one(&mut worker, &q, "worker-3", "5 minutes").unwrap();
    assert_eq!(c.task_id, t);
    assert_eq!(
        fail_with(
            &mut worker,
            &q,
            t,
            c.fencing_token,
            "smtp said no",
            &FailOpts {
                dead_letter: Some(true),
                ..Default::default()
            }
        ),
        Outcome::Applied
    );
    let page = server.get(&format!("/tasks/{t}")).ok().body;
    let errors = must(&page, "<section id=\"errors\"");
    for (attempt, error) in [(1, "smtp timeout"), (2, "smtp said no")] {
        let row = text(must(errors, &format!("<tr data-attempt=\"{attempt}\"")));
        assert!(row.contains(error), "attempt {attempt}: {row}");
    }
    assert!(page.contains("data-action=\"retry\""), "{page}");

    assert_eq!(server.get("/tasks/987654321").status, 404);
    assert_eq!(server.get("/tasks/not-a-number").status, 400);
}

#[test]
fn search_goes_to_a_task_by_id_or_key_and_lists_several() {
    let a = unique_queue("srv_search_a");
    let b = unique_queue("srv_search_b");
    let mut producer = cluster().connect_as(PRODUCER);
    let one = enqueue_with(
        &mut producer,
        &a,
        Some(&json!(1)),
        &EnqueueOpts::default().key(&format!("only-{a}")),
    )
    .task_id;
    let shared = format!("shared-{a}");
    enqueue_with(
        &mut producer,
        &a,
        Some(&json!(2)),
        &EnqueueOpts::default().key(&shared),
    );
    enqueue_with(
        &mut producer,
        &b,
        Some(&json!(3)),
        &EnqueueOpts::default().key(&shared),
    );

    let server = serve(cluster(), &[]);
    let by_id = server.get(&format!("/search?q={one}"));
    assert_eq!(
        (by_id.status, by_id.header("location")),
        (303, Some(format!("/tasks/{one}").as_str()))
    );
    let by_key = server.get(&format!("/search?q=only-{a}"));
    assert_eq!(
        (by_key.status, by_key.header("location")),
        (303, Some(format!("/tasks/{one}").as_str()))
    );
    let several = server.get(&format!("/search?q={shared}")).ok().body;
    let results = must(&several, "<table id=\"results\"");
    assert_eq!(results.matches("<tr data-task-id=").count(), 2, "{results}");
    let none = server.get("/search?q=no-such-key-anywhere").ok().body;
    must(&none, "id=\"no-results\"");
}

#[test]
fn hostile_names_payloads_and_errors_are_escaped() {
    let q = format!("<script>alert('{}')</script>", unique_queue("x"));
    let mut producer = cluster().connect_as(PRODUCER);
    let mut worker = cluster().connect_as(WORKER);
    let t = enqueue(
        &mut producer,
        &q,
        &json!({"html": "</pre><script>alert(2)</script>"}),
    )
    .task_id;
    let c = claim_one(&mut worker, &q, "<b>owner</b>", "5 minutes").unwrap();
    fail_with(
        &mut worker,
        &q,
        t,
        c.fencing_token,
        "<img src=x onerror=alert(3)>",
        &FailOpts {
            dead_letter: Some(true),
            ..Default::default()
        },
    );

    let server = serve(cluster(), &[]);
    let pages = [
        server.get("/").ok().body,
        server.get(&format!("/queues/{}", seg(&q))).ok().body,
        server.get(&format!("/tasks/{t}")).ok().body,
    ];
    for page in &pages {
        assert!(
            !page.contains("<script>alert"),
            "raw script from the database in\n{page}"
        );
        assert!(
            !page.contains("<img src=x"),
            "raw img from the database in\n{page}"
        );
        assert!(!page.contains("<b>owner"), "{page}");
    }
    assert!(
        pages[0].contains(&esc(&q)),
        "the name, escaped: {}",
        pages[0]
    );
    assert_eq!(text(must(&pages[1], "<h1")), q);
    assert!(text(must(&pages[1], "<section id=\"dead\"")).contains("<img src=x onerror=alert(3)>"));
    assert!(
        text(must(&pages[2], "<pre id=\"payload\"")).contains("</pre><script>alert(2)</script>")
    );
    // A search for hostile text is escaped too.
    let found = server
        .get("/search?q=%3Cscript%3Ealert(9)%3C%2Fscript%3E")
        .ok()
        .body;
    assert!(!found.contains("<script>alert(9)"), "{found}");
    // Label values are escaped as the text format wants (' is not special).
    let m = server.metrics();
    assert_eq!(
        must_sample(
            &m,
            &format!("aedb_queue_tasks{{queue=\"{q}\",state=\"dead\"}}")
        ),
        1.0
    );
}

#[test]
fn figures_past_the_exact_limit_are_marked_as_estimates() {
    let big = unique_queue("srv_big");
    let small = unique_queue("srv_small");
    let mut producer = cluster().connect_as(PRODUCER);
    enqueue_batch(
        &mut producer,
        &big,
        &(0..12).map(|i| json!(i)).collect::<Vec<_>>(),
    );
    enqueue_batch(&mut producer, &small, &[json!(1), json!(2)]);
    let server = serve(cluster(), &["--exact-limit", "5"]);
    let page = server.get("/").ok().body;
    let row = queue_row(&page, &big);
    let ready = must(row, "<td class=\"num\" data-field=\"ready\"");
    assert!(
        ready.contains("<span class=\"estimate\" title=\"estimate\">~"),
        "{ready}"
    );
    let n: i64 = field(row, "ready").trim_start_matches('~').parse().unwrap();
    assert!(n >= 5, "an estimate is never below the limit: {n}");
    assert_eq!(field(queue_row(&page, &small), "ready"), "2");
    assert!(!queue_row(&page, &small).contains("estimate"));
    assert!(
        text(must(&page, "id=\"estimates-legend\"")).contains("5"),
        "the legend names the limit"
    );
    let qp = server.get(&format!("/queues/{}", seg(&big))).ok().body;
    assert!(
        must(&qp, "<table id=\"summary\"").contains("class=\"estimate\""),
        "{qp}"
    );
    let m = server.metrics();
    assert_eq!(
        must_sample(
            &m,
            &format!("aedb_queue_tasks_estimated{{queue=\"{big}\",state=\"ready\"}}")
        ),
        1.0
    );
    assert_eq!(
        must_sample(
            &m,
            &format!("aedb_queue_tasks_estimated{{queue=\"{small}\",state=\"ready\"}}")
        ),
        0.0
    );
}

// ---------------------------------------------------------------------------
// Actions
// ---------------------------------------------------------------------------

fn dead_ids(c: &mut Client, queue: &str) -> Vec<i64> {
    list(c, queue, Some("dead"), 100)
        .iter()
        .map(|t| t.task_id)
        .collect()
}

#[test]
fn each_action_changes_the_database_and_comes_back_with_a_flash() {
    let q = unique_queue("srv_actions");
    let (busy, later, doomed) = seed(&q);
    let mut admin = cluster().connect_as(ADMIN);
    let server = serve(cluster(), &[]);
    let csrf = server.csrf();
    let base = format!("/queues/{}", seg(&q));

    // Pause: 303 back to the queue, the flash shown once there.
    let r = server.post(&format!("{base}/pause"), &[("csrf", &csrf)]);
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some(base.as_str())),
        "{}",
        r.body
    );
    assert!(paused(&mut admin, &q));
    let cookie = r.flash_cookie().expect("a flash cookie");
    let page = server.get_with_cookie(&base, &cookie).ok().body;
    assert!(
        text(must(&page, "<p class=\"flash\" role=\"status\"")).contains("Paused"),
        "{page}"
    );
    assert!(page.contains("data-action=\"resume\"") && !page.contains("data-action=\"pause\""));
    assert!(
        server
            .get(&base)
            .ok()
            .body
            .find("class=\"flash\"")
            .is_none(),
        "no flash without the cookie"
    );

    let r = server.post(&format!("{base}/resume"), &[("csrf", &csrf)]);
    assert_eq!(r.status, 303);
    assert!(!paused(&mut admin, &q));

    // Retry one dead task, back to its page when asked.
    let r = server.post(
        &format!("{base}/retry-dead"),
        &[
            ("csrf", &csrf),
            ("task_id", &doomed.to_string()),
            ("back", "task"),
        ],
    );
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some(format!("/tasks/{doomed}").as_str()))
    );
    assert_eq!(get(&mut admin, &q, doomed).unwrap().state, "ready");

    // Retry all: kill two, retry them in one click.
    let mut worker = cluster().connect_as(WORKER);
    for t in claim(&mut worker, &q, "w", "5 minutes", 2) {
        fail_with(
            &mut worker,
            &q,
            t.task_id,
            t.fencing_token,
            "again",
            &FailOpts {
                dead_letter: Some(true),
                ..Default::default()
            },
        );
    }
    assert_eq!(dead_ids(&mut admin, &q).len(), 2);
    let r = server.post(&format!("{base}/retry-dead"), &[("csrf", &csrf)]);
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(dead_ids(&mut admin, &q).is_empty());
    let page = server
        .get_with_cookie(&base, &r.flash_cookie().unwrap())
        .ok()
        .body;
    assert!(
        text(must(&page, "<p class=\"flash\"")).contains("Moved 2 dead tasks"),
        "{page}"
    );

    // Cancel: the task is gone, back to its queue.
    let r = server.post(&format!("/tasks/{later}/cancel"), &[("csrf", &csrf)]);
    assert_eq!((r.status, r.header("location")), (303, Some(base.as_str())));
    assert!(get(&mut admin, &q, later).is_none());

    // Purge with the name typed: every ready task deleted, the rest kept.
    let mut su = cluster().connect();
    assert!(task_count(&mut su, &q, Some("ready")) > 0);
    let r = server.post(
        &format!("{base}/purge"),
        &[("csrf", &csrf), ("state", "ready"), ("confirm", &q)],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(task_count(&mut su, &q, Some("ready")), 0);
    assert!(get(&mut admin, &q, busy).is_some(), "in flight kept");

    // in_flight needs force; without it the server's refusal shows its SQLSTATE.
    let r = server.post(
        &format!("{base}/purge"),
        &[("csrf", &csrf), ("state", "in_flight"), ("confirm", &q)],
    );
    assert_eq!(r.status, 400);
    assert!(
        text(must(&r.body, "<p class=\"error\" role=\"alert\"")).contains("[22023]"),
        "{}",
        r.body
    );
    assert!(get(&mut admin, &q, busy).is_some());
    let r = server.post(
        &format!("{base}/purge"),
        &[
            ("csrf", &csrf),
            ("state", "in_flight"),
            ("confirm", &q),
            ("force", "true"),
        ],
    );
    assert_eq!(r.status, 303);
    assert!(get(&mut admin, &q, busy).is_none());
}

#[test]
fn purge_without_the_typed_queue_name_is_refused_and_purges_nothing() {
    let q = unique_queue("srv_purge");
    seed(&q);
    let server = serve(cluster(), &[]);
    let csrf = server.csrf();
    let mut su = cluster().connect();
    let before = task_count(&mut su, &q, None);
    let path = format!("/queues/{}/purge", seg(&q));
    for confirm in [None, Some(""), Some("wrong"), Some(&q[..q.len() - 1])] {
        let mut fields = vec![("csrf", csrf.as_str()), ("state", "ready")];
        if let Some(c) = confirm {
            fields.push(("confirm", c));
        }
        let r = server.post(&path, &fields);
        assert_eq!(r.status, 400, "confirm {confirm:?}: {}", r.body);
        must(&r.body, "<p class=\"error\" role=\"alert\"");
    }
    assert_eq!(task_count(&mut su, &q, None), before);
}

#[test]
fn a_missing_or_wrong_csrf_token_or_a_foreign_origin_is_refused() {
    let q = unique_queue("srv_csrf");
    let (_, later, doomed) = seed(&q);
    let server = serve(cluster(), &[]);
    let csrf = server.csrf();
    let base = format!("/queues/{}", seg(&q));
    let wrong = "0".repeat(csrf.len());
    let attempts: Vec<(String, Vec<(&str, &str)>)> = vec![
        (format!("{base}/pause"), vec![]),
        (format!("{base}/pause"), vec![("csrf", &wrong)]),
        (format!("{base}/retry-dead"), vec![("csrf", "")]),
        (
            format!("{base}/purge"),
            vec![("state", "ready"), ("confirm", &q)],
        ),
        (format!("/tasks/{later}/cancel"), vec![("csrf", &wrong)]),
    ];
    for (path, fields) in &attempts {
        let r = server.post(path, fields);
        assert_eq!(r.status, 403, "{path} {fields:?}: {}", r.body);
        must(&r.body, "<p class=\"error\" role=\"alert\"");
    }
    // The right token from another site's page.
    let r = server.post_from(
        &format!("{base}/pause"),
        "http://evil.example",
        &[("csrf", &csrf)],
    );
    assert_eq!(r.status, 403, "{}", r.body);
    let r = server.post_from(
        &format!("{base}/purge"),
        "null",
        &[("csrf", &csrf), ("state", "ready"), ("confirm", &q)],
    );
    assert_eq!(r.status, 403);

    // Nothing changed, seen from another connection.
    let mut admin = cluster().connect_as(ADMIN);
    let mut su = cluster().connect();
    assert!(!paused(&mut admin, &q));
    assert_eq!(task_count(&mut su, &q, Some("ready")), 3);
    assert_eq!(dead_ids(&mut admin, &q), vec![doomed]);
    assert!(get(&mut admin, &q, later).is_some());

    // The same origin passes.
    let origin = format!("http://{}", server.addr);
    let r = server.post_from(&format!("{base}/pause"), &origin, &[("csrf", &csrf)]);
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(paused(&mut admin, &q));
}

/// The listening port of `server` (its address is 127.0.0.1:PORT).
fn port_of(server: &Server) -> &str {
    server.addr.rsplit_once(':').expect("ADDR:PORT").1
}

/// Every GET route (and one that is none), then every action with a valid
/// token and an Origin matching the Host (as a DNS-rebinding page sends),
/// all with `host`: each must get 421 and no token.
fn assert_refused_everywhere(server: &Server, host: Option<&str>, q: &str, csrf: &str) {
    let base = format!("/queues/{}", seg(q));
    let gets = [
        "/".to_string(),
        base.clone(),
        "/tasks/1".into(),
        "/search?q=1".into(),
        "/metrics".into(),
        "/healthz".into(),
        "/assets/app.js".into(),
        "/no-such-page".into(),
    ];
    for path in &gets {
        let r = server.request_to(host, "GET", path, &[], "");
        assert_eq!(r.status, 421, "GET {path} with Host {host:?}: {}", r.body);
        assert!(
            r.body.contains("--allowed-host") && !r.body.contains(csrf),
            "{}",
            r.body
        );
    }
    let origin = format!("http://{}", host.unwrap_or("evil.example"));
    for (path, fields) in [
        (format!("{base}/pause"), vec![("csrf", csrf)]),
        (format!("{base}/retry-dead"), vec![("csrf", csrf)]),
        (
            format!("{base}/purge"),
            vec![("csrf", csrf), ("state", "ready"), ("confirm", q)],
        ),
        ("/tasks/1/cancel".into(), vec![("csrf", csrf)]),
    ] {
        let body = form_encode(&fields);
        let r = server.request_to(host, "POST", &path, &[("Origin", &origin)], &body);
        assert_eq!(r.status, 421, "POST {path} with Host {host:?}: {}", r.body);
    }
}

#[test]
fn a_foreign_or_missing_host_is_refused_before_anything_happens() {
    let q = unique_queue("srv_host");
    let (_, _, doomed) = seed(&q);
    let server = serve(cluster(), &[]);
    let csrf = server.csrf();
    let port = port_of(&server).to_string();
    let evil = format!("evil.example:{port}");
    for host in [
        Some(evil.as_str()),
        Some("EVIL.example"),
        Some("localhost:1"),
        Some("0.0.0.0:1"),
        Some(""),
        None,
    ] {
        assert_refused_everywhere(&server, host, &q, &csrf);
    }
    // The target's own authority counts too (absolute form).
    let r = server.get(&format!("http://{evil}/"));
    assert_eq!(r.status, 421, "{}", r.body);
    // Two Host headers: refused whatever the first one says.
    let r = server.request("GET", "/", &[("Host", &evil)], "");
    assert_eq!(r.status, 421, "{}", r.body);

    // Nothing changed, seen from other connections (nothing paused, retried
    // or purged).
    let mut admin = cluster().connect_as(ADMIN);
    let mut su = cluster().connect();
    assert!(!paused(&mut admin, &q));
    assert_eq!(task_count(&mut su, &q, Some("ready")), 3);
    assert_eq!(dead_ids(&mut admin, &q), vec![doomed]);

    // The listening Host and the loopback forms of its port are answered.
    for host in [
        server.addr.clone(),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("[::1]:{port}"),
    ] {
        let r = server.request_to(Some(&host), "GET", "/", &[], "");
        assert_eq!(r.status, 200, "Host {host}: {}", r.body);
        assert!(r.body.contains(&csrf));
    }
    let local = format!("localhost:{port}");
    let r = server.request_to(
        Some(&local),
        "POST",
        &format!("/queues/{}/pause", seg(&q)),
        &[("Origin", &format!("http://{local}"))],
        &form_encode(&[("csrf", &csrf)]),
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(paused(&mut admin, &q));
}

#[test]
fn allowed_host_admits_the_hosts_an_operator_names() {
    let q = unique_queue("srv_allowed");
    seed(&q);
    let server = serve(
        cluster(),
        &[
            "--allowed-host",
            "Dash.Example",
            "--allowed-host",
            "proxy.example:1",
        ],
    );
    let csrf = server.csrf();
    let port = port_of(&server).to_string();
    let dash = format!("dash.example:{port}");
    for host in [
        dash.as_str(),
        "dash.example",
        "proxy.example:1",
        &server.addr,
    ] {
        let r = server.request_to(Some(host), "GET", "/", &[], "");
        assert_eq!(r.status, 200, "Host {host}: {}", r.body);
        assert!(r.body.contains(&csrf));
    }
    // A named port is that port alone; other names are still refused.
    let proxy_here = format!("proxy.example:{port}");
    let evil = format!("evil.example:{port}");
    for host in [
        proxy_here.as_str(),
        "proxy.example",
        &evil,
        "sub.dash.example",
    ] {
        assert_refused_everywhere(&server, Some(host), &q, &csrf);
    }
    let mut admin = cluster().connect_as(ADMIN);
    assert!(!paused(&mut admin, &q));
    // An action through the named host, from its own page, works.
    let r = server.request_to(
        Some(&dash),
        "POST",
        &format!("/queues/{}/pause", seg(&q)),
        &[("Origin", &format!("http://{dash}"))],
        &form_encode(&[("csrf", &csrf)]),
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(paused(&mut admin, &q));
}

#[test]
fn a_malformed_allowed_host_is_a_usage_error() {
    for bad in ["http://dash.example", "*.example", "::1", "dash.example:0"] {
        let r = cli(cluster(), &["serve", "--allowed-host", bad]);
        assert_eq!(r.code, 2, "{bad}: {r:#?}");
        assert!(r.stderr.contains("--allowed-host"), "{bad}: {}", r.stderr);
    }
}

#[test]
fn a_role_without_administer_sees_no_actions_and_is_refused_when_posting() {
    let q = unique_queue("srv_worker");
    let (busy, _, doomed) = seed(&q);
    let server = serve_as(cluster(), WORKER, &[]);
    let queue_page = server.get(&format!("/queues/{}", seg(&q))).ok().body;
    let task_page = server.get(&format!("/tasks/{doomed}")).ok().body;
    for page in [&queue_page, &task_page] {
        assert!(
            !page.contains("data-action="),
            "no action forms for a worker:\n{page}"
        );
    }
    // It still sees the tasks.
    must(&queue_page, &format!("<tr data-task-id=\"{busy}\""));

    let csrf = server.csrf();
    let base = format!("/queues/{}", seg(&q));
    for (path, fields) in [
        (format!("{base}/pause"), vec![("csrf", csrf.as_str())]),
        (format!("{base}/retry-dead"), vec![("csrf", csrf.as_str())]),
        (
            format!("{base}/purge"),
            vec![
                ("csrf", csrf.as_str()),
                ("state", "dead"),
                ("confirm", q.as_str()),
            ],
        ),
        (
            format!("/tasks/{busy}/cancel"),
            vec![("csrf", csrf.as_str())],
        ),
    ] {
        let r = server.post(&path, &fields);
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        assert!(
            text(must(&r.body, "<p class=\"error\" role=\"alert\"")).contains("[42501]"),
            "{}",
            r.body
        );
    }
    let mut admin = cluster().connect_as(ADMIN);
    assert!(!paused(&mut admin, &q));
    assert_eq!(dead_ids(&mut admin, &q), vec![doomed]);
    assert!(get(&mut admin, &q, busy).is_some());
}

// ---------------------------------------------------------------------------
// /metrics
// ---------------------------------------------------------------------------

#[test]
fn metrics_follow_enqueues_completions_and_failures() {
    let q = unique_queue("srv_metrics");
    let server = serve(cluster(), &[]);
    let series = |name: &str| format!("{name}{{queue=\"{q}\"}}");
    let mut producer = cluster().connect_as(PRODUCER);
    let mut worker = cluster().connect_as(WORKER);
    // Distinct figures, so that no two counters can be mixed up unseen.
    let ids = enqueue_batch(
        &mut producer,
        &q,
        &(0..10).map(|i| json!(i)).collect::<Vec<_>>(),
    );
    let ts = claim(&mut worker, &q, "w", "5 minutes", 8);
    for t in &ts[..4] {
        assert_eq!(
            complete(&mut worker, &q, t.task_id, t.fencing_token),
            Outcome::Applied
        );
    }
    fail_with(
        &mut worker,
        &q,
        ts[4].task_id,
        ts[4].fencing_token,
        "no",
        &FailOpts {
            dead_letter: Some(true),
            ..Default::default()
        },
    );
    for t in &ts[5..7] {
        let retry = FailOpts {
            retry_in: Some("1 hour".into()),
            ..Default::default()
        };
        assert_eq!(
            fail_with(&mut worker, &q, t.task_id, t.fencing_token, "later", &retry),
            Outcome::Applied
        );
    }
    let mut admin = cluster().connect_as(ADMIN);
    assert!(cancel(&mut admin, &q, ts[7].task_id), "in flight");
    assert!(cancel(&mut admin, &q, ids[9]), "ready");

    let m = server.metrics();
    assert_eq!(must_sample(&m, "aedb_queue_up"), 1.0);
    assert_eq!(must_sample(&m, "aedb_queue_counters_up"), 1.0);
    assert!(must_sample(&m, "aedb_queue_scrape_duration_seconds") >= 0.0);
    let state = |s: &str| {
        must_sample(
            &m,
            &format!("aedb_queue_tasks{{queue=\"{q}\",state=\"{s}\"}}"),
        )
    };
    assert_eq!(
        (
            state("ready"),
            state("in_flight"),
            state("scheduled"),
            state("dead"),
            state("waiting"),
            state("blocked")
        ),
        (1.0, 0.0, 2.0, 1.0, 0.0, 0.0)
    );
    assert_eq!(must_sample(&m, &series("aedb_queue_enqueued_total")), 10.0);
    assert_eq!(must_sample(&m, &series("aedb_queue_completed_total")), 4.0);
    assert_eq!(must_sample(&m, &series("aedb_queue_failed_total")), 3.0);
    assert_eq!(
        must_sample(&m, &series("aedb_queue_dead_lettered_total")),
        1.0
    );
    assert_eq!(must_sample(&m, &series("aedb_queue_cancelled_total")), 2.0);
    assert_eq!(must_sample(&m, &series("aedb_queue_reclaimed_total")), 0.0);
    assert_eq!(must_sample(&m, &series("aedb_queue_paused")), 0.0);
    assert_eq!(must_sample(&m, &series("aedb_queue_expired_leases")), 0.0);
    assert!(must_sample(&m, &series("aedb_queue_oldest_ready_age_seconds")) >= 0.0);
    for name in ["aedb_queue_tasks", "aedb_queue_completed_total"] {
        assert_eq!(m.matches(&format!("# TYPE {name} ")).count(), 1, "{name}");
    }

    // The scrape has every name the Grafana dashboard uses.
    let file = temp_file("metrics.txt");
    std::fs::write(&file, &m).unwrap();
    let check = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/grafana/check.py"
        ))
        .arg("--metrics")
        .arg(&file)
        .output()
        .expect("run docs/grafana/check.py");
    assert!(
        check.status.success(),
        "check.py: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn the_shared_overview_is_kept_for_max_age_and_dropped_by_an_action() {
    let q = unique_queue("srv_cache");
    let mut producer = cluster().connect_as(PRODUCER);
    enqueue(&mut producer, &q, &json!(1));
    // No sample replaces the snapshot while the test looks at it.
    let server = serve(cluster(), &["--max-age", "600", "--sample-every", "3600"]);
    let ready = |m: &str| {
        must_sample(
            m,
            &format!("aedb_queue_tasks{{queue=\"{q}\",state=\"ready\"}}"),
        )
    };
    assert_eq!(ready(&server.metrics()), 1.0);
    enqueue(&mut producer, &q, &json!(2));
    // Within --max-age the snapshot is served as it was...
    assert_eq!(ready(&server.metrics()), 1.0);
    assert_eq!(
        field(queue_row(&server.get("/").ok().body, &q), "ready"),
        "1"
    );
    // ...and an action of this server drops it.
    let r = server.post(
        &format!("/queues/{}/pause", seg(&q)),
        &[("csrf", &server.csrf())],
    );
    assert_eq!(r.status, 303);
    assert_eq!(ready(&server.metrics()), 2.0);
    let page = server.get(&format!("/queues/{}", seg(&q))).ok().body;
    assert_eq!(field(must(&page, "<table id=\"summary\""), "ready"), "2");
    // A queue newer than the snapshot still has its page.
    let newer = unique_queue("srv_cache_new");
    enqueue(&mut producer, &newer, &json!(1));
    assert_eq!(server.get(&format!("/queues/{}", seg(&newer))).status, 200);
}

/// `aedb-queue serve ARGS` (no login, any port) run to its end: for start-up
/// failures.
fn serve_fails(args: &[&str]) -> Run {
    let mut cmd = support::command(cluster());
    cmd.args(["serve", "--no-login", "--listen", "127.0.0.1:0"]);
    cmd.args(args);
    run_command(cmd, "")
}

/// A DSN of the cluster's database on a port where nothing listens.
fn dead_dsn() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("host=127.0.0.1 port={port} user={ADMIN} dbname={DB} connect_timeout=5")
}

#[test]
fn sample_every_and_max_age_take_durations_as_in_sql() {
    let q = unique_queue("srv_durations");
    let mut producer = cluster().connect_as(PRODUCER);
    enqueue(&mut producer, &q, &json!(1));
    let ready = |m: &str| {
        must_sample(
            m,
            &format!("aedb_queue_tasks{{queue=\"{q}\",state=\"ready\"}}"),
        )
    };
    // Read by the server's interval input: '1 hour' samples hourly, and a
    // snapshot is served for '10 minutes'.
    let server = serve(
        cluster(),
        &["--sample-every", "1 hour", "--max-age", "10 minutes"],
    );
    must(&server.get("/").ok().body, "Sampled every 3600 s,");
    assert_eq!(ready(&server.metrics()), 1.0);
    enqueue(&mut producer, &q, &json!(2));
    assert_eq!(ready(&server.metrics()), 1.0, "kept for --max-age");
    drop(server);
    for (every, shown) in [("250ms", "0.25"), ("PT2S", "2"), ("1.5", "1.5")] {
        let server = serve(cluster(), &["--sample-every", every, "--max-age", "0"]);
        must(
            &server.get("/").ok().body,
            &format!("Sampled every {shown} s,"),
        );
        assert_eq!(ready(&server.metrics()), 2.0, "--max-age 0 reads anew");
    }

    // Bad syntax, or out of the flag's range: usage errors naming the flag.
    for (flag, bad) in [
        ("--sample-every", "soon"),
        ("--sample-every", "0"),
        ("--sample-every", "5ms"),
        ("--sample-every", "2 days"),
        ("--max-age", "1x"),
        ("--max-age", "-1"),
        ("--max-age", "1 second ago"),
        ("--max-age", "2 hours"),
    ] {
        let run = serve_fails(&[flag, bad]);
        assert_eq!(run.code, 2, "{flag} {bad}: {run:#?}");
        assert!(
            run.stderr
                .contains(&format!("invalid value '{bad}' for '{flag} <DURATION>'")),
            "{flag} {bad}: {run:#?}"
        );
        assert!(!run.stdout.contains("listening on"), "{run:#?}");
    }

    // The database down at start: plain numbers are seconds and serve starts...
    let dead = dead_dsn();
    let server = serve(
        cluster(),
        &["--dsn", &dead, "--sample-every", "0.5", "--max-age", "1"],
    );
    assert_eq!(server.get("/healthz").status, 503);
    drop(server);
    // ...any other duration is an error naming the flag that says what to do.
    for flag in ["--sample-every", "--max-age"] {
        let run = serve_fails(&["--dsn", &dead, flag, "1 minute"]);
        assert_eq!(run.code, 1, "{flag}: {run:#?}");
        assert!(
            run.stderr.contains(&format!("{flag} '1 minute'"))
                && run.stderr.contains(&format!("give {flag} in seconds"))
                && run.stderr.contains("or start the database"),
            "{flag}: {run:#?}"
        );
        assert!(!run.stdout.contains("listening on"), "{run:#?}");
    }
}

#[test]
fn queue_labels_are_capped_and_the_rest_summed_as_other() {
    // A database of its own, so that the queues are exactly these.
    let db = format!("serve_cap_{}", std::process::id());
    let mut su = cluster().connect();
    su.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    let conn = |user: &str| {
        Client::connect(
            &format!(
                "host=127.0.0.1 port={} user={user} dbname={db}",
                cluster().port()
            ),
            postgres::NoTls,
        )
        .unwrap()
    };
    conn("postgres")
        .batch_execute("CREATE EXTENSION aedb_queue CASCADE")
        .unwrap();
    let mut producer = conn(PRODUCER);
    for (q, n) in [("a", 1), ("b", 2), ("c", 4), ("d", 8)] {
        enqueue_batch(
            &mut producer,
            q,
            &(0..n).map(|i| json!(i)).collect::<Vec<_>>(),
        );
    }
    let dsn = format!(
        "host=127.0.0.1 port={} user={ADMIN} dbname={db}",
        cluster().port()
    );
    let server = serve(cluster(), &["--dsn", &dsn, "--max-queues", "2"]);
    let m = server.metrics();
    let mut labels: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("aedb_queue_tasks{"))
        .filter_map(|l| l.split("queue=\"").nth(1)?.split('"').next())
        .collect();
    labels.sort_unstable();
    labels.dedup();
    assert_eq!(labels, vec!["a", "other"], "at most 2 label values:\n{m}");
    assert_eq!(
        must_sample(&m, "aedb_queue_tasks{queue=\"a\",state=\"ready\"}"),
        1.0
    );
    assert_eq!(
        must_sample(&m, "aedb_queue_tasks{queue=\"other\",state=\"ready\"}"),
        14.0
    );
    assert_eq!(
        must_sample(&m, "aedb_queue_enqueued_total{queue=\"other\"}"),
        14.0
    );
    assert_eq!(
        must_sample(&m, "aedb_queue_enqueued_total{queue=\"a\"}"),
        1.0
    );
    // Without the cap every queue has its own.
    let wide = serve(cluster(), &["--dsn", &dsn]).metrics();
    assert_eq!(
        must_sample(&wide, "aedb_queue_tasks{queue=\"d\",state=\"ready\"}"),
        8.0
    );
    assert!(!wide.contains("queue=\"other\""), "{wide}");
}

#[test]
fn without_preloading_counters_are_unavailable_and_a_stopped_database_is_up_0() {
    let plain = Cluster::start();
    let q = unique_queue("srv_plain");
    let mut producer = plain.connect_as(PRODUCER);
    enqueue(&mut producer, &q, &json!(1));
    let server = serve(&plain, &["--sample-every", "0.2"]);

    let m = server.metrics();
    assert_eq!(must_sample(&m, "aedb_queue_up"), 1.0);
    assert_eq!(must_sample(&m, "aedb_queue_counters_up"), 0.0);
    assert!(!m.contains("_total"), "no counters without them:\n{m}");
    assert_eq!(
        must_sample(
            &m,
            &format!("aedb_queue_tasks{{queue=\"{q}\",state=\"ready\"}}")
        ),
        1.0
    );
    let page = server.get("/").ok().body;
    must(&page, "id=\"counters-unavailable\"");
    assert_eq!(field(queue_row(&page, &q), "throughput"), "n/a");
    assert_eq!(field(queue_row(&page, &q), "failure_rate"), "n/a");
    must(
        &server.get(&format!("/queues/{}", seg(&q))).ok().body,
        "id=\"counters-unavailable\"",
    );
    assert_eq!(server.get("/healthz").ok().body.trim(), "ok");

    // The database goes away: /metrics still answers, with up 0.
    plain.stop_immediate();
    let r = server.get("/metrics");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(must_sample(&r.body, "aedb_queue_up"), 0.0);
    assert_eq!(must_sample(&r.body, "aedb_queue_counters_up"), 0.0);
    assert!(!r.body.contains("aedb_queue_tasks{"), "{}", r.body);
    assert_eq!(server.get("/").status, 503);
    assert_eq!(server.get("/healthz").status, 503);

    // And back: the pool reconnects by itself.
    plain.start_again();
    eventually("aedb_queue_up 1 again", || {
        sample(&server.get("/metrics").body, "aedb_queue_up") == Some(1.0)
    });
}

// ---------------------------------------------------------------------------
// Operators: login, roles, the proxy's header
// ---------------------------------------------------------------------------

const GATEWAY: &str = "srv_gateway";

/// Two tenants' operator roles (confined to srv_ta.* and srv_tb.*, admins
/// there), the dashboard's connection role (NOINHERIT, member of both,
/// no rights of its own), a queue of each tenant with a ready task, and a
/// users file: alice (ops_a, password "alice-pw"), bob (ops_b, "bob-pw"),
/// sso_a (ops_a, no password).
fn tenants() -> (String, String, i64, std::path::PathBuf) {
    static ROLES: OnceLock<()> = OnceLock::new();
    ROLES.get_or_init(|| {
        let mut su = cluster().connect();
        su.batch_execute(&format!(
            "CREATE ROLE srv_ops_a; CREATE ROLE srv_ops_b;
             GRANT aedb_queue_admin TO srv_ops_a, srv_ops_b;
             CREATE ROLE {GATEWAY} LOGIN NOINHERIT;
             GRANT srv_ops_a, srv_ops_b TO {GATEWAY};"
        ))
        .unwrap();
        let mut admin = cluster().connect_as(ADMIN);
        sql(
            &mut admin,
            "SELECT aedb_queue.queue_grant('srv_ta.*', 'srv_ops_a', 'admin')",
            &[],
        );
        sql(
            &mut admin,
            "SELECT aedb_queue.queue_grant('srv_tb.*', 'srv_ops_b', 'admin')",
            &[],
        );
    });
    let qa = unique_queue("srv_ta.jobs");
    let qb = unique_queue("srv_tb.jobs");
    let mut producer = cluster().connect_as(PRODUCER);
    enqueue(&mut producer, &qa, &json!({"tenant": "a"}));
    let tb = enqueue(&mut producer, &qb, &json!({"tenant": "b"})).task_id;
    let line = |name: &str, role: &str, pw: &str| {
        let run = run_command(
            {
                let mut c = std::process::Command::new(BIN);
                c.args(["hash-password", name, role]);
                c
            },
            &format!("{pw}\n"),
        )
        .ok();
        run.stdout.trim().to_string()
    };
    let path = temp_file("users");
    std::fs::write(
        &path,
        format!(
            "# the operators\n{}\n{}\nsso_a srv_ops_a -\n",
            line("alice", "srv_ops_a", "alice-pw"),
            line("bob", "srv_ops_b", "bob-pw")
        ),
    )
    .unwrap();
    (qa, qb, tb, path)
}

fn serve_operators(users: &std::path::Path, extra: &[&str]) -> Server {
    let dsn = cluster().dsn(GATEWAY);
    let mut args = vec!["--dsn", dsn.as_str(), "--users", users.to_str().unwrap()];
    args.extend_from_slice(extra);
    serve(cluster(), &args)
}

/// The `name=value` of the session cookie a login response sets, and the
/// whole Set-Cookie header.
fn session_cookie(r: &Resp) -> (String, String) {
    let set = r
        .headers
        .iter()
        .find(|(k, v)| k.eq_ignore_ascii_case("set-cookie") && v.starts_with("aedb_queue_session="))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no session cookie: {:?}", r.headers));
    (set.split(';').next().unwrap().to_string(), set)
}

/// Logs in; the session cookie and the operator's CSRF token.
fn log_in(server: &Server, name: &str, password: &str) -> (String, String) {
    let login = server.get("/login").ok().body;
    let token = attr_of(&login, "<input type=\"hidden\" name=\"csrf\"", "value").unwrap();
    let r = server.post(
        "/login",
        &[("csrf", &token), ("name", name), ("password", password)],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let (cookie, _) = session_cookie(&r);
    let page = server.get_with_cookie("/", &cookie).ok().body;
    let csrf = attr_of(&page, "<meta name=\"csrf-token\"", "content").unwrap();
    (cookie, csrf)
}

#[test]
fn operators_log_in_and_act_only_as_their_role() {
    let (qa, qb, tb, users) = tenants();
    let server = serve_operators(&users, &[]);

    // Logged out: pages redirect to the login form, posts are refused.
    for path in [
        "/",
        &format!("/queues/{}", seg(&qa)),
        "/tasks/1",
        "/search?q=1",
    ] {
        let r = server.get(path);
        assert_eq!(
            (r.status, r.header("location")),
            (303, Some("/login")),
            "{path}"
        );
    }
    let r = server.post(&format!("/queues/{}/pause", seg(&qa)), &[("csrf", "x")]);
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(server.get("/healthz").status, 200, "open");

    // Wrong passwords and unknown names read the same.
    let login = server.get("/login").ok().body;
    let token = attr_of(&login, "<input type=\"hidden\" name=\"csrf\"", "value").unwrap();
    for (name, pw) in [("alice", "bob-pw"), ("nobody", "alice-pw"), ("sso_a", "")] {
        let r = server.post(
            "/login",
            &[("csrf", &token), ("name", name), ("password", pw)],
        );
        assert_eq!(r.status, 401, "{name}: {}", r.body);
        assert!(r.body.contains("Wrong name or password."), "{}", r.body);
        assert!(r.header("set-cookie").is_none());
    }
    // The login form is a form like the others: its token is checked.
    let r = server.post(
        "/login",
        &[
            ("csrf", "forged"),
            ("name", "alice"),
            ("password", "alice-pw"),
        ],
    );
    assert_eq!(r.status, 403, "{}", r.body);

    let r = server.post(
        "/login",
        &[
            ("csrf", &token),
            ("name", "alice"),
            ("password", "alice-pw"),
        ],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let (_, set) = session_cookie(&r);
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(flag), "{set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP: {set}");

    let (alice, alice_csrf) = log_in(&server, "alice", "alice-pw");
    let (bob, _) = log_in(&server, "bob", "bob-pw");
    let page = server.get_with_cookie("/", &alice).ok().body;
    queue_row(&page, &qa);
    assert!(
        !page.contains("srv_tb."),
        "alice sees no tenant b queue:\n{page}"
    );
    let page = server.get_with_cookie("/", &bob).ok().body;
    queue_row(&page, &qb);
    assert!(!page.contains("srv_ta."), "{page}");
    let r = server.get_with_cookie(&format!("/queues/{}", seg(&qb)), &alice);
    assert_eq!(r.status, 404, "{}", r.body);
    let r = server.get_with_cookie(&format!("/tasks/{tb}"), &alice);
    assert_eq!(r.status, 404, "{}", r.body);
    server.get_with_cookie(&format!("/tasks/{tb}"), &bob).ok();

    // A forged post with alice's own session and token against tenant b:
    // the database refuses it, nothing changes.
    let forge = |path: &str| {
        server.request(
            "POST",
            path,
            &[("Cookie", &alice)],
            &form_encode(&[("csrf", &alice_csrf)]),
        )
    };
    let r = forge(&format!("/queues/{}/pause", seg(&qb)));
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("[42501]"), "{}", r.body);
    assert_eq!(forge(&format!("/tasks/{tb}/cancel")).status, 404);
    let mut admin = cluster().connect_as(ADMIN);
    assert!(!paused(&mut admin, &qb));
    let mut su = cluster().connect();
    assert_eq!(task_count(&mut su, &qb, Some("ready")), 1);
    // Her own queue she may pause.
    assert_eq!(forge(&format!("/queues/{}/pause", seg(&qa))).status, 303);
    assert!(paused(&mut admin, &qa));

    // /metrics: the operator's queues only; Basic credentials for scrapers.
    let m = server.get_with_cookie("/metrics", &bob).ok().body;
    assert!(
        m.contains(&format!("queue=\"{qb}\"")) && !m.contains("srv_ta."),
        "{m}"
    );
    let r = server.get("/metrics");
    assert_eq!(r.status, 401);
    assert!(r
        .header("www-authenticate")
        .unwrap_or("")
        .starts_with("Basic"));
    use base64ct::Encoding as _;
    let basic = format!(
        "Basic {}",
        base64ct::Base64::encode_string(b"alice:alice-pw")
    );
    let r = server
        .request("GET", "/metrics", &[("Authorization", &basic)], "")
        .ok();
    assert!(
        r.body.contains(&format!("queue=\"{qa}\"")) && !r.body.contains("srv_tb."),
        "{}",
        r.body
    );

    // Logout ends the session on the server too.
    let r = server.request(
        "POST",
        "/logout",
        &[("Cookie", &alice)],
        &form_encode(&[("csrf", &alice_csrf)]),
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(r.header("set-cookie").unwrap_or("").contains("Max-Age=0"));
    assert_eq!(server.get_with_cookie("/", &alice).status, 303);
}

#[test]
fn the_connection_role_alone_reaches_no_queue() {
    let (qa, _, _, _) = tenants();
    // The gateway's own rights: none (NOINHERIT), whatever it may become.
    let mut gateway = cluster().connect_as(GATEWAY);
    let e = gateway
        .query("SELECT * FROM aedb_queue.queue_overview()", &[])
        .unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("42501"), "{e}");
    // As tenant a it still cannot reach tenant b (the login role's rights
    // are checked too, and SET ROLE only narrows).
    gateway.batch_execute("SET ROLE srv_ops_a").unwrap();
    let rows = sql(
        &mut gateway,
        "SELECT queue FROM aedb_queue.queue_overview()",
        &[],
    );
    let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert!(
        names.contains(&qa) && names.iter().all(|n| n.starts_with("srv_ta.")),
        "{names:?}"
    );
}

#[test]
fn the_user_header_is_trusted_only_from_a_trusted_proxy() {
    let (qa, _, _, users) = tenants();
    let header = [("X-Forwarded-User", "sso_a")];
    let trusting = serve_operators(
        &users,
        &[
            "--trust-user-header",
            "X-Forwarded-User",
            "--trusted-proxy",
            "127.0.0.2",
        ],
    );
    // From the proxy's address: the operator's page, no login needed.
    let r = trusting.request_from("127.0.0.2", "/", &header).ok();
    queue_row(&r.body, &qa);
    assert!(r.body.contains(">sso_a<"), "{}", r.body);
    // The same header from elsewhere is ignored: the login form.
    let r = trusting.request("GET", "/", &header, "");
    assert_eq!((r.status, r.header("location")), (303, Some("/login")));
    // A name the users file does not have is nobody.
    let r = trusting.request_from("127.0.0.2", "/", &[("X-Forwarded-User", "mallory")]);
    assert_eq!(r.status, 303);
}

#[test]
fn repeated_failed_logins_are_refused_for_a_while() {
    let (_, _, _, users) = tenants();
    let server = serve_operators(&users, &[]);
    let login = server.get("/login").ok().body;
    let token = attr_of(&login, "<input type=\"hidden\" name=\"csrf\"", "value").unwrap();
    let try_login = |pw: &str| {
        server
            .post(
                "/login",
                &[("csrf", &token), ("name", "bob"), ("password", pw)],
            )
            .status
    };
    for _ in 0..5 {
        assert_eq!(try_login("guess"), 401);
    }
    assert_eq!(
        try_login("bob-pw"),
        429,
        "even the right password, for a minute"
    );
}

#[test]
fn no_login_is_for_loopback_and_login_needs_a_users_file() {
    let run = run_command(
        {
            let mut c = support::command(cluster());
            c.args(["serve", "--no-login", "--listen", "0.0.0.0:0"]);
            c
        },
        "",
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("--no-login serves everyone"),
        "{}",
        run.stderr
    );
    let run = run_command(
        {
            let mut c = support::command(cluster());
            c.args(["serve", "--listen", "127.0.0.1:0"]);
            c
        },
        "",
    );
    assert_eq!(run.code, 2, "a usage error: {run:?}");
    assert!(run.stderr.contains("--users"), "{}", run.stderr);
}
