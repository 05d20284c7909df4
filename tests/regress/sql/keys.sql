-- Shards from keys: snowid_shard_for, and the snowid_fill_id trigger.
\set SHOW_CONTEXT never

-- A documented hash that never changes (FNV-1a 64 of the key's canonical text, modulo 8192):
-- a number, its text and an untyped literal agree, and so do a uuid and its lowercase text.
SELECT snowid_shard_for(42) AS int4, snowid_shard_for(42::bigint) AS int8, snowid_shard_for('42') AS text,
       snowid_shard_for(-1) AS negative, snowid_shard_for(1341) AS instagram_shard;
SELECT snowid_shard_for('alice@example.com') AS email, snowid_shard_for('') AS empty;
SELECT snowid_shard_for('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid) AS uuid,
       snowid_shard_for('A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'::uuid) AS uuid_upper,
       snowid_shard_for('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11') AS its_text;
-- Evenly spread, and always a shard.
SELECT min(n), max(n), min(s), max(s)
FROM (SELECT count(*) AS n FROM generate_series(1, 819200) k GROUP BY snowid_shard_for(k)) c,
     (SELECT min(snowid_shard_for(k)) AS s FROM generate_series(-1000, 1000) k
      UNION ALL SELECT max(snowid_shard_for(k)) FROM generate_series(-1000, 1000) k) b;

-- The trigger gives each row an ID on its own key's shard, and keeps an ID the statement gave.
CREATE TABLE photos (id bigint PRIMARY KEY, user_id bigint NOT NULL, url text);
CREATE TRIGGER photos_id BEFORE INSERT ON photos
    FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('id', 'user_id');
INSERT INTO photos (user_id, url) VALUES (42, 'a'), (1341, 'b'), (42, 'c');
INSERT INTO photos (id, user_id, url) VALUES (7, 42, 'supplied');
SELECT user_id, url, CASE WHEN id = 7 THEN 'kept' ELSE (snowid_shard(id) = snowid_shard_for(user_id))::text END AS on_its_shard
FROM photos ORDER BY url;
SELECT (SELECT id FROM photos WHERE url = 'c') > (SELECT id FROM photos WHERE url = 'a') AS later_is_greater;

-- Keys of other types.
CREATE TABLE tenants (id bigint PRIMARY KEY, name text, key uuid, n int);
CREATE TRIGGER by_name BEFORE INSERT ON tenants FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('id', 'name');
INSERT INTO tenants (name) VALUES ('acme');
SELECT snowid_shard(id) = snowid_shard_for('acme') AS by_text FROM tenants;
DROP TRIGGER by_name ON tenants;
CREATE TRIGGER by_uuid BEFORE INSERT ON tenants FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('id', 'key');
INSERT INTO tenants (key) VALUES ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11');
SELECT snowid_shard(id) = snowid_shard_for(key) AS by_uuid FROM tenants WHERE key IS NOT NULL;
DROP TRIGGER by_uuid ON tenants;
CREATE TRIGGER by_int BEFORE INSERT ON tenants FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('id', 'n');
INSERT INTO tenants (n) VALUES (42);
SELECT snowid_shard(id) = snowid_shard_for(42) AS by_int FROM tenants WHERE n IS NOT NULL;

-- Misuse is refused with a reason.
INSERT INTO tenants (name) VALUES (NULL);
DROP TRIGGER by_int ON tenants;
CREATE TRIGGER no_such BEFORE INSERT ON tenants FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('id', 'nope');
INSERT INTO tenants (n) VALUES (1);
DROP TRIGGER no_such ON tenants;
CREATE TRIGGER wrong_id BEFORE INSERT ON tenants FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('name', 'n');
INSERT INTO tenants (id, n) VALUES (1, 1);
DROP TRIGGER wrong_id ON tenants;
CREATE TRIGGER one_arg BEFORE INSERT ON tenants FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('id');
INSERT INTO tenants (n) VALUES (1);
DROP TRIGGER one_arg ON tenants;
CREATE TRIGGER after AFTER INSERT ON tenants FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('id', 'n');
INSERT INTO tenants (id, n) VALUES (2, 1);
DROP TRIGGER after ON tenants;
-- Called directly, not as a trigger: the trigger protocol's error, never an internal one.
SELECT sqlstate_of($$SELECT snowid_fill_id()$$);
