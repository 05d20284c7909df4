//! `snowid_convert_column(tbl, col, shard)`: turns an existing key column (an identity, or a
//! `bigint` with a sequence default, as `bigserial` makes) into one keyed by
//! `DEFAULT snowid_next(shard)`, in place and in one transaction:
//! - the caller must own the table (or be a member of its owner, or a superuser), as for
//!   `ALTER TABLE`;
//! - it takes an ACCESS EXCLUSIVE lock on the table and every table below it first: inserts
//!   wait, then see the new default;
//! - an `int` column is refused (42804) with the `ALTER ... TYPE bigint` that would rewrite the
//!   table; another default than a sequence's is refused (55000); a column already keyed by
//!   snowid is left as it is, with a NOTICE;
//! - every existing value, in the table and every table below it, must be below the first ID it
//!   issues, or nothing changes (55000); a table below it whose rows snowid cannot read (a
//!   foreign table, another session's temporary table) is refused by name (55000);
//! - an identity is dropped with its sequence; a sequence default is replaced and the sequence
//!   kept (other code may still call it); the result and a NOTICE say which.
//!
//! Everything after the ownership check runs as PostgreSQL's maintenance commands run on a
//! table: as the table's owner, in a security-restricted operation, with `search_path` set to
//! `pg_catalog, pg_temp`, every name in its SQL schema-qualified, and the values read through
//! the table's access method (and a plain B-tree index on the column), in a snapshot taken after
//! the lock ([`crate::server::databases::key_reads`]): so a superuser converting a database
//! owner's table runs nothing of hers with more rights than hers (0.7.0 read `max(col)` with a
//! query, as the caller: planning it folded her functions in an index expression or predicate,
//! a statistics object or a child's CHECK, and ran them as the superuser).

use super::generate::next_id;
use crate::errors;
use crate::server::databases::key_reads::{key_index_join, AsOwner, KeyType, Member};
use crate::server::databases::safe_search_path::SafeSearchPath;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::{c_char, CStr, CString};

extension_sql!(
    r#"
CREATE FUNCTION snowid_convert_column(tbl regclass, col name, shard int,
    OUT old_default text, OUT old_sequence text, OUT sequence_fate text, OUT first_id bigint)
RETURNS record
VOLATILE STRICT
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_convert_column_wrapper';

COMMENT ON FUNCTION snowid_convert_column(regclass, name, int) IS
    'Turns a bigint column keyed by an identity or a sequence default into one keyed by DEFAULT snowid_next(shard), under an ACCESS EXCLUSIVE lock, after checking that every existing value is below the first ID it will issue; says what became of the sequence. Runs as the table''s owner.';
"#,
    name = "snowid_convert_column",
    requires = ["snowid_next"]
);

v1_function_info!(pg_finfo_snowid_convert_column_wrapper);

/// `snowid_convert_column(tbl regclass, col name, shard int)`.
///
/// # Safety
///
/// Called by PostgreSQL's function manager with three non-null arguments (`regclass`, `name`,
/// `int`) and a composite result of four columns.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_convert_column_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the function is STRICT with these three arguments; a `name` is a NameData, whose
    // bytes are NUL-terminated; the function's own OID is in its flinfo.
    let (table, column, shard, schema) = unsafe {
        let args = (*fcinfo).args.as_slice(3);
        let table = pg_sys::Oid::from(args[0].value.value() as u32);
        let column = CStr::from_ptr(args[1].value.cast_mut_ptr::<c_char>()).to_owned();
        let shard = args[2].value.value() as i32;
        let namespace = pg_sys::get_func_namespace((*(*fcinfo).flinfo).fn_oid);
        let schema = CStr::from_ptr(pg_sys::get_namespace_name(namespace)).to_owned();
        (table, column, shard, schema)
    };
    let converted = convert(table, &column, shard, &schema);
    // SAFETY: fcinfo is this call's; the result is the record its OUT parameters describe.
    unsafe { converted.into_record(fcinfo) }
}

