"""The on-demand tools over a table's driver: verify (every finding reported), re-stamp (a
query-side change accepted), detect (which contract wrote the vectors). Core decides each
(:mod:`ctxemb_core.index.guarded`, :mod:`ctxemb_core.detect`); this module names the table."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.contract import same_contract
from ctxemb_core.detect import DetectReport, detect_contract
from ctxemb_core.errors import InvalidInputError, StampError
from ctxemb_core.guard import (
    RestampReport,
    VerifyReport,
    as_embedder,
    check_count,
    check_querier,
    sample_ranges,
)
from ctxemb_core.index import StampMovedError, restamp_index, verify_driver
from ctxemb_core.stamp import CANARY_TOLERANCE
from ctxemb_pgvector._connect import check_connection
from ctxemb_pgvector._driver import PgvectorDriver
from ctxemb_pgvector._store import StoredTable, stored_table
from ctxemb_pgvector._table import GuardedTable

__all__ = ["detect", "restamp", "verify"]

_FOR_CHECK = frozenset({"vector", "text"})


def verify(
    table: Any,
    contract: EmbeddingContract | Embedder,
    sample: int = 32,
    *,
    all: bool = False,
    progress: bool | None = None,
) -> VerifyReport:
    """Check a table against a contract and report every finding (never raises for them).

    Args:
        table: a :class:`GuardedTable`, or a :class:`StoredTable` (``stored_table(conn, name)``,
            unguarded: for a table that would not open).
        contract: the caller's contract (or embedder).
        sample: how many stored rows to re-embed (the newest half by last write, whoever wrote
            it, and a random half).
        all: re-embed every stored row instead, page by page, with a progress bar.
        progress: show the progress bar (``None``: as the embedder's ``show_progress`` says).

    The report's ``configuration`` says whether the embedding column is of the type the
    stamp's contract stores (``match``, or what differs); ``checked()`` / ``not_checked()``
    say what was proven.
    """
    if isinstance(table, GuardedTable):
        driver = table.driver
    elif isinstance(table, StoredTable):
        driver = PgvectorDriver(table.conn, table.name, schema=table.schema)
    else:
        raise InvalidInputError(
            f"table must be a GuardedTable or a StoredTable, got {type(table).__name__}"
        )
    return verify_driver(driver, contract, all=all, sample=sample, progress=progress)


def restamp(
    conn: Any,
    name: str,
    contract: EmbeddingContract | Embedder,
    *,
    embedder: Embedder | None = None,
    schema: str = "public",
) -> RestampReport:
    """Stamp a table with a new contract whose change leaves its stored vectors valid.

    A new query prefix, a separate query encoder, or a new name for the same weights: the rows
    stay, the stamp row (fingerprint, contract and canary, computed with the new contract's
    embedder) is rewritten in one transaction under the table's advisory lock, and every open
    :class:`GuardedTable` sees its version change on its next call.

    Raises:
        ContractMismatchError: the change needs the documents re-embedded: migrate instead.
        EncoderDriftError: the new embedder does not reproduce the stored document vectors.
        MissingStampError: the table carries no stamp (open it with ``adopt=True`` first).
    """
    check_connection(conn)
    chosen = as_embedder(contract)
    given = check_querier(embedder)
    if given is not None and not same_contract(chosen.contract, given.contract, exact=True):
        raise InvalidInputError(
            "embedder must embed under the contract being stamped; its contract differs in "
            f"{chosen.contract.diff(given.contract)}"
        )
    stored_table(conn, name, schema)  # a missing table named with the schema's tables
    try:
        return restamp_index(PgvectorDriver(conn, name, schema=schema), given or chosen)
    except StampMovedError:
        raise StampError(
            f"the stamp of {name!r} changed while it was re-stamped; nothing was written: "
            "check it (ctxemb_pgvector.verify) and re-stamp again"
        ) from None


def detect(
    conn: Any,
    name: str,
    *models: Any,
    sample: int = 32,
    keep: Collection[str] = (),
    tolerance: float = CANARY_TOLERANCE,
    backend: str = "auto",
    schema: str = "public",
) -> DetectReport:
    """Find which contract wrote a table's vectors; reads a sample, never writes.

    As :func:`ctxemb_chroma.detect`: the newest half (by last write) and a random half of
    ``sample`` rows are re-embedded under each model's candidate contracts. A conclusive report
    can be adopted with ``open_table(conn, name, report.best.contract, adopt=True)``.
    """
    check_connection(conn)
    size = check_count(sample, "sample", 1)
    stored = stored_table(conn, name, schema)
    driver = PgvectorDriver(conn, name, schema=schema)
    records = stored.count()
    rows = [r for a, b in sample_ranges(records, size) for r in driver.page(a, b - a, _FOR_CHECK)]
    try:
        stamped: EmbeddingContract | None = IndexStamp.from_metadata(stored.metadata).contract
    except StampError:
        stamped = None
    return detect_contract(
        [r.text for r in rows],
        [r.vector for r in rows],
        models,
        ids=[r.id for r in rows],
        stamped=stamped,
        keep=keep,
        records=records,
        tolerance=tolerance,
        backend=backend,
    )
