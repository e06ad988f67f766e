//! For the plan tests: the plan a statement runs with, as EXPLAIN shows it,
//! and how many sequential scans it has.

use std::ffi::c_int;

use pgrx::pg_sys;
use pgrx::Spi;

use super::{planner, Statement};
use crate::errors::{internal, Result};

/// The plan `stmt` runs with, as EXPLAIN (FORMAT JSON) shows it: prepared
/// and explained under the same planner settings as `execute`, with NULL
/// for every parameter (a generic plan does not depend on them).
pub(crate) fn explain(stmt: &Statement) -> Result<serde_json::Value> {
    let types: Vec<String> = stmt
        .parameter_types()
        .into_iter()
        .map(|oid| {
            // SAFETY: a built-in type oid; the result is a palloc'd C string.
            let name =
                unsafe { std::ffi::CStr::from_ptr(pgrx::pg_sys::format_type_be(oid.into())) };
            name.to_string_lossy().into_owned()
        })
        .collect();
    let nulls = vec!["NULL"; types.len()].join(", ");
    // EXPLAIN EXECUTE plans the PREPARE's text, which the planner hook does
    // not recognise as ours: set what the hook sets for the same plan.
    let _generic = planner::GenericPlans::enter();
    let _planner = planner::PlannerOffForExplain::enter(stmt.sql);
    Spi::connect_mut(|client| {
        client
            .update(
                &if types.is_empty() {
                    format!("PREPARE aedb_queue_explained AS {}", stmt.sql)
                } else {
                    format!(
                        "PREPARE aedb_queue_explained({}) AS {}",
                        types.join(", "),
                        stmt.sql
                    )
                },
                None,
                &[],
            )
            .map_err(internal)?;
        let execute = if types.is_empty() {
            "EXECUTE aedb_queue_explained".to_string()
        } else {
            format!("EXECUTE aedb_queue_explained({nulls})")
        };
        let plan = client
            .select(&format!("EXPLAIN (FORMAT JSON) {execute}"), None, &[])
            .map_err(internal)?
            .first()
            .get_one::<pgrx::Json>()
            .map_err(internal)?
            .ok_or_else(|| internal("EXPLAIN returned no plan"))?;
        client
            .update("DEALLOCATE aedb_queue_explained", None, &[])
            .map_err(internal)?;
        Ok(plan.0)
    })
}

/// How many sequential scans the plan of `stmt` has, planned the way
/// `store::execute` plans it: prepared through SPI with its marked text (so
/// through the planner hook) under generic plans. For the plan tests: the
/// EXPLAIN of `store::explain` goes through SQL, which the hook does not see.
pub(crate) fn seq_scans_of(stmt: &Statement) -> usize {
    nodes_as_executed(stmt, &[pg_sys::NodeTag::T_SeqScan])
}

/// How many sorts and bitmap scans the plan of `stmt` has, planned as in
/// `seq_scans_of`: none for a statement the hook plans in index order.
pub(crate) fn sorts_of(stmt: &Statement) -> usize {
    use pg_sys::NodeTag::*;
    nodes_as_executed(stmt, &[T_Sort, T_IncrementalSort, T_BitmapHeapScan, T_BitmapIndexScan])
}

/// How many nodes of the `kinds` the plan of `stmt` has, planned as
/// `store::execute` plans it.
fn nodes_as_executed(stmt: &Statement, kinds: &[pg_sys::NodeTag]) -> usize {
    use pgrx::pg_sys::{NodeTag, Plan};

    unsafe fn count(plan: *mut Plan, kinds: &[NodeTag]) -> usize {
        if plan.is_null() {
            return 0;
        }
        let mut n = usize::from(kinds.contains(&(*plan).type_));
        n += count((*plan).lefttree, kinds) + count((*plan).righttree, kinds);
        let children: *mut pg_sys::List = match (*plan).type_ {
            NodeTag::T_Append => (*(plan as *mut pg_sys::Append)).appendplans,
            NodeTag::T_MergeAppend => (*(plan as *mut pg_sys::MergeAppend)).mergeplans,
            _ => std::ptr::null_mut(),
        };
        n + plans_in(children, kinds)
    }
    unsafe fn plans_in(list: *mut pg_sys::List, kinds: &[NodeTag]) -> usize {
        if list.is_null() {
            return 0;
        }
        (0..(*list).length)
            .map(|i| count(pg_sys::list_nth(list, i) as *mut Plan, kinds))
            .sum()
    }

    let sql = std::ffi::CString::new(planner::marked(stmt.sql)).expect("no NUL in our SQL");
    let mut types: Vec<pg_sys::Oid> = stmt
        .parameter_types()
        .into_iter()
        .map(|t| pgrx::pg_sys::PgOid::BuiltIn(t).value())
        .collect();
    let _generic = planner::GenericPlans::enter();
    pgrx::Spi::connect(|_| {
        // SAFETY: SPI is connected; the plan and cached plan are released
        // before returning.
        unsafe {
            let plan = pg_sys::SPI_prepare(sql.as_ptr(), types.len() as c_int, types.as_mut_ptr());
            assert!(!plan.is_null(), "SPI_prepare failed for {}", stmt.sql);
            let cached = pg_sys::SPI_plan_get_cached_plan(plan);
            let statements = (*cached).stmt_list;
            let mut n = 0;
            for i in 0..(*statements).length {
                let planned = pg_sys::list_nth(statements, i) as *mut pg_sys::PlannedStmt;
                n += count((*planned).planTree, kinds) + plans_in((*planned).subplans, kinds);
            }
            pg_sys::ReleaseCachedPlan(cached, std::ptr::null_mut());
            pg_sys::SPI_freeplan(plan);
            n
        }
    })
}