/// What a conversion did: the function's OUT parameters.
struct Converted {
    old_default: Option<String>,
    old_sequence: Option<String>,
    sequence_fate: String,
    first_id: Option<i64>,
}

/// The key column, as the catalogs describe it.
struct Key {
    attnum: i16,
    type_oid: pg_sys::Oid,
    identity: bool,
    /// Its default, deparsed, and whether it already calls snowid's `snowid_next`.
    default: Option<String>,
    keyed: bool,
    /// The sequence behind its identity or its default, and its name.
    sequence: Option<String>,
}

fn convert(table: pg_sys::Oid, column: &CStr, shard: i32, schema: &CStr) -> Converted {
    // Checked before the lock, so that a call cannot queue behind (and hold up) a lock on a
    // table the caller may not alter; and again after it, in case it was dropped or changed
    // hands meanwhile.
    owner_of(table);
    lock_with_every_table_below(table);
    let owner = owner_of(table);
    let name = relation_name(table);
    let col = display(column);
    let key = {
        let _owner = AsOwner::enter(owner);
        key_column(table, column).unwrap_or_else(|| errors::convert_no_column(&col, &name))
    };
    match key.type_oid {
        pg_sys::INT8OID => {}
        pg_sys::INT4OID | pg_sys::INT2OID => errors::convert_not_bigint(
            &col,
            &name,
            &type_name(key.type_oid),
            Some(&display(&alter(table, column, c"TYPE bigint"))),
        ),
        other => errors::convert_not_bigint(&col, &name, &type_name(other), None),
    }
    if key.keyed {
        let default = key.default.unwrap_or_default();
        notice!(
            "column \"{col}\" of {name} already takes its values from snowid ({default}): \
             left as it is"
        );
        return Converted {
            old_default: Some(default),
            old_sequence: None,
            sequence_fate: "unchanged: the column was already keyed by snowid".into(),
            first_id: None,
        };
    }
    if let (Some(default), None) = (&key.default, &key.sequence) {
        let drop = display(&alter(table, column, c"DROP DEFAULT"));
        errors::convert_other_default(&col, &name, default, &drop);
    }

    // Every existing value must lie below the first ID snowid issues for the column.
    let first_id = next_id(i64::from(shard));
    let _owner = AsOwner::enter(owner);
    if let Some(highest) = highest_value(table, &key, &col, &name) {
        if highest >= first_id {
            errors::convert_values_above(&col, &name, highest, shard, first_id);
        }
    }

    let sequence_fate = if key.identity {
        execute(&alter(table, column, c"DROP IDENTITY"));
        "dropped with the identity"
    } else if key.sequence.is_some() {
        "kept: no longer the column's default; DROP SEQUENCE it once nothing else uses it"
    } else {
        "none: the column had no default"
    };
    let mut default = b"SET DEFAULT ".to_vec();
    default.extend_from_slice(quote(schema).to_bytes());
    default.extend_from_slice(format!(".snowid_next({shard})").as_bytes());
    let default = CString::new(default).unwrap_or_default();
    execute(&alter(table, column, &default));
    notice!(
        "column \"{col}\" of {name} now takes its values from snowid_next({shard}); \
         its sequence {}: {sequence_fate}",
        key.sequence.as_deref().unwrap_or("(none)")
    );
    Converted {
        old_default: key.default,
        old_sequence: key.sequence,
        sequence_fate: sequence_fate.into(),
        first_id: Some(first_id),
    }
}

