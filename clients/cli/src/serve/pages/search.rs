//! `GET /search?q=`: a task id goes to its page; otherwise an idempotency
//! key: one task goes to its page, several are listed.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::header::LOCATION;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::html;

use super::{layout, queue_href, shorten, PageError};
use crate::serve::identity::Operator;
use crate::serve::queries;
use crate::serve::Shared;

/// Tasks listed for one idempotency key (one per queue at most).
const RESULTS_LIMIT: i64 = 100;

fn see_task(id: i64) -> Response {
    (StatusCode::SEE_OTHER, [(LOCATION, format!("/tasks/{id}"))]).into_response()
}

pub async fn page(
    State(app): State<Shared>,
    Query(params): Query<HashMap<String, String>>,
    op: Operator,
) -> Result<Response, PageError> {
    let q = params.get("q").map(|s| s.trim()).unwrap_or("");
    let c = app.view(&op)?.db.conn().await?;
    if let Ok(id) = q.parse::<i64>() {
        if queries::find_by_id(&c, id).await?.is_some() {
            return Ok(see_task(id));
        }
    }
    let found = if q.is_empty() {
        Vec::new()
    } else {
        queries::find_by_key(&c, q, RESULTS_LIMIT).await?
    };
    if let [one] = found.as_slice() {
        return Ok(see_task(one.task_id));
    }
    let body = html! {
        h1 { "Search" }
        @if found.is_empty() {
            p #no-results {
                @if q.is_empty() { "Type a task id or an idempotency key." }
                @else { "No task with id or idempotency key \"" (q) "\" in a queue this role may read." }
            }
        } @else {
            p { (found.len()) " tasks with idempotency key \"" (q) "\":" }
            table #results {
                thead { tr { th { "task" } th { "queue" } th { "state" } th { "created" } th { "payload" } } }
                tbody {
                    @for t in &found {
                        tr data-task-id=(t.task_id) {
                            td { a href={"/tasks/" (t.task_id)} { (t.task_id) } }
                            td { a href=(queue_href(&t.queue)) { (t.queue) } }
                            td { (t.state) }
                            td { (t.created_at.as_deref().unwrap_or("")) }
                            td { code { (shorten(t.payload.as_deref().unwrap_or("null"), 60)) } }
                        }
                    }
                }
            }
        }
    };
    Ok(layout("search", Some(&op), None, body).into_response())
}
