"""pgvector's options on the ``ctxemb`` command line, ``--dsn`` (default ``$CTXEMB_PG_DSN``)
and ``--schema``, for ``--store pgvector`` (the protocol ``cli.stores.StoreOptions``)."""

from __future__ import annotations

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
    example = "postgresql://user@localhost:5432/rag"
    return ConnectionString(
        "pgvector", "PostgreSQL", DSN_ENV, example, within=schema, create="create_extension"
    )


# add_arguments, check_arguments, connect, ray_session, ...: _options()'s (nothing for the
# demo); adapter().
__getattr__ = options_of(__name__, _options)
