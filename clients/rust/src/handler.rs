//! Handlers: async functions of a task that return [`Done`] or [`TaskError`].

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::task::{Done, Task, TaskError};
use crate::telemetry::Cause;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What the runtime calls for each claimed task of a queue.
pub trait Handler: Send + Sync + 'static {
    fn call(&self, task: Task) -> BoxFuture<Result<Done, TaskError>>;
}

/// A handler of tasks whose payload decodes (serde) as `T`. A payload that
/// does not decode dead-letters the task: no retry could change it.
///
/// ```no_run
/// use aedb_queue_client::{handler, Done, Task, TaskError};
/// #[derive(serde::Deserialize)]
/// struct Email { to: String }
/// let send = handler(|task: Task<Email>| async move {
///     println!("mail to {}", task.payload.to);
///     Ok::<_, TaskError>(Done::new())
/// });
/// ```
pub fn handler<T, F, Fut>(f: F) -> Arc<dyn Handler>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Task<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Done, TaskError>> + Send + 'static,
{
    Arc::new(Typed {
        f,
        _payload: PhantomData,
    })
}

struct Typed<T, F> {
    f: F,
    _payload: PhantomData<fn() -> T>,
}

impl<T, F, Fut> Handler for Typed<T, F>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Task<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Done, TaskError>> + Send + 'static,
{
    fn call(&self, task: Task) -> BoxFuture<Result<Done, TaskError>> {
        let (task, raw) = task.with_payload(());
        match serde_json::from_value::<T>(raw) {
            Ok(payload) => Box::pin((self.f)(task.with_payload(payload).0)),
            Err(e) => Box::pin(async move {
                Err(
                    TaskError::dead_letter(format!("the payload does not decode: {e}"))
                        .caused_by(Cause::Undecodable),
                )
            }),
        }
    }
}

/// The payload as the runtime reads it: NULL is JSON null.
pub(crate) fn payload_value(payload: Option<Value>) -> Value {
    payload.unwrap_or(Value::Null)
}
