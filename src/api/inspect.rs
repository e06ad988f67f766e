//! Argument checks for the SQL-language inspection functions in `sql/inspect.sql`.

use aedb_queue_core::validate;
use pgrx::prelude::*;

use super::{checked_name, required};
use crate::errors::run;

#[pg_extern]
fn check_get_args(queue: Option<&str>, task_id: Option<i64>) {
    run(|| {
        checked_name("queue", queue)?;
        required("task_id", task_id)?;
        Ok(())
    })
}

#[pg_extern]
fn check_list_args(queue: Option<&str>, state: Option<&str>, limit: Option<i32>) {
    run(|| {
        checked_name("queue", queue)?;
        if let Some(state) = state {
            validate::state(state)?;
        }
        validate::list_limit(required("limit", limit)?)?;
        Ok(())
    })
}

extension_sql_file!(
    "../../sql/inspect.sql",
    name = "inspect",
    requires = [check_get_args, check_list_args]
);
