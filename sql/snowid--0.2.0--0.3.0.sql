\echo Use "ALTER EXTENSION snowid UPDATE TO '0.3.0'" to load this file. \quit

-- snowid 0.3.0. Why each change exists:
-- - snowid's durable state (lease, time-base floor, earliest epoch, released shards, fence) is
--   one structure, kept in pages that every change updates through the WAL, so that refusals,
--   releases and epochs survive restarts, failovers, restores and upgrades. A cluster that is
--   fenced (its state was stale or unreadable, or it was made by pg_upgrade) needs one statement
--   to resume above the IDs it issued: snowid_resume_above_columns() does that above every
--   column in the current database that snowid fills.
-- - snowid_release is durable and travels in WAL; snowid_resume_above takes a released shard
--   back and lifts a fence. Their comments say so.
-- - snowid_convert_column(tbl, col, shard) turns an identity or bigserial key column into one keyed
--   by snowid_next, in place.
-- - snowid_shard_for(text) hashes a key's UTF-8 bytes in every database encoding, and
--   snowid_fill_id takes text keys and column names in the database's encoding; both keep their
--   symbols, so nothing changes in the catalog for them.
-- New functions are created with CREATE FUNCTION, never OR REPLACE, so that an object a database
-- owner planted under one of these names makes the update fail instead of being adopted.

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

REVOKE ALL ON FUNCTION snowid_resume_above_columns() FROM PUBLIC;
COMMENT ON FUNCTION snowid_resume_above(bigint) IS
    'Superuser: from now on every ID this server issues is above this ID and dated after its millisecond, durably; takes its shard back if it was released, and lifts a fence. For pg_upgrade, logical copies and shard hand-offs. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_release(int) IS
    'Superuser: stops this server, and every server that replays its WAL, issuing IDs for a shard, including in running statements, durably, and returns the last ID issued for it.';
COMMENT ON FUNCTION snowid_resume_above_columns() IS
    'Superuser: snowid_resume_above the highest value of every column in this database whose default calls snowid_next or that a snowid_fill_id trigger fills; lists them. The one statement a fenced cluster needs, run in each database with snowid keys.';
COMMENT ON FUNCTION snowid_stats() IS
    'A row per shard used since the server started, or released: the last ID issued, its time and sequence number, IDs issued (by transactions that ended, and by this session), waits at the lead bound.';

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
