//! A row version as the direct writes' callers see it: judged (`holds`,
//! a statement's WHERE), read (its RETURNING) or changed, by column name.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, CStr};

use pgrx::pg_sys::{self, Datum};

/// The version of the row the caller judges or reads.
pub struct Row {
    slot: *mut pg_sys::TupleTableSlot,
    /// Column numbers found by name so far in this call: every row of the
    /// call has the same descriptor, so each name is searched for once.
    columns: RefCell<Vec<(*const c_char, Option<i32>)>>,
    /// Where in `columns` the next name is looked for first: each row of a
    /// call asks for its names in the same order.
    next: Cell<usize>,
}

impl Row {
    /// The row in `slot`, which stays valid while the `Row` is used.
    pub(super) fn over(slot: *mut pg_sys::TupleTableSlot) -> Row {
        Row {
            slot,
            columns: RefCell::new(Vec::new()),
            next: Cell::new(0),
        }
    }

    pub(super) fn slot(&self) -> *mut pg_sys::TupleTableSlot {
        self.slot
    }

    /// Column `name`'s value; None when it is NULL or there is no such
    /// column.
    pub fn get(&self, name: &CStr) -> Option<Datum> {
        let column = self.column(name)?;
        // SAFETY: the slot holds a pinned version of a row of the open
        // relation while `Row` is lent out; its values are read once
        // deformed up to `column`, as slot_getattr does.
        unsafe {
            if i32::from((*self.slot).tts_nvalid) < column {
                pg_sys::slot_getsomeattrs_int(self.slot, column);
            }
            let at = column as usize - 1;
            (!*(*self.slot).tts_isnull.add(at)).then(|| *(*self.slot).tts_values.add(at))
        }
    }

    /// Whether text column `name` holds `value` (false when NULL), without
    /// copying it out.
    pub fn text_is(&self, name: &CStr, value: &str) -> bool {
        let Some(datum) = self.get(name) else {
            return false;
        };
        // SAFETY: a text column's datum, not NULL; detoasted (a no-op for
        // the short inline values of a row) for as long as this call.
        unsafe {
            let text = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
            pgrx::varlena::varlena_to_byte_slice(text) == value.as_bytes()
        }
    }

    /// `name`'s column number, found in the descriptor on first use.
    pub(super) fn column(&self, name: &CStr) -> Option<i32> {
        let mut columns = self.columns.borrow_mut();
        let next = self.next.get();
        let at = match columns.get(next) {
            Some(&(n, _)) if n == name.as_ptr() => Some(next),
            _ => columns.iter().position(|(n, _)| *n == name.as_ptr()),
        };
        if let Some(at) = at {
            self.next.set(at + 1);
            return columns[at].1;
        }
        // SAFETY: the slot's descriptor is the open relation's.
        let column = unsafe {
            let desc = (*self.slot).tts_tupleDescriptor;
            let attrs = crate::pg_compat::attributes(desc);
            super::insert::find_attribute(attrs, name, 0).map(|at| at as i32 + 1)
        };
        columns.push((name.as_ptr(), column));
        self.next.set(columns.len());
        column
    }

    pub fn text(&self, name: &CStr) -> Option<String> {
        // SAFETY: a text column's datum, not NULL.
        self.get(name)
            .and_then(|d| unsafe { <String as pgrx::FromDatum>::from_datum(d, false) })
    }

    pub fn int8(&self, name: &CStr) -> Option<i64> {
        self.get(name).map(|d| d.value() as i64)
    }

    pub fn bool(&self, name: &CStr) -> Option<bool> {
        self.get(name).map(|d| d.value() != 0)
    }

    pub fn oid(&self, name: &CStr) -> Option<pg_sys::Oid> {
        self.get(name).map(|d| pg_sys::Oid::from(d.value() as u32))
    }
}
