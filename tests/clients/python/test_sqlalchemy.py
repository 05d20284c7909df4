"""SQLAlchemy 2 (ORM, psycopg 3 driver): which mapping of a snowid key lets
`session.add_all([...]); session.flush()` send ONE INSERT (insertmanyvalues with RETURNING) and
still put every generated ID on its object.

The answer is SQLAlchemy 2.1's `monotonic=True` on the function: it tells SQLAlchemy that the
server default yields increasing values, so SQLAlchemy can batch the rows in one
INSERT ... SELECT ... ORDER BY ... RETURNING and match the returned IDs to the objects by sorting
them. snowid_next(shard) is strictly increasing per shard, within a statement too, which is
exactly that promise. The other mappings are measured here as well, so that a change in
SQLAlchemy's behaviour shows up as a failing expectation."""

import pytest
import sqlalchemy as sa
from conftest import assert_snowids
from sqlalchemy import BigInteger, Identity, String, event, func, insert, insert_sentinel, text
from sqlalchemy.exc import InvalidRequestError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

N = 1000

# snippet: sqlalchemy-mapping
class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    # monotonic=True (SQLAlchemy 2.1+): snowid_next's values increase, so add_all + flush
    # sends one batched INSERT ... RETURNING for many objects and sorts the IDs back onto them.
    id: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, server_default=func.snowid_next(5, monotonic=True)
    )
    note: Mapped[str] = mapped_column(String(40))
# end snippet


@pytest.fixture(scope="module")
def engine(url):
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    yield engine
    engine.dispose()


class StatementCounter:
    """Counts the statements SQLAlchemy hands to the driver (one per insertmanyvalues batch)."""

    def __init__(self, engine):
        self.statements = []
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, conn, cursor, statement, parameters, context, executemany):
        self.statements.append(statement)

    def inserts(self):
        return [s for s in self.statements if s.lstrip().upper().startswith("INSERT")]


@pytest.fixture
def counter(engine):
    counter = StatementCounter(engine)
    yield counter
    event.remove(engine, "before_cursor_execute", counter._seen)


def fresh_table(engine, base, ddl=None):
    """Creates the mapping's table from its metadata, or from `ddl` when the metadata lies."""
    table = next(iter(base.metadata.tables.values()))
    with engine.begin() as conn:
        conn.execute(text(f"DROP TABLE IF EXISTS {table.name}"))
        if ddl:
            conn.execute(text(ddl.format(table=table.name)))
        else:
            base.metadata.create_all(conn)


def add_all_and_flush(engine, model, counter, server_statements):
    """Adds N objects, flushes, and returns (their IDs, client statements, server INSERTs)."""
    server_statements.reset()
    with Session(engine) as session:
        objects = [model(note=f"n{i}") for i in range(N)]
        counter.statements.clear()
        session.add_all(objects)
        session.flush()
        ids = [o.id for o in objects]  # read before commit: no refresh, no extra SELECT
        sent = len(counter.inserts())
        session.commit()
        rows = dict(session.execute(text(f"SELECT id, note FROM {model.__tablename__}")).all())
    # Every object got its own row's ID.
    assert rows == {i: f"n{k}" for k, i in enumerate(ids)}
    return ids, sent, server_statements.calls()


def test_monotonic_server_default_sends_one_insert(engine, counter, server_statements):
    fresh_table(engine, Base)
    ddl = str(sa.schema.CreateTable(Order.__table__).compile(engine))
    assert "DEFAULT snowid_next(5)" in ddl

    ids, sent, on_server = add_all_and_flush(engine, Order, counter, server_statements)

    assert (sent, on_server) == (1, 1)
    assert counter.inserts()[0].startswith("INSERT INTO orders (note) SELECT")
    assert_snowids(ids, n=N)


# Every other mapping tried, with the INSERT statements it sends for N objects (client side and
# server side agree). `ddl` creates the table when the mapping's metadata does not describe it.
SNOW_DDL = "CREATE TABLE {table} (id bigint PRIMARY KEY DEFAULT snowid_next(5), note varchar(40))"
OTHER_MAPPINGS = {
    # The plain mapping: no way to match batched RETURNING rows to objects, so one per object.
    "server_default_text": (lambda: {"id": mapped_column(BigInteger, primary_key=True, server_default=text("snowid_next(5)"))}, None, {}, N),
    "server_default_func": (lambda: {"id": mapped_column(BigInteger, primary_key=True, server_default=func.snowid_next(5))}, None, {}, N),
    "server_default_text_eager_defaults_false": (lambda: {"id": mapped_column(BigInteger, primary_key=True, server_default=text("snowid_next(5)"))}, None, {"eager_defaults": False}, N),
    # autoincrement=True: create_all would make it BIGSERIAL and drop the snowid default (see
    # test_autoincrement_true_drops_the_default), so the table comes from DDL here.
    "server_default_text_autoincrement_true": (lambda: {"id": mapped_column(BigInteger, primary_key=True, autoincrement=True, server_default=text("snowid_next(5)"))}, SNOW_DDL, {}, N),
    # A client-side SQL-expression default is rendered into the INSERT, still one per object
    # without monotonic=True; with it, one statement, but the table then has no DEFAULT of its own.
    "default_func_client_side": (lambda: {"id": mapped_column(BigInteger, primary_key=True, default=func.snowid_next(5))}, None, {}, N),
    "default_func_client_side_monotonic": (lambda: {"id": mapped_column(BigInteger, primary_key=True, default=func.snowid_next(5, monotonic=True))}, None, {}, 1),
    # Declaring Identity() in the model while the table really has the snowid DEFAULT: one
    # statement (SQLAlchemy sorts the returned keys, and snowid's increase), but the metadata lies:
    # create_all would make an IDENTITY column, so the table must come from elsewhere.
    "identity_in_model_snowid_in_table": (lambda: {"id": mapped_column(BigInteger, Identity(), primary_key=True)}, SNOW_DDL, {}, 1),
    # An extra sentinel column (insert_sentinel()) in the table: one statement, one column more.
    "server_default_plus_sentinel_column": (lambda: {"id": mapped_column(BigInteger, primary_key=True, server_default=text("snowid_next(5)")), "_sentinel": insert_sentinel()}, None, {}, 1),
    "server_default_monotonic_insert_sentinel": (lambda: {"id": mapped_column(BigInteger, primary_key=True, server_default=func.snowid_next(5, monotonic=True), insert_sentinel=True)}, None, {}, 1),
}