/// The owner of a table the caller may alter: 42809 for a relation that is not an ordinary or
/// partitioned table (or no longer exists), 42501 for a caller who is not a member of its owner.
fn owner_of(table: pg_sys::Oid) -> pg_sys::Oid {
    let _path = SafeSearchPath::set();
    let found = Spi::connect(|client| {
        let row = client
            .select(
                "SELECT c.relowner FROM pg_catalog.pg_class c
                 WHERE c.oid OPERATOR(pg_catalog.=) $1 AND c.relkind IN ('r', 'p')",
                Some(1),
                &[table.into()],
            )?
            .next();
        match row {
            Some(row) => row.get::<pg_sys::Oid>(1),
            None => Ok(None),
        }
    })
    .unwrap_or_else(|e| errors::catalog_read_failed(&e));
    let Some(owner) = found else {
        errors::convert_not_a_table(&relation_name(table))
    };
    // SAFETY: a catalog lookup of role membership, as pg_has_role(..., 'USAGE') makes it.
    if !unsafe { pg_sys::has_privs_of_role(pg_sys::GetUserId(), owner) } {
        errors::convert_not_owner(&relation_name(table));
    }
    owner
}

/// An ACCESS EXCLUSIVE lock on the table and every table below it, as `LOCK TABLE` takes it.
fn lock_with_every_table_below(table: pg_sys::Oid) {
    let mode = pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE;
    // SAFETY: locks by OID; find_all_inheritors locks each table below it as it finds it and
    // leaves out one dropped meanwhile.
    unsafe {
        pg_sys::LockRelationOid(table, mode);
        pg_sys::find_all_inheritors(table, mode, std::ptr::null_mut());
    }
}

/// The key column, or `None` if the table has no such column.
fn key_column(table: pg_sys::Oid, column: &CStr) -> Option<Key> {
    // SAFETY: a syscache lookup by OID and a NUL-terminated name; 0 (none, or dropped) and the
    // negative numbers of system columns are not user columns.
    let attnum = unsafe { pg_sys::get_attnum(table, column.as_ptr()) };
    if attnum <= 0 {
        return None;
    }
    Spi::connect(|client| {
        let row = client
            .select(KEY_COLUMN, Some(1), &[table.into(), attnum.into()])?
            .next();
        let Some(row) = row else {
            return Ok::<_, pgrx::spi::Error>(None);
        };
        Ok(Some(Key {
            attnum,
            type_oid: row.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid),
            identity: row.get::<bool>(2)?.unwrap_or(false),
            default: row.get::<String>(3)?,
            keyed: row.get::<bool>(4)?.unwrap_or(false),
            sequence: row.get::<String>(5)?,
        }))
    })
    .unwrap_or_else(|e| errors::catalog_read_failed(&e))
}

/// A key column ($1, $2): its type, whether it is an identity, its default deparsed, whether
/// that calls the `snowid_next` of the extension snowid, and the sequence behind the identity or
/// the default (one the column owns, or else one the default names).
const KEY_COLUMN: &str = r#"
SELECT a.atttypid,
       a.attidentity OPERATOR(pg_catalog.<>) '',
       pg_catalog.pg_get_expr(d.adbin, d.adrelid),
       EXISTS (
           SELECT FROM pg_catalog.pg_depend dep
           JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) dep.refobjid
            AND p.proname OPERATOR(pg_catalog.=) 'snowid_next'
           JOIN pg_catalog.pg_depend ext
             ON ext.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
            AND ext.objid OPERATOR(pg_catalog.=) p.oid
            AND ext.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
            AND ext.deptype OPERATOR(pg_catalog.=) 'e'
           JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) ext.refobjid
            AND e.extname OPERATOR(pg_catalog.=) 'snowid'
           WHERE dep.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_attrdef'::pg_catalog.regclass
             AND dep.objid OPERATOR(pg_catalog.=) d.oid
             AND dep.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
       ),
       (SELECT s.oid::pg_catalog.regclass::pg_catalog.text
        FROM pg_catalog.pg_depend dep
        JOIN pg_catalog.pg_class s ON s.oid OPERATOR(pg_catalog.=) dep.objid
         AND s.relkind OPERATOR(pg_catalog.=) 'S'
        WHERE dep.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
          AND dep.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
          AND dep.refobjid OPERATOR(pg_catalog.=) a.attrelid
          AND dep.refobjsubid OPERATOR(pg_catalog.=) a.attnum
          AND dep.deptype IN ('a', 'i')
        UNION ALL
        SELECT s.oid::pg_catalog.regclass::pg_catalog.text
        FROM pg_catalog.pg_depend dep
        JOIN pg_catalog.pg_class s ON s.oid OPERATOR(pg_catalog.=) dep.refobjid
         AND s.relkind OPERATOR(pg_catalog.=) 'S'
        WHERE dep.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_attrdef'::pg_catalog.regclass
          AND dep.objid OPERATOR(pg_catalog.=) d.oid
          AND dep.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
        LIMIT 1)
