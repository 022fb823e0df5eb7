"""Accepting a query-side contract change on a stamped table: the stamp row rewritten."""

from __future__ import annotations

from typing import Any

from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.contract import same_contract
from ctxemb_core.errors import InvalidInputError, StampError
from ctxemb_core.guard import RestampReport, as_embedder, check_querier, restamp_stamp
from ctxemb_pgvector._connect import check_connection, translated
from ctxemb_pgvector._open import _lock, write_stamp
from ctxemb_pgvector._store import stored_or_none, stored_table
from ctxemb_pgvector._verify import unstamped


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
    new_embedder = given or chosen
    stored = stored_table(conn, name, schema)
    if not stored.stamped:
        raise unstamped(stored)
    stamp = IndexStamp.from_metadata(stored.metadata)
    new_stamp, report = restamp_stamp(stamp, new_embedder)
    if not report.changed:
        return report
    with translated(f"re-stamping {name!r}"), conn.transaction():
        _lock(conn, schema, name)
        again = stored_or_none(conn, name, schema)
        if again is None or again.version != stored.version:
            raise StampError(
                f"the stamp of {name!r} changed while it was re-stamped; nothing was written: "
                "check it (ctxemb_pgvector.verify) and re-stamp again"
            )
        write_stamp(conn, schema, name, new_stamp)
    return report
