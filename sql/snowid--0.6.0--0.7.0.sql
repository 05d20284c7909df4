\echo Use "ALTER EXTENSION snowid UPDATE TO '0.7.0'" to load this file. \quit

-- snowid 0.7.0.

-- The resumes read every table as its owner, in a security-restricted operation, through its
-- access method, so that no code of a database owner's runs as the superuser; a key dated
-- further ahead of the clock than snowid issues needs the superuser's word (accept_ahead); a
-- database that cannot be read can be left out knowingly (skip_databases). The earlier shapes
-- keep their symbols in the library for the earlier versions' scripts.
DROP FUNCTION snowid_resume_above(bigint);
CREATE FUNCTION snowid_resume_above(
	"id" bigint,
	"skip_databases" TEXT[] DEFAULT NULL
) RETURNS timestamp with time zone
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'resume_above_skipping_wrapper';
DROP FUNCTION snowid_resume_above_columns(int[]);
CREATE FUNCTION snowid_resume_above_columns(
	"released" INT[] DEFAULT NULL,
	"accept_ahead" interval DEFAULT NULL,
	"skip_databases" TEXT[] DEFAULT NULL
) RETURNS TABLE (
	"database" TEXT,
	"tbl" TEXT,
	"col" TEXT,
	"max_id" bigint
)
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'resume_above_every_key_column_wrapper';
REVOKE ALL ON FUNCTION snowid_resume_above(bigint, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION snowid_resume_above_columns(int[], interval, text[]) FROM PUBLIC;
COMMENT ON FUNCTION snowid_resume_above(bigint, text[]) IS
    'Superuser: from now on every ID this server issues is above this ID and dated after its millisecond, durably, and a fence is lifted (on a fenced server, above the highest snowid key of every database but those in skip_databases too, and with every release the databases record). Released shards stay released. For pg_upgrade, logical copies and shard hand-offs. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_resume_above_columns(int[], interval, text[]) IS
    'Superuser: snowid_resume_above the highest value of every column, in every database of the cluster but those in skip_databases, whose default (or type''s default) calls snowid_next or that a snowid_fill_id trigger fills (partitions and children included), each read as its table''s owner; lists them. A key dated further ahead of the clock than snowid issues needs accept_ahead. On a fenced server it also releases again every shard the databases record as released, and those named in released, which it needs where no database records them. The one statement a fenced cluster needs.';

-- A release is recorded in every database before it is made durable, a take-back after; both
-- under one cluster-wide lock with installs.
COMMENT ON FUNCTION snowid_take_back(int, bigint) IS
    'Superuser: takes back a shard this server released, above an ID of that shard (its other owner''s last ID, from snowid_release there), durably, and records that in every database. Not undone by ROLLBACK. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_release(int) IS
    'Superuser: stops this server, and every server that replays its WAL, issuing IDs for a shard, including in running statements, records that in every database, makes it durable, and returns the last ID issued for it. Not undone by ROLLBACK.';

-- This database's record of the released shards is written from the state when the update
-- commits, under that lock.
CREATE FUNCTION snowid_create_state() RETURNS void
VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_create_state_wrapper';
SELECT @extschema@.snowid_create_state();
DROP FUNCTION @extschema@.snowid_create_state();

-- Public IDs: a keyed, reversible mask of the non-negative bigints (FF1 of NIST
-- SP 800-38G under the key in snowid.mask_key), so that an ID shown in a URL or an API says
-- nothing of when, where or how many, and its text form for URLs. STABLE: the result depends
-- on a setting a reload can change.
CREATE FUNCTION snowid_mask(id bigint) RETURNS bigint
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_wrapper';
CREATE FUNCTION snowid_unmask(masked bigint) RETURNS bigint
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_unmask_wrapper';
CREATE FUNCTION snowid_mask_text(id bigint) RETURNS text
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_text_wrapper';
CREATE FUNCTION snowid_unmask_text(masked text) RETURNS bigint
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_unmask_text_wrapper';
COMMENT ON FUNCTION snowid_mask(bigint) IS
    'An ID''s public form: a non-negative bigint that says nothing of the ID''s time, shard or order without the key in snowid.mask_key (FF1 of NIST SP 800-38G). STABLE: the key can change.';
COMMENT ON FUNCTION snowid_unmask(bigint) IS
    'The ID a public form from snowid_mask stands for, under the key in snowid.mask_key: for lookups, WHERE id = snowid_unmask($1).';
COMMENT ON FUNCTION snowid_mask_text(bigint) IS
    'An ID''s public form for URLs: snowid_mask as 13 symbols of Crockford''s base32.';
COMMENT ON FUNCTION snowid_unmask_text(text) IS
    'The ID a text from snowid_mask_text stands for (any case; I, L and O read as 1, 1 and 0).';

-- Citus, first-class. A node of a Citus cluster with no snowid.shards of its own takes its
-- group's 32 shards, and every node checks its shards against every other node's, refusing
-- those another node claims too. A node's check asks the others with snowid_citus_claim over
-- Citus's connections; snowid_citus_nodes shows what this node's last check found. snowid_next()
-- says so in its comment.
CREATE FUNCTION snowid_citus_claim(asker_group int, asker_claim text) RETURNS text
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_citus_claim_wrapper';
REVOKE ALL ON FUNCTION snowid_citus_claim(int, text) FROM PUBLIC;
COMMENT ON FUNCTION snowid_citus_claim(int, text) IS
    'Superuser: what this Citus node claims, as another node''s check of its shards asks it over Citus''s connections (that node''s group and claim given, so that this node checks again if they make its last check out of date).';

CREATE FUNCTION snowid_citus_nodes() RETURNS TABLE (
	node text,
	citus_group int,
	this_node bool,
	by_hand bool,
	claims text,
	generates text,
	shared text,
	unanswered text
)
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_citus_nodes_wrapper';
COMMENT ON FUNCTION snowid_citus_nodes() IS
    'On Citus: every node of the cluster as this node''s last check of its shards found it (checking first if one is due): the shards each claims, the shards this node generates for, and those of its claim another node claims too, which neither generates for.';

COMMENT ON FUNCTION snowid_next() IS
    'The next ID on one of this server''s own shards (snowid.shards; on Citus, its group''s own unless snowid.shards is set, less any another node claims too), the same for every session of a backend: one DEFAULT for every node of a cluster.';
