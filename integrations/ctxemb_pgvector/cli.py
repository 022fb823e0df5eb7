"""pgvector's options on the ``ctxemb`` command line, ``--dsn`` (default ``$CTXEMB_PG_DSN``)
and ``--schema``, for ``--store pgvector`` (the protocol ``cli.stores.StoreOptions``)."""

from __future__ import annotations

import argparse
from typing import Any

from ctxemb_core.cli.stores import ConnectionString, Scope, options_of

#: The environment variable ``--dsn`` defaults to.
DSN_ENV = "CTXEMB_PG_DSN"
#: The tables' schema without ``--schema``.
DEFAULT_SCHEMA = "public"


def _check_schema(name: str, what: str) -> str:
    from ctxemb_pgvector._sql import check_name  # psycopg: only for a pgvector command

    return check_name(name, what)


def _options() -> ConnectionString:
    """A connection string's options with ``--schema``, from this module's defaults at the call."""
    schema = Scope("schema", DEFAULT_SCHEMA, "PostgreSQL: the tables' schema", _check_schema)
    return ConnectionString(
        "pgvector", "PostgreSQL", DSN_ENV, "postgresql://user@localhost:5432/rag", within=schema
    )


# add_arguments, check_arguments, defaults, ...: _options()'s (nothing for the demo); adapter().
__getattr__ = options_of(__name__, _options)


def connect(args: argparse.Namespace, *, create: bool) -> Any:
    """A connection to the database (pgvector enabled only when the command may create)."""
    from ctxemb_pgvector._connect import connect as _connect  # psycopg: only now

    return _connect(args.dsn, create_extension=create)


def ray_session(args: argparse.Namespace, name: str) -> Any:
    """Table ``name`` in the database, as every Ray actor reaches it (``ctxemb index --ray``)."""
    from ctxemb_ray import AdapterSession

    return AdapterSession("ctxemb_pgvector", name, {"dsn": args.dsn}, {"schema": args.schema})
