//! The operations that move IDs between servers and lift fences, for superusers only:
//! - `snowid_release(shard)` hands a shard off: durably, so the server's standbys, restores and
//!   promoted standbys refuse it too;
//! - `snowid_resume_above(id)` makes every later ID greater than one issued where this server's
//!   state could not know it (another server, a `pg_upgrade`), takes a released shard back, and
//!   lifts a fence;
//! - `snowid_resume_above_columns()` does that above the highest value of every column in the
//!   current database that snowid fills: the one statement a fenced cluster needs.

use super::decode;
use super::generate::{generating_state, generator, raise_refusal};
use crate::errors;
use crate::server::settings;
use pgrx::prelude::*;
use snowid_core::layout::{self, Shard};

/// Resumes above an ID issued elsewhere: a `pg_upgrade`, a logical copy, a shard handed over, a
/// fence.
#[pg_extern(volatile, strict)]
fn snowid_resume_above(id: i64) -> TimestampWithTimeZone {
    let Some(parts) = layout::decompose(id) else {
        errors::negative_id(id)
    };
    let state = generating_state("snowid_resume_above()");
    let shard = Shard::new(parts.shard).unwrap_or_else(|| errors::shard_out_of_range(parts.shard));
    let floor = generator(state)
        .resume_above(parts)
        .unwrap_or_else(|refused| raise_refusal(refused, shard));
    decode::timestamptz(floor).unwrap_or_else(|| errors::exhausted(settings::epoch_unix_ms()))
}

/// Releases a shard on this server, for handing it to another: from the moment this is called no
/// statement here issues another ID for it, and once it returns neither does any server that
/// replays this one's WAL. Returns the last ID issued for it.
#[pg_extern(volatile, strict)]
fn snowid_release(shard: i32) -> i64 {
    let Some(valid) = Shard::new(shard) else {
        errors::shard_out_of_range(shard)
    };
    let state = generating_state("snowid_release()");
    generator(state)
        .release(valid)
        .unwrap_or_else(|refused| raise_refusal(refused, valid))
}

extension_sql!(
    r#"
CREATE FUNCTION snowid_resume_above_columns(OUT tbl regclass, OUT col name, OUT max_id bigint)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    highest bigint;
    seen boolean := false;
BEGIN
    -- Every column of an ordinary table (a partition included) whose default calls snowid_next,
    -- or that a snowid_fill_id trigger fills (the trigger's first argument names it).
    FOR tbl, col IN
        WITH snowid_functions AS (
            SELECT p.oid, p.proname
            FROM pg_depend d
            JOIN pg_extension e ON e.oid = d.refobjid
            JOIN pg_proc p ON p.oid = d.objid
            WHERE d.classid = 'pg_proc'::regclass
              AND d.refclassid = 'pg_extension'::regclass
              AND d.deptype = 'e'
              AND e.extname = 'snowid'
        )
        SELECT c.oid::regclass, a.attname
        FROM pg_attrdef ad
        JOIN pg_depend dep ON dep.classid = 'pg_attrdef'::regclass AND dep.objid = ad.oid
        JOIN snowid_functions f ON f.oid = dep.refobjid AND f.proname = 'snowid_next'
        JOIN pg_class c ON c.oid = ad.adrelid AND c.relkind = 'r'
        JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
        WHERE dep.refclassid = 'pg_proc'::regclass AND NOT a.attisdropped
        UNION
        SELECT c.oid::regclass, a.attname
        FROM pg_trigger t
        JOIN snowid_functions f ON f.oid = t.tgfoid AND f.proname = 'snowid_fill_id'
        JOIN pg_class c ON c.oid = t.tgrelid AND c.relkind = 'r'
        JOIN pg_attribute a ON a.attrelid = t.tgrelid AND NOT a.attisdropped
         AND a.attname = convert_from(
                substring(t.tgargs FROM 1 FOR greatest(position('\x00'::bytea IN t.tgargs) - 1, 0)),
                getdatabaseencoding())::name
        ORDER BY 1, 2
    LOOP
        EXECUTE format('SELECT max(%I) FROM ONLY %s', col, tbl) INTO max_id;
        seen := true;
        highest := greatest(highest, max_id);
        RETURN NEXT;
    END LOOP;
    IF NOT seen THEN
        RAISE EXCEPTION 'no column of database "%" takes its values from snowid', current_database()
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'snowid_resume_above_columns() resumes above the highest value of every column whose default calls snowid_next or that a snowid_fill_id trigger fills.',
                  HINT = 'Run it in the database that has such columns, or resume by hand: SELECT snowid_resume_above(<the highest ID issued>);';
    END IF;
    PERFORM @extschema@.snowid_resume_above(coalesce(highest, 0));
END
$$;

REVOKE ALL ON FUNCTION snowid_resume_above(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION snowid_release(int) FROM PUBLIC;
REVOKE ALL ON FUNCTION snowid_resume_above_columns() FROM PUBLIC;
COMMENT ON FUNCTION snowid_resume_above(bigint) IS
    'Superuser: from now on every ID this server issues is above this ID and dated after its millisecond, durably; takes its shard back if it was released, and lifts a fence. For pg_upgrade, logical copies and shard hand-offs. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_release(int) IS
    'Superuser: stops this server, and every server that replays its WAL, issuing IDs for a shard, including in running statements, durably, and returns the last ID issued for it.';
COMMENT ON FUNCTION snowid_resume_above_columns() IS
    'Superuser: snowid_resume_above the highest value of every column in this database whose default calls snowid_next or that a snowid_fill_id trigger fills; lists them. The one statement a fenced cluster needs, run in each database with snowid keys.';
"#,
    name = "operations",
    requires = [snowid_resume_above, snowid_release]
);
