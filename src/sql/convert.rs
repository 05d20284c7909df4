//! `snowid_convert_column(tbl, col, shard)`: turns an existing key column (an identity, or a
//! `bigint` with a sequence default, as `bigserial` makes) into one keyed by
//! `DEFAULT snowid_next(shard)`, in place and in one transaction:
//! - the caller must own the table (or be a superuser), as for `ALTER TABLE`;
//! - it takes an ACCESS EXCLUSIVE lock first: inserts wait, then see the new default;
//! - an `int` column is refused (42804) with the `ALTER ... TYPE bigint` that would rewrite the
//!   table; another default than a sequence's is refused (55000); a column already keyed by
//!   snowid is left as it is, with a NOTICE;
//! - every existing value must be below the first ID it issues, or nothing changes (55000);
//! - an identity is dropped with its sequence; a sequence default is replaced and the sequence
//!   kept (other code may still call it); the result and a NOTICE say which.
//!
//! PL/pgSQL with a fixed `search_path`, every identifier quoted with `format('%I')` or through
//! `regclass`, and SECURITY INVOKER: it can do nothing its caller could not.

use pgrx::prelude::*;

extension_sql!(
    r#"
CREATE FUNCTION snowid_convert_column(tbl regclass, col name, shard int,
    OUT old_default text, OUT old_sequence text, OUT sequence_fate text, OUT first_id bigint)
RETURNS record
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    att pg_catalog.pg_attribute;
    owner oid;
    sequence_oid oid;
    highest bigint;
BEGIN
    SELECT c.relowner INTO owner FROM pg_class c WHERE c.oid = tbl AND c.relkind IN ('r', 'p');
    IF NOT FOUND THEN
        RAISE EXCEPTION '"%" is not a table', tbl
            USING ERRCODE = 'wrong_object_type';
    END IF;
    IF NOT pg_has_role(current_user, owner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', tbl
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'snowid_convert_column alters the table: run it as its owner or a superuser.';
    END IF;
    -- Inserts wait from here until the transaction ends, and then see the new default.
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl);

    SELECT * INTO att FROM pg_attribute a
    WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of relation % does not exist', col, tbl
            USING ERRCODE = 'undefined_column';
    END IF;
    IF att.atttypid IN ('int4'::regtype, 'int2'::regtype) THEN
        RAISE EXCEPTION 'column "%" of % is of type %, not bigint', col, tbl, format_type(att.atttypid, NULL)
            USING ERRCODE = 'datatype_mismatch',
                  DETAIL = 'snowid IDs need 64 bits.',
                  HINT = format('Change its type first, which rewrites the table under an ACCESS EXCLUSIVE lock (and any column that references it): ALTER TABLE %s ALTER COLUMN %I TYPE bigint;', tbl, col);
    ELSIF att.atttypid <> 'int8'::regtype THEN
        RAISE EXCEPTION 'column "%" of % is of type %, not bigint', col, tbl, format_type(att.atttypid, NULL)
            USING ERRCODE = 'datatype_mismatch';
    END IF;

    old_default := pg_get_expr(
        (SELECT d.adbin FROM pg_attrdef d WHERE d.adrelid = tbl AND d.adnum = att.attnum), tbl);
    -- A column already keyed by snowid: nothing to do.
    IF EXISTS (
        SELECT FROM pg_attrdef d
        JOIN pg_depend dep ON dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
         AND dep.refclassid = 'pg_proc'::regclass
        JOIN pg_proc p ON p.oid = dep.refobjid AND p.proname = 'snowid_next'
        JOIN pg_depend ext ON ext.classid = 'pg_proc'::regclass AND ext.objid = p.oid
         AND ext.refclassid = 'pg_extension'::regclass AND ext.deptype = 'e'
        JOIN pg_extension e ON e.oid = ext.refobjid AND e.extname = 'snowid'
        WHERE d.adrelid = tbl AND d.adnum = att.attnum
    ) THEN
        RAISE NOTICE 'column "%" of % already takes its values from snowid (%): left as it is', col, tbl, old_default;
        sequence_fate := 'unchanged: the column was already keyed by snowid';
        RETURN;
    END IF;

    -- The sequence behind an identity, or behind a default (owned by the column or not).
    sequence_oid := pg_get_serial_sequence(tbl::text, col)::regclass;
    IF sequence_oid IS NULL THEN
        SELECT dep.refobjid INTO sequence_oid
        FROM pg_attrdef d
        JOIN pg_depend dep ON dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
         AND dep.refclassid = 'pg_class'::regclass
        JOIN pg_class s ON s.oid = dep.refobjid AND s.relkind = 'S'
        WHERE d.adrelid = tbl AND d.adnum = att.attnum
        LIMIT 1;
    END IF;
    IF old_default IS NOT NULL AND sequence_oid IS NULL THEN
        RAISE EXCEPTION 'column "%" of % has a default that is not a sequence''s: %', col, tbl, old_default
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'snowid_convert_column replaces an identity or a sequence default, and leaves other defaults to their owners.',
                  HINT = format('If the column should be keyed by snowid, drop the default first: ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT;', tbl, col);
    END IF;
    old_sequence := sequence_oid::regclass::text;

    -- Every existing value must lie below the first ID snowid issues for the column.
    first_id := @extschema@.snowid_next(shard);
    EXECUTE format('SELECT max(%I) FROM %s', col, tbl) INTO highest;
    IF highest >= first_id THEN
        RAISE EXCEPTION 'column "%" of % holds values at or above the IDs snowid would issue', col, tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('Its highest value is %s; snowid''s next ID for shard %s is %s. New keys could collide with existing ones. Nothing was changed.', highest, shard, first_id),
                  HINT = 'If those values are snowid IDs issued under another server or epoch, a superuser can move every later ID above them with SELECT snowid_resume_above(<the highest value>); and then convert the column.';
    END IF;

    IF att.attidentity <> '' THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP IDENTITY', tbl, col);
        sequence_fate := 'dropped with the identity';
    ELSIF sequence_oid IS NOT NULL THEN
        sequence_fate := 'kept: no longer the column''s default; DROP SEQUENCE it once nothing else uses it';
    ELSE
        sequence_fate := 'none: the column had no default';
    END IF;
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s(%s)',
                   tbl, col, '@extschema@.snowid_next', shard);
    RAISE NOTICE 'column "%" of % now takes its values from snowid_next(%); its sequence %: %',
        col, tbl, shard, coalesce(old_sequence, '(none)'), sequence_fate;
END
$$;

COMMENT ON FUNCTION snowid_convert_column(regclass, name, int) IS
    'Turns a bigint column keyed by an identity or a sequence default into one keyed by DEFAULT snowid_next(shard), under an ACCESS EXCLUSIVE lock, after checking that every existing value is below the first ID it will issue; says what became of the sequence.';
"#,
    name = "snowid_convert_column",
    requires = ["snowid_next"]
);
