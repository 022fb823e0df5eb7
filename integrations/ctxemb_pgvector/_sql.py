"""What a guarded table is in PostgreSQL: its columns, its stamp row, the SQL that reads both
(why each is so: ``docs/pgvector.md``, "How the table keeps the protocol")."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ctxemb_core import EmbeddingContract
from ctxemb_core.contract import Precision
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index.driver import default_space

#: The table of stamps, in the guarded table's schema.
STAMPS = "ctxemb_stamps"
#: ctxemb's own column beside Haystack's: the row's write number.
SEQ = "ctxemb_seq"
#: The longest id the ``id VARCHAR(128)`` column holds.
MAX_ID = 128

# A name PostgreSQL keeps as given when quoted, short enough that the index names built from it
# (``<name>_ctxemb_hnsw``) stay within its 63 bytes.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,47}")


def check_name(name: Any, what: str = "table name") -> str:
    """``name`` if it can name a guarded table, else ``InvalidInputError`` saying why."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name == STAMPS:
        raise InvalidInputError(
            f"{what} {name!r} is not one ctxemb's pgvector adapter takes: 1-48 characters of "
            "a-z A-Z 0-9 _ -, starting with a letter or _"
            + (f" ({STAMPS!r} is ctxemb's own)" if name == STAMPS else "")
        )
    return name


@dataclass(frozen=True)
class Layout:
    """How a contract's vectors are stored and searched: ``column`` type (``kind``, ``dim``),
    search ``operator``, HNSW ``opclass``, ``space`` (``docs/pgvector.md``, "What is stored")."""

    column: str
    operator: str
    opclass: str
    space: str
    kind: str
    dim: int

    @property
    def space_for_similarity(self) -> str:
        """The space :meth:`distance` is read in (Hamming as the ±1 vectors' cosine distance)."""
        return "cosine" if self.space == "hamming" else self.space

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.column, "operator": self.operator, "opclass": self.opclass}

    def distance(self, column: sql.Composable, query: sql.Composable) -> sql.Composed:
        """The SQL of this layout's distance, as :func:`ctxemb_core.guard.similarity` reads it."""
        raw = sql.SQL("({} {} {})").format(column, sql.SQL(self.operator), query)
        if self.space == "ip":  # <#> is the negated inner product: 1 + it is Chroma's 1 - dot
            return sql.SQL("(1 + {})").format(raw)
        if self.space == "hamming":  # on ±1 vectors cos = 1 - 2·hamming/dim
            return sql.SQL("(2.0 * {} / {})").format(raw, sql.Literal(self.dim))
        return raw


def layout_for(contract: EmbeddingContract) -> Layout:
    """The column type, operator and index a contract's vectors get (``docs/pgvector.md``,
    "What is stored, and how")."""
    dim = contract.output_dim
    if contract.precision is Precision.BINARY:
        return Layout(f"bit({dim})", "<~>", "bit_hamming_ops", "hamming", "bit", dim)
    kind = "halfvec" if contract.precision is Precision.FLOAT16 else "vector"
    space = default_space(contract)  # cosine (<=>) or inner product (<#>): core's choice
    operator = "<=>" if space == "cosine" else "<#>"
    return Layout(f"{kind}({dim})", operator, f"{kind}_{space}_ops", space, kind, dim)


def ident(schema: str, name: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))


def advisory_lock(conn: Any, key: str) -> None:
    """Hold the advisory lock of ``key`` until the caller's transaction ends."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (key,))


def relation_exists(conn: Any, schema: str, name: str) -> bool:
    """Whether ``schema.name`` exists (a table, a sequence, an index)."""
    found = conn.execute("SELECT to_regclass(%s)", (f'"{schema}"."{name}"',)).fetchone()
    return found is not None and found[0] is not None


def setup_statements(schema: str) -> list[sql.Composed]:
    """The stamps table, its version sequence and the triggers' functions (idempotent)."""
    stamps = ident(schema, STAMPS)
    versions = ident(schema, "ctxemb_stamp_version")
    rows = ident(schema, "ctxemb_row_seq")
    bump_version = ident(schema, "ctxemb_bump_version")
    bump_seq = ident(schema, "ctxemb_bump_seq")
    return [
        sql.SQL("CREATE SEQUENCE IF NOT EXISTS {}").format(versions),
        sql.SQL("CREATE SEQUENCE IF NOT EXISTS {}").format(rows),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (table_name text PRIMARY KEY, version bigint NOT "
            "NULL, stamp jsonb NOT NULL, layout jsonb NOT NULL, written timestamptz NOT NULL "
            "DEFAULT now())"
        ).format(stamps),
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "NEW.version := nextval({}); NEW.written := now(); RETURN NEW; END $$"
        ).format(bump_version, sql.Literal(f'"{schema}".ctxemb_stamp_version')),
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "NEW.ctxemb_seq := nextval({}); RETURN NEW; END $$"
        ).format(bump_seq, row_seq(schema)),
        sql.SQL(
            "CREATE OR REPLACE TRIGGER ctxemb_stamp_version BEFORE INSERT OR UPDATE ON {} "
            "FOR EACH ROW EXECUTE FUNCTION {}()"
        ).format(stamps, bump_version),
        always(stamps, "ctxemb_stamp_version"),
    ]


