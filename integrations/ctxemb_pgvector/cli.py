"""pgvector's options on the ``ctxemb`` command line: ``--dsn`` (and ``--schema``).

The module the CLI's store table names for ``--store pgvector``; it follows the protocol
:class:`ctxemb_core.cli.stores.StoreOptions`. ``--dsn`` defaults to ``$CTXEMB_PG_DSN``, then to
libpq's own defaults (``PGHOST``, ``PGDATABASE``, ...).
"""

from __future__ import annotations

import argparse
from typing import Any

from ctxemb_core.cli.stores import ConnectionString, options_of
from ctxemb_pgvector._connect import connect as _connect
from ctxemb_pgvector._sql import check_name

#: The environment variable ``--dsn`` defaults to.
DSN_ENV = "CTXEMB_PG_DSN"
#: The tables' schema without ``--schema``.
DEFAULT_SCHEMA = "public"


def _options() -> ConnectionString:
    """Those of every store reached by a connection string, with this module's default as it
    is at the call (so a default changed here is the one every command fills in and shows)."""
    return ConnectionString(
        "pgvector", "PostgreSQL", DSN_ENV, "postgresql://user@localhost:5432/rag"
    )


# absent, from_environment: _options()'s.
__getattr__ = options_of(__name__, _options)


def add_arguments(parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
    """``--dsn`` and ``--schema`` (the demo has no PostgreSQL: nothing is added for it)."""
    if demo:
        return
    _options().add_argument(parser)
    parser.add_argument(
        "--schema",
        default=None,
        help=f"PostgreSQL: the tables' schema (default: {DEFAULT_SCHEMA})",
    )


def check_arguments(args: argparse.Namespace, *, demo: bool = False) -> None:
    """``--dsn`` (:class:`~ctxemb_core.cli.stores.ConnectionString`) and ``--schema``."""
    _options().check_arguments(args, demo=demo)
    if getattr(args, "schema", None) is None:
        args.schema = DEFAULT_SCHEMA
    check_name(args.schema, "--schema")


def defaults() -> dict[str, str]:
    return {**_options().defaults(), "schema": DEFAULT_SCHEMA}


def scope(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of the adapter's calls that the checked options set: the schema."""
    return {"schema": args.schema}


def flags(args: argparse.Namespace) -> str:
    out = _options().flags(args)
    return out + (f" --schema {args.schema}" if args.schema not in (None, "public") else "")


def location(args: argparse.Namespace) -> str:
    """The database (its DSN, the password masked) and the schema."""
    return f"{_options().location(args)} schema {args.schema}"


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
