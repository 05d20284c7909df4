-- The shapes of snowid_info() and snowid_stats(): their columns are part of the contract.
SET timezone = 'UTC';

SELECT u.name AS column, pg_catalog.format_type(u.typ, NULL) AS type
FROM pg_proc, unnest(proargnames, proallargtypes) AS u(name, typ)
WHERE oid = 'snowid_info()'::regprocedure;
SELECT u.name AS column, pg_catalog.format_type(u.typ, NULL) AS type
FROM pg_proc, unnest(proargnames, proallargtypes) AS u(name, typ)
WHERE oid = 'snowid_stats()'::regprocedure;

-- The fixed part of snowid_info(), readable without \x.
SELECT epoch, layout, ids_per_ms, exhausted_at, shards, max_lead, generating FROM snowid_info();
-- The moving part: the time base is now, the clock is not behind it, and the high-water mark
-- covers every ID issued so far.
SELECT abs(extract(epoch FROM time_base - clock_timestamp())) < 5 AS time_base_is_now,
       clock_behind < '1 second' AS clock_not_behind, clock_steps_back,
       high_water_mark > (SELECT max(snowid_timestamp(snowid_next(s))) FROM generate_series(0, 10) s) AS covers,
       lease_writes > 0 AS written
FROM snowid_info();

-- A row per shard used: its last ID, and what it says.
SELECT snowid_next(4242) AS issued \gset
SELECT shard, last_id = :issued AS last_id_is_the_one_issued, last_ts = snowid_timestamp(:issued) AS ts_agrees,
       last_seq = snowid_seq(:issued) AS seq_agrees, ids_issued, throttled_waits, released
FROM snowid_stats() WHERE shard = 4242;

-- Every function and the extension have a comment, and the control file agrees with it.
SELECT p.oid::regprocedure AS function_without_comment
FROM pg_proc p
JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowid'
WHERE obj_description(p.oid, 'pg_proc') IS NULL;
SELECT obj_description(e.oid, 'pg_extension') = a.comment AS comments_agree
FROM pg_extension e, pg_available_extensions a WHERE e.extname = 'snowid' AND a.name = 'snowid';
