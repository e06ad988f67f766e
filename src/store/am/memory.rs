//! Memory contexts of our own, for data that must outlive (or be freed
//! apart from) the memory context a call runs in.

use std::ffi::CStr;

use pgrx::pg_sys;

/// A new context under `parent` with PostgreSQL's small sizes
/// (`ALLOCSET_SMALL_SIZES`): the few kilobytes of nodes we keep need no
/// more, and an 8 kB first block would be mostly empty.
///
/// # Safety
/// `parent` is a valid memory context.
pub(super) unsafe fn small_context(
    parent: pg_sys::MemoryContext,
    name: &'static CStr,
) -> pg_sys::MemoryContext {
    unsafe { pg_sys::AllocSetContextCreateInternal(parent, name.as_ptr(), 0, 1024, 8 * 1024) }
}
