"""No raw driver error reaches a caller of ctxemb_pgvector (issue 42, item 16): a missing schema,
a bad ``keep`` and a connection made by plain psycopg each get a typed error with its remedy, and
nothing is written or deleted."""

from __future__ import annotations

import psycopg
import pytest
from conftest import DOCS
from pg_server import fresh_database

import ctxemb_pgvector
from ctxemb_core.errors import InvalidInputError, MissingDependencyError


@pytest.mark.parametrize("create", [True, False])
def test_a_missing_schema_is_named_with_its_remedy(pg, minilm, create):
    with pytest.raises(InvalidInputError, match="nope") as caught:
        ctxemb_pgvector.open_table(pg, "docs", minilm, schema="nope", create=create)
    assert "CREATE SCHEMA" in str(caught.value)
    with pytest.raises(InvalidInputError, match="nope"):
        ctxemb_pgvector.stamped_contract(pg, "docs", "nope")
    assert pg.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'docs'").fetchone() == (0,)


@pytest.mark.parametrize("keep", [None, "tea", 42, ["tea", 1], [None]])
def test_delete_missing_refuses_a_keep_that_is_not_ids_and_deletes_nothing(pg, minilm, keep):
    table = ctxemb_pgvector.open_table(pg, "docs", minilm)
    table.add(list(DOCS), list(DOCS.values()))
    with pytest.raises(InvalidInputError, match="keep"):
        table.delete_missing(keep)
    with pytest.raises(InvalidInputError, match="keep"):
        table.delete_missing(keep, dry_run=True)
    assert table.ids() == set(DOCS)
    assert table.delete_missing(iter(["tea"])) == [i for i in DOCS if i != "tea"]


def test_a_plain_psycopg_connection_gets_the_vector_types(pg, minilm):
    with psycopg.connect(pg.ctxemb_dsn, autocommit=True) as conn:
        table = ctxemb_pgvector.open_table(conn, "docs", minilm)
        table.add(["tea", "moon"], [DOCS["tea"], DOCS["moon"]])
        assert table.query(["green tea"], 1)["ids"] == [["tea"]]
    assert ctxemb_pgvector.open_table(pg, "docs", minilm).ids() == {"tea", "moon"}


def test_a_connection_outside_autocommit_is_refused_up_front(pg, minilm):
    with (
        psycopg.connect(pg.ctxemb_dsn) as conn,
        pytest.raises(InvalidInputError, match="autocommit"),
    ):
        ctxemb_pgvector.open_table(conn, "docs", minilm)
    assert ctxemb_pgvector.stored_or_none(pg, "docs") is None


def test_a_plain_connection_to_a_database_without_pgvector_says_so(pg_dsn, minilm):
    with (
        psycopg.connect(fresh_database(pg_dsn), autocommit=True) as conn,
        pytest.raises(MissingDependencyError, match="CREATE EXTENSION vector"),
    ):
        ctxemb_pgvector.open_table(conn, "docs", minilm)


def test_a_role_that_may_not_create_pgvector_is_told_who_must_and_where(pg_dsn):
    # The usual second-day case: an application's own role, on a database without pgvector.
    # PostgreSQL says "permission denied to create extension ... Must be superuser", which
    # connect passed on as StoreUnavailableError ("not allowed by the database"), against its
    # docstring's MissingDependencyError and with no statement to run.
    dsn = fresh_database(pg_dsn)
    base, _, query = dsn.partition("?")
    name = base.rsplit("/", 1)[1]
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("CREATE ROLE app_h47 LOGIN PASSWORD 'hunter2secret'")
        admin.execute(f'ALTER DATABASE "{name}" OWNER TO app_h47')
    as_app = base.replace("postgresql://postgres:@", "postgresql://app_h47:hunter2secret@")
    as_app += f"?{query}" if query else ""
    with pytest.raises(MissingDependencyError) as caught:
        ctxemb_pgvector.connect(as_app)
    said = str(caught.value)
    assert f"CREATE EXTENSION vector; in database {name!r}" in said and "'app_h47'" in said
    assert "hunter2secret" not in said
    with psycopg.connect(dsn, autocommit=True) as admin:  # nothing was created
        assert (
            admin.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None
        )
        admin.execute("CREATE EXTENSION vector")  # as advised: then the role connects
    ctxemb_pgvector.connect(as_app).close()
