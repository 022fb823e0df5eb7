"""Re-stamping a collection: deliberately accepting a new query side without re-embedding."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from chromadb.api import ClientAPI

from ctxemb_chroma._function import ContractEmbeddingFunction
from ctxemb_chroma._store import (
    check_client,
    check_name,
    configured_function,
    stored_collection,
    translated,
)
from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.contract import same_contract
from ctxemb_core.errors import InvalidInputError, StampError
from ctxemb_core.guard import (
    RestampReport,
    as_embedder,
    check_configuration,
    check_querier,
    restamp_stamp,
)


def restamp(
    client: ClientAPI,
    collection_name: str,
    contract: EmbeddingContract | Embedder,
    *,
    embedder: Embedder | None = None,
) -> RestampReport:
    """Stamp a collection with a new contract whose change leaves its documents valid.

    What a query-side change needs (a new ``query_prefix``, a separate query encoder) or a new
    name for the same weights: the stored vectors stay, the stamp (fingerprint, contract and
    canary, computed with the new contract's embedder) and Chroma's persisted embedding
    function are rewritten in one ``modify`` call, so a raw ``get_collection`` in a process that
    imported ``ctxemb_chroma`` embeds queries under the new query side. Works on any stamped
    collection, whichever adapter wrote it (``ctxemb_chroma``, Haystack's
    ``ChromaDocumentStore``, LangChain's ``Chroma``). Collections opened before keep their
    contract until they notice the change; open them again under the new contract.

    Args:
        client: a ``chromadb`` client.
        collection_name: the stamped collection.
        contract: the new contract (or an :class:`~ctxemb_core.Embedder` built from it).
        embedder: the embedder that computes the new canary (e.g. one with another backend);
            its contract must be ``contract``. Default: ``Embedder(contract)``.

    Returns:
        What changed: the old and new fingerprints and the differing fields (nothing is
        written when the contracts are identical).

    Raises:
        ContractMismatchError: the change needs the documents re-embedded; use
            :func:`ctxemb_chroma.migrate` into a new collection instead.
        EncoderDriftError: the new contract's embedder does not reproduce the stored document
            vectors (the stamp's canary).
        MissingStampError: the collection carries no stamp (open it with ``adopt=True`` first).
        DamagedStampError: its stamp cannot be read.
        InvalidInputError: no such collection, or an ``embedder`` of another contract.
        ConfigurationMismatchError: the store did not keep what was written.

    Example:
        >>> new = contract.with_(query_prefix="query: ")               # doctest: +SKIP
        >>> restamp(client, "docs", new)                               # doctest: +SKIP
        RestampReport(old_fingerprint='3f1c…', new_fingerprint='9a0b…', ...)
    """
    check_client(client)
    check_name(collection_name)
    new_embedder = _embedder(contract, embedder)
    raw = stored_collection(client, collection_name)
    with translated(f"re-stamping {collection_name!r}"):
        stamp = IndexStamp.from_metadata(raw.metadata)
        new_stamp, report = restamp_stamp(stamp, new_embedder)
        if not report.changed:
            return report
        function = ContractEmbeddingFunction(new_embedder)
        # Chroma saves the configuration, then asks the old function to validate the change;
        # ours refuses any other contract (after the save). What was kept is read back below.
        with contextlib.suppress(ValueError, StampError):
            raw.modify(
                metadata={**_without_stamp(raw.metadata), **new_stamp.to_metadata()},
                configuration={"embedding_function": function},
            )
        again = stored_collection(client, collection_name)
        written = IndexStamp.from_metadata(again.metadata)
        if not same_contract(new_stamp, written, exact=True):
            raise InvalidInputError(
                f"re-stamping {collection_name!r}: the store kept fingerprint "
                f"{written.fingerprint[:12]}, not {new_stamp.fingerprint[:12]}: the write did not "
                "take, or another writer changed the stamp meanwhile. Check the collection with "
                "ctxemb_chroma.verify and re-stamp again."
            )
        check_configuration(written, *configured_function(again))
    return report


def _embedder(contract: EmbeddingContract | Embedder, embedder: Embedder | None) -> Embedder:
    chosen = as_embedder(contract)
    given = check_querier(embedder)
    if given is None:
        return chosen
    if not same_contract(chosen.contract, given.contract, exact=True):
        raise InvalidInputError(
            "embedder must embed under the contract being stamped; its contract differs in "
            f"{chosen.contract.diff(given.contract)}"
        )
    return given


def _without_stamp(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    # The collection's own keys stay; every ctxemb key comes from the new stamp. Chroma's
    # ``hnsw:`` keys cannot be written back (modify refuses any metadata naming hnsw:space, even
    # unchanged); the space lives on in the collection's configuration.
    return {k: v for k, v in (metadata or {}).items() if not k.startswith(("ctxemb:", "hnsw:"))}
