//! The POST actions: pause, resume, retry dead tasks, purge, cancel, retry
//! a workflow from a step, and the queue page's bulk retry and cancel of
//! the selected tasks.
//!
//! Each first checks the form's CSRF token (the per-process random token
//! every form carries) and, when the browser sent one, that the Origin is
//! this server's own (the Host it was reached at): a page elsewhere cannot
//! make an operator's browser act. Then the extension's own call, which
//! checks the role's rights; a refusal is shown with its SQLSTATE (42501:
//! 403). Success redirects (303) back with a flash message.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::header::{HOST, LOCATION, ORIGIN, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Form;

use super::identity::Operator;
use super::pages::{flash_cookie, queue_href, PageError};
use super::queries;
use super::Shared;

type Fields = HashMap<String, String>;

/// Dead tasks moved per `queue_retry_dead` call (each its own transaction,
/// so no call holds row locks on a whole backlog), and calls per click.
const RETRY_CHUNK: i32 = 1000;
const RETRY_CALLS: usize = 100;

/// Equal without an early exit on the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The Origin header, if sent, must be `http://<the Host it came to>`.
fn origin_ok(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(ORIGIN) else {
        return true;
    };
    let host = headers.get(HOST).and_then(|h| h.to_str().ok());
    match (origin.to_str().ok(), host) {
        (Some(o), Some(h)) => o == format!("http://{h}") || o == format!("https://{h}"),
        _ => false,
    }
}

/// 403 unless the form carries `expected` (the operator's token, or the
/// login form's) and the origin is this server's.
pub fn check_request(
    expected: &str,
    headers: &HeaderMap,
    fields: &Fields,
) -> Result<(), PageError> {
    let token_ok = !expected.is_empty() && fields.get("csrf").is_some_and(|t| same(t, expected));
    if !token_ok {
        return Err(PageError::new(
            StatusCode::FORBIDDEN,
            "Missing or wrong CSRF token: reload the page and try again.",
        ));
    }
    if !origin_ok(headers) {
        return Err(PageError::new(
            StatusCode::FORBIDDEN,
            "This request came from another site's page: refused.",
        ));
    }
    Ok(())
}

/// 303 to `path`, carrying `msg` to that page. The shared overview is
/// dropped first, so the page shows what the action did.
fn see(app: &super::App, path: &str, msg: &str) -> Response {
    app.invalidate();
    (
        StatusCode::SEE_OTHER,
        [
            (LOCATION, path.to_string()),
            (SET_COOKIE, flash_cookie(msg)),
        ],
    )
        .into_response()
}

fn task_id_field(fields: &Fields) -> Result<Option<i64>, PageError> {
    match fields
        .get("task_id")
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
    {
        None => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|_| {
            PageError::new(
                StatusCode::BAD_REQUEST,
                format!("task_id {s:?} is not a task id"),
            )
        }),
    }
}

async fn set_paused(
    app: Shared,
    queue: String,
    op: Operator,
    headers: HeaderMap,
    fields: Fields,
    paused: bool,
) -> Result<Response, PageError> {
    check_request(&op.csrf, &headers, &fields)?;
    let c = app.view(&op)?.db.conn().await?;
    let changed = queries::set_paused(&c, &queue, paused).await?;
    let msg = match (paused, changed) {
        (true, true) => format!("Paused {queue}: nothing is handed out until it is resumed."),
        (true, false) => format!("{queue} was already paused."),
        (false, true) => format!("Resumed {queue}."),
        (false, false) => format!("{queue} was not paused."),
    };
    Ok(see(&app, &queue_href(&queue), &msg))
}

pub async fn pause(
    State(app): State<Shared>,
    Path(queue): Path<String>,
    op: Operator,
    headers: HeaderMap,
    Form(f): Form<Fields>,
) -> Result<Response, PageError> {
    set_paused(app, queue, op, headers, f, true).await
}

pub async fn resume(
    State(app): State<Shared>,
    Path(queue): Path<String>,
    op: Operator,
    headers: HeaderMap,
    Form(f): Form<Fields>,
) -> Result<Response, PageError> {
    set_paused(app, queue, op, headers, f, false).await
}

