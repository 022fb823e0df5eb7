"""``python -m ctxemb_pgvector.server DIR``: a local PostgreSQL with pgvector, for trying it out,
its DSN printed and kept running by core's :func:`~ctxemb_core.index.embedded.helper_main`
(``docs/pgvector.md``, "Trying it out: a local server")."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ctxemb_core.index.embedded import alive, helper_main
from ctxemb_pgvector._connect import _adopt_orphan, connect, local_server


def main(argv: list[str] | None = None) -> int:
    return helper_main("ctxemb_pgvector.server", _start, argv)


def _start(given: str) -> tuple[str, list[str]]:
    """Start (or join) the server in folder ``given``: its DSN, and what to say first."""
    folder = Path(given)
    dead = _adopt_orphan(folder.resolve()) if folder.is_dir() else []
    orphan = _postmaster(folder) if dead else None
    dsn = local_server(folder)
    connect(dsn).close()  # pgvector enabled in the default database
    said = [
        f"PostgreSQL with pgvector is running in {given}; e.g. ctxemb index --store pgvector "
        f"--dsn '{dsn}' ...  (Ctrl-C or kill {os.getpid()} stops it)"
    ]
    if orphan is not None:
        said.insert(
            0,
            f"adopted the server (pid {orphan}) in {given} that a process now gone "
            f"(pid {', '.join(map(str, dead))}) left running: this helper now owns it",
        )
    return dsn, said


def _postmaster(folder: Path) -> int | None:
    """The pid of the server running in ``folder``, if one is."""
    try:
        pid = int((folder / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if alive(pid) else None


if __name__ == "__main__":
    sys.exit(main())
