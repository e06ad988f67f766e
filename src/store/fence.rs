//! The pairs of the batch settle running now, which the SQL function
//! `aedb_queue_internal.fence_holds` checks each task against (see
//! COMPLETE_MANY). Kept here rather than passed to the function as arrays:
//! the function would have to unpack them on every call, or cache them
//! under the arrays' addresses, which a caller could reuse for other values.

use std::cell::RefCell;

use aedb_queue_core::fence::FencePairs;

/// A task and the fencing token it was settled under.
pub type IdAndToken = (i64, i64);

thread_local! {
    /// A stack: a trigger that settles a batch inside our statement has its own.
    static ACTIVE: RefCell<Vec<FencePairs>> = const { RefCell::new(Vec::new()) };
}

/// Makes `pairs` the ones `holds` checks until dropped, also when unwinding.
pub(super) struct Active;

impl Active {
    pub(super) fn enter(pairs: FencePairs) -> Self {
        ACTIVE.with(|a| a.borrow_mut().push(pairs));
        Active
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        ACTIVE.with(|a| {
            a.borrow_mut().pop();
        });
    }
}

/// Whether the batch settle running now named this task under this token;
/// false outside one, so no other caller can make the function say yes.
pub fn fence_holds(task_id: i64, fencing_token: i64) -> bool {
    ACTIVE.with(|a| {
        a.borrow()
            .last()
            .is_some_and(|pairs| pairs.contains(task_id, fencing_token))
    })
}
