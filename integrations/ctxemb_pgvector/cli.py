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
from ctxemb_core.redact import redact_dsn
from ctxemb_pgvector._connect import connect as _connect
from ctxemb_pgvector._sql import check_name

#: The environment variable ``--dsn`` defaults to.
DSN_ENV = "CTXEMB_PG_DSN"
#: The tables' schema without ``--schema``.
DEFAULT_SCHEMA = "public"


def add_arguments(parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
    """``--dsn`` and ``--schema`` (the demo has no PostgreSQL: nothing is added for it)."""
    if demo:
        return
    parser.add_argument(
        "--dsn",
        help=f"the PostgreSQL connection string (default: ${DSN_ENV}); selects --store pgvector",
    )
    parser.add_argument(
        "--schema",
        default=None,
        help=f"PostgreSQL: the tables' schema (default: {DEFAULT_SCHEMA})",
    )


def check_arguments(args: argparse.Namespace, *, demo: bool = False) -> None:
    """``--dsn`` given, or taken from the environment (another store's options beside it are
    refused before, by :func:`ctxemb_core.cli.stores.choose_store`)."""
    if demo:
        raise InvalidInputError("the demo runs on Chroma: leave out --store pgvector")
    if getattr(args, "dsn", None) is None:
        args.dsn = os.environ.get(DSN_ENV)
    if not args.dsn:
        raise InvalidInputError(
            f"--store pgvector needs --dsn (a PostgreSQL connection string, e.g. "
            f"postgresql://user@localhost:5432/rag) or ${DSN_ENV}"
        )
    if getattr(args, "schema", None) is None:
        args.schema = DEFAULT_SCHEMA
    check_name(args.schema, "--schema")


def defaults() -> dict[str, str]:
    """The defaults :func:`check_arguments` fills in, as a help text shows them."""
    return {"dsn": f"${DSN_ENV}", "schema": DEFAULT_SCHEMA}


def from_environment() -> str | None:
    """What selects this store when no store option is given: ``$CTXEMB_PG_DSN``, if set."""
    return f"${DSN_ENV}" if os.environ.get(DSN_ENV) else None


def scope(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of the adapter's calls that the checked options set: the schema."""
    return {"schema": args.schema}


def absent(args: argparse.Namespace) -> bool:
    """A database is never "not there yet" the way a folder is: connecting says so."""
    return False


def flags(args: argparse.Namespace) -> str:
    """The options, the DSN's password masked (a command line to show, not to hold secrets)."""
    out = f"--store pgvector --dsn {shlex.quote(redact_dsn(args.dsn))}"
    return out + (f" --schema {args.schema}" if args.schema not in (None, "public") else "")


def location(args: argparse.Namespace) -> str:
    """The database (its DSN, the password masked) and the schema."""
    return f"{redact_dsn(args.dsn)} schema {args.schema}"


def connect(args: argparse.Namespace, *, create: bool) -> Any:
    """A connection to the database (pgvector enabled only when the command may create)."""
    return _connect(args.dsn, create_extension=create)


def ray_session(args: argparse.Namespace, name: str) -> Any:
    """Table ``name`` in the database, as every Ray actor reaches it (``ctxemb index --ray``)."""
    from ctxemb_pgvector._ray import DatabaseTable

    return DatabaseTable(args.dsn, name, args.schema)


def adapter() -> Any:
    import ctxemb_pgvector

    return ctxemb_pgvector
