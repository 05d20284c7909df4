-- Public IDs: snowid_mask, snowid_unmask and their text forms, under the keys tests/regress/run
-- writes into the test server's key file: this database's version 1 is NIST's FF1 sample key,
-- 2B7E151628AED2A6ABF7158809CF4F3C, and its version 2 is staged to unmask only. The values below
-- are pinned: a release that masked differently under the same key would break every link users
-- have handed out. mask(0), mask(1), mask(2^63 - 1) and the text form of 8388613127 are the known
-- answers of an implementation written from SP 800-38G independently of snowid: 7407393923982924685,
-- 967355656107369710, 3989821467963092630 and 2D476KTY36P9K.
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

-- This database's keys: version 1 masks, version 2 only unmasks (staged); fingerprints are safe
-- to show, and equal on every server with the same key.
SELECT * FROM snowid_mask_keys();
SELECT snowid_mask_key_fingerprint();

-- A text form that names version 2 reads under version 2; versions without a key are refused.
SELECT snowid_unmask_text('20000000000001') AS v2, snowid_unmask_text('2D476KTY36P9K') AS v1,
       snowid_unmask_text('1' || '2D476KTY36P9K') AS v1_written_out;
SELECT snowid_unmask_text('32D476KTY36P9K');
SELECT snowid_unmask_text('02D476KTY36P9K');
SELECT snowid_unmask(snowid_mask(8388613127), '', 1) AS unmasked;
SELECT snowid_unmask(snowid_mask(8388613127), '', 2) <> 8388613127 AS another_key;
SELECT snowid_unmask(1, '', 3);
SELECT snowid_unmask(NULL, '') IS NULL AS null_id, snowid_unmask(1, NULL) IS NULL AS null_domain;

-- Domains (FF1's tweak): one ID has unrelated public forms in two tables, each readable only in
-- its own; the empty domain is the mask without one. A prefix goes before the form, and a text
-- without it is refused.
SELECT snowid_mask(8388613127, 'orders') AS orders, snowid_mask(8388613127, 'users') AS users,
       snowid_mask(8388613127, '') = snowid_mask(8388613127) AS empty_domain;
SELECT snowid_mask_text(8388613127, 'orders', 'ord') AS orders, snowid_mask_text(8388613127, 'users') AS users;
SELECT snowid_unmask_text(snowid_mask_text(8388613127, 'orders', 'ord'), 'orders', 'ord') AS orders,
       snowid_unmask_text(upper(snowid_mask_text(8388613127, 'orders', 'ord')), 'orders', 'ord') AS any_case,
       snowid_unmask(snowid_mask(8388613127, 'orders'), 'orders') AS unmasked,
       snowid_unmask(snowid_mask(8388613127, 'orders'), 'users') <> 8388613127 AS not_in_users;
SELECT snowid_unmask_text(snowid_mask_text(8388613127, 'orders', 'ord'), 'orders', 'usr');
SELECT snowid_unmask_text(snowid_mask_text(8388613127, 'orders', 'ord'), 'orders');
SELECT snowid_mask_text(1, 'orders', 'or-d');
SELECT snowid_mask_text(1, 'orders', repeat('a', 33));

-- No setting holds a key: 0.7.0's snowid.mask_key is gone (its prefix is reserved, so naming it
-- is an error, and the log hides such a statement), and snowid.mask_key_file is a path.
SELECT sqlstate_of('SET snowid.mask_key = ''00000000000000000000000000000000''');
SELECT sqlstate_of('SELECT set_config(''snowid.mask_key'', ''00000000000000000000000000000000'', false)');
SELECT sqlstate_of('SHOW snowid.mask_key');
SELECT sqlstate_of('SET snowid.mask_key_file = ''other.keys''');
SELECT name, setting, context FROM pg_settings WHERE name LIKE 'snowid.mask%';
CREATE ROLE mask_reader;
SET ROLE mask_reader;
\set VERBOSITY sqlstate
SHOW snowid.mask_key_file;
SELECT pg_read_file('mask.keys');
\set VERBOSITY default
-- ... yet every role can mask and unmask.
SELECT snowid_unmask(snowid_mask(8388613127)) AS unmasked;
RESET ROLE;
DROP ROLE mask_reader;
