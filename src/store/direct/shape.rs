//! The task table and ready index as the direct writes assume them, which
//! `sql/schema.sql` defines: checked against the catalogs at run time
//! (once per relation-cache version, `guards::verdict`), so a column whose
//! type an operator changed, or a ready index redefined, sends the calls to
//! their statements instead of reading values of the wrong type or an index
//! in the wrong order.

use std::ffi::CStr;

use pgrx::pg_sys::{self, Oid};

use crate::store::am::{guards, Decline};

/// Every column the direct writes set or read, and its type.
const TASK_COLUMNS: &[(&CStr, Type)] = &[
    (c"task_id", Type::Builtin(pg_sys::INT8OID)),
    (c"queue", Type::Builtin(pg_sys::TEXTOID)),
    (c"priority", Type::Builtin(pg_sys::INT8OID)),
    (c"max_attempts", Type::Builtin(pg_sys::INT4OID)),
    (c"backoff_base", Type::Builtin(pg_sys::INTERVALOID)),
    (c"backoff_max", Type::Builtin(pg_sys::INTERVALOID)),
    (c"created_at", Type::Builtin(pg_sys::TIMESTAMPTZOID)),
    (c"idempotency_key", Type::Builtin(pg_sys::TEXTOID)),
    (c"payload", Type::Builtin(pg_sys::JSONBOID)),
    (c"not_before", Type::Builtin(pg_sys::TIMESTAMPTZOID)),
    (c"state", Type::TaskState),
    (c"attempts", Type::Builtin(pg_sys::INT4OID)),
    (c"fencing_token", Type::Builtin(pg_sys::INT8OID)),
    (c"lease_deadline", Type::Builtin(pg_sys::TIMESTAMPTZOID)),
    (c"updated_at", Type::Builtin(pg_sys::TIMESTAMPTZOID)),
    (c"owner_id", Type::Builtin(pg_sys::TEXTOID)),
    (c"progress", Type::Builtin(pg_sys::JSONBOID)),
    (c"last_error", Type::Builtin(pg_sys::TEXTOID)),
    (c"waiting_on", Type::Builtin(pg_sys::INT4OID)),
    (c"has_dependents", Type::Builtin(pg_sys::BOOLOID)),
    (c"concurrency_key", Type::Builtin(pg_sys::TEXTOID)),
    (c"ordering_key", Type::Builtin(pg_sys::TEXTOID)),
    (c"fairness_key", Type::Builtin(pg_sys::TEXTOID)),
    (c"fair_vt", Type::Builtin(pg_sys::INT8OID)),
];

#[derive(Clone, Copy)]
enum Type {
    Builtin(Oid),
    /// `aedb_queue.task_state`.
    TaskState,
}

impl Type {
    fn oid(self) -> Oid {
        match self {
            Type::Builtin(oid) => oid,
            Type::TaskState => crate::oids::type_oid(c"task_state"),
        }
    }
}

/// The admission check of enqueues and completions.
pub(super) fn task_table(
    rel: pg_sys::Relation,
    _index: Option<pg_sys::Relation>,
) -> Result<(), Decline> {
    // SAFETY: `rel` is the open, locked task table (`Admission::shape`).
    unsafe { guards::verdict((*rel).rd_id, || task_columns(rel)) }
}

/// The admission check of claims: the table, and the index they read.
pub(super) fn task_table_and_ready_index(
    rel: pg_sys::Relation,
    index: Option<pg_sys::Relation>,
) -> Result<(), Decline> {
    task_table(rel, None)?;
    let Some(index) = index else {
        return Err(Decline::Shape);
    };
    // SAFETY: both are open and locked (`Admission::shape`).
    unsafe { guards::verdict((*index).rd_id, || ready_index(rel, index)) }
}

/// The attribute number of live column `name` of `rel`.
unsafe fn attnum(rel: pg_sys::Relation, name: &CStr) -> Option<i16> {
    unsafe {
        let desc = (*rel).rd_att;
        let attrs = crate::pg_compat::attributes(desc);
        crate::store::am::insert::find_attribute(attrs, name, 0).map(|at| at as i16 + 1)
    }
}

unsafe fn task_columns(rel: pg_sys::Relation) -> Result<(), Decline> {
    unsafe {
        let desc = (*rel).rd_att;
        let attrs = crate::pg_compat::attributes(desc);
        let every_column_as_defined = TASK_COLUMNS.iter().all(|(name, ty)| {
            attnum(rel, name).is_some_and(|at| attrs[at as usize - 1].atttypid == ty.oid())
        });
        if every_column_as_defined {
            Ok(())
        } else {
            Err(Decline::Shape)
        }
    }
}

