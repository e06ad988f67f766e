//! Settling the changed keys of one kind (slots or lines): their rows
//! locked in key order, then one statement for all of them.

use std::collections::BTreeMap;

use pgrx::spi::SpiClient;

use super::super::{execute, Statement};
use crate::errors::Result;

/// Takes the rows of the changed keys with `lock` (its parameters: the
/// queues and the keys, in key order), then runs `settle` in a statement of
/// its own with each key's change as well; the queues where tasks became
/// ready (`settle`'s first column).
pub(super) fn lock_then_settle<T>(
    client: &mut SpiClient<'_>,
    changes: BTreeMap<(String, String), T>,
    lock: &'static Statement,
    settle: &'static Statement,
) -> Result<Vec<String>>
where
    Vec<T>: pgrx::IntoDatum,
{
    let mut queues = Vec::with_capacity(changes.len());
    let mut keys = Vec::with_capacity(changes.len());
    let mut each = Vec::with_capacity(changes.len());
    for ((queue, key), change) in changes {
        queues.push(queue);
        keys.push(key);
        each.push(change);
    }
    execute(client, lock, &[queues.clone().into(), keys.clone().into()])?;
    let rows = execute(client, settle, &[queues.into(), keys.into(), each.into()])?;
    Ok(rows
        .first(|row| row.get::<Vec<String>>(1))?
        .flatten()
        .unwrap_or_default())
}
