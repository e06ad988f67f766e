//! `queue_write_path()`: for each operation with a direct path, whether
//! this session's calls would take it now, and if not, why (see
//! `store::direct`). For operators checking what `aedb_queue.direct_writes`
//! and the task table's state give them.

use pgrx::prelude::*;

use crate::errors::run;
use crate::store::direct::{self, Operation};

const OPERATIONS: [(Operation, &str); 3] = [
    (Operation::Enqueue, "enqueue"),
    (Operation::Claim, "claim"),
    (Operation::Complete, "complete"),
];

#[pg_extern]
fn queue_write_path() -> TableIterator<
    'static,
    (
        name!(operation, String),
        name!(direct, bool),
        name!(reason, Option<String>),
    ),
> {
    run(|| {
        let mut rows = Vec::with_capacity(OPERATIONS.len());
        for (operation, name) in OPERATIONS {
            let decline = direct::would_decline(operation)?;
            rows.push((
                name.to_owned(),
                decline.is_none(),
                decline.map(|d| direct::reason(d).to_owned()),
            ));
        }
        Ok(TableIterator::new(rows))
    })
}
