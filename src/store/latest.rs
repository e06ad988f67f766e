//! Reading rows under the newest snapshot instead of the transaction's.
//! A REPEATABLE READ or SERIALIZABLE transaction keeps one snapshot, and
//! SPI (through pgrx) runs every statement under it once the transaction
//! has written: a grant revoked after that snapshot would stay in force
//! for the rest of the transaction. Rights are read with
//! `SPI_execute_snapshot` and a snapshot taken now, as PostgreSQL's
//! foreign-key checks read the newest rows under such a transaction.

use std::cell::RefCell;
use std::ffi::CString;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use rustc_hash::FxHashMap;

use super::{planner, Statement};
use crate::errors::{internal, Result};

thread_local! {
    /// Plans kept for the rest of the backend, by statement.
    static PLANS: RefCell<FxHashMap<usize, pg_sys::SPIPlanPtr>> = RefCell::new(FxHashMap::default());
}

fn plan(stmt: &'static Statement) -> Result<pg_sys::SPIPlanPtr> {
    let key = stmt as *const Statement as usize;
    if let Some(plan) = PLANS.with(|p| p.borrow().get(&key).copied()) {
        return Ok(plan);
    }
    let sql = CString::new(planner::marked(stmt.sql)).map_err(internal)?;
    let mut types: Vec<pg_sys::Oid> = stmt
        .parameter_types()
        .into_iter()
        .map(|t| t.value())
        .collect();
    // SAFETY: inside an SPI connection (the caller's with_client); the
    // kept plan lives in a context of its own until the backend exits.
    let plan = unsafe {
        let plan = pg_sys::SPI_prepare(sql.as_ptr(), types.len() as i32, types.as_mut_ptr());
        if plan.is_null() || pg_sys::SPI_keepplan(plan) != 0 {
            return Err(internal("SPI_prepare failed"));
        }
        plan
    };
    PLANS.with(|p| p.borrow_mut().insert(key, plan));
    Ok(plan)
}

/// Runs the read-only `stmt` under a snapshot taken now; each row's
/// columns as their text output (None: NULL). Call inside an SPI
/// connection.
pub(crate) fn read_latest(
    stmt: &'static Statement,
    args: &[DatumWithOid<'_>],
) -> Result<Vec<Vec<Option<String>>>> {
    let plan = plan(stmt)?;
    let mut values: Vec<pg_sys::Datum> = Vec::with_capacity(args.len());
    let mut nulls: Vec<std::ffi::c_char> = Vec::with_capacity(args.len());
    for arg in args {
        match arg.datum() {
            Some(d) => {
                values.push(d.sans_lifetime());
                nulls.push(b' ' as std::ffi::c_char);
            }
            None => {
                values.push(pg_sys::Datum::from(0usize));
                nulls.push(b'n' as std::ffi::c_char);
            }
        }
    }
    // SAFETY: the plan's own argument count and types; a read-only run
    // under exactly the snapshot given, no crosscheck, no triggers. The
    // result is read before anything else runs through SPI.
    unsafe {
        let status = pg_sys::SPI_execute_snapshot(
            plan,
            values.as_mut_ptr(),
            nulls.as_ptr(),
            pg_sys::GetLatestSnapshot(),
            std::ptr::null_mut(),
            true,
            false,
            0,
        );
        if status != pg_sys::SPI_OK_SELECT as i32 {
            return Err(internal(format!("SPI_execute_snapshot returned {status}")));
        }
        let table = pg_sys::SPI_tuptable;
        let mut rows = Vec::with_capacity(pg_sys::SPI_processed as usize);
        for i in 0..pg_sys::SPI_processed as usize {
            let tuple = *(*table).vals.add(i);
            let columns = (*(*table).tupdesc).natts;
            let row = (1..=columns)
                .map(|c| {
                    let text = pg_sys::SPI_getvalue(tuple, (*table).tupdesc, c);
                    (!text.is_null()).then(|| {
                        std::ffi::CStr::from_ptr(text)
                            .to_string_lossy()
                            .into_owned()
                    })
                })
                .collect();
            rows.push(row);
        }
        Ok(rows)
    }
}
