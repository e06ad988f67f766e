//! jsonb values kept as the Postgres datums they already are.
//!
//! pgrx's `JsonB` parses every value into a `serde_json::Value` and prints it
//! back on the way out; payloads only pass through the queue, so that work is
//! pure overhead on the hot path. Follow-up specs, which the extension does
//! read, still use `JsonB`.

use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::{Datum, JsonB};
use pgrx::pg_sys;
use pgrx::{FromDatum, IntoDatum, PgMemoryContexts};

/// Implements the pgrx conversion traits for a wrapper around a by-reference datum.
macro_rules! raw_datum_type {
    ($name:ident, $oid:expr, $sql:literal) => {
        #[derive(Debug, Clone, Copy)]
        pub struct $name(pg_sys::Datum);

        impl FromDatum for $name {
            unsafe fn from_polymorphic_datum(
                datum: pg_sys::Datum,
                is_null: bool,
                _: pg_sys::Oid,
            ) -> Option<Self> {
                (!is_null).then_some($name(datum))
            }

            /// Copies the value, so one read from an SPI result outlives `SPI_finish`.
            unsafe fn from_datum_in_memory_context(
                mut memory_context: PgMemoryContexts,
                datum: pg_sys::Datum,
                is_null: bool,
                _: pg_sys::Oid,
            ) -> Option<Self> {
                if is_null {
                    return None;
                }
                memory_context.switch_to(|_| {
                    let copy = unsafe { pg_sys::pg_detoast_datum_copy(datum.cast_mut_ptr()) };
                    Some($name(pg_sys::Datum::from(copy)))
                })
            }
        }

        impl IntoDatum for $name {
            fn into_datum(self) -> Option<pg_sys::Datum> {
                Some(self.0)
            }

            fn type_oid() -> pg_sys::Oid {
                $oid
            }
        }

        unsafe impl<'fcx> ArgAbi<'fcx> for $name {
            unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
                let index = arg.index();
                unsafe { arg.unbox_arg_using_from_datum() }
                    .unwrap_or_else(|| panic!("argument {index} must not be null"))
            }
        }

        unsafe impl BoxRet for $name {
            unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
                unsafe { fcinfo.return_raw_datum(self.0) }
            }
        }

        pgrx::impl_sql_translatable!($name, $sql);
    };
}

raw_datum_type!(RawJsonb, pg_sys::JSONBOID, "jsonb");
raw_datum_type!(RawJsonbArray, pg_sys::JSONBARRAYOID, "jsonb[]");

impl RawJsonb {
    /// Bytes of the uncompressed jsonb value (what `aedb_queue.max_payload_bytes` limits).
    pub fn byte_size(&self) -> usize {
        raw_size(self.0)
    }

    pub fn from_json(value: serde_json::Value) -> Self {
        RawJsonb(JsonB(value).into_datum().expect("jsonb_in returns a value"))
    }
}

impl RawJsonbArray {
    /// The elements (`None` for a NULL element), in array order. They point
    /// into the detoasted array, which lives as long as the current memory
    /// context.
    pub fn elements(&self) -> Vec<Option<RawJsonb>> {
        unsafe {
            let array = pg_sys::pg_detoast_datum(self.0.cast_mut_ptr()) as *mut pg_sys::ArrayType;
            let mut elements: *mut pg_sys::Datum = std::ptr::null_mut();
            let mut nulls: *mut bool = std::ptr::null_mut();
            let mut count: i32 = 0;
            pg_sys::deconstruct_array(
                array,
                pg_sys::JSONBOID,
                -1,
                false,
                pg_sys::TYPALIGN_INT as std::ffi::c_char,
                &mut elements,
                &mut nulls,
                &mut count,
            );
            (0..count as usize)
                .map(|i| (!*nulls.add(i)).then(|| RawJsonb(*elements.add(i))))
                .collect()
        }
    }
}

fn raw_size(datum: pg_sys::Datum) -> usize {
    unsafe { pg_sys::toast_raw_datum_size(datum) }.saturating_sub(pg_sys::VARHDRSZ)
}