FROM pg_catalog.pg_attribute a
LEFT JOIN pg_catalog.pg_attrdef d
  ON d.adrelid OPERATOR(pg_catalog.=) a.attrelid AND d.adnum OPERATOR(pg_catalog.=) a.attnum
WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attnum OPERATOR(pg_catalog.=) $2
  AND NOT a.attisdropped
"#;

/// The highest value of the key column that is an ID, in the table and every table below it,
/// each read as its owner through its access method, in a snapshot taken now (after the lock):
/// a concurrent insert the lock waited for is seen.
fn highest_value(table: pg_sys::Oid, key: &Key, col: &str, name: &str) -> Option<i64> {
    // Each member, and whether it is another session's temporary table, whose rows no other
    // session can read.
    let members = Spi::connect(|client| {
        client
            .select(MEMBERS, None, &[table.into(), key.attnum.into()])?
            .map(|row| {
                Ok((
                    Member::from_row(&row, 1)?,
                    row.get::<bool>(8)?.unwrap_or(false),
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| errors::catalog_read_failed(&e));
    // SAFETY: a snapshot taken now, pushed for the reads below and popped after them.
    unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot()) };
    let mut highest = None;
    for (member, others_temporary) in members {
        let read = match others_temporary {
            true => Err(format!(
                "{} below it is another session's temporary table",
                member.table
            )),
            false => member.read(KeyType::Int8),
        };
        match read {
            Ok(found) => highest = highest.max(found.and_then(|f| f.max_id)),
            Err(unread) => errors::convert_unreadable(col, name, &unread),
        }
    }
    // SAFETY: pops the snapshot pushed above.
    unsafe { pg_sys::PopActiveSnapshot() };
    highest
}

/// The table ($1) and every table below it, each as a [`Member`] of the key column (number $2 of
/// the table), and whether it is another session's temporary table.
const MEMBERS: &str = concat!(
    r#"
WITH RECURSIVE tree(relid) AS (
    SELECT $1::pg_catalog.oid
    UNION
    SELECT i.inhrelid FROM pg_catalog.pg_inherits i
    JOIN tree ON i.inhparent OPERATOR(pg_catalog.=) tree.relid
)
SELECT c.oid,
       pg_catalog.format('%I.%I', n.nspname, c.relname),
       c.relkind::pg_catalog.text,
       c.relowner,
       a.attnum,
       ix.indexrelid,
       ix.descending,
       c.relpersistence OPERATOR(pg_catalog.=) 't'
           AND c.relnamespace OPERATOR(pg_catalog.<>) pg_catalog.pg_my_temp_schema()
FROM tree
JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) tree.relid
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
LEFT JOIN pg_catalog.pg_attribute a
  ON a.attrelid OPERATOR(pg_catalog.=) c.oid
 AND a.attname OPERATOR(pg_catalog.=) (
        SELECT k.attname FROM pg_catalog.pg_attribute k
        WHERE k.attrelid OPERATOR(pg_catalog.=) $1 AND k.attnum OPERATOR(pg_catalog.=) $2)
 AND NOT a.attisdropped
"#,
    key_index_join!(),
    r#"
ORDER BY 2
"#
);

/// `ALTER TABLE <table> ALTER COLUMN <column> <action>;`, every name quoted and qualified, in
/// the database's encoding.
fn alter(table: pg_sys::Oid, column: &CStr, action: &CStr) -> CString {
    // SAFETY: catalog lookups of a table that exists (it is locked).
    let (schema, relation) = unsafe {
        let schema = CStr::from_ptr(pg_sys::get_namespace_name(pg_sys::get_rel_namespace(table)));
        let relation = CStr::from_ptr(pg_sys::get_rel_name(table));
        (schema.to_owned(), relation.to_owned())
    };
    let mut statement = b"ALTER TABLE ".to_vec();
    for (part, text) in [
        (&*quote(&schema), &b"."[..]),
        (&*quote(&relation), b" ALTER COLUMN "),
        (&*quote(column), b" "),
        (action, b";"),
    ] {
        statement.extend_from_slice(part.to_bytes());
        statement.extend_from_slice(text);
    }
    CString::new(statement).unwrap_or_default()
}

/// Runs a utility statement snowid wrote, as the current user.
fn execute(statement: &CStr) {
    Spi::connect(|_| {
        // SAFETY: inside the connection Spi::connect made; an error raised inside propagates.
        let status = unsafe { pg_sys::SPI_execute(statement.as_ptr(), false, 0) };
        if status < 0 {
            errors::catalog_read_failed(&format!("SPI_execute returned {status}"));
        }
    });
}

/// A relation's name as `regclass` prints it with `search_path` set to `pg_catalog, pg_temp`:
/// qualified unless that finds it, and quoted where needed; its number if it was dropped.
fn relation_name(table: pg_sys::Oid) -> String {
    let _path = SafeSearchPath::set();
    // SAFETY: catalog lookups by OID; get_rel_name returns NULL for a relation that is gone.
    unsafe {
        let relation = pg_sys::get_rel_name(table);
        if relation.is_null() {
            return table.to_u32().to_string();
        }
        let name = if pg_sys::RelationIsVisible(table) {
            pg_sys::quote_identifier(relation)
        } else {
            let schema = pg_sys::get_namespace_name(pg_sys::get_rel_namespace(table));
            pg_sys::quote_qualified_identifier(schema, relation)
        };
        display(CStr::from_ptr(name))
    }
}

fn type_name(oid: pg_sys::Oid) -> String {
    // SAFETY: format_type_be returns a palloc'd NUL-terminated name for any type OID.
    display(unsafe { CStr::from_ptr(pg_sys::format_type_be(oid)) })
}

/// An identifier quoted as PostgreSQL would, when it needs quoting, in the database's encoding.
fn quote(identifier: &CStr) -> CString {
    // SAFETY: quote_identifier reads a NUL-terminated string and returns it or a palloc'd copy.
    unsafe { CStr::from_ptr(pg_sys::quote_identifier(identifier.as_ptr())) }.to_owned()
}

/// A name for a message.
fn display(name: &CStr) -> String {
    name.to_string_lossy().into_owned()
}

impl Converted {
    /// The result row.
    ///
    /// # Safety
    ///
    /// `fcinfo` is the call's, whose result type is the record of the OUT parameters.
    unsafe fn into_record(self, fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
        // SAFETY: guaranteed by the caller; the four values match the four OUT parameters.
        unsafe {
            let mut descriptor: pg_sys::TupleDesc = std::ptr::null_mut();
            let kind = pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut descriptor);
            if kind != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE {
                errors::catalog_read_failed(&"snowid_convert_column's result is not a record");
            }
            let descriptor = pg_sys::BlessTupleDesc(descriptor);
            let values = [
                self.old_default.into_datum(),
                self.old_sequence.into_datum(),
                Some(self.sequence_fate).into_datum(),
                self.first_id.into_datum(),
            ];
            let mut datums = values.map(|v| v.unwrap_or(pg_sys::Datum::from(0)));
            let mut nulls = values.map(|v| v.is_none());
            let tuple =
                pg_sys::heap_form_tuple(descriptor, datums.as_mut_ptr(), nulls.as_mut_ptr());
            pgrx::heap_tuple_get_datum(tuple)
        }
    }
}