@pytest.mark.parametrize("name", OTHER_MAPPINGS)
def test_other_mappings(name, engine, counter, server_statements):
    columns, ddl, mapper_args, expected = OTHER_MAPPINGS[name]

    class OtherBase(DeclarativeBase):
        pass

    attrs = {"__tablename__": f"t_{name}", "note": mapped_column(String(40)), **columns()}
    if mapper_args:
        attrs["__mapper_args__"] = mapper_args
    model = type(f"M_{name}", (OtherBase,), attrs)
    fresh_table(engine, OtherBase, ddl)

    ids, sent, on_server = add_all_and_flush(engine, model, counter, server_statements)

    assert (sent, on_server) == (expected, expected)
    assert_snowids(ids, n=N)


def test_insert_sentinel_refused_for_plain_server_default(engine):
    class RefusedBase(DeclarativeBase):
        pass

    class Refused(RefusedBase):
        __tablename__ = "refused"
        id: Mapped[int] = mapped_column(
            BigInteger,
            primary_key=True,
            server_default=text("snowid_next(5)"),
            insert_sentinel=True,
        )
        note: Mapped[str] = mapped_column(String(40))

    fresh_table(engine, RefusedBase)
    with Session(engine) as session:
        session.add_all([Refused(note="a"), Refused(note="b")])
        with pytest.raises(InvalidRequestError, match="can't be a sentinel column"):
            session.flush()


def test_orm_bulk_insert_sorted_by_parameter_order(engine, counter, server_statements):
    """session.execute(insert(...).returning(..., sort_by_parameter_order=True), rows) with a
    plain server default: one per row, as for add_all; with the monotonic mapping: one."""

    class BulkBase(DeclarativeBase):
        pass

    class Plain(BulkBase):
        __tablename__ = "bulk_plain"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, server_default=text("snowid_next(5)"))
        note: Mapped[str] = mapped_column(String(40))

    for model, expected in ((Plain, N), (Order, 1)):
        fresh_table(engine, BulkBase if model is Plain else Base)
        server_statements.reset()
        counter.statements.clear()
        with Session(engine) as session:
            ids = session.scalars(
                insert(model).returning(model.id, sort_by_parameter_order=True),
                [{"note": f"n{i}"} for i in range(N)],
            ).all()
            session.commit()
            rows = dict(session.execute(text(f"SELECT id, note FROM {model.__tablename__}")).all())
        assert rows == {i: f"n{k}" for k, i in enumerate(ids)}
        assert (len(counter.inserts()), server_statements.calls()) == (expected, expected)
        assert_snowids(ids, n=N)


def test_autoincrement_true_drops_the_default(engine):
    """A pitfall: autoincrement=True next to the server default makes create_all emit BIGSERIAL,
    silently without snowid_next: the keys would be 1, 2, 3, ..."""

    class PitfallBase(DeclarativeBase):
        pass

    class Pitfall(PitfallBase):
        __tablename__ = "pitfall"
        id: Mapped[int] = mapped_column(
            BigInteger, primary_key=True, autoincrement=True, server_default=text("snowid_next(5)")
        )

    ddl = str(sa.schema.CreateTable(Pitfall.__table__).compile(engine))
    assert "BIGSERIAL" in ddl and "snowid_next" not in ddl


class LegacyBase(DeclarativeBase):
    pass


class Invoice(LegacyBase):
    """An application's model from before snowid: an identity key, which stays as it is."""

    __tablename__ = "invoices"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    note: Mapped[str] = mapped_column(String(40))


def test_orm_inserts_after_snowid_convert_column(engine):
    """An identity-keyed table converted in place with snowid_convert_column: the ORM model is
    unchanged (it leaves the key to the server and reads it back), old rows keep their IDs, new
    rows get snowid IDs on the shard given, above every old one."""
    LegacyBase.metadata.drop_all(engine)
    LegacyBase.metadata.create_all(engine)
    with Session(engine) as session:
        session.add_all([Invoice(note=f"old {i}") for i in range(100)])
        session.commit()
    with engine.begin() as conn:
        fate = conn.execute(text("SELECT sequence_fate FROM snowid_convert_column('invoices', 'id', 5)")).scalar()
    assert fate == "dropped with the identity"
    with Session(engine) as session:
        new = [Invoice(note=f"new {i}") for i in range(N)]
        session.add_all(new)
        session.flush()
        ids = [invoice.id for invoice in new]
        session.commit()
    assert all(i is not None for i in ids)
    assert len(set(ids)) == N
    assert all((i >> 10) & 8191 == 5 for i in ids)
    with engine.connect() as conn:
        old_max = conn.execute(text("SELECT max(id) FROM invoices WHERE note LIKE 'old %'")).scalar()
        assert old_max == 100
        assert conn.execute(text("SELECT count(*) FROM invoices")).scalar() == 100 + N
    assert min(ids) > old_max
    LegacyBase.metadata.drop_all(engine)
