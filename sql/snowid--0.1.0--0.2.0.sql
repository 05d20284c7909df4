\echo Use "ALTER EXTENSION snowid UPDATE TO '0.2.0'" to load this file. \quit

-- snowid 0.2.0. Why each change exists:
-- - snowid_partition_ddl was a SQL function that called format, to_char, || and comparison
--   operators unqualified, without SET search_path: a database owner could plant her own
--   versions and have them run as a superuser who called it (a privilege escalation). It also
--   generated its series before checking its bounds, named partitions so that some collided,
--   and emitted DDL that failed on a rerun. It is now a C function that validates first, names
--   partitions uniquely, emits IF NOT EXISTS, and reads the catalogs with qualified names.
-- - snowid_next gains bigint and double precision forms (JDBC's setLong, user_id % 8192, untyped
--   parameters) and a no-argument form that picks one of the server's own shards, so one DEFAULT
--   serves every node of a cluster.
-- - snowid_shard_for derives a shard from a key; snowid_fill_id is a trigger that does so per row.
-- - snowid_text writes an ID as fixed-width text that sorts like the ID, for JSON.
-- - snowid_release and snowid_resume_above hand a shard from one server to another without a
--   duplicate, and resume above IDs the server's own high-water mark cannot know (pg_upgrade).
-- - snowid_info and snowid_stats read better: fewer, grouped columns; server-wide figures out of
--   the per-shard rows; the last ID per shard.
-- - Every function has a comment.
-- New functions are created with CREATE FUNCTION, never OR REPLACE, so that an object a database
-- owner planted under one of these names makes the update fail instead of being adopted.

-- Generation.
CREATE FUNCTION snowid_next(shard bigint) RETURNS bigint
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_next_int8';

CREATE FUNCTION snowid_next(shard double precision) RETURNS bigint
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_next_float8';

CREATE FUNCTION snowid_next() RETURNS bigint
VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_next_own';

COMMENT ON FUNCTION snowid_next(int) IS
    'The next ID for a shard (0 to 8191): greater than every ID issued for that shard before it.';
COMMENT ON FUNCTION snowid_next(bigint) IS
    'snowid_next for a bigint shard number, such as user_id % 8192 or a JDBC setLong parameter.';
COMMENT ON FUNCTION snowid_next(double precision) IS
    'snowid_next for any other numeric shard argument, including untyped parameters: it must hold a whole number from 0 to 8191.';
COMMENT ON FUNCTION snowid_next() IS
    'The next ID on one of this server''s own shards (snowid.shards), the same for every session of a backend: one DEFAULT for every node of a cluster.';

-- Moving shards between servers, and resuming above IDs from elsewhere.
CREATE FUNCTION snowid_resume_above(id bigint) RETURNS timestamp with time zone
STRICT VOLATILE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_resume_above_wrapper';

CREATE FUNCTION snowid_release(shard int) RETURNS bigint
STRICT VOLATILE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_release_wrapper';

