//! `snowid_fill_id(id_column, key_column)`: a BEFORE INSERT trigger that gives each row an ID on
//! the shard of its own key, which a column `DEFAULT` cannot do (a default cannot read the row).
//!
//! ```sql
//! CREATE TRIGGER photos_id BEFORE INSERT ON photos
//!     FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('id', 'user_id');
//! ```
//!
//! A row whose ID column is already set keeps it. The key may be `bigint`, `int`, `smallint`,
//! `text`, `varchar` or `uuid`, and picks the shard `snowid_shard_for(key)`; a text key hashes
//! its UTF-8 bytes whatever the database's encoding ([`text_key`]).
//!
//! Written against PostgreSQL's trigger data directly, under the symbol earlier versions'
//! scripts name: so that a direct call is refused with 39P01 before anything reads the trigger
//! data, and column names and keys are taken as bytes in the database's encoding, never
//! required to be UTF-8.

use super::generate::next_id;
use super::text_key;
use crate::errors;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::shard_hash;
use std::ffi::{c_char, CStr};
use std::num::NonZeroUsize;

extension_sql!(
    r#"
CREATE FUNCTION "snowid_fill_id"() RETURNS trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_fill_id_wrapper';

COMMENT ON FUNCTION snowid_fill_id() IS
    'BEFORE INSERT row trigger: snowid_fill_id(''id'', ''user_id'') sets a null id to snowid_next(snowid_shard_for(user_id)); an id the statement supplied is kept.';
"#,
    name = "snowid_fill_id"
);

v1_function_info!(pg_finfo_snowid_fill_id_wrapper);

/// The trigger function.
///
/// # Safety
///
/// Called by PostgreSQL's function manager; `fcinfo->context` is checked before it is used.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_fill_id_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is valid for the call; the context, when it is a TriggerData node, is
    // the trigger manager's, valid for the call too.
    unsafe {
        let context = (*fcinfo).context;
        if context.is_null() || (*context).type_ != pg_sys::NodeTag::T_TriggerData {
            errors::trigger_misuse("it was called directly, not by the trigger manager");
        }
        fill_id(&*context.cast::<pg_sys::TriggerData>())
    }
}

/// The row to insert, with its ID filled in unless the statement supplied one.
///
/// # Safety
///
/// `data` is the trigger manager's, for this call.
unsafe fn fill_id(data: &pg_sys::TriggerData) -> pg_sys::Datum {
    const TIMING: u32 = pg_sys::TRIGGER_EVENT_TIMINGMASK;
    let event = data.tg_event;
    let fired_right = event & pg_sys::TRIGGER_EVENT_ROW != 0
        && event & TIMING == pg_sys::TRIGGER_EVENT_BEFORE
        && event & pg_sys::TRIGGER_EVENT_OPMASK == pg_sys::TRIGGER_EVENT_INSERT;
    if !fired_right {
        errors::trigger_misuse("it was fired otherwise");
    }
    // SAFETY: for a row-level INSERT trigger, the trigger, the relation and the new tuple are
    // set; the arguments are `tgnargs` NUL-terminated strings.
    unsafe {
        let trigger = &*data.tg_trigger;
        let args: &[*mut c_char] = if trigger.tgnargs > 0 {
            std::slice::from_raw_parts(trigger.tgargs, trigger.tgnargs as usize)
        } else {
            &[]
        };
        let [id_column, key_column] = args else {
            errors::trigger_arguments(args.len())
        };
        let relation = data.tg_relation;
        let descriptor = (*relation).rd_att;
        let tuple = data.tg_trigtuple;
        let table = display(CStr::from_ptr((*(*relation).rd_rel).relname.data.as_ptr()));

        let (id_number, id_type) = column(descriptor, *id_column, &table);
        if id_type != pg_sys::INT8OID {
            errors::trigger_column_type(
                &display(CStr::from_ptr(*id_column)),
                &type_name(id_type),
                "bigint",
            );
        }
        if pgrx::htup::heap_getattr_raw(tuple, id_number, descriptor).is_some() {
            return pg_sys::Datum::from(tuple);
        }
        let (key_number, key_type) = column(descriptor, *key_column, &table);
        let Some(key) = pgrx::htup::heap_getattr_raw(tuple, key_number, descriptor) else {
            errors::trigger_null_key(&display(CStr::from_ptr(*key_column)))
        };
        let shard = match key_type {
            pg_sys::INT2OID => shard_hash::shard_for_i64(i64::from(key.value() as i16)),
            pg_sys::INT4OID => shard_hash::shard_for_i64(i64::from(key.value() as i32)),
            pg_sys::INT8OID => shard_hash::shard_for_i64(key.value() as i64),
            pg_sys::TEXTOID | pg_sys::VARCHAROID => {
                text_key::with_utf8(key, shard_hash::shard_for_bytes)
            }
            pg_sys::UUIDOID => {
                let bytes = &*key.cast_mut_ptr::<[u8; 16]>();
                shard_hash::shard_for_uuid(bytes)
            }
            other => errors::trigger_column_type(
                &display(CStr::from_ptr(*key_column)),
                &type_name(other),
                "bigint, integer, smallint, text, varchar or uuid",
            ),
        };
        let mut value = pg_sys::Datum::from(next_id(i64::from(shard)));
        let mut is_null = false;
        let mut number = id_number.get() as i32;
        // The arrays are only read: 19 declares them `const`, earlier majors do not, and a
        // mutable raw pointer fits both.
        let filled = pg_sys::heap_modify_tuple_by_cols(
            tuple,
            descriptor,
            1,
            &raw mut number,
            &raw mut value,
            &raw mut is_null,
        );
        pg_sys::Datum::from(filled)
    }
}

/// A column's number and type, by its name as the trigger's argument gives it (in the
/// database's encoding); 42703 if there is none.
///
/// # Safety
///
/// `descriptor` is the relation's, `name` a NUL-terminated string.
unsafe fn column(
    descriptor: pg_sys::TupleDesc,
    name: *const c_char,
    table: &str,
) -> (NonZeroUsize, pg_sys::Oid) {
    // SAFETY: SPI_fnumber and SPI_gettypeid only read the descriptor (no SPI connection needed).
    unsafe {
        let number = pg_sys::SPI_fnumber(descriptor, name);
        match usize::try_from(number).ok().and_then(NonZeroUsize::new) {
            Some(positive) => (positive, pg_sys::SPI_gettypeid(descriptor, number)),
            // Not found, or a system column (negative), which a trigger cannot fill.
            None => errors::trigger_column_missing(&display(CStr::from_ptr(name)), table),
        }
    }
}

/// A name for an error message.
fn display(name: &CStr) -> String {
    name.to_string_lossy().into_owned()
}

fn type_name(oid: pg_sys::Oid) -> String {
    // SAFETY: format_type_be returns a palloc'd NUL-terminated name for any type OID.
    unsafe { CStr::from_ptr(pg_sys::format_type_be(oid)) }
        .to_string_lossy()
        .into_owned()
}
