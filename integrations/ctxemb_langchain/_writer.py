"""The write path every ctxemb LangChain writer shares, whatever it writes to.

:class:`TextWriter` is ``add_texts`` and ``add_documents`` once for ``ContractChroma``,
``ContractPGVector``, ``ContractVectorStore`` and ``ContractHybridRetriever``: the batch is
checked whole and each text named by an id (:func:`batch`) before the writer's own ``_write``
sees it. :class:`BuiltFromTexts` is ``from_texts`` of the vector stores built here (a store made
for an embedding by its ``_for_texts``, then written). :class:`IndexWriter` is the write on a
guarded index: embedded under the contract and upserted, all or nothing, an error advising in
the words of the store's adapter.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from langchain_core.documents import Document
from typing_extensions import Self

from ctxemb_core.errors import InvalidInputError, worded
from ctxemb_core.index import GuardedIndex, StoreDriver
from ctxemb_core.remedy import DEFAULT_TERMS, StoreTerms
from ctxemb_core.validate import texts_from_iterable
from ctxemb_langchain._checks import without_text_digest
from ctxemb_langchain._embeddings import contract_embeddings
from ctxemb_langchain._retriever import GuardedStore


def batch(
    texts: Iterable[str], metadatas: Sequence[Any] | None, ids: Sequence[str | None] | None
) -> tuple[list[str], list[str], list[Any] | None]:
    """``(ids, texts, metadatas)`` of a batch to write: an id made for each text given none,
    and each metadata without a text digest carried in from an earlier text (the write sets
    this text's); missing metadatas are ``None``.

    Raises:
        InvalidInputError: one string instead of a batch, another number of ids than texts,
            more metadatas than texts (a store that zips them would lose texts silently).
    """
    texts = texts_from_iterable(texts)
    if ids is not None and len(ids) != len(texts):
        raise InvalidInputError(f"{len(ids)} ids for {len(texts)} texts")
    given: list[str | None] = list(ids) if ids is not None else [None] * len(texts)
    keys = [i if i is not None else str(uuid.uuid4()) for i in given]
    metas: list[Any] | None = None
    if metadatas:
        if len(metadatas) > len(texts):
            raise InvalidInputError(f"{len(metadatas)} metadatas for {len(texts)} texts")
        metas = [without_text_digest(m) for m in metadatas]
        metas += [None] * (len(texts) - len(metas))
    return keys, texts, metas


class TextWriter:
    """``add_texts`` and ``add_documents`` of a ctxemb LangChain writer, on its ``_write``."""

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict] | None = None,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embed under the contract and write (an upsert), checked whole first, all or nothing;
        returns the ids, one made for each text given none."""
        keys, texts, metas = batch(texts, metadatas, ids)
        if texts:
            self._write(keys, texts, metas, **kwargs)
        return keys

    def _write(
        self, ids: list[str], texts: list[str], metas: list[Any] | None, **kwargs: Any
    ) -> None:
        """Write one batch :func:`batch` made; each writer's own."""
        raise NotImplementedError  # pragma: no cover - each writer's own

    def add_documents(
        self, documents: Sequence[Document], *, ids: list[str] | None = None, **kwargs: Any
    ) -> list[str]:
        """:meth:`add_texts` of the documents' texts and metadata (the caller's documents are
        not changed) under their ids, where any has one."""
        if ids is None and any(d.id is not None for d in documents):
            ids = [d.id if d.id is not None else str(uuid.uuid4()) for d in documents]
        texts = [d.page_content for d in documents]
        return self.add_texts(texts, [dict(d.metadata) for d in documents], ids=ids, **kwargs)


class BuiltFromTexts:
    """``from_texts`` of a vector store built here: the store ``_for_texts`` makes for the
    embedding (from LangChain's keyword arguments), then the texts written to it."""

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Any,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> Self:
        """The store ``_for_texts`` builds for ``embedding`` (and ``kwargs``), holding ``texts``."""
        store = cls._for_texts(contract_embeddings(embedding), **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    @classmethod
    def _for_texts(cls, embedding: Any, **kwargs: Any) -> Any:
        raise NotImplementedError  # pragma: no cover - each store's own


class IndexWriter(TextWriter, GuardedStore):
    """The write path of every LangChain store on a guarded index (``index``): a batch
    embedded under the contract of ``embeddings`` and upserted, all or nothing; errors advise
    in the words of the store's adapter (``_terms``). ``_merges``: the upsert keeps a stored
    record's metadata keys the batch does not set (``langchain_chroma.Chroma``'s upsert);
    otherwise the batch's metadata replaces the stored record's."""

    _terms: StoreTerms = DEFAULT_TERMS
    _merges: bool = False

    @property
    def index(self) -> GuardedIndex:
        """The guarded index this store reads and writes through."""
        raise NotImplementedError  # pragma: no cover - each store's own

    @contextlib.contextmanager
    def _worded(self) -> Iterator[None]:
        with worded(self._terms):
            yield

    def _opened(self, driver: StoreDriver, **options: Any) -> GuardedIndex:
        """The index on ``driver`` opened (or created) under this store's contract;
        ``options``: :meth:`GuardedIndex.open`'s (``create``, ``adopt``, ``sample``)."""
        with self._worded():
            embedder = contract_embeddings(self.embeddings).embedder
            return GuardedIndex.open(driver, embedder, **options)

    def _write(
        self, ids: list[str], texts: list[str], metas: list[Any] | None, **kwargs: Any
    ) -> None:
        embeddings = contract_embeddings(self.embeddings)
        with self._worded():
            self.index.add_embedded(
                ids,
                embeddings.embed_documents(texts),
                texts,
                self._merged(ids, metas) if self._merges else metas,
                fingerprint=embeddings.fingerprint,
                upsert=True,
            )

    def _merged(self, ids: list[str], metas: list[Any] | None) -> list[Any] | None:
        """The stored records' metadata with the batch's keys set over it (a record written
        without metadata keeps its own)."""
        stored = {r.id: r.metadata for r in self.index.get(ids, include=("metadata",))}
        if not stored:
            return metas
        given = metas or [None] * len(ids)
        return [
            _merged(stored[i], m) if i in stored else m for i, m in zip(ids, given, strict=True)
        ]


def _merged(stored: Any, given: Any) -> Any:
    """A stored record's metadata (without its text digest) with ``given``'s keys set over it."""
    if given is not None and not isinstance(given, dict):
        return given  # refused, by name, with the batch
    kept = without_text_digest(stored) or {}
    return {**kept, **(given or {})} or None
