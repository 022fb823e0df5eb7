"""pgvector's options on the ``ctxemb`` command line: ``--dsn`` (and ``--schema``).

The module the CLI's store table names for ``--store pgvector``; it follows the protocol
:class:`ctxemb_core.cli.stores.StoreOptions`. ``--dsn`` defaults to ``$CTXEMB_PG_DSN``, then to
libpq's own defaults (``PGHOST``, ``PGDATABASE``, ...).
"""

from __future__ import annotations

import argparse
import os
import shlex
from typing import Any

from ctxemb_core.errors import InvalidInputError
from ctxemb_pgvector._connect import connect as _connect

#: The environment variable ``--dsn`` defaults to.
DSN_ENV = "CTXEMB_PG_DSN"


def add_arguments(parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
    """``--dsn`` and ``--schema`` (the demo has no PostgreSQL: nothing is added for it)."""
    if demo:
        return
    parser.add_argument(
        "--dsn",
        help=f"with --store pgvector: the PostgreSQL connection string (default: ${DSN_ENV})",
    )
    parser.add_argument(
        "--schema", default=None, help="with --store pgvector: the tables' schema (public)"
    )


def check_arguments(args: argparse.Namespace, *, demo: bool = False) -> None:
    """``--dsn`` given, or taken from the environment; no Chroma option beside it."""
    if demo:
        raise InvalidInputError("the demo runs on Chroma: leave out --store pgvector")
    for option in ("path", "host", "port"):
        if getattr(args, option, None) is not None:
            raise InvalidInputError(f"--{option} is a Chroma option; --store pgvector takes --dsn")
    if getattr(args, "dsn", None) is None:
        args.dsn = os.environ.get(DSN_ENV)
    if not args.dsn:
        raise InvalidInputError(
            f"--store pgvector needs --dsn (a PostgreSQL connection string, e.g. "
            f"postgresql://user@localhost:5432/rag) or ${DSN_ENV}"
        )
    if getattr(args, "schema", None) is None:
        args.schema = "public"


def absent(args: argparse.Namespace) -> bool:
    """A database is never "not there yet" the way a folder is: connecting says so."""
    return False


def flags(args: argparse.Namespace) -> str:
    out = f"--store pgvector --dsn {shlex.quote(str(args.dsn))}"
    return out + (f" --schema {args.schema}" if args.schema not in (None, "public") else "")


def location(args: argparse.Namespace) -> str:
    return str(args.dsn)


def connect(args: argparse.Namespace, *, create: bool) -> Any:
    """A connection to the database (pgvector enabled only when the command may create)."""
    return _connect(args.dsn, create_extension=create)


def adapter() -> Any:
    import ctxemb_pgvector

    return ctxemb_pgvector