/// One task (`task_id`), or every dead task in chunks.
pub async fn retry_dead(
    State(app): State<Shared>,
    Path(queue): Path<String>,
    op: Operator,
    headers: HeaderMap,
    Form(f): Form<Fields>,
) -> Result<Response, PageError> {
    check_request(&op.csrf, &headers, &f)?;
    let task_id = task_id_field(&f)?;
    let c = app.view(&op)?.db.conn().await?;
    let msg = match task_id {
        Some(id) => match queries::retry_dead(&c, &queue, Some(id), None).await? {
            0 => format!("Task {id} is not dead: nothing moved."),
            _ => format!("Moved task {id} back to ready."),
        },
        None => {
            let mut moved = 0;
            let mut more = true;
            for _ in 0..RETRY_CALLS {
                let n = queries::retry_dead(&c, &queue, None, Some(RETRY_CHUNK)).await?;
                moved += n;
                if n < i64::from(RETRY_CHUNK) {
                    more = false;
                    break;
                }
            }
            if more {
                format!("Moved {moved} dead tasks of {queue} back to ready; more are dead: retry again.")
            } else {
                format!("Moved {moved} dead tasks of {queue} back to ready.")
            }
        }
    };
    let back = match (task_id, f.get("back").map(String::as_str)) {
        (Some(id), Some("task")) => format!("/tasks/{id}"),
        _ => queue_href(&queue),
    };
    Ok(see(&app, &back, &msg))
}

/// Every task of one state; `confirm` must be the queue's name.
pub async fn purge(
    State(app): State<Shared>,
    Path(queue): Path<String>,
    op: Operator,
    headers: HeaderMap,
    Form(f): Form<Fields>,
) -> Result<Response, PageError> {
    check_request(&op.csrf, &headers, &f)?;
    if f.get("confirm").map(|s| s.as_str()) != Some(queue.as_str()) {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            format!("Nothing purged: type the queue's name (\"{queue}\") to confirm."),
        ));
    }
    let state = f.get("state").map(|s| s.trim()).unwrap_or("");
    let force = f.get("force").is_some_and(|v| v == "true" || v == "on");
    let c = app.view(&op)?.db.conn().await?;
    let n = queries::purge(&c, &queue, state, force).await?;
    Ok(see(
        &app,
        &queue_href(&queue),
        &format!("Purged {n} {state} tasks of {queue}."),
    ))
}

/// One task, wherever the role may read it; back to its queue.
pub async fn cancel(
    State(app): State<Shared>,
    Path(id): Path<i64>,
    op: Operator,
    headers: HeaderMap,
    Form(f): Form<Fields>,
) -> Result<Response, PageError> {
    check_request(&op.csrf, &headers, &f)?;
    let c = app.view(&op)?.db.conn().await?;
    let task = queries::find_by_id(&c, id).await?.ok_or_else(|| {
        PageError::not_found(format!("No task {id} in a queue this role may read."))
    })?;
    let msg = if queries::cancel(&c, &task.queue, id).await? {
        format!("Cancelled task {id}.")
    } else {
        format!("Task {id} was not cancelled (it is no longer queued).")
    };
    Ok(see(&app, &queue_href(&task.queue), &msg))
}

/// What one bulk post did, id by id.
#[derive(Debug, Default, PartialEq)]
struct BulkOutcome {
    applied: Vec<i64>,
    /// Not dead (retry) or not a task of this queue (cancel).
    skipped: Vec<i64>,
    /// The database refused (42501).
    refused: Vec<i64>,
}

/// The selected ids of a bulk post: each a task id, at most
/// [`BULK_MAX`](super::pages::queue::BULK_MAX), duplicates once.
fn bulk_ids(pairs: &[(String, String)]) -> Result<Vec<i64>, PageError> {
    let mut ids: Vec<i64> = Vec::new();
    for (k, v) in pairs.iter().filter(|(k, _)| k == "id") {
        let id: i64 = v.trim().parse().map_err(|_| {
            PageError::new(
                StatusCode::BAD_REQUEST,
                format!("{k} {v:?} is not a task id: nothing done."),
            )
        })?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    let max = super::pages::queue::BULK_MAX;
    if ids.len() > max {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "{} tasks selected: at most {max} a post. Nothing done.",
                ids.len()
            ),
        ));
    }
    Ok(ids)
}

/// Where a bulk post goes back to: the queue page with the list's filters
/// and page, when they are the page's own percent-encoded query string.
fn bulk_back(queue: &str, back: Option<&str>) -> String {
    let safe = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~!'()*%&=".contains(&b))
    };
    match back.filter(|b| !b.is_empty() && safe(b)) {
        Some(b) => format!("{}?{b}#task-list", queue_href(queue)),
        None => format!("{}#task-list", queue_href(queue)),
    }
}

