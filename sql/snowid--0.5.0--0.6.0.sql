\echo Use "ALTER EXTENSION snowid UPDATE TO '0.6.0'" to load this file. \quit

-- snowid 0.6.0: a fence forgets no release. Each database records the shards the cluster
-- released (snowid_released_shards), so that a resume lifting a fence after a lost or damaged
-- state, or pg_upgrade, releases them again; where no database knows them, the resume names
-- them (its new argument, released). The resume also reads key columns of any type whose
-- default calls snowid_next, and domains whose default does; it refuses while transactions are
-- prepared, and above a key dated more than an hour ahead unless given by number.

CREATE TABLE snowid_released_shards (
    recorded_at timestamptz NOT NULL,
    shards int[] NOT NULL,
    last_ids bigint[] NOT NULL,
    CHECK (pg_catalog.cardinality(shards) OPERATOR(pg_catalog.=) pg_catalog.cardinality(last_ids))
);
REVOKE ALL ON TABLE snowid_released_shards FROM PUBLIC;
GRANT SELECT ON TABLE snowid_released_shards TO PUBLIC;
COMMENT ON TABLE snowid_released_shards IS
    'The shards this cluster released, each with the last ID it was released at, as this database records them: what a resume that lifts a fence releases again. Written by snowid only.';

-- snowid_next(int)'s symbol is named after its argument's type, like its two siblings'; the old
-- name stays in the library for the earlier versions' scripts.
CREATE OR REPLACE FUNCTION snowid_next(shard int) RETURNS bigint
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_next_int4';

DROP FUNCTION snowid_resume_above_columns();
CREATE FUNCTION snowid_resume_above_columns(released int[] DEFAULT NULL) RETURNS TABLE (
	"database" TEXT,
	"tbl" TEXT,
	"col" TEXT,
	"max_id" bigint
)
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'resume_above_every_column_wrapper';
REVOKE ALL ON FUNCTION snowid_resume_above_columns(int[]) FROM PUBLIC;
COMMENT ON FUNCTION snowid_resume_above_columns(int[]) IS
    'Superuser: snowid_resume_above the highest value of every column, in every database of the cluster, whose default (or type''s default) calls snowid_next or that a snowid_fill_id trigger fills (partitions and children included); lists them. On a fenced server it also releases again every shard the databases record as released, and those named in released, which it needs where no database records them. The one statement a fenced cluster needs.';
COMMENT ON FUNCTION snowid_resume_above(bigint) IS
    'Superuser: from now on every ID this server issues is above this ID and dated after its millisecond, durably, and a fence is lifted (on a fenced server, above the highest snowid key of every database too, and with every release the databases record). Released shards stay released. For pg_upgrade, logical copies and shard hand-offs. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_take_back(int, bigint) IS
    'Superuser: takes back a shard this server released, above an ID of that shard (its other owner''s last ID, from snowid_release there), durably. Not undone by ROLLBACK. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_release(int) IS
    'Superuser: stops this server, and every server that replays its WAL, issuing IDs for a shard, including in running statements, durably, records that in every database, and returns the last ID issued for it. Not undone by ROLLBACK.';

-- Fills this database's record from the state, which knows its releases unless it is fenced.
CREATE FUNCTION snowid_create_state() RETURNS void
VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_create_state_wrapper';
SELECT @extschema@.snowid_create_state();
DROP FUNCTION @extschema@.snowid_create_state();
