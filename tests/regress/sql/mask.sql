-- Public IDs: snowid_mask, snowid_unmask and their text forms, under the key tests/regress/run
-- writes into the test server's postgresql.conf (NIST's FF1 sample key,
-- 2B7E151628AED2A6ABF7158809CF4F3C). The values below are pinned: a release that masked
-- differently under the same key would break every link users have handed out.
\set SHOW_CONTEXT never

-- The masked forms of a few IDs, in both forms; each unmasks back to its ID.
SELECT id, snowid_mask(id) AS masked, snowid_mask_text(id) AS text,
       snowid_unmask(snowid_mask(id)) = id AS unmasks,
       snowid_unmask_text(snowid_mask_text(id)) = id AS text_unmasks
FROM (VALUES (0::bigint), (1), (2), (8388613127), (8388613128), (9223372036854775806),
             (9223372036854775807)) v(id);

-- Every value is a masked ID: unmasking, then masking, gives it back.
SELECT masked, snowid_mask(snowid_unmask(masked)) = masked AS masks_back
FROM (VALUES (0::bigint), (42), (9223372036854775807)) v(masked);

-- The text form: 13 symbols of Crockford's base32, read in any case, with I, L and O read as
-- 1, 1 and 0.
SELECT snowid_unmask_text('1B5RHNKA4V06Q') = snowid_unmask_text('1b5rhnka4v06q') AS any_case,
       snowid_unmask_text('000000000000I') = snowid_unmask_text('0000000000001') AS i_is_1,
       snowid_unmask_text('000000000000L') = snowid_unmask_text('0000000000001') AS l_is_1,
       snowid_unmask_text('000000000000O') = snowid_unmask_text('0000000000000') AS o_is_0;
SELECT count(*) AS ids, count(*) FILTER (WHERE snowid_mask_text(id) ~ '^[0-7][0-9A-HJKMNP-TV-Z]{12}$') AS well_formed
FROM generate_series(8388613127, 8388613127 + 999) id;

-- A null gives a null.
SELECT snowid_mask(NULL) IS NULL AS mask, snowid_unmask(NULL) IS NULL AS unmask,
       snowid_mask_text(NULL) IS NULL AS mask_text, snowid_unmask_text(NULL) IS NULL AS unmask_text;

-- Lookups by a public ID go through the primary key: the functions are STABLE, so the planner
-- evaluates snowid_unmask once and uses it as an index condition.
CREATE TABLE items (id bigint PRIMARY KEY DEFAULT snowid_next(3), name text);
INSERT INTO items (name) SELECT 'item ' || i FROM generate_series(1, 100) i;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT name FROM items WHERE id = snowid_unmask_text('1B5RHNKA4V06Q');
EXPLAIN (COSTS OFF) SELECT name FROM items WHERE id = snowid_unmask(123456789);
RESET enable_seqscan;
SELECT count(*) AS found
FROM items i WHERE i.name = (SELECT name FROM items WHERE id = snowid_unmask_text(snowid_mask_text(i.id)));
-- Consecutive rows' public IDs are not in the rows' order.
SELECT count(*) > 0 AS some_rise, count(*) < 99 AS some_fall
FROM (SELECT snowid_mask(id) > lag(snowid_mask(id)) OVER (ORDER BY id) AS rises FROM items) r
WHERE rises;
DROP TABLE items;

-- Errors a user can meet.
SELECT snowid_mask(-1);
SELECT snowid_unmask(-9223372036854775808);
SELECT snowid_mask_text(-5);
SELECT snowid_unmask_text('1B5RHNKA4V06');
SELECT snowid_unmask_text('1B5RHNKA4V06QQ');
SELECT snowid_unmask_text('');
SELECT snowid_unmask_text('1B5RHNKA4V06U');
SELECT snowid_unmask_text('1B5RH-KA4V06Q');
SELECT snowid_unmask_text('8000000000000');
SELECT sqlstate_of('SELECT snowid_unmask_text(''ZZZZZZZZZZZZZ'')');
SELECT sqlstate_of('SELECT snowid_unmask_text(repeat(''x'', 100))');
-- A character outside ASCII is named by its code point, the same in every database encoding.
SET client_encoding = 'UTF8';
SELECT snowid_unmask_text('1B5RHNKA4V0é6');
RESET client_encoding;

-- The key itself: a setting no session can change, hidden from SHOW ALL and pg_settings, and
-- from every role that is not a superuser (PostgreSQL's messages differ between majors: only
-- the SQLSTATEs are shown).
SELECT count(*) AS listed FROM pg_settings WHERE name = 'snowid.mask_key';
SELECT sqlstate_of('SET snowid.mask_key = ''00000000000000000000000000000000''');
SELECT sqlstate_of('SELECT set_config(''snowid.mask_key'', ''00000000000000000000000000000000'', false)');
CREATE ROLE mask_reader;
SET ROLE mask_reader;
\set VERBOSITY sqlstate
SHOW snowid.mask_key;
SELECT current_setting('snowid.mask_key');
SELECT current_setting('snowid.mask_key', true);
SELECT * FROM pg_file_settings;
ALTER SYSTEM SET snowid.mask_key = '00000000000000000000000000000000';
\set VERBOSITY default
SELECT count(*) AS listed FROM pg_settings WHERE name = 'snowid.mask_key';
-- ... yet every role can mask and unmask.
SELECT snowid_unmask(snowid_mask(8388613127)) AS unmasked;
RESET ROLE;
DROP ROLE mask_reader;
-- A malformed key is refused without being repeated.
ALTER SYSTEM SET snowid.mask_key = '2b7e151628aed2a6abf7158809cf4f3g';
ALTER SYSTEM SET snowid.mask_key = '2b7e151628aed2a6abf7158809cf4f3';
