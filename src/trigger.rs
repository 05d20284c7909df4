//! `snowid_fill_id(id_column, key_column)`: a BEFORE INSERT trigger that gives each row an ID on
//! the shard of its own key, which a column `DEFAULT` cannot do (a default cannot read the row).
//!
//! ```sql
//! CREATE TRIGGER photos_id BEFORE INSERT ON photos
//!     FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('id', 'user_id');
//! ```
//!
//! A row whose ID column is already set keeps it. The key may be `bigint`, `int`, `smallint`,
//! `text`, `varchar` or `uuid`, and picks the shard `snowid_shard_for(key)`.

use crate::errors;
use crate::generate::next_id;
use pgrx::prelude::*;
use snowid_core::shard_hash;

#[pg_trigger]
fn snowid_fill_id<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, impl WhoAllocated>>, pgrx::datum::TryFromDatumError> {
    let fired_right = matches!(trigger.level(), PgTriggerLevel::Row)
        && matches!(trigger.when(), Ok(PgTriggerWhen::Before))
        && matches!(trigger.op(), Ok(PgTriggerOperation::Insert));
    if !fired_right {
        errors::trigger_misuse("it was fired otherwise");
    }
    let args = trigger.extra_args().unwrap_or_default();
    let [id_column, key_column] = args.as_slice() else {
        errors::trigger_arguments(args.len())
    };
    let table = trigger.table_name().unwrap_or_default();
    let Some(row) = trigger.new() else {
        errors::trigger_misuse("there is no new row")
    };
    let mut row = row.into_owned();

    let Some((_, id_attr)) = row.get_attribute_by_name(id_column) else {
        errors::trigger_column_missing(id_column, &table)
    };
    if id_attr.atttypid != pg_sys::INT8OID {
        errors::trigger_column_type(id_column, &type_name(id_attr.atttypid), "bigint");
    }
    if row.get_by_name::<i64>(id_column).ok().flatten().is_some() {
        return Ok(Some(row));
    }
    let Some((_, key_attr)) = row.get_attribute_by_name(key_column) else {
        errors::trigger_column_missing(key_column, &table)
    };
    let shard = match key_attr.atttypid {
        pg_sys::INT2OID => {
            value::<i16>(&row, key_column).map(|k| shard_hash::shard_for_i64(k.into()))
        }
        pg_sys::INT4OID => {
            value::<i32>(&row, key_column).map(|k| shard_hash::shard_for_i64(k.into()))
        }
        pg_sys::INT8OID => value::<i64>(&row, key_column).map(shard_hash::shard_for_i64),
        pg_sys::TEXTOID | pg_sys::VARCHAROID => {
            value::<String>(&row, key_column).map(|k| shard_hash::shard_for_bytes(k.as_bytes()))
        }
        pg_sys::UUIDOID => {
            value::<pgrx::Uuid>(&row, key_column).map(|k| shard_hash::shard_for_uuid(k.as_bytes()))
        }
        other => errors::trigger_column_type(
            key_column,
            &type_name(other),
            "bigint, integer, smallint, text, varchar or uuid",
        ),
    };
    let Some(shard) = shard else {
        errors::trigger_null_key(key_column)
    };
    row.set_by_name(id_column, next_id(i64::from(shard)))?;
    Ok(Some(row))
}

/// A column's value; `None` when it is null.
fn value<'r, T>(row: &'r PgHeapTuple<'_, AllocatedByRust>, column: &str) -> Option<T>
where
    T: FromDatum + IntoDatum + pgrx::datum::UnboxDatum<As<'r> = T> + 'r,
{
    row.get_by_name::<T>(column).ok().flatten()
}

fn type_name(oid: pg_sys::Oid) -> String {
    // SAFETY: format_type_be returns a palloc'd NUL-terminated name for any type OID.
    unsafe { std::ffi::CStr::from_ptr(pg_sys::format_type_be(oid)) }
        .to_string_lossy()
        .into_owned()
}

extension_sql!(
    r#"
COMMENT ON FUNCTION snowid_fill_id() IS
    'BEFORE INSERT row trigger: snowid_fill_id(''id'', ''user_id'') sets a null id to snowid_next(snowid_shard_for(user_id)); an id the statement supplied is kept.';
"#,
    name = "fill_id_comment",
    requires = [snowid_fill_id]
);
