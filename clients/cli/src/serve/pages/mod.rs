//! The HTML pages: the layout every page shares, the error page, the flash
//! message after an action, and small formatting helpers. maud escapes
//! every interpolated value; nothing here writes raw HTML from data.

pub mod overview;
pub mod queue;
pub mod search;
pub mod task;

use axum::extract::FromRequestParts;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, COOKIE, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::identity::Operator;
use super::{describe_db, sqlstate};

/// The cookie that carries an action's message to the page it redirects to.
pub const FLASH_COOKIE: &str = "aedb_queue_flash";

const CSS: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
nav{display:flex;gap:1em;align-items:center;padding:.5em 1em;background:#234;color:#fff}
nav a{color:#fff;text-decoration:none;font-weight:600}
nav form{margin-left:auto}
main{padding:1em;max-width:1200px}
h1{font-size:1.4em;margin:.3em 0}
h2{font-size:1.1em;margin:1.2em 0 .4em}
table{border-collapse:collapse;background:#fff}
th,td{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.estimate{color:#a60;cursor:help}
.flash{background:#e6f4e6;border:1px solid #7b7;padding:.5em}
.error{background:#fbe9e9;border:1px solid #d77;padding:.5em}
.muted{color:#777}
.paused{color:#a60;font-weight:600}
pre{background:#fff;border:1px solid #ddd;padding:.5em;overflow:auto;max-height:30em}
dl#task{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}
dt{font-weight:600}dd{margin:0}
form.inline{display:inline}
.actions{display:flex;gap:.5em;flex-wrap:wrap;align-items:center;margin:.5em 0}
button{cursor:pointer}
svg text{font-family:system-ui,sans-serif}
div.graph,div.timeline{overflow-x:auto;max-width:100%}
p.pager a{margin-right:1em}
";

/// Progressive enhancement only: a confirm() before destructive actions,
/// and the overview's refresh in place (the page works without it).
/// Served as /assets/app.js so that the pages' policy allows no inline
/// script at all.
pub const JS: &str = r#"
document.addEventListener('submit', function (e) {
  var b = e.submitter;
  var msg = (b && b.getAttribute('data-confirm')) || e.target.getAttribute('data-confirm');
  if (msg && msg.indexOf('{n}') >= 0) {
    // getAttribute: the form's own id (form.id is its control named "id").
    var id = e.target.getAttribute('id');
    var n = id ? document.querySelectorAll('input[name="id"][form="' + id + '"]:checked').length : 0;
    if (!n) return;   // nothing selected: the server says so
    msg = msg.replace('{n}', String(n));
  }
  if (msg && !window.confirm(msg)) e.preventDefault();
});
document.addEventListener('change', function (e) {
  var form = e.target.getAttribute && e.target.getAttribute('data-select-all');
  if (!form) return;
  var boxes = document.querySelectorAll('input[name="id"][form="' + form + '"]');
  for (var i = 0; i < boxes.length; i++) boxes[i].checked = e.target.checked;
});
(function () {
  var t = document.querySelector('table#queues');
  var every = t && parseInt(t.getAttribute('data-refresh') || '0', 10);
  if (!every) return;
  setInterval(function () {
    if (document.hidden) return;
    fetch(location.href, {headers: {'Accept': 'text/html'}}).then(function (r) {
      return r.ok ? r.text() : null;
    }).then(function (text) {
      if (!text) return;
      var doc = new DOMParser().parseFromString(text, 'text/html');
      var fresh = doc.querySelector('#overview');
      var old = document.querySelector('#overview');
      if (fresh && old) old.replaceWith(fresh);
    }).catch(function () {});
  }, every * 1000);
})();
"#;

/// The page shell: `<title>` starting with "aedb_queue", the nav with the
/// search form and the operator (with a logout button after a password
/// login), the flash message if any. The operator's CSRF token goes in a
/// meta tag too (`meta[name=csrf-token]`), for scripts and for tests of
/// the server's own checks; error and login pages leave it out.
pub fn layout(title: &str, op: Option<&Operator>, flash: Option<&str>, body: Markup) -> Markup {
    let csrf = op.map(|o| o.csrf.as_str());
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "aedb_queue · " (title) }
                @if let Some(token) = csrf { meta name="csrf-token" content=(token); }
                style { (PreEscaped(CSS)) }
            }
            body {
                nav {
                    a href="/" { "aedb_queue" }
                    a href="/" { "Queues" }
                    a href="/metrics" { "Metrics" }
                    form #search action="/search" method="get" role="search" {
                        input name="q" type="search" placeholder="task id or idempotency key"
                            aria-label="task id or idempotency key";
                        " "
                        button type="submit" { "Search" }
                    }
                    @if let Some(o) = op.filter(|o| !o.name.is_empty()) {
                        span #operator title=(o.role.as_deref().unwrap_or("")) { (o.name) }
                        @if o.session {
                            form #logout method="post" action="/logout" {
                                (csrf_field(&o.csrf))
                                button type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main {
                    @if let Some(msg) = flash {
                        p.flash role="status" { (msg) }
                    }
                    (body)
                }
                script src="/assets/app.js" {}
            }
        }
    }
}

/// `GET /assets/app.js`.
pub async fn script() -> Response {
    (
        [
            (CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (CACHE_CONTROL, "max-age=3600"),
        ],
        JS,
    )
        .into_response()
}

/// The value of cookie `name` in the request, if sent.
pub fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| kv.trim().strip_prefix(name)?.strip_prefix('='))
}

/// The message an action left for this page, read from its cookie.
pub struct Flash(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for Flash {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let msg = cookie_value(&parts.headers, FLASH_COOKIE).and_then(hex_decode);
        Ok(Flash(msg))
    }
}

/// A Set-Cookie value carrying `msg` to the next page (hex keeps any text
/// a valid cookie value).
pub fn flash_cookie(msg: &str) -> String {
    let hex: String = msg.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{FLASH_COOKIE}={hex}; Path=/; HttpOnly; SameSite=Strict; Max-Age=60")
}

fn hex_decode(s: &str) -> Option<String> {
    if s.is_empty() || !s.len().is_multiple_of(2) || s.len() > 4096 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// A page as a response; a flash shown is cleared so a reload does not
/// show it again.
pub fn respond(flash: &Flash, page: Markup) -> Response {
    let mut resp = page.into_response();
    if flash.0.is_some() {
        if let Ok(v) = format!("{FLASH_COOKIE}=; Path=/; Max-Age=0").parse() {
            resp.headers_mut().append(SET_COOKIE, v);
        }
    }
    resp
}

/// A page that could not be shown: its status, and the SQLSTATE and
/// message when the database refused.
#[derive(Debug)]
pub struct PageError {
    pub status: StatusCode,
    pub message: String,
}

impl PageError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> PageError {
        PageError {
            status,
            message: message.into(),
        }
    }

    pub fn not_found(what: impl Into<String>) -> PageError {
        PageError::new(StatusCode::NOT_FOUND, what)
    }
}

/// The HTTP status for a refused call: privileges 403, bad arguments 400,
/// a read-only database or an object in the wrong state (55000) 409,
/// anything else 500.
pub fn status_for(code: Option<&str>) -> StatusCode {
    match code {
        Some("42501") => StatusCode::FORBIDDEN,
        Some(c) if c.starts_with("22") || c == "54000" => StatusCode::BAD_REQUEST,
        // Read-only database; an object not in the state the action needs
        // (a task in flight, its worker holds it).
        Some("25006" | "55000") => StatusCode::CONFLICT,
        Some(_) => StatusCode::INTERNAL_SERVER_ERROR,
        // The connection failed: the database is not there.
        None => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl From<tokio_postgres::Error> for PageError {
    fn from(e: tokio_postgres::Error) -> Self {
        PageError::new(status_for(sqlstate(&e).as_deref()), describe_db(&e))
    }
}

impl From<deadpool_postgres::PoolError> for PageError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        PageError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("database unavailable: {e}"),
        )
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let title = self.status.canonical_reason().unwrap_or("error");
        let body = html! {
            h1 { (self.status.as_u16()) " " (title) }
            p.error role="alert" { (self.message) }
            p { a href="/" { "All queues" } }
        };
        (self.status, layout(title, None, None, body)).into_response()
    }
}

pub async fn not_found() -> PageError {
    PageError::not_found("No such page.")
}

/// A path segment percent-encoded as JavaScript's encodeURIComponent does
/// (queue names may hold `/`, `?`, `#`, spaces): what a script builds
/// from a name matches the pages' own links.
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!'()*".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub fn queue_href(queue: &str) -> String {
    format!("/queues/{}", encode_segment(queue))
}

/// A duration for people: "45s", "3m 12s", "2h 5m", "3d 4h".
pub fn human_secs(secs: f64) -> String {
    let s = secs.abs().round() as i64;
    let text = if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m {}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h {}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d {}h", s / 86_400, (s % 86_400) / 3600)
    };
    if secs < 0.0 {
        format!("-{text}")
    } else {
        text
    }
}

/// A count, as "~N" inside `span.estimate` when it is an estimate.
pub fn count(n: i64, estimated: bool) -> Markup {
    html! {
        @if estimated {
            span.estimate title="estimate" { "~" (n) }
        } @else {
            (n)
        }
    }
}

/// The hidden CSRF field of every form.
pub fn csrf_field(token: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(token); }
}

/// An optional text cell ("–" when NULL).
pub fn opt(v: Option<&str>) -> Markup {
    html! {
        @match v {
            Some(s) => (s),
            None => span.muted { "–" },
        }
    }
}

/// A JSON text pretty-printed for `<pre>` (as it is when it is not JSON).
pub fn pretty_json(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_string())
}

/// At most `max` characters, with "…" when cut.
pub fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(encode_segment("a.b_c-d~"), "a.b_c-d~");
        assert_eq!(encode_segment("a/b c?#<"), "a%2Fb%20c%3F%23%3C");
        assert_eq!(
            encode_segment("x('y')!*"),
            "x('y')!*",
            "as encodeURIComponent leaves them"
        );
        assert_eq!(encode_segment("é"), "%C3%A9");
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(human_secs(4.4), "4s");
        assert_eq!(human_secs(192.0), "3m 12s");
        assert_eq!(human_secs(7500.0), "2h 5m");
        assert_eq!(human_secs(273_600.0), "3d 4h");
        assert_eq!(human_secs(-5.0), "-5s");
    }

    #[test]
    fn the_flash_survives_its_cookie() {
        let c = flash_cookie("Purged 3 <dead> tasks; \"ok\"");
        let value = c.split(';').next().unwrap().split_once('=').unwrap().1;
        assert_eq!(
            hex_decode(value).as_deref(),
            Some("Purged 3 <dead> tasks; \"ok\"")
        );
        assert_eq!(hex_decode("zz"), None);
        assert_eq!(hex_decode("abc"), None);
    }

    #[test]
    fn estimates_are_marked_and_values_escaped() {
        assert_eq!(count(5, false).into_string(), "5");
        assert_eq!(
            count(1200, true).into_string(),
            "<span class=\"estimate\" title=\"estimate\">~1200</span>"
        );
        let op = Operator {
            name: "<alice>".into(),
            role: Some("ra".into()),
            csrf: "t0k".into(),
            session: true,
        };
        let page = layout(
            "<q>",
            Some(&op),
            Some("<b>done</b>"),
            html! { p { ("<script>x</script>") } },
        )
        .into_string();
        assert!(page.contains("&lt;script&gt;x&lt;/script&gt;"), "{page}");
        assert!(
            page.contains("<p class=\"flash\" role=\"status\">&lt;b&gt;done&lt;/b&gt;</p>"),
            "{page}"
        );
        assert!(
            page.contains("<title>aedb_queue · &lt;q&gt;</title>"),
            "{page}"
        );
        assert!(
            page.contains("<meta name=\"csrf-token\" content=\"t0k\">"),
            "{page}"
        );
        assert!(page.contains("&lt;alice&gt;"), "{page}");
        assert!(page.contains("<form id=\"logout\""), "{page}");
    }

    #[test]
    fn refusals_map_to_statuses() {
        assert_eq!(status_for(Some("42501")), StatusCode::FORBIDDEN);
        assert_eq!(status_for(Some("22023")), StatusCode::BAD_REQUEST);
        assert_eq!(status_for(Some("55000")), StatusCode::CONFLICT);
        assert_eq!(status_for(Some("XX000")), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(status_for(None), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn long_texts_are_shortened_on_a_char_boundary() {
        assert_eq!(shorten("abcdef", 3), "abc…");
        assert_eq!(shorten("ééé", 5), "ééé");
        assert_eq!(shorten("éééé", 2), "éé…");
    }
}
