"""The tools over one collection: verify it, find which contract wrote it, re-stamp it.

Each is core's over a :class:`ChromaDriver` (:func:`ctxemb_core.index.verify_driver`,
:func:`ctxemb_core.detect.detect_driver`, :func:`ctxemb_core.index.restamp_index`), taking and
naming Chroma's clients and collections.
"""

from __future__ import annotations

from collections.abc import Collection as Names
from typing import Any

from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection

from ctxemb_chroma._collection import GuardedCollection
from ctxemb_chroma._driver import ChromaDriver
from ctxemb_chroma._store import check_client, check_name, stored_collection, translated
from ctxemb_core import Embedder, EmbeddingContract
from ctxemb_core.detect import DetectReport, detect_driver
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import RestampReport, VerifyReport, check_count
from ctxemb_core.index import Capabilities, restamp_index, verify_driver
from ctxemb_core.stamp import CANARY_TOLERANCE

__all__ = ["detect", "restamp", "verify"]


class _Given(ChromaDriver):
    """The driver of one raw collection object, as the caller holds it (its client is the
    collection's own: a raw collection does not hold the ``ClientAPI`` it came from)."""

    def __init__(self, raw: Collection) -> None:
        self.client = raw._client  # type: ignore[assignment]  # the collection's ServerAPI
        self._name, self.embedder, self._raw = raw.name, None, raw
        self._seen = raw
        self._marks = None  # a verify lists every id: no mark is needed
        self.capabilities = Capabilities(filters=True)

    def _stored(self) -> Collection:
        self._seen = self._raw
        return self._raw


def verify(
    collection: Any,
    contract: EmbeddingContract | Embedder,
    sample: int = 32,
    *,
    all: bool = False,
    progress: bool | None = None,
) -> VerifyReport:
    """Check a collection against a contract and report every finding (never raises for them).

    Args:
        collection: a :class:`GuardedCollection` or a raw Chroma collection.
        contract: the caller's contract (or embedder).
        sample: how many stored records to re-embed (the newest half and a random half).
        all: re-embed every stored record instead, page by page, with a progress bar.
        progress: show the progress bar (``None``: as the embedder's ``show_progress`` says).

    The report's ``checked()`` / ``not_checked()`` (and ``to_dict()``) say what was proven and
    what was not, with the probability that a sample finds one altered older record.
    """
    if isinstance(collection, GuardedCollection):
        driver: ChromaDriver = ChromaDriver(collection.client, collection.name)
    elif isinstance(collection, Collection):
        driver = _Given(collection)
    else:
        raise InvalidInputError(
            f"collection must be a Chroma collection, got {type(collection).__name__}"
        )
    with translated(f"verifying {driver.name!r}"):
        return verify_driver(driver, contract, all=all, sample=sample, progress=progress)


def detect(
    client: ClientAPI,
    name: str,
    *models: Any,
    sample: int = 32,
    keep: Names[str] = (),
    tolerance: float = CANARY_TOLERANCE,
    backend: str = "auto",
) -> DetectReport:
    """Find which contract wrote a collection's vectors; reads a sample, never writes.

    The newest half and a random half of ``sample`` records are re-embedded under the
    candidates of each model (see :func:`ctxemb_core.detect.detect_contract`). A stamped
    collection's own contract is tried too, and ``report.stamp_match`` says whether it is the
    best match. A conclusive report can be adopted with
    ``open_collection(client, name, report.best.contract, adopt=True)``.

    Args:
        client: a ``chromadb`` client.
        name: the collection, stamped or not (a raw ``chromadb`` one).
        *models: candidate models (contracts, embedders, folders or names); default: the
            stamp's contract, else the bundled all-MiniLM-L6-v2 (Chroma's own default model).
        sample: how many stored records to re-embed (at least 1).
        keep: contract fields held as each model's contract has them instead of varied.
        tolerance: the agreement each record must reach.
        backend: the embedder backend.

    Example:
        >>> report = detect(client, "legacy-docs")       # doctest: +SKIP
        >>> report.conclusive, report.best.label         # doctest: +SKIP
        (True, 'mean, normalised, no document prefix')
    """
    check_client(client)
    check_name(name)
    check_count(sample, "sample", 1)
    stored_collection(client, name)  # a missing one named with a hint at a near one
    with translated(f"sampling {name!r}"):
        return detect_driver(
            ChromaDriver(client, name),
            *models,
            sample=sample,
            keep=keep,
            tolerance=tolerance,
            backend=backend,
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
    stored_collection(client, collection_name)  # a missing one named with a hint at a near one
    given = embedder or (contract if isinstance(contract, Embedder) else None)
    driver = ChromaDriver(client, collection_name, embedder=given)  # whose function Chroma keeps
    with translated(f"re-stamping {collection_name!r}"):
        return restamp_index(driver, contract, embedder=embedder)
