//! `GET /tasks/{id}`: one task with every field, its payload, progress,
//! error and parents, found with `queue_find` in the queues the role reads.

use axum::extract::{Path, State};
use axum::response::Response;
use maud::{html, Markup};

use super::queue::{cancel_form, retry_form};
use super::{human_secs, layout, opt, pretty_json, queue_href, respond, Flash, PageError};
use crate::serve::queries::{self, Task};
use crate::serve::Shared;

/// Parents listed.
const PARENTS_LIMIT: i64 = 100;

fn field(name: &str, value: Markup) -> Markup {
    html! {
        dt { (name.replace('_', " ")) }
        dd data-field=(name) { (value) }
    }
}

fn fields(t: &Task) -> Markup {
    let text = |v: Option<&str>| opt(v);
    html! {
        dl #task {
            (field("id", html! { (t.task_id) }))
            (field("queue", html! { a href=(queue_href(&t.queue)) { (t.queue) } }))
            (field("state", html! { (t.state) }))
            (field("attempts", html! { (t.attempts) }))
            (field("max_attempts", text(t.max_attempts.map(|m| m.to_string()).as_deref())))
            (field("priority", html! { (t.priority) }))
            (field("fencing_token", text(t.fencing_token.map(|f| f.to_string()).as_deref())))
            (field("owner", text(t.owner_id.as_deref())))
            (field("lease_until", html! {
                (opt(t.lease_until.as_deref()))
                @if let (Some(s), "in_flight") = (t.lease_left_secs, t.state.as_str()) {
                    " " span.muted { "(" @if s < 0.0 { "expired " (human_secs(-s)) " ago" } @else { (human_secs(s)) " left" } ")" }
                }
            }))
            (field("due_at", text(t.due_at.as_deref())))
            (field("created_at", html! {
                (opt(t.created_at.as_deref()))
                @if let Some(a) = t.age_secs { " " span.muted { "(" (human_secs(a)) " ago)" } }
            }))
            (field("updated_at", text(t.updated_at.as_deref())))
            (field("completed_at", text(t.completed_at.as_deref())))
            (field("progress", html! { @match &t.progress { Some(p) => code { (p) }, None => span.muted { "–" } } }))
            (field("idempotency_key", text(t.idempotency_key.as_deref())))
        }
    }
}

fn parents_section(parents: &[Task]) -> Markup {
    html! {
        @if !parents.is_empty() {
            section #dependencies {
                h2 { "Dependencies" }
                p.muted { "Tasks this one waits or waited for (parents in queues this role may not read are left out)." }
                table {
                    thead { tr { th { "parent" } th { "queue" } th { "state" } th { "result" } } }
                    tbody {
                        @for p in parents {
                            tr data-task-id=(p.task_id) {
                                td { a href={"/tasks/" (p.task_id)} { (p.task_id) } }
                                td { (p.queue) }
                                td { (p.state) }
                                td { code { (opt(p.result.as_deref())) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub async fn page(
    State(app): State<Shared>,
    Path(id): Path<i64>,
    flash: Flash,
) -> Result<Response, PageError> {
    let c = app.pool.get().await?;
    let t = queries::find_by_id(&c, id).await?.ok_or_else(|| {
        PageError::not_found(format!("No task {id} in a queue this role may read."))
    })?;
    let (parents, administer) = futures_util::join!(
        queries::parents(&c, &t.queue, id, PARENTS_LIMIT),
        queries::administers(&c, &t.queue)
    );
    drop(c);
    // Reading parents needs the worker's rights; without them the section
    // is left out rather than the page refused.
    let parents = parents.unwrap_or_default();
    let administer = administer?;
    let csrf = app.csrf.as_str();
    let body = html! {
        p.muted { a href="/" { "Queues" } " / " a href=(queue_href(&t.queue)) { (t.queue) } " / " (t.task_id) }
        h1 { "Task " (t.task_id) }
        @if administer && t.state != "completed" {
            div.actions #actions {
                @if t.state == "dead" { (retry_form(csrf, &t.queue, t.task_id, true)) }
                (cancel_form(csrf, t.task_id))
            }
        }
        (fields(&t))
        h2 { "Payload" }
        pre #payload { (t.payload.as_deref().map(pretty_json).unwrap_or_else(|| "null".into())) }
        @if let Some(r) = &t.result {
            h2 { "Result" }
            pre #result { (pretty_json(r)) }
        }
        section #errors {
            h2 { "Errors" }
            @match &t.last_error {
                Some(e) => {
                    p.muted { "The extension keeps the last error of a task." }
                    pre.error-text data-attempt=(t.attempts) { (e) }
                }
                None => p.muted { "None." },
            }
        }
        (parents_section(&parents))
    };
    Ok(respond(
        &flash,
        layout(
            &format!("task {id}"),
            Some(&app.csrf),
            flash.0.as_deref(),
            body,
        ),
    ))
}
