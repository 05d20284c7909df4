"""Django 5: a migration that creates the extension and a model keyed by snowid; create() and
bulk_create() must give back the real IDs. Runs against the fresh, empty database that
tests/clients/run made (no extension in it: the migration creates it)."""

import os

import pytest
from conftest import assert_snowids

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproject.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models.expressions import DatabaseDefault  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from snowapp.models import Event, EventDbDefault, EventSnowIdField  # noqa: E402

N = 1000


@pytest.fixture(scope="module", autouse=True)
def migrated():
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_extension WHERE extname = 'snowid'")
        assert cur.fetchone()[0] == 0, "the database should be fresh"
    call_command("migrate", verbosity=0)
    yield
    connection.close()


def column(table):
    with connection.cursor() as cur:
        cur.execute(
            """SELECT column_default, is_identity FROM information_schema.columns
                WHERE table_name = %s AND column_name = 'id'""",
            [table],
        )
        return cur.fetchone()


def test_migration_and_models_agree():
    # Raises SystemExit if the models have changes the migrations lack.
    call_command("makemigrations", "snowapp", check=True, dry_run=True, verbosity=0)
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_extension WHERE extname = 'snowid'")
        assert cur.fetchone()[0] == 1
    assert column("snowapp_event") == ("snowid_next(5)", "NO")
    assert column("snowapp_eventsnowidfield") == ("snowid_next(5)", "NO")
    assert column("snowapp_eventdbdefault") == ("snowid_next(5)", "NO")


def bulk_create(model, server_statements):
    """bulk_create of N objects: (the objects, INSERTs Django sent, INSERTs the server ran)."""
    objects = [model(note=f"n{i}") for i in range(N)]
    server_statements.reset()
    with CaptureQueriesContext(connection) as queries:
        created = model.objects.bulk_create(objects)
    assert created is not None
    sent = [q for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    return objects, len(sent), server_statements.calls()


def test_usage():
    # snippet: django-usage
    event = Event.objects.create(note="one")
    assert isinstance(event.id, int)  # the real snowid, read back with RETURNING
    events = Event.objects.bulk_create(Event(note=f"bulk {i}") for i in range(3))
    assert all(isinstance(e.id, int) for e in events)
    # end snippet
    assert_snowids([event.id] + [e.id for e in events], n=4)


@pytest.mark.parametrize("model", [Event, EventSnowIdField])
def test_create_and_bulk_create_return_ids(model, server_statements):
    event = model.objects.create(note="one")
    events = model.objects.bulk_create(model(note=f"bulk {i}") for i in range(3))
    assert_snowids([event.id] + [e.id for e in events], n=4)

    objects, sent, on_server = bulk_create(model, server_statements)
    assert (sent, on_server) == (1, 1)  # one INSERT ... VALUES (...), ... RETURNING "id"
    ids = [o.pk for o in objects]
    assert_snowids(ids, n=N)
    assert ids[0] > events[-1].id
    in_db = dict(model.objects.filter(note__startswith="n").values_list("id", "note"))
    assert in_db == {i: f"n{k}" for k, i in enumerate(ids)}


def test_db_default_bulk_create_leaves_no_ids(server_statements):
    """The db_default mapping: create() reads the ID back, but bulk_create() treats the
    DatabaseDefault placeholder as a primary key already set, and never replaces it."""
    one = EventDbDefault.objects.create(note="one")
    assert_snowids([one.pk], n=1)

    objects, sent, on_server = bulk_create(EventDbDefault, server_statements)
    assert (sent, on_server) == (1, 1)
    assert all(isinstance(o.pk, DatabaseDefault) for o in objects)  # the pitfall
    # The rows themselves did get snowids.
    ids = list(EventDbDefault.objects.filter(note__startswith="n").order_by("id").values_list("id", flat=True))
    assert_snowids(ids, n=N)
