//! The rows a statement returned, read the way the hot paths need: each row
//! deformed once (`heap_deform_tuple`), then values taken by position.
//!
//! pgrx's `SpiHeapTupleData` calls `SPI_getbinval` and `SPI_gettypeid` for
//! every column of a row before the first value is read; after the first
//! NULL or variable-length column each `SPI_getbinval` walks the tuple from
//! its start. A claim of 100 tasks spent about 900,000 instructions there.

use pgrx::pg_sys;
use pgrx::spi::SpiTupleTable;
use pgrx::{FromDatum, IntoDatum, PgMemoryContexts};

use crate::errors::{internal, Result};

/// The result of the statement `execute` just ran. It holds SPI's tuple
/// table, which lives until the next statement or the end of the
/// connection; reading it consumes it, so no read outlives it.
pub(crate) struct Rows<'conn> {
    table: SpiTupleTable<'conn>,
}

/// One deformed row of [`Rows`].
pub(crate) struct Row<'r> {
    values: &'r [pg_sys::Datum],
    nulls: &'r [bool],
    types: &'r [pg_sys::Oid],
    /// Where by-reference values are copied, so they outlive `SPI_finish`
    /// (the same context pgrx copies into).
    outer: pg_sys::MemoryContext,
}

impl<'conn> Rows<'conn> {
    pub(super) fn new(table: SpiTupleTable<'conn>) -> Self {
        Rows { table }
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// `read` applied to every row, in order.
    pub(crate) fn map<T>(self, read: impl FnMut(&Row<'_>) -> Result<T>) -> Result<Vec<T>> {
        self.read(usize::MAX, read)
    }

    /// `read` applied to the first row; None if there is none.
    pub(crate) fn first<T>(self, read: impl FnMut(&Row<'_>) -> Result<T>) -> Result<Option<T>> {
        Ok(self.read(1, read)?.pop())
    }

    /// `read` applied to the first `limit` rows.
    fn read<T>(self, limit: usize, mut read: impl FnMut(&Row<'_>) -> Result<T>) -> Result<Vec<T>> {
        let count = self.len();
        let mut out = Vec::with_capacity(count.min(limit));
        if count == 0 {
            return Ok(out);
        }
        // SAFETY: `self.table` wraps SPI_tuptable, set by the statement just
        // run and kept until the next one; no statement runs while `self`
        // lives (`execute` needs the client `self` borrows). The tuple
        // descriptor has `natts` attributes and `vals` holds `numvals` tuples.
        unsafe {
            let tuptable = pg_sys::SPI_tuptable;
            if tuptable.is_null() || (*tuptable).numvals as usize != count {
                return Err(internal("the SPI tuple table is not the statement's"));
            }
            let tupdesc = (*tuptable).tupdesc;
            let natts = (*tupdesc).natts as usize;
            let types: Vec<pg_sys::Oid> = crate::pg_compat::attributes(tupdesc)
                .iter()
                .map(|a| a.atttypid)
                .collect();
            let outer = (*pg_sys::CurrentMemoryContext).parent;
            if outer.is_null() {
                return Err(internal("the SPI memory context has no parent"));
            }
            let mut values = vec![pg_sys::Datum::from(0usize); natts];
            let mut nulls = vec![true; natts];
            let tuples = std::slice::from_raw_parts((*tuptable).vals, count);
            for &tuple in tuples.iter().take(limit) {
                pg_sys::heap_deform_tuple(tuple, tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
                out.push(read(&Row {
                    values: &values,
                    nulls: &nulls,
                    types: &types,
                    outer,
                })?);
            }
        }
        Ok(out)
    }
}

impl Row<'_> {
    /// The value at `ordinal` (1-based), None for NULL.
    pub(crate) fn get<T: FromDatum + IntoDatum>(&self, ordinal: usize) -> Result<Option<T>> {
        let at = ordinal
            .checked_sub(1)
            .filter(|&i| i < self.values.len())
            .ok_or_else(|| internal(format!("the statement has no column {ordinal}")))?;
        if self.nulls[at] {
            return Ok(None);
        }
        // SAFETY: a non-NULL datum of type `types[at]` from a live tuple;
        // try_from_* refuses a Rust type that does not match it.
        unsafe {
            T::try_from_datum_in_memory_context(
                PgMemoryContexts::For(self.outer),
                self.values[at],
                false,
                self.types[at],
            )
        }
        .map_err(internal)
    }

    /// The value at `ordinal`, which the statement never returns NULL.
    pub(crate) fn required<T: FromDatum + IntoDatum>(&self, ordinal: usize) -> Result<T> {
        self.get(ordinal)?
            .ok_or_else(|| internal(format!("column {ordinal} is unexpectedly NULL")))
    }
}
