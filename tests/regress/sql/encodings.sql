-- Text keys in every database encoding. snowid_shard_for(text) and snowid_fill_id hash a key's
-- UTF-8 bytes, so the same text gives the same shard in a UTF8, LATIN1, EUC_JP or SQL_ASCII
-- database, and in any client that hashes its own UTF-8 string. Guards against a text key's
-- shard depending on the database's encoding, and against internal errors (XX000) for keys
-- that are not UTF-8 in the database. The client speaks UTF-8 to every database (this file is
-- UTF-8 text), whatever the regression database's own encoding is.
\encoding UTF8
\set SHOW_CONTEXT never
SELECT current_database() AS regress_db \gset
CREATE TABLE shards_here AS
SELECT k, snowid_shard_for(k) AS shard
FROM (VALUES ('plain'), ('é'), ('Zürich'), ('straße')) v(k);
SELECT k, shard FROM shards_here ORDER BY shard;

CREATE DATABASE snowid_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
CREATE DATABASE snowid_euc_jp ENCODING 'EUC_JP' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
CREATE DATABASE snowid_sql_ascii ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;

-- LATIN1: the same shards as above, from the function and from the trigger, whose key and
-- column names are not ASCII.
\c 'dbname=snowid_latin1 client_encoding=UTF8'
CREATE EXTENSION snowid;
SELECT getdatabaseencoding();
SELECT k, snowid_shard_for(k) AS shard
FROM (VALUES ('plain'), ('é'), ('Zürich'), ('straße')) v(k) ORDER BY shard;
CREATE TABLE villes (clé bigint PRIMARY KEY, nom varchar NOT NULL);
CREATE TRIGGER villes_clé BEFORE INSERT ON villes
    FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('clé', 'nom');
INSERT INTO villes (nom) VALUES ('Zürich'), ('é'), ('plain');
SELECT nom, snowid_shard(clé) AS shard, snowid_shard(clé) = snowid_shard_for(nom::text) AS same
FROM villes ORDER BY shard;

-- EUC_JP: Japanese keys hash to the shards of their UTF-8 form.
\c 'dbname=snowid_euc_jp client_encoding=UTF8'
CREATE EXTENSION snowid;
SELECT getdatabaseencoding();
SELECT k, snowid_shard_for(k) AS shard FROM (VALUES ('plain'), ('東京'), ('ユーザー')) v(k) ORDER BY shard;
CREATE TABLE users (id bigint PRIMARY KEY, name text NOT NULL);
CREATE TRIGGER users_id BEFORE INSERT ON users FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('id', 'name');
INSERT INTO users (name) VALUES ('東京');
SELECT name, snowid_shard(id) AS shard FROM users;

-- SQL_ASCII stores any bytes: UTF-8 text hashes as everywhere else, and bytes that are not
-- UTF-8 are refused with 22021, by the function and by the trigger, and nothing is inserted.
\c 'dbname=snowid_sql_ascii client_encoding=UTF8'
CREATE EXTENSION snowid;
SELECT getdatabaseencoding();
SELECT k, snowid_shard_for(k) AS shard FROM (VALUES ('plain'), ('é'), ('東京')) v(k) ORDER BY shard;
\set VERBOSITY sqlstate
SELECT snowid_shard_for(E'Z\xfcrich');
CREATE TABLE tenants (id bigint PRIMARY KEY, name text NOT NULL);
CREATE TRIGGER tenants_id BEFORE INSERT ON tenants FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('id', 'name');
INSERT INTO tenants (name) VALUES (E'Z\xfcrich');
\set VERBOSITY default
SELECT count(*) AS inserted FROM tenants;

\c :regress_db
DROP DATABASE snowid_latin1;
DROP DATABASE snowid_euc_jp;
DROP DATABASE snowid_sql_ascii;
DROP TABLE shards_here;