/// `POST /queues/{queue}/bulk`: `action` retry (queue_retry_dead per id:
/// the dead ones go back to ready) or cancel (queue_cancel per id), for
/// each `id` field. Every call names this queue, so an id of another
/// queue is not touched; a refusal (42501) is counted per id. When the
/// database refused every id, the answer is 403.
pub async fn bulk(
    State(app): State<Shared>,
    Path(queue): Path<String>,
    op: Operator,
    headers: HeaderMap,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let f: Fields = pairs.iter().filter(|(k, _)| k != "id").cloned().collect();
    check_request(&op.csrf, &headers, &f)?;
    let action = f.get("action").map(String::as_str).unwrap_or("");
    if !matches!(action, "retry" | "cancel") {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            format!("action {action:?} is not retry or cancel: nothing done."),
        ));
    }
    let ids = bulk_ids(&pairs)?;
    let back = bulk_back(&queue, f.get("back").map(String::as_str));
    if ids.is_empty() {
        return Ok(see(&app, &back, "No task selected: nothing done."));
    }
    let c = app.view(&op)?.db.conn().await?;
    let mut out = BulkOutcome::default();
    for &id in &ids {
        let r = match action {
            "retry" => queries::retry_dead(&c, &queue, Some(id), None)
                .await
                .map(|n| n > 0),
            _ => queries::cancel(&c, &queue, id).await,
        };
        match r {
            Ok(true) => out.applied.push(id),
            Ok(false) => out.skipped.push(id),
            Err(e) if super::sqlstate(&e).as_deref() == Some("42501") => out.refused.push(id),
            Err(e) => {
                let mut err = PageError::from(e);
                err.message = format!(
                    "{} (after {} of {} selected tasks: {} applied)",
                    err.message,
                    out.applied.len() + out.skipped.len() + out.refused.len(),
                    ids.len(),
                    out.applied.len()
                );
                app.invalidate();
                return Err(err);
            }
        }
    }
    let list = |v: &[i64]| {
        v.iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (done, not) = match action {
        "retry" => ("Retried", "not dead"),
        _ => ("Cancelled", "not tasks of this queue"),
    };
    let mut msg = format!(
        "{done} {} of {} selected tasks of {queue}.",
        out.applied.len(),
        ids.len()
    );
    if !out.skipped.is_empty() {
        msg.push_str(&format!(" Skipped ({not}): {}.", list(&out.skipped)));
    }
    if !out.refused.is_empty() {
        msg.push_str(&format!(
            " Refused by the database (42501: this role does not administer {queue}): {}.",
            list(&out.refused)
        ));
        if out.applied.is_empty() {
            return Err(PageError::new(StatusCode::FORBIDDEN, msg));
        }
    }
    Ok(see(&app, &back, &msg))
}

/// A workflow task runs again from the step `step` (it and the later
/// steps are dropped); back to the task. The database refuses a task in
/// flight (55000, 409), an unknown step (22023, 400) and a role that does
/// not administer the queue (42501, 403).
pub async fn retry_from_step(
    State(app): State<Shared>,
    Path(id): Path<i64>,
    op: Operator,
    headers: HeaderMap,
    Form(f): Form<Fields>,
) -> Result<Response, PageError> {
    check_request(&op.csrf, &headers, &f)?;
    let step = f.get("step").map(String::as_str).unwrap_or("");
    let c = app.view(&op)?.db.conn().await?;
    let task = queries::find_by_id(&c, id).await?.ok_or_else(|| {
        PageError::not_found(format!("No task {id} in a queue this role may read."))
    })?;
    let dropped = queries::retry_from_step(&c, &task.queue, id, step).await?;
    let msg = format!(
        "Task {id} runs again from step {step:?}: dropped {}.",
        dropped
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(see(&app, &format!("/tasks/{id}"), &msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_this_servers_origin_passes() {
        assert!(
            origin_ok(&headers(&[("host", "127.0.0.1:8080")])),
            "no Origin: a form post from an old browser, or curl"
        );
        assert!(origin_ok(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080")
        ])));
        assert!(!origin_ok(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://evil.example")
        ])));
        assert!(!origin_ok(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "null")
        ])));
        assert!(!origin_ok(&headers(&[("origin", "http://127.0.0.1:8080")])));
    }

    #[test]
    fn bulk_ids_are_bounded_and_parsed() {
        let pairs = |ids: &[&str]| -> Vec<(String, String)> {
            ids.iter()
                .map(|i| ("id".to_string(), i.to_string()))
                .chain([("csrf".to_string(), "x".to_string())])
                .collect()
        };
        assert_eq!(bulk_ids(&pairs(&["3", "1", "3"])).unwrap(), vec![3, 1]);
        assert!(bulk_ids(&pairs(&["1; DROP"])).is_err());
        let many: Vec<String> = (0..=500).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            bulk_ids(&pairs(&many)).unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(bulk_ids(&pairs(&many[..500])).unwrap().len(), 500);
    }

    #[test]
    fn bulk_goes_back_only_to_its_own_queue() {
        assert_eq!(
            bulk_back("q", Some("state=dead&after=5")),
            "/queues/q?state=dead&after=5#task-list"
        );
        assert_eq!(bulk_back("q", Some("x=<script>")), "/queues/q#task-list");
        assert_eq!(
            bulk_back("q", Some("//evil.example")),
            "/queues/q#task-list"
        );
        assert_eq!(bulk_back("q", None), "/queues/q#task-list");
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
    }
}
