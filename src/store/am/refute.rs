//! Which of a table's partial indexes a write may leave alone: those whose
//! predicate the write's constant columns refute, by PostgreSQL's own proof
//! (`predicate_refuted_by`, the planner's). An enqueue of ready tasks
//! (`state = 'ready'`, `lease_deadline` NULL) then neither opens nor locks
//! the indexes of scheduled, in-flight and dead tasks: no row it writes can
//! enter them, and the table's lock already keeps their definitions still.

use pgrx::pg_sys::{self, Datum, Oid};

use super::memory::small_context;

/// A column every row of a write holds the same value in: its attribute
/// number and value (None = NULL). Only NULL and by-value types are used, so
/// the value can be compared and kept as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Constant {
    pub attno: i16,
    pub value: Option<usize>,
}

/// The attribute numbers of the relation (range table entry 1) that
/// `node` reads: system columns negative, 0 for a whole-row reference.
///
/// # Safety
/// `node` is an expression tree or NULL.
pub(crate) unsafe fn attributes_read(node: *mut pg_sys::Node) -> Vec<i32> {
    unsafe {
        let mut set: *mut pg_sys::Bitmapset = std::ptr::null_mut();
        pg_sys::pull_varattnos(node, 1, &mut set);
        let mut attrs = Vec::new();
        // Members are attribute numbers offset past the system columns.
        let mut member = -1;
        loop {
            member = pg_sys::bms_next_member(set, member);
            if member < 0 {
                break;
            }
            attrs.push(member + pg_sys::FirstLowInvalidHeapAttributeNumber);
        }
        pg_sys::bms_free(set);
        attrs
    }
}

/// The attribute numbers the predicates of `infos` read, sorted.
///
/// # Safety
/// Each info is a valid `IndexInfo`.
pub(crate) unsafe fn predicate_attributes(infos: &[*mut pg_sys::IndexInfo]) -> Vec<i16> {
    unsafe {
        let mut attrs = Vec::new();
        for &info in infos {
            let predicate = (*info).ii_Predicate;
            if predicate.is_null() {
                continue;
            }
            attrs.extend(
                attributes_read(predicate.cast())
                    .into_iter()
                    .filter(|&attno| attno > 0)
                    .map(|attno| attno as i16),
            );
        }
        attrs.sort_unstable();
        attrs.dedup();
        attrs
    }
}

/// For each of `infos`, whether `constants` refute its predicate (an index
/// without a predicate never is). Works in a memory context of its own.
///
/// # Safety
/// `rel` is open; each info is a valid `IndexInfo` of one of its indexes;
/// each constant names an attribute of `rel` of a by-value type, or NULL.
pub(crate) unsafe fn refuted(
    rel: pg_sys::Relation,
    infos: &[*mut pg_sys::IndexInfo],
    constants: &[Constant],
) -> Vec<bool> {
    unsafe {
        if constants.is_empty() {
            return vec![false; infos.len()];
        }
        let context = small_context(pg_sys::CurrentMemoryContext, c"aedb_queue index refutation");
        let caller = pg_sys::MemoryContextSwitchTo(context);
        let mut clauses: *mut pg_sys::List = std::ptr::null_mut();
        for constant in constants {
            if let Some(clause) = clause(rel, *constant) {
                clauses = pg_sys::lappend(clauses, clause.cast());
            }
        }
        let refuted = infos
            .iter()
            .map(|&info| {
                let predicate = (*info).ii_Predicate;
                // Weak refutation: a row is in a partial index only if the
                // predicate is true, so "false or NULL" keeps it out (and
                // `waiting_on IS NULL` refutes `waiting_on > 0`).
                !predicate.is_null()
                    && !clauses.is_null()
                    && pg_sys::predicate_refuted_by(predicate, clauses, true)
            })
            .collect();
        pg_sys::MemoryContextSwitchTo(caller);
        pg_sys::MemoryContextDelete(context);
        refuted
    }
}

/// `column IS NULL` or `column = value` (the type's default equality), as
/// the planner would read it from a query; None when the type has none.
unsafe fn clause(rel: pg_sys::Relation, constant: Constant) -> Option<*mut pg_sys::Expr> {
    unsafe {
        let desc = (*rel).rd_att;
        let attr = &crate::pg_compat::attributes(desc)[constant.attno as usize - 1];
        let var = pg_sys::makeVar(
            1,
            constant.attno,
            attr.atttypid,
            attr.atttypmod,
            attr.attcollation,
            0,
        );
        let Some(value) = constant.value else {
            let test =
                pg_sys::palloc0(std::mem::size_of::<pg_sys::NullTest>()) as *mut pg_sys::NullTest;
            (*test).xpr.type_ = pg_sys::NodeTag::T_NullTest;
            (*test).arg = var.cast();
            (*test).nulltesttype = pg_sys::NullTestType::IS_NULL;
            (*test).argisrow = false;
            (*test).location = -1;
            return Some(test.cast());
        };
        let cache = pg_sys::lookup_type_cache(attr.atttypid, pg_sys::TYPECACHE_EQ_OPR as i32);
        let equality: Oid = (*cache).eq_opr;
        if equality == pg_sys::InvalidOid {
            return None;
        }
        let value = pg_sys::makeConst(
            attr.atttypid,
            attr.atttypmod,
            attr.attcollation,
            attr.attlen as i32,
            Datum::from(value),
            false,
            true,
        );
        let clause = pg_sys::make_opclause(
            equality,
            pg_sys::BOOLOID,
            false,
            var.cast(),
            value.cast(),
            pg_sys::InvalidOid,
            attr.attcollation,
        );
        pg_sys::fix_opfuncids(clause.cast());
        Some(clause)
    }
}
