//! Values kept as the Postgres datums they already are: jsonb, jsonb[], and
//! task rows.
//!
//! pgrx's `JsonB` parses every value into a `serde_json::Value` and prints it
//! back on the way out; payloads only pass through the queue, so that work is
//! pure overhead on the hot path, and it loses what serde cannot hold
//! (numbers beyond f64, nesting past its recursion limit). Follow-up specs,
//! which the extension does read, are walked in place, one level deep
//! ([`follow_up_specs`]), and their payloads stay jsonb, byte for byte.

use aedb_queue_core::spec::{self, Json};
use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::Datum;
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
// A task as `queue_get` and `queue_list` return it: a row of type
// aedb_queue.task_row (sql/schema.sql, the one definition of its columns),
// built by the statement (`store::admin`) and handed back untouched. In SPI
// results it is an anonymous record of the same columns, which is what a
// function declared to return task_row (or 0.2.0's TABLE of the same
// columns) may return.
raw_datum_type!(RawTaskRow, pg_sys::RECORDOID, "aedb_queue.task_row");
// A schedule as the schedule functions return it (aedb_queue.schedule_row),
// built by the statement (`store::schedule`) in the same way.
raw_datum_type!(RawScheduleRow, pg_sys::RECORDOID, "aedb_queue.schedule_row");

impl RawJsonb {
    /// Bytes of the uncompressed jsonb value (what `aedb_queue.max_payload_bytes` limits).
    pub fn byte_size(&self) -> usize {
        raw_size(self.0)
    }
}

/// One follow-up spec as read from the jsonb: its keys with their values
/// as text, and its payload as a jsonb value of its own.
pub struct SpecFields {
    fields: Vec<(String, Scalar)>,
    pub payload: Option<RawJsonb>,
}

enum Scalar {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    /// The texts of its elements if all are numbers (read for `wait_for` only).
    Array(Option<Vec<String>>),
    Object,
}

impl SpecFields {
    /// The keys and values in the form the pure spec parser takes.
    pub fn as_json(&self) -> Vec<(&str, Json<'_>)> {
        self.fields
            .iter()
            .map(|(key, value)| {
                let json = match value {
                    Scalar::Null => Json::Null,
                    Scalar::Bool(b) => Json::Bool(*b),
                    Scalar::Number(text) => Json::Number(text),
                    Scalar::String(text) => Json::String(text),
                    Scalar::Array(numbers) => Json::Array(numbers.as_deref()),
                    Scalar::Object => Json::Object,
                };
                (key.as_str(), json)
            })
            .collect()
    }
}

/// Reads the `follow_ups` argument: its size and number of specs are
/// checked before anything else is read, and nothing below the first
/// level of each spec is visited (a payload is copied as the bytes it is).
/// JSON `null` means none.
pub fn follow_up_specs(
    arg: &str,
    value: RawJsonb,
    payload_limit: usize,
) -> crate::errors::Result<Vec<(String, SpecFields)>> {
    spec::check_follow_ups_size(arg, value.byte_size(), payload_limit)?;
    // SAFETY: a detoasted jsonb datum is a varlena header then its root
    // container; every value read from it is used before the memory
    // context it lives in (the current one) is reset.
    unsafe {
        let jsonb = pg_sys::pg_detoast_datum(value.0.cast_mut_ptr()) as *mut pg_sys::Jsonb;
        let root = &mut (*jsonb).root as *mut pg_sys::JsonbContainer;
        let header = (*root).header;
        let count = header & pg_sys::JB_CMASK;
        if header & pg_sys::JB_FSCALAR != 0 {
            let only = pg_sys::getIthJsonbValueFromContainer(root, 0);
            return if (*only).type_ == pg_sys::jbvType::jbvNull {
                Ok(Vec::new())
            } else {
                Err(spec::not_an_array(arg))
            };
        }
        if header & pg_sys::JB_FARRAY == 0 {
            return Err(spec::not_an_array(arg));
        }
        spec::check_follow_ups_count(arg, count as usize)?;
        (0..count)
            .map(|i| {
                let path = format!("{arg}[{i}].");
                let element = pg_sys::getIthJsonbValueFromContainer(root, i);
                if (*element).type_ != pg_sys::jbvType::jbvBinary
                    || (*(*element).val.binary.data).header & pg_sys::JB_FOBJECT == 0
                {
                    return Err(spec::not_an_object(&path));
                }
                let fields = object_fields((*element).val.binary.data);
                Ok((path, fields))
            })
            .collect()
    }
}

