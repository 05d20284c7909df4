\echo Use "ALTER EXTENSION snowid UPDATE TO '0.8.0'" to load this file. \quit

-- snowid 0.8.0.

-- Nothing a database owner plants steers what snowid runs (issue 51, items 5 to 7): what a
-- superuser runs in her database is never hers to steer. Like the install script, this runs as a superuser when a database owner updates
-- the trusted extension: every function and operator is qualified, and a literal with a
-- backslash is an E'' string, which her standard_conforming_strings does not change.

-- snowid_parse: a SQL-standard body, its names bound here (search_path puts pg_catalog first)
-- rather than looked up at each call under the caller's search_path.
CREATE OR REPLACE FUNCTION @extschema@.snowid_parse(id bigint, OUT ts timestamptz, OUT shard int, OUT seq int)
RETURNS record
LANGUAGE sql STABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT @extschema@.snowid_timestamp(id), @extschema@.snowid_shard(id), @extschema@.snowid_seq(id);
END;

-- snowid_convert_column: no longer PL/pgSQL reading max(col) as the caller (planning that query
-- ran a database owner's functions as the superuser converting her table), but snowid's own code,
-- which reads and alters the table as its owner (src/sql/convert.rs).
CREATE OR REPLACE FUNCTION @extschema@.snowid_convert_column(tbl regclass, col name, shard int,
    OUT old_default text, OUT old_sequence text, OUT sequence_fate text, OUT first_id bigint)
RETURNS record
VOLATILE STRICT
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_convert_column_wrapper';
COMMENT ON FUNCTION @extschema@.snowid_convert_column(pg_catalog.regclass, pg_catalog.name, pg_catalog.int4) IS
    'Turns a bigint column keyed by an identity or a sequence default into one keyed by DEFAULT snowid_next(shard), under an ACCESS EXCLUSIVE lock, after checking that every existing value is below the first ID it will issue; says what became of the sequence. Runs as the table''s owner.';
COMMENT ON FUNCTION @extschema@.snowid_partition_ddl(pg_catalog.regclass, pg_catalog.timestamptz, pg_catalog.timestamptz, pg_catalog.interval, pg_catalog.int4) IS
    E'CREATE TABLE IF NOT EXISTS statements for the range partitions of a table partitioned by its snowid column that do not exist yet, one per step from from_ts until to_ts, named after their lower bound in UTC; run them with \\gexec, as the table''s owner.';

-- The record of the released shards is a heap table in the cluster's own tablespace, whatever
-- default_table_access_method and default_tablespace said when 0.7.0 created it: a columnar
-- record refused the DELETE each release makes, so that every snowid_release in the cluster
-- failed. An update of a record that cannot be moved fails here, in its own database, rather than
-- at a superuser's release.
ALTER TABLE @extschema@.snowid_released_shards SET ACCESS METHOD heap;
ALTER TABLE @extschema@.snowid_released_shards SET TABLESPACE pg_default;
-- The cluster-wide statements (issues 51 and 53): snowid_resume_above is the Rust function of its
-- own name, whose symbol also serves 0.6.0's one-argument shape; 0.7.0's symbol stays exported
-- for databases not yet updated.
CREATE OR REPLACE FUNCTION @extschema@.snowid_resume_above(
    "id" pg_catalog.int8,
    "skip_databases" pg_catalog.text[] DEFAULT NULL
) RETURNS pg_catalog.timestamptz
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowid_resume_above_wrapper';

-- Citus: the check on Citus (issues 51 items 8 and 9, 55). A node asks another through the
-- setting snowid.citus_claim, which only snowid defines, instead of calling snowid_citus_claim by
-- name in a schema a database owner can create in: the function goes (the library still answers
-- a node on 0.7.0 that calls it in a database not yet updated). snowid_citus_nodes() says the
-- group each node takes itself to be in, and the IDs it issued outside its claim.
DROP FUNCTION @extschema@.snowid_citus_claim(pg_catalog.int4, pg_catalog.text);

DROP FUNCTION @extschema@.snowid_citus_nodes();
CREATE FUNCTION @extschema@.snowid_citus_nodes() RETURNS TABLE (
	node pg_catalog.text,
	citus_group pg_catalog.int4,
	this_node pg_catalog.bool,
	by_hand pg_catalog.bool,
	claims pg_catalog.text,
	generates pg_catalog.text,
	shared pg_catalog.text,
	unanswered pg_catalog.text,
	own_group pg_catalog.int4,
	issued_outside pg_catalog.text
)
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_citus_nodes_wrapper';
COMMENT ON FUNCTION @extschema@.snowid_citus_nodes() IS
    'On Citus: every node of the cluster as this node''s last check of its shards found it (waiting for a check that is due): the shards each claims, the group each takes itself to be in, the shards this node generates for, and those of its claim another node claims too, which neither generates for.';

-- Public IDs (issue 54): the keys come from the file snowid.mask_key_file names, one per
-- database and versioned; domains (FF1's tweak) and prefixes; the keys' fingerprints, to compare
-- servers. The four 0.7.0 functions keep their signatures and symbols (their comments no longer
-- name the removed setting snowid.mask_key).
CREATE FUNCTION @extschema@.snowid_mask(id pg_catalog.int8, domain pg_catalog.text) RETURNS pg_catalog.int8
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_in_domain_wrapper';
CREATE FUNCTION @extschema@.snowid_unmask(masked pg_catalog.int8, domain pg_catalog.text, version pg_catalog.int4 DEFAULT NULL) RETURNS pg_catalog.int8
STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_unmask_in_domain_wrapper';
CREATE FUNCTION @extschema@.snowid_mask_text(id pg_catalog.int8, domain pg_catalog.text, prefix pg_catalog.text DEFAULT '') RETURNS pg_catalog.text
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_text_in_domain_wrapper';
CREATE FUNCTION @extschema@.snowid_unmask_text(masked pg_catalog.text, domain pg_catalog.text, prefix pg_catalog.text DEFAULT '') RETURNS pg_catalog.int8
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_unmask_text_in_domain_wrapper';
CREATE FUNCTION @extschema@.snowid_mask_keys() RETURNS TABLE (version pg_catalog.int4, masks pg_catalog.bool, fingerprint pg_catalog.text, derived pg_catalog.bool)
STRICT STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_keys_wrapper';
CREATE FUNCTION @extschema@.snowid_mask_key_fingerprint() RETURNS pg_catalog.text
STRICT STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_key_fingerprint_wrapper';
COMMENT ON FUNCTION @extschema@.snowid_mask(pg_catalog.int8) IS
    'An ID''s public form: a non-negative bigint that says nothing of the ID''s time, shard or order without the key (FF1 of NIST SP 800-38G under this database''s key from snowid.mask_key_file). STABLE: the key can change.';
COMMENT ON FUNCTION @extschema@.snowid_unmask(pg_catalog.int8) IS
    'The ID a public form from snowid_mask stands for, under the key version that masks: for lookups, WHERE id = snowid_unmask($1).';
COMMENT ON FUNCTION @extschema@.snowid_mask_text(pg_catalog.int8) IS
    'An ID''s public form for URLs: snowid_mask as 13 symbols of Crockford''s base32, after a symbol of the key''s version from version 2.';
COMMENT ON FUNCTION @extschema@.snowid_unmask_text(pg_catalog.text) IS
    'The ID a text from snowid_mask_text stands for, under the key version it names (any case; I, L and O read as 1, 1 and 0).';
COMMENT ON FUNCTION @extschema@.snowid_mask(pg_catalog.int8, pg_catalog.text) IS
    'An ID''s public form in a domain (a table or type name, FF1''s tweak): two domains give one ID unrelated forms.';
COMMENT ON FUNCTION @extschema@.snowid_unmask(pg_catalog.int8, pg_catalog.text, pg_catalog.int4) IS
    'The ID a public form from snowid_mask(id, domain) stands for, under a key version (null: the one that masks).';
COMMENT ON FUNCTION @extschema@.snowid_mask_text(pg_catalog.int8, pg_catalog.text, pg_catalog.text) IS
    'An ID''s public form for URLs in a domain, after a prefix and _ where one is given (ord_...).';
COMMENT ON FUNCTION @extschema@.snowid_unmask_text(pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'The ID a text from snowid_mask_text(id, domain, prefix) stands for; a text without the prefix is refused.';
COMMENT ON FUNCTION @extschema@.snowid_mask_keys() IS
    'This database''s mask key versions: which masks, each one''s fingerprint (safe to show), and whether they are the default''s derived for this database.';
COMMENT ON FUNCTION @extschema@.snowid_mask_key_fingerprint() IS
    'This database''s mask keys'' fingerprints in one line: equal on every node, standby and Patroni member that gives its IDs the same public forms.';
