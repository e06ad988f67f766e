//! How our statements are planned: generic plans, and no sequential scans.
//!
//! Generic plans: the plan cache would otherwise misjudge `LIMIT $n` and
//! re-plan the claim on every call. No sequential scans: a generic plan
//! lives as long as the backend's statistics, so one made while the table
//! was empty or never analyzed (a fresh install, workers started before
//! producers) would otherwise scan every task on each claim until the next
//! ANALYZE; every statement here has an index path, which is right at any
//! table size.
//!
//! `enable_seqscan` is turned off by a planner hook only while the planner
//! plans one of our statements (their text starts with [`MARKER`]), so no
//! other query, and no user code (a trigger someone put on our tables),
//! ever sees it. A statement whose text starts with [`IN_INDEX_ORDER`]
//! (`in_index_order!`) must read its rows in an index's order and stop at
//! its limit: `enable_sort` and `enable_bitmapscan` are off too while it is
//! planned, so the ordered index scan is taken whatever the statistics say
//! (a generic plan made on a table never analyzed, or one whose rows a
//! bitmap finds cheaply, would otherwise sort every row its filters pass). `plan_cache_mode` is read when a cached plan is chosen,
//! outside the planner, so it is set for the statement through the GUC
//! machinery, as a function's `SET` clause sets it (user code run inside
//! our statement sees it too, and a `SET` of it made there lasts until our
//! statement ends).

use std::ffi::{c_char, c_int, CStr};

use pgrx::pg_sys;

use crate::guc::SetClause;

/// The first bytes of every statement we prepare.
const MARKER: &str = "/* aedb_queue */ ";

/// The first bytes of a statement that reads an index in order (see above).
pub(crate) const IN_INDEX_ORDER: &str = in_index_order!();

/// `sql` marked as ours.
pub(crate) fn marked(sql: &str) -> String {
    format!("{MARKER}{sql}")
}

static mut PREVIOUS_PLANNER: pg_sys::planner_hook_type = None;

pub(crate) fn register() {
    // SAFETY: called once from _PG_init, chaining whatever hook was there.
    unsafe {
        PREVIOUS_PLANNER = pg_sys::planner_hook;
        pg_sys::planner_hook = Some(plan);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn plan(
    parse: *mut pg_sys::Query,
    query_string: *const c_char,
    cursor_options: c_int,
    bound_params: pg_sys::ParamListInfo,
) -> *mut pg_sys::PlannedStmt {
    let text = if query_string.is_null() {
        &[][..]
    } else {
        CStr::from_ptr(query_string).to_bytes()
    };
    let ours = text.starts_with(MARKER.as_bytes());
    let ordered = ours && text[MARKER.len()..].starts_with(IN_INDEX_ORDER.as_bytes());
    let _off = ours.then(|| PlannerOff::enter(ordered));
    match PREVIOUS_PLANNER {
        Some(previous) => previous(parse, query_string, cursor_options, bound_params),
        None => pg_sys::standard_planner(parse, query_string, cursor_options, bound_params),
    }
}

/// `enable_seqscan = off` for the planning of one of our statements, and
/// `enable_sort` and `enable_bitmapscan` as well for one that reads an
/// index in order. The variables are written directly: nothing but the
/// planner reads them in between, no user code runs while our statement
/// is planned, and the values are restored before the planner returns
/// (also when it raises).
struct PlannerOff {
    seqscan: bool,
    /// `enable_sort` and `enable_bitmapscan` as they were, if turned off.
    ordered: Option<(bool, bool)>,
}

impl PlannerOff {
    fn enter(ordered: bool) -> Self {
        // SAFETY: plain variables of this single-threaded backend.
        unsafe {
            let saved = PlannerOff {
                seqscan: pg_sys::enable_seqscan,
                ordered: ordered.then(|| (pg_sys::enable_sort, pg_sys::enable_bitmapscan)),
            };
            pg_sys::enable_seqscan = false;
            if ordered {
                pg_sys::enable_sort = false;
                pg_sys::enable_bitmapscan = false;
            }
            saved
        }
    }
}

impl Drop for PlannerOff {
    fn drop(&mut self) {
        // SAFETY: as in `enter`; writing a bool cannot raise.
        unsafe {
            pg_sys::enable_seqscan = self.seqscan;
            if let Some((sort, bitmapscan)) = self.ordered {
                pg_sys::enable_sort = sort;
                pg_sys::enable_bitmapscan = bitmapscan;
            }
        }
    }
}

/// Generic plans for the statement being executed.
pub(crate) struct GenericPlans(#[allow(dead_code)] SetClause);

impl GenericPlans {
    pub(crate) fn enter() -> Self {
        GenericPlans(SetClause::enter(&[(
            c"plan_cache_mode",
            c"force_generic_plan",
        )]))
    }
}

/// What the hook does for `sql`, for `store::explain`, which plans through SQL.
#[cfg(any(test, feature = "pg_test"))]
pub(crate) struct PlannerOffForExplain(#[allow(dead_code)] SetClause);

#[cfg(any(test, feature = "pg_test"))]
impl PlannerOffForExplain {
    pub(crate) fn enter(sql: &str) -> Self {
        let seqscan = (c"enable_seqscan", c"off");
        PlannerOffForExplain(if sql.starts_with(IN_INDEX_ORDER) {
            SetClause::enter(&[seqscan, (c"enable_sort", c"off"), (c"enable_bitmapscan", c"off")])
        } else {
            SetClause::enter(&[seqscan])
        })
    }
}