/// The keys and values of one object container, one level deep.
unsafe fn object_fields(container: *mut pg_sys::JsonbContainer) -> SpecFields {
    let mut iterator = pg_sys::JsonbIteratorInit(container);
    let mut value = std::mem::zeroed::<pg_sys::JsonbValue>();
    let mut fields = Vec::new();
    let mut payload = None;
    let mut key = String::new();
    loop {
        match pg_sys::JsonbIteratorNext(&mut iterator, &mut value, true) {
            pg_sys::JsonbIteratorToken::WJB_KEY => key = text_of(&value),
            pg_sys::JsonbIteratorToken::WJB_VALUE => {
                let mut scalar = scalar_of(&value);
                if key == "wait_for" && matches!(scalar, Scalar::Array(_)) {
                    scalar = Scalar::Array(numbers_of(value.val.binary.data));
                }
                if key == "payload" && !matches!(scalar, Scalar::Null) {
                    let copy = pg_sys::JsonbValueToJsonb(&mut value);
                    payload = Some(RawJsonb(pg_sys::Datum::from(copy)));
                }
                fields.push((std::mem::take(&mut key), scalar));
            }
            pg_sys::JsonbIteratorToken::WJB_DONE => break,
            _ => {}
        }
    }
    SpecFields { fields, payload }
}

/// The elements of an array container as number texts; None if one is not
/// a number. The element count was bounded with the whole argument's size.
unsafe fn numbers_of(array: *mut pg_sys::JsonbContainer) -> Option<Vec<String>> {
    let count = (*array).header & pg_sys::JB_CMASK;
    (0..count)
        .map(
            |i| match scalar_of(&*pg_sys::getIthJsonbValueFromContainer(array, i)) {
                Scalar::Number(text) => Some(text),
                _ => None,
            },
        )
        .collect()
}

unsafe fn text_of(value: &pg_sys::JsonbValue) -> String {
    let string = value.val.string;
    let bytes = std::slice::from_raw_parts(string.val as *const u8, string.len as usize);
    String::from_utf8_lossy(bytes).into_owned()
}

unsafe fn scalar_of(value: &pg_sys::JsonbValue) -> Scalar {
    match value.type_ {
        pg_sys::jbvType::jbvNull => Scalar::Null,
        pg_sys::jbvType::jbvBool => Scalar::Bool(value.val.boolean),
        pg_sys::jbvType::jbvString => Scalar::String(text_of(value)),
        pg_sys::jbvType::jbvNumeric => {
            let text = pg_sys::numeric_normalize(value.val.numeric);
            Scalar::Number(
                std::ffi::CStr::from_ptr(text)
                    .to_string_lossy()
                    .into_owned(),
            )
        }
        pg_sys::jbvType::jbvBinary if (*value.val.binary.data).header & pg_sys::JB_FARRAY != 0 => {
            Scalar::Array(None)
        }
        _ => Scalar::Object,
    }
}

impl RawJsonbArray {
    /// The number of elements, read from the array's header alone.
    pub fn len(&self) -> usize {
        // SAFETY: the dimensions follow the fixed array header.
        unsafe {
            let array = pg_sys::pg_detoast_datum(self.0.cast_mut_ptr()) as *mut pg_sys::ArrayType;
            let dims = (array as *mut u8).add(std::mem::size_of::<pg_sys::ArrayType>()) as *mut i32;
            pg_sys::ArrayGetNItems((*array).ndim, dims).max(0) as usize
        }
    }

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
