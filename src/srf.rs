//! Set-returning results written to the caller's tuplestore in one call
//! (`SFRM_Materialize`), for every `RETURNS TABLE` function of ours.
//!
//! pgrx's own `TableIterator` returns one row per call of the function
//! (`SFRM_ValuePerCall`): every row re-enters the wrapper and the first call
//! looks the result type up in the catalogs, about 1,500 instructions a row
//! on a claim of 100. Our functions hold all their rows when they return, so
//! this type writes them into a tuplestore at once, under the row type the
//! calling node already built. It is named like pgrx's on purpose:
//! `#[pg_extern]` recognises a `RETURNS TABLE` function, and reads its
//! columns' names from the signature's `name!` items, by that name.

use std::marker::PhantomData;

use pgrx::callconv::RetAbi;
use pgrx::pg_sys;
use pgrx::IntoDatum;

/// The rows of one call, written out when the function returns.
pub struct TableIterator<'a, Row> {
    rows: Vec<Row>,
    _borrows: PhantomData<&'a ()>,
}

impl<Row> TableIterator<'_, Row> {
    pub fn new(rows: impl IntoIterator<Item = Row>) -> Self {
        TableIterator {
            rows: rows.into_iter().collect(),
            _borrows: PhantomData,
        }
    }

    pub fn once(row: Row) -> Self {
        Self::new([row])
    }

    /// The same rows in another shape (an older signature's columns).
    pub fn map_rows<Other>(self, shape: impl FnMut(Row) -> Other) -> TableIterator<'static, Other> {
        TableIterator::new(self.rows.into_iter().map(shape))
    }
}

/// A tuple whose elements are a row's columns, in order.
pub trait TableRow {
    const COLUMNS: usize;
    /// Writes the columns into `values` and `nulls`, each `COLUMNS` long.
    fn write(self, values: &mut [pg_sys::Datum], nulls: &mut [bool]);
}

macro_rules! table_row {
    ($count:literal: $($t:ident $i:tt),+) => {
        impl<$($t: IntoDatum),+> TableRow for ($($t,)+) {
            const COLUMNS: usize = $count;
            fn write(self, values: &mut [pg_sys::Datum], nulls: &mut [bool]) {
                $(
                    match self.$i.into_datum() {
                        Some(datum) => {
                            values[$i] = datum;
                            nulls[$i] = false;
                        }
                        None => nulls[$i] = true,
                    }
                )+
            }
        }
    };
}

table_row!(2: A 0, B 1);
table_row!(3: A 0, B 1, C 2);
table_row!(4: A 0, B 1, C 2, D 3);
table_row!(5: A 0, B 1, C 2, D 3, E 4);
table_row!(8: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
table_row!(9: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
table_row!(10: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
table_row!(11: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
table_row!(16: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15);

unsafe impl<Row: TableRow> RetAbi for TableIterator<'_, Row> {
    type Item = Row;
    type Ret = Self;

    fn to_ret(self) -> Self::Ret {
        self
    }

    unsafe fn box_ret_in_fcinfo(fcinfo: pg_sys::FunctionCallInfo, ret: Self::Ret) -> pg_sys::Datum {
        unsafe {
            let rsinfo = (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo;
            // The row type the calling node expects, when it built one;
            // otherwise InitMaterializedSRF reads the function's from pg_proc.
            // It raises the error itself when the caller cannot take a
            // tuplestore (rsinfo absent or without SFRM_Materialize).
            let expected = !rsinfo.is_null()
                && (*rsinfo).type_ == pg_sys::NodeTag::T_ReturnSetInfo
                && !(*rsinfo).expectedDesc.is_null();
            let flags = if expected {
                pg_sys::MAT_SRF_USE_EXPECTED_DESC
            } else {
                0
            };
            pg_sys::InitMaterializedSRF(fcinfo, flags);
            let store = (*rsinfo).setResult;
            let desc = (*rsinfo).setDesc;
            if (*desc).natts as usize != Row::COLUMNS {
                pgrx::error!(
                    "aedb_queue internal error: {} result columns expected, the function has {}",
                    (*desc).natts,
                    Row::COLUMNS
                );
            }
            let mut values = vec![pg_sys::Datum::from(0); Row::COLUMNS];
            let mut nulls = vec![false; Row::COLUMNS];
            for row in ret.rows {
                row.write(&mut values, &mut nulls);
                pg_sys::tuplestore_putvalues(store, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
            }
            (*fcinfo).isnull = true;
            pg_sys::Datum::from(0)
        }
    }

    unsafe fn move_into_fcinfo_fcx(self, _fcinfo: pg_sys::FunctionCallInfo) {}

    unsafe fn fill_fcinfo_fcx(&self, _fcinfo: pg_sys::FunctionCallInfo) {}
}
