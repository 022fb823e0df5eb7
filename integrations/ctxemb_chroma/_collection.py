"""A stamped Chroma collection bound to one contract: every call checked before it runs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection

from ctxemb_chroma._store import identity, read_settled, stored_or_none, translated
from ctxemb_chroma._verify import verify_open
from ctxemb_chroma._write import check_metadatas, write_undoable
from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.documents import TEXT_KEY, check_fingerprint
from ctxemb_core.errors import ExistingIdsError, InvalidInputError
from ctxemb_core.guard import (
    OPEN_SAMPLE,
    add_missing,
    check_count,
    check_delete,
    check_embedded,
    check_paging,
    check_querier,
    check_querier_canary,
    check_records,
    storable,
)
from ctxemb_core.sync import SyncReport, missing_ids, sync_batch, with_text_digest
from ctxemb_core.verified import OpenCheck


class GuardedCollection:
    """A Chroma collection bound to one contract; every call is checked before it runs.

    Every call first reads the collection back from the store (one ``get_collection``: 0.3-0.5
    ms embedded) and compares its id, stamp and Chroma's persisted configuration with what was
    verified: a change after open (a stamp replaced or removed, a configuration changed, the
    collection created again under the name) is verified again in full, or the call refused.
    """

    def __init__(
        self,
        client: ClientAPI,
        raw: Collection,
        embedder: Embedder,
        stamp: IndexStamp,
        *,
        sample: int = OPEN_SAMPLE,
        open_check: OpenCheck | None = None,
    ) -> None:
        self.client = client
        self.raw = raw
        self.embedder = embedder
        self.stamp = stamp
        self.sample = sample
        #: What the last verification checked of the stored records (``None`` when the
        #: collection was created or adopted by this open).
        self.open_check = open_check
        self._seen = identity(raw)
        self._queriers: list[Embedder] = [embedder]  # embedders whose canary this stamp passed

    @property
    def name(self) -> str:
        return self.raw.name

    @property
    def contract(self) -> EmbeddingContract:
        return self.embedder.contract

    def count(self) -> int:
        with translated("count"):
            return read_settled(self.current().count)

    def ids(self) -> set[str]:
        with translated("reading ids"):
            return set(read_settled(self.current().get, include=[])["ids"])

    def stored(self) -> Collection:
        """The collection as the store has it now, unguarded (for reading or verifying)."""
        raw = stored_or_none(self.client, self.name)
        if raw is None:
            raise InvalidInputError(f"collection {self.name!r} no longer exists")
        return raw

    def current(self) -> Collection:
        """The collection now, proven to carry the stamp this object verified (or re-verified)."""
        raw = self.stored()
        seen = identity(raw)
        if seen != self._seen:
            # Changed since it was verified (another process, a raw client): check it whole.
            with translated(f"verifying {self.name!r} again"):
                self.stamp, self.open_check = verify_open(
                    self.client, raw, self.embedder, self.sample, False
                )
            self.raw, self._seen, self._queriers = raw, seen, [self.embedder]
        return self.raw

    def add(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        upsert: bool = False,
    ) -> None:
        """Embed documents under the contract and write them.

        The batch, the stamp and, for ``add``, that no id is stored yet (Chroma would keep the
        old record silently) are checked before anything is written. A write that fails or is
        interrupted (Ctrl-C included) is undone exactly, in chunks of the store's batch limit.

        Raises:
            InvalidInputError: a bad batch (named), ExistingIdsError for ``add``.
            IncompleteWriteError: the write failed and so did its undo (both reported).
        """
        self._write(ids, documents, metadatas, upsert)

    def add_embedded(
        self,
        ids: Sequence[str],
        vectors: Any,
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        fingerprint: str,
        upsert: bool = False,
    ) -> None:
        """Write records a ctxemb embedder elsewhere already embedded, under ``fingerprint``.

        For frameworks whose embedder and writer are separate steps (Haystack, LangChain):
        the vectors are refused unless ``fingerprint`` is the stamp's, and each must be finite
        and of the contract's width; otherwise as :meth:`add` (checked whole, undone on error).

        Raises:
            ContractMismatchError: the vectors were made under another contract.
            InvalidInputError: a bad batch or vector (named), ExistingIdsError for ``add``.
        """
        self._write(ids, documents, metadatas, upsert, (vectors, fingerprint))

    def _write(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None,
        upsert: bool,
        embedded: tuple[Any, str] | None = None,
    ) -> None:
        ids, metadatas = check_records(ids, documents, metadatas)
        check_metadatas(ids, metadatas)  # the caller's, as Chroma would judge them
        # Each record carries the digest of the text its vector is of (what a re-index compares);
        # vectors embedded elsewhere may come with the digest of the text their embedder used.
        metadatas = [
            with_text_digest(m, d, keep=embedded is not None)
            for m, d in zip(metadatas or [None] * len(ids), documents, strict=True)
        ]
        raw = self.current()
        vectors = None
        if embedded is not None:
            check_fingerprint(embedded[1], self.stamp.contract)
            vectors = check_embedded(embedded[0], self.contract, ids)
        with translated("reading the records to be written"):
            before = read_settled(
                raw.get, ids=ids, include=["documents", "embeddings", "metadatas"]
            )
        if before["ids"] and not upsert:
            raise ExistingIdsError(tuple(before["ids"]))
        if vectors is None:
            vectors = storable(
                self.embedder.embed_documents(list(documents)), self.contract.precision
            )
        with translated("reading the store's batch limit"):
            step = self.client.get_max_batch_size()
        write_undoable(raw, step, upsert, ids, vectors, documents, metadatas, before)

    def add_missing(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> int:
        """Add the records whose ids the collection lacks; returns how many this call added.

        What indexing a corpus wants: a re-run, or another process indexing the same corpus
        at the same time, adds nothing twice and fails on nothing that is already there.
        """
        ids, metadatas = check_records(ids, documents, metadatas)
        return add_missing(self._present, self.add, ids, documents, metadatas)

    def sync(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> SyncReport:
        """Index a batch as a sync: embed and write only the records that are new or whose text
        changed; returns what was added, updated and left unchanged.

        Changed records are upserted (undone whole on failure, as :meth:`upsert`), so a sync
        interrupted mid-corpus keeps the batches before and a re-run resumes. ``dry_run``
        embeds and writes nothing. See :mod:`ctxemb_core.sync` for the rules.
        """
        ids, metadatas = check_records(ids, documents, metadatas)
        return sync_batch(
            self._stored,
            self.upsert,
            ids,
            documents,
            metadatas,
            dry_run=dry_run,
            progress=progress,
        )

    def delete_missing(self, keep: Iterable[str], *, dry_run: bool = False) -> list[str]:
        """Delete the records whose ids are not in ``keep`` (a corpus's ids); returns them.

        Deleting is by id in chunks of the store's batch limit; an interrupted run leaves some
        deleted and the next run deletes the rest.
        """
        gone = missing_ids(self.ids(), keep)
        if dry_run or not gone:
            return gone
        with translated("reading the store's batch limit"):
            step = self.client.get_max_batch_size()
        for start in range(0, len(gone), max(1, step)):
            self.delete(gone[start : start + max(1, step)])
        return gone

    def _stored(self, ids: list[str]) -> dict[str, tuple[str | None, Any]]:
        """The metadata of the stored ones of ``ids``, and the stored text of those that carry
        no text digest (written before it existed): what a sync compares."""
        with translated("reading the stored records"):
            got = read_settled(self.current().get, ids=ids, include=["metadatas"])
            metas = dict(zip(got["ids"], got["metadatas"] or [], strict=True))
            legacy = [i for i, m in metas.items() if not (m or {}).get(TEXT_KEY)]
            texts: dict[str, Any] = {}
            if legacy:
                old = read_settled(self.current().get, ids=legacy, include=["documents"])
                texts = dict(zip(old["ids"], old["documents"] or [], strict=True))
        return {i: (texts.get(i), m) for i, m in metas.items()}

    def _present(self, ids: list[str]) -> set[str]:
        with translated("reading ids"):
            return set(read_settled(self.current().get, ids=ids, include=[])["ids"])

    def upsert(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """Like :meth:`add`, replacing existing ids (restored as they were on error)."""
        self.add(ids, documents, metadatas, upsert=True)

    def query(
        self,
        query_texts: Sequence[str],
        n_results: int = 10,
        *,
        embedder: Embedder | None = None,
        **kwargs: Any,
    ) -> Any:
        """Embed queries under the contract (query role) and search; checked before it runs.

        ``embedder`` lets a caller query with its own embedder; its contract must be the
        collection's, or :class:`~ctxemb_core.errors.ContractMismatchError` is raised and nothing
        is returned.
        """
        check_count(n_results, "n_results")
        querier = check_querier(embedder) or self.embedder
        if isinstance(query_texts, str):
            query_texts = [query_texts]
        raw = self.current()
        check_querier_canary(self.stamp, querier, self._queriers)
        vectors = storable(querier.embed_queries(query_texts), querier.contract.precision)
        with translated("query"):
            return read_settled(raw.query, query_embeddings=vectors, n_results=n_results, **kwargs)

    def get(self, **kwargs: Any) -> Any:
        """Chroma's ``get`` on the collection, after the stamp is checked."""
        check_paging(kwargs, "get")
        with translated("get"):
            return read_settled(self.current().get, **kwargs)

    def delete(
        self,
        ids: Sequence[str] | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        where_document: Mapping[str, Any] | None = None,
    ) -> None:
        """Delete records by id, by Chroma ``where`` / ``where_document`` filter, or both
        (a record must match all that are given). An empty filter is refused, never read as
        "everything"."""
        ids, given = check_delete(ids, {"where": where, "where_document": where_document})
        raw = self.current()
        with translated("delete"):
            raw.delete(ids=ids, **given)
