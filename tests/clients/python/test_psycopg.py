"""psycopg 3: DEFAULT + RETURNING, server-side prepared statements, executemany with
returning=True, and COPY, all into a table keyed by snowid_next(5)."""

import psycopg
from psycopg.types.numeric import Int8
import pytest
from conftest import assert_snowids

N = 1000


@pytest.fixture(scope="module")
def conn(url):
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS orders")
        conn.execute(
            """CREATE TABLE orders (
                   id bigint PRIMARY KEY DEFAULT snowid_next(5),
                   note text NOT NULL)"""
        )
        yield conn


def prepared_statements(conn):
    return [r[0] for r in conn.execute("SELECT statement FROM pg_prepared_statements")]


def test_every_way_of_inserting(conn, server_statements):
    inserted = []  # (id, note) in insert order, across every way of inserting below

    # snippet: psycopg-insert-returning
    row = conn.execute(
        "INSERT INTO orders (note) VALUES (%s) RETURNING id", ["first"]
    ).fetchone()
    order_id = row[0]  # a Python int: exact, however large
    # end snippet
    inserted.append((order_id, "first"))

    # snippet: psycopg-decode
    ts, shard, seq = conn.execute(
        "SELECT ts, shard, seq FROM snowid_parse(%s)", [order_id]
    ).fetchone()
    # end snippet
    assert shard == 5 and seq >= 0 and ts.tzinfo is not None
    assert shard == (order_id >> 10) & 8191 and seq == order_id & 1023

    # The shard as a parameter: psycopg sends a Python int as int2, int4 or int8 by its size,
    # and each resolves; a shard outside 0..8191 is refused with 22003, never truncated.
    (by_param,) = conn.execute("SELECT snowid_next(%s)", [5]).fetchone()
    assert (by_param >> 10) & 8191 == 5 and by_param > order_id
    (by_big,) = conn.execute("SELECT snowid_next(%s)", [Int8(6)]).fetchone()
    assert (by_big >> 10) & 8191 == 6
    with pytest.raises(psycopg.errors.NumericValueOutOfRange):
        conn.execute("SELECT snowid_next(%s)", [2**40])

    # Server-side prepared statements: forced at once with prepare=True ...
    assert prepared_statements(conn) == []
    # snippet: psycopg-prepared
    insert = "INSERT INTO orders (note) VALUES (%s) RETURNING id"
    prepared_ids = [
        conn.execute(insert, [f"prepared {i}"], prepare=True).fetchone()[0]
        for i in range(3)
    ]
    # end snippet
    inserted += [(i, f"prepared {k}") for k, i in enumerate(prepared_ids)]
    assert prepared_statements(conn) == ["INSERT INTO orders (note) VALUES ($1) RETURNING id"]
    # ... and automatically after prepare_threshold (5) executions of the same query.
    auto = "INSERT INTO orders (note) VALUES (%s) RETURNING id /* auto */"
    for i in range(conn.prepare_threshold + 2):
        (new_id,) = conn.execute(auto, [f"auto {i}"]).fetchone()
        inserted.append((new_id, f"auto {i}"))
    assert any("/* auto */" in s for s in prepared_statements(conn))

    # executemany(..., returning=True): one result set per row, every ID comes back.
    server_statements.reset()
    # snippet: psycopg-executemany
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO orders (note) VALUES (%s) RETURNING id",
            [(f"many {i}",) for i in range(N)],
            returning=True,
        )
        ids = []
        while True:
            ids.append(cur.fetchone()[0])
            if not cur.nextset():
                break
    # end snippet
    assert len(ids) == N
    # psycopg pipelines it: one INSERT per row on the server, without a round trip per row.
    assert server_statements.calls() == N
    inserted += [(i, f"many {k}") for k, i in enumerate(ids)]

    # COPY into the table: the IDs come from the DEFAULT, in the order of the copied rows.
    server_statements.reset()
    # snippet: psycopg-copy
    with conn.cursor() as cur:
        with cur.copy("COPY orders (note) FROM STDIN") as copy:
            for i in range(N):
                copy.write_row([f"copy {i}"])
    # end snippet
    assert server_statements.calls("COPY") == 1
    copied = conn.execute(
        "SELECT id, note FROM orders WHERE note LIKE 'copy %' ORDER BY id"
    ).fetchall()
    assert [note for _, note in copied] == [f"copy {i}" for i in range(N)]
    inserted += copied

    ids = [i for i, _ in inserted]
    assert_snowids(ids, n=1 + 3 + conn.prepare_threshold + 2 + 2 * N)
    # Every returned ID is the row's key in the table.
    assert dict(conn.execute("SELECT id, note FROM orders").fetchall()) == dict(inserted)
