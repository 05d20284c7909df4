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
