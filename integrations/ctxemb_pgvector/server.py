"""``python -m ctxemb_pgvector.server DIR``: a local PostgreSQL with pgvector, for trying it out:
its DSN printed, kept running until Ctrl-C, SIGTERM or SIGHUP (``docs/pgvector.md``, "Trying it
out: a local server")."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from ctxemb_pgvector._connect import _adopt_orphan, _alive, connect, local_server


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # As Ctrl-C: pgserver stops the server in an exit handler (docs/pgvector.md, "Trying it out").
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m ctxemb_pgvector.server DIR", file=sys.stderr)
        return 2
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    try:
        folder = Path(argv[0])
        dead = _adopt_orphan(folder.resolve()) if folder.is_dir() else []
        orphan = _postmaster(folder) if dead else None
        dsn = local_server(folder)
        connect(dsn).close()  # pgvector enabled in the default database
        # Everything said on stderr before the DSN on stdout, which a caller may act on at once.
        if orphan is not None:
            print(
                f"adopted the server (pid {orphan}) in {argv[0]} that a process now gone "
                f"(pid {', '.join(map(str, dead))}) left running: this helper now owns it",
                file=sys.stderr,
                flush=True,
            )
        print(
            f"PostgreSQL with pgvector is running in {argv[0]}; e.g. ctxemb index --store pgvector "
            f"--dsn '{dsn}' ...  (Ctrl-C or kill {os.getpid()} stops it)",
            file=sys.stderr,
            flush=True,
        )
        print(dsn, flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0


def _postmaster(folder: Path) -> int | None:
    """The pid of the server running in ``folder``, if one is."""
    try:
        pid = int((folder / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if _alive(pid) else None


if __name__ == "__main__":
    sys.exit(main())