REVOKE ALL ON FUNCTION snowid_resume_above(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION snowid_release(int) FROM PUBLIC;
COMMENT ON FUNCTION snowid_resume_above(bigint) IS
    'Superuser: from now on every ID this server issues is dated after this ID''s millisecond, durably; for pg_upgrade, logical copies and shard hand-offs. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_release(int) IS
    'Superuser: stops this server issuing IDs for a shard already removed from snowid.shards, including in running statements, and returns the last ID issued for it.';

-- A text form that sorts like the ID, for JSON.
CREATE FUNCTION snowid_text(id bigint) RETURNS text
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_text_wrapper';

COMMENT ON FUNCTION snowid_text(bigint) IS
    'An ID as 19 zero-padded decimal digits: text that sorts like the ID, for JSON and JavaScript. Cast it back with ::bigint.';

-- Shards from keys.
CREATE FUNCTION snowid_shard_for(key bigint) RETURNS int
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_shard_for_bigint_wrapper';

CREATE FUNCTION snowid_shard_for(key text) RETURNS int
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_shard_for_text_wrapper';

CREATE FUNCTION snowid_shard_for(key uuid) RETURNS int
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_shard_for_uuid_wrapper';

CREATE FUNCTION snowid_fill_id() RETURNS trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_fill_id_wrapper';

COMMENT ON FUNCTION snowid_shard_for(bigint) IS
    'The shard of a bigint key: FNV-1a 64 of its decimal text, modulo 8192. Never changes across versions.';
COMMENT ON FUNCTION snowid_shard_for(text) IS
    'The shard of a text key: FNV-1a 64 of its bytes, modulo 8192. Never changes across versions.';
COMMENT ON FUNCTION snowid_shard_for(uuid) IS
    'The shard of a uuid key: FNV-1a 64 of its lowercase hyphenated text, modulo 8192. Never changes across versions.';
COMMENT ON FUNCTION snowid_fill_id() IS
    'BEFORE INSERT row trigger: snowid_fill_id(''id'', ''user_id'') sets a null id to snowid_next(snowid_shard_for(user_id)); an id the statement supplied is kept.';

-- Partitions: the SQL function is replaced by a C function with one more argument.
DROP FUNCTION snowid_partition_ddl(regclass, timestamptz, timestamptz, interval);

CREATE FUNCTION snowid_partition_ddl(
    parent regclass,
    from_ts timestamp with time zone,
    to_ts timestamp with time zone,
    step interval DEFAULT '1 day',
    max_partitions int DEFAULT 1000
) RETURNS SETOF text
STRICT STABLE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_partition_ddl_wrapper';

COMMENT ON FUNCTION snowid_partition_ddl(regclass, timestamptz, timestamptz, interval, int) IS
    'CREATE TABLE IF NOT EXISTS statements for the range partitions of a table partitioned by its snowid column that do not exist yet, one per step from from_ts until to_ts, named after their lower bound in UTC; run them with \gexec.';

-- Running state: new shapes.
DROP FUNCTION snowid_info();
DROP FUNCTION snowid_stats();

CREATE FUNCTION snowid_info() RETURNS TABLE (
    epoch timestamp with time zone,
    layout text,
    ids_per_ms int,
    exhausted_at timestamp with time zone,
    shards text,
    max_lead interval,
    generating text,
    time_base timestamp with time zone,
    clock_behind interval,
    clock_steps_back bigint,
    high_water_mark timestamp with time zone,
    lease_writes bigint
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_info_v2_wrapper';

CREATE FUNCTION snowid_stats() RETURNS TABLE (
    shard int,
    last_id bigint,
    last_ts timestamp with time zone,
    last_seq int,
    ids_issued bigint,
    throttled_waits bigint,
    released boolean
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_stats_v2_wrapper';

COMMENT ON FUNCTION snowid_info() IS
    'snowid on this server: epoch, layout, exhaustion date, shards, max_lead, whether it generates and why not, time base, how far the system clock is behind it, backward steps seen, high-water mark (every ID issued is dated before it) and lease writes.';
COMMENT ON FUNCTION snowid_stats() IS
    'A row per shard used or released since the server started: the last ID issued, its time and sequence number, IDs issued, waits at the lead bound.';

-- Decoding: comments for what 0.1.0 left without one.
COMMENT ON FUNCTION snowid_timestamp(bigint) IS
    'When an ID was issued, to the millisecond, under this server''s snowid.epoch. STABLE: the epoch can differ between servers and restarts.';
COMMENT ON FUNCTION snowid_timestamp(bigint, timestamptz) IS
    'When an ID was issued, under an explicit epoch. IMMUTABLE, for expression indexes and generated columns.';
COMMENT ON FUNCTION snowid_shard(bigint) IS
    'The logical shard (0 to 8191) an ID was issued for.';
COMMENT ON FUNCTION snowid_seq(bigint) IS
    'An ID''s sequence number (0 to 1023) within its millisecond and shard.';
COMMENT ON FUNCTION snowid_from_timestamp(timestamptz, int, int) IS
    'The ID of a millisecond, shard and sequence number; with the defaults, the smallest ID of that millisecond, for id >= ... AND id < ... range scans and partition bounds.';

COMMENT ON EXTENSION snowid IS 'Sharded, time-sorted 64-bit keys in Instagram''s 41/13/10 layout, generated lock-free in shared memory';