def row_seq(schema: str) -> sql.Literal:
    """The sequence every row's ``ctxemb_seq`` is taken from, as ``nextval`` names it."""
    return sql.Literal(f'"{schema}".ctxemb_row_seq')


def always(table: sql.Composable, trigger: str) -> sql.Composed:
    """``trigger`` fires whoever writes, a replication subscriber too (``docs/pgvector.md``)."""
    return sql.SQL("ALTER TABLE {} ENABLE ALWAYS TRIGGER {}").format(table, sql.Identifier(trigger))


def table_statement(schema: str, name: str, column: str, *, seq: bool = True) -> sql.Composed:
    """``CREATE TABLE`` of Haystack's layout with an ``embedding`` ``column`` (and ``seq``)."""
    return sql.SQL(
        "CREATE TABLE {} (id VARCHAR(128) PRIMARY KEY, embedding {}, content TEXT, "
        "blob_data BYTEA, blob_meta JSONB, blob_mime_type VARCHAR(255), meta JSONB{})"
    ).format(
        ident(schema, name),
        sql.SQL(column),
        sql.SQL(", ctxemb_seq bigint NOT NULL DEFAULT nextval({})").format(row_seq(schema))
        if seq
        else sql.SQL(""),
    )


def seq_statements(schema: str, name: str) -> list[sql.Composed]:
    """The indexes of the rows by write and of those without a vector, and the row trigger."""
    table = ident(schema, name)
    return [
        sql.SQL("CREATE INDEX {} ON {} (ctxemb_seq)").format(
            sql.Identifier(f"{name}_ctxemb_seq"), table
        ),
        sql.SQL("CREATE INDEX {} ON {} (ctxemb_seq) WHERE embedding IS NULL").format(
            sql.Identifier(f"{name}_ctxemb_novec"), table
        ),
        sql.SQL(
            "CREATE TRIGGER ctxemb_row_seq BEFORE INSERT OR UPDATE ON {} FOR EACH ROW "
            "EXECUTE FUNCTION {}()"
        ).format(table, ident(schema, "ctxemb_bump_seq")),
        always(table, "ctxemb_row_seq"),
    ]


def create_statements(schema: str, name: str, layout: Layout, hnsw: bool) -> list[sql.Composed]:
    """The guarded table, its trigger and (``hnsw``) its HNSW index."""
    out = [table_statement(schema, name, layout.column), *seq_statements(schema, name)]
    return [*out, hnsw_statement(schema, name, layout)] if hnsw else out


def hnsw_statement(schema: str, name: str, layout: Layout, suffix: str = "") -> sql.Composed:
    """An HNSW index of the layout's operator class on ``embedding``, ``<name>_ctxemb_hnsw``."""
    return sql.SQL("CREATE INDEX {} ON {} USING hnsw (embedding {})").format(
        sql.Identifier(f"{name}_ctxemb_hnsw{suffix}"), ident(schema, name), sql.SQL(layout.opclass)
    )


#: pgvector's highest ``hnsw.ef_search``.
MAX_EF_SEARCH = 1000


def copy_rows(
    conn: psycopg.Connection[Any],
    table: sql.Composable,
    kind: str,
    rows: Iterable[tuple[str, str | None, Any, Any]],
    upsert: bool,
) -> None:
    """Write ``(id, content, meta, embedding)`` rows by binary COPY in the caller's transaction
    (``upsert``: existing rows replaced whole; ``kind``: the column's type)."""
    columns = sql.SQL("(id, content, meta, embedding)")
    target: sql.Composable = table
    if upsert:
        target = sql.Identifier("ctxemb_upsert")
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE ctxemb_upsert ON COMMIT DROP AS SELECT id, content, meta, "
                "embedding FROM {} WITH NO DATA"
            ).format(table)
        )
    with conn.cursor() as cur:
        with cur.copy(
            sql.SQL("COPY {} {} FROM STDIN (FORMAT BINARY)").format(target, columns)
        ) as copy:
            copy.set_types(["varchar", "text", "jsonb", kind])
            for row in rows:
                copy.write_row((row[0], row[1], Jsonb(row[2]), row[3]))
        if upsert:
            cur.execute(
                sql.SQL(
                    "INSERT INTO {} (id, content, meta, embedding, blob_data, blob_meta, "
                    "blob_mime_type) SELECT id, content, meta, embedding, NULL, NULL, NULL "
                    "FROM ctxemb_upsert ON CONFLICT (id) DO UPDATE SET content = "
                    "EXCLUDED.content, meta = EXCLUDED.meta, embedding = EXCLUDED.embedding, "
                    "blob_data = NULL, blob_meta = NULL, blob_mime_type = NULL"
                ).format(table)
            )