/// `task_ready_idx` as defined: `(queue, priority DESC, (-coalesce(fair_vt,
/// task_id)) DESC) WHERE state = 'ready'`, with the default btree operator
/// families. The direct claim builds its scan keys and its service order
/// on exactly this.
unsafe fn ready_index(rel: pg_sys::Relation, index: pg_sys::Relation) -> Result<(), Decline> {
    unsafe {
        let form = &*(*index).rd_index;
        let desc_nulls_first = (pg_sys::INDOPTION_DESC | pg_sys::INDOPTION_NULLS_FIRST) as i16;
        let (Some(queue), Some(priority)) = (attnum(rel, c"queue"), attnum(rel, c"priority"))
        else {
            return Err(Decline::Shape);
        };
        let columns_as_defined = form.indnatts == 3
            && form.indnkeyatts == 3
            && form.indkey.values.as_slice(3) == [queue, priority, 0]
            && std::slice::from_raw_parts((*index).rd_indoption, 3)
                == [0, desc_nulls_first, desc_nulls_first]
            && std::slice::from_raw_parts((*index).rd_opfamily, 3)
                == [
                    pg_sys::TEXT_BTREE_FAM_OID,
                    pg_sys::INTEGER_BTREE_FAM_OID,
                    pg_sys::INTEGER_BTREE_FAM_OID,
                ]
            && *(*index).rd_indcollation == collation(rel, queue);
        if columns_as_defined && rank_expression(rel, index) && ready_predicate(rel, index) {
            Ok(())
        } else {
            Err(Decline::Shape)
        }
    }
}

unsafe fn collation(rel: pg_sys::Relation, attnum: i16) -> Oid {
    unsafe {
        let desc = (*rel).rd_att;
        crate::pg_compat::attributes(desc)[attnum as usize - 1].attcollation
    }
}

/// The third column's expression is `-coalesce(fair_vt, task_id)`.
unsafe fn rank_expression(rel: pg_sys::Relation, index: pg_sys::Relation) -> bool {
    unsafe {
        let expressions = pg_sys::RelationGetIndexExpressions(index);
        let [negated] = nodes(expressions)[..] else {
            return false;
        };
        let Some([coalesce]) = operator_call(negated, pg_sys::F_INT8UM) else {
            return false;
        };
        if !is(coalesce, pg_sys::NodeTag::T_CoalesceExpr) {
            return false;
        }
        let args = nodes((*coalesce.cast::<pg_sys::CoalesceExpr>()).args);
        matches!(args[..], [first, second]
            if is_column(first, attnum(rel, c"fair_vt"))
                && is_column(second, attnum(rel, c"task_id")))
    }
}

/// The predicate is `state = 'ready'` and nothing else.
unsafe fn ready_predicate(rel: pg_sys::Relation, index: pg_sys::Relation) -> bool {
    unsafe {
        let predicate = pg_sys::RelationGetIndexPredicate(index);
        let [clause] = nodes(predicate)[..] else {
            return false;
        };
        let Some([column, value]) = operator_call(clause, pg_sys::F_ENUM_EQ) else {
            return false;
        };
        if !is_column(column, attnum(rel, c"state")) || !is(value, pg_sys::NodeTag::T_Const) {
            return false;
        }
        let value = &*value.cast::<pg_sys::Const>();
        let ready = crate::oids::enum_label_oid(c"task_state", c"ready");
        !value.constisnull
            && value.consttype == crate::oids::type_oid(c"task_state")
            && value.constvalue == pg_sys::Datum::from(ready)
    }
}

unsafe fn is(node: *mut pg_sys::Node, tag: pg_sys::NodeTag) -> bool {
    unsafe { !node.is_null() && (*node).type_ == tag }
}

/// The arguments of `node` if it is a call of the operator whose function
/// is `function` with `N` arguments.
unsafe fn operator_call<const N: usize>(
    node: *mut pg_sys::Node,
    function: u32,
) -> Option<[*mut pg_sys::Node; N]> {
    unsafe {
        if !is(node, pg_sys::NodeTag::T_OpExpr) {
            return None;
        }
        let call = &*node.cast::<pg_sys::OpExpr>();
        if call.opfuncid != Oid::from(function) {
            return None;
        }
        nodes(call.args).try_into().ok()
    }
}

/// Whether `node` is a plain reference to column `attnum` of the table.
unsafe fn is_column(node: *mut pg_sys::Node, attnum: Option<i16>) -> bool {
    unsafe {
        is(node, pg_sys::NodeTag::T_Var)
            && attnum.is_some_and(|at| (*node.cast::<pg_sys::Var>()).varattno == at)
    }
}

/// The elements of a node list.
unsafe fn nodes(list: *mut pg_sys::List) -> Vec<*mut pg_sys::Node> {
    unsafe {
        if list.is_null() {
            return Vec::new();
        }
        (0..(*list).length as usize)
            .map(|i| (*(*list).elements.add(i)).ptr_value.cast())
            .collect()
    }
}
