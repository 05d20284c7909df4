"""Helpers shared by the Python client tests (run by tests/clients/run)."""

import os

import psycopg
import pytest

# snowid IDs are 64-bit; today's IDs are far above 2**53, where JavaScript's Number and
# JSON.parse start to round.
JS_SAFE_MAX = 2**53 - 1


@pytest.fixture(scope="session")
def url():
    return os.environ["SNOWID_CLIENTS_URL"]


class ServerStatements:
    """Counts the statements a database ran, from the server's side (pg_stat_statements)."""

    def __init__(self, dbname):
        self.dbname = dbname
        self.conn = psycopg.connect(dbname="postgres", autocommit=True)

    def reset(self):
        self.conn.execute("SELECT pg_stat_statements_reset()")

    def calls(self, prefix="INSERT"):
        """How many statements starting with `prefix` ran in the database since the reset."""
        return self.conn.execute(
            """SELECT coalesce(sum(s.calls), 0)::int
                 FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
                WHERE d.datname = %s AND s.query ILIKE %s""",
            [self.dbname, prefix + "%"],
        ).fetchone()[0]


@pytest.fixture(scope="session")
def server_statements():
    counter = ServerStatements(os.environ["PGDATABASE"])
    yield counter
    counter.conn.close()


def assert_snowids(ids, n=None, shard=5):
    """Every ID is a Python int, distinct, above 2**53, and they increase in the given order."""
    if n is not None:
        assert len(ids) == n
    assert all(type(i) is int for i in ids), ids[:5]
    assert len(set(ids)) == len(ids), "duplicate IDs"
    assert ids == sorted(ids), "IDs do not increase in insert order"
    assert ids[0] > JS_SAFE_MAX
    assert all((i >> 10) & 8191 == shard for i in ids)
