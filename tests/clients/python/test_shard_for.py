"""snowid_shard_for computed in Python, without the server: docs/guide.md's claim that any language
can compute a key's shard. 1,000 keys (text with accents, CJK and emoji among them, negative and
large numbers, UUIDs) must give the server's shard for each, in a UTF8 database and in a LATIN1
one (where the server converts the text back to UTF-8 before hashing)."""

import random
import uuid

import psycopg
import pytest


# snippet: python-shard-for
def shard_for(key) -> int:
    """snowid_shard_for(key): FNV-1a 64 of the key's canonical text as UTF-8, modulo 8192.
    The canonical text of a number is its decimal digits, of a UUID its lowercase hyphenated
    form, of a text itself."""
    h = 0xCBF29CE484222325
    for byte in str(key).encode("utf-8"):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h % 8192
# end snippet


def keys():
    rng = random.Random(8192)
    texts = ["", "alice@example.com", "é", "Zürich", "straße", "Ærø", "東京", "ユーザー", "🙂", "naïve café"]
    latin1 = "abcdefghijklmnopqrstuvwxyzàéîõüßÆØÅ"
    wide = latin1 + "東京都大阪市😀🙂ДЖЯ"
    texts += ["".join(rng.choice(latin1) for _ in range(rng.randint(1, 12))) for _ in range(290)]
    texts += ["".join(rng.choice(wide) for _ in range(rng.randint(1, 12))) for _ in range(300)]
    numbers = [0, -1, 1341, 2**63 - 1, -(2**63)] + [rng.randint(-(2**63), 2**63 - 1) for _ in range(195)]
    uuids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(200)]
    return texts, numbers, uuids


def server_shards(conn, texts, numbers, uuids):
    text_shards = conn.execute(
        "SELECT array_agg(snowid_shard_for(k) ORDER BY i) FROM unnest(%s::text[]) WITH ORDINALITY u(k, i)",
        [texts],
    ).fetchone()[0]
    number_shards = conn.execute(
        "SELECT array_agg(snowid_shard_for(k) ORDER BY i) FROM unnest(%s::bigint[]) WITH ORDINALITY u(k, i)",
        [numbers],
    ).fetchone()[0]
    uuid_shards = conn.execute(
        "SELECT array_agg(snowid_shard_for(k) ORDER BY i) FROM unnest(%s::uuid[]) WITH ORDINALITY u(k, i)",
        [uuids],
    ).fetchone()[0]
    return text_shards, number_shards, uuid_shards


def test_python_computes_the_servers_shard_for_1000_keys(url):
    texts, numbers, uuids = keys()
    assert len(texts) + len(numbers) + len(uuids) == 1000
    assert sum(1 for t in texts if not t.isascii()) > 400
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT getdatabaseencoding()").fetchone()[0] == "UTF8"
        text_shards, number_shards, uuid_shards = server_shards(conn, texts, numbers, uuids)
    assert text_shards == [shard_for(t) for t in texts]
    assert number_shards == [shard_for(n) for n in numbers]
    assert uuid_shards == [shard_for(u) for u in uuids]
    # A number and its text land on the same shard.
    assert [shard_for(str(n)) for n in numbers] == number_shards


def test_a_latin1_database_gives_the_same_shards(url):
    texts, _, _ = keys()
    representable = [t for t in texts if all(ord(c) < 256 for c in t)]
    assert len(representable) > 250
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS snowid_latin1")
        admin.execute(
            "CREATE DATABASE snowid_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
        )
    latin1_url = psycopg.conninfo.make_conninfo(url, dbname="snowid_latin1", client_encoding="UTF8")
    try:
        with psycopg.connect(latin1_url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION snowid")
            assert conn.execute("SELECT getdatabaseencoding()").fetchone()[0] == "LATIN1"
            shards = conn.execute(
                "SELECT array_agg(snowid_shard_for(k) ORDER BY i) FROM unnest(%s::text[]) WITH ORDINALITY u(k, i)",
                [representable],
            ).fetchone()[0]
            assert shards == [shard_for(t) for t in representable]
            # The trigger takes the same shard as the function.
            conn.execute("CREATE TABLE tenants (id bigint PRIMARY KEY, name text NOT NULL)")
            conn.execute(
                "CREATE TRIGGER tenants_id BEFORE INSERT ON tenants "
                "FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('id', 'name')"
            )
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO tenants (name) VALUES (%s)", [[t] for t in representable[:50]])
            rows = conn.execute("SELECT name, snowid_shard(id) FROM tenants").fetchall()
            assert len(rows) == 50
            assert all(shard == shard_for(name) for name, shard in rows)
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS snowid_latin1")
