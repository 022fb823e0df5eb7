"""The evaluation path through a framework's stores (``ctxemb eval --via haystack-*|langchain-*``).

A framework adapter measures what its users run: its own components over its in-memory store,
over Chroma or over pgvector. What every framework's path does the same lives here:

- :func:`eval_path_of` makes an adapter's public ``eval_path`` (the one signature
  ``ctxemb eval --via`` calls), and :func:`store_where` checks in it which store is asked for
  and where it is, before anything opens;
- :class:`FrameworkPath` is the evaluation loop: it makes the framework's embedder from the core
  ``Embedder`` (:func:`component_of`) and picks the stores (:meth:`FrameworkPath.over`), opens
  the documents' store and the sentence pairs' stores on first use (pairs in blocks of
  ``stores.pairs_per_store``, or all in one), embeds and writes only the ids a store lacks, in
  chunks of :data:`WRITE_CHUNK`, collects each query's run, scores each pair by searching its
  first sentence under a metadata filter on its id (:data:`PAIR_KEY`, :func:`pair_ids`), and
  closes what it opened once;
- :class:`PairedStores` is a store's side over one client of the path's own: the documents in
  ``collection``, the pairs in ``<collection>-pairs``; :func:`paired_stores` picks the side
  of the store asked for (imported only then) and names the path.

The adapter says only what is its framework's: which stores serve each store name (a
``SIDES`` table of ``_eval_<store>`` modules), how a store is opened
(:meth:`FrameworkPath.open`), which ids it holds (:meth:`FrameworkPath.present`), how texts
are written (:meth:`FrameworkPath.write`) and retrieved (:meth:`FrameworkPath.retrieve`), and
how a store's score becomes the contract's similarity.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from ctxemb_core.errors import CtxembError, InvalidInputError
from ctxemb_core.eval.paths import check_documents, check_pairs, check_queries

__all__ = [
    "PAIR_KEY",
    "WRITE_CHUNK",
    "FrameworkPath",
    "MemoryStores",
    "PairedStores",
    "component_of",
    "eval_path_of",
    "pair_ids",
    "paired_stores",
    "store_where",
]

#: What every framework adapter's ``eval_path`` takes (:func:`eval_path_of`), in its docstring.
SIGNATURE = (
    '``eval_path(embedder, store="memory", *, collection="ctxemb-eval", path=None, host=None, '
    "port=8000, dsn=None, url=None)`` (the signature and the checks of ``store`` and where it "
    "is are core's: :func:`~ctxemb_core.eval.frameworks.eval_path_of`; ``embedder``: the core "
    "Embedder, whose contract, model folder and run settings make the framework's embedders, "
    "its cache (if any) theirs, so vectors embedded by another path are read back; "
    "``collection``: the Chroma "
    "collection or PostgreSQL table, the sentence pairs in ``<collection>-pairs``; ``path``, "
    "``host``, ``port``: Chroma's embedded folder or server; ``dsn``: PostgreSQL's connection "
    "string; ``path`` or ``url``: Qdrant's local folder or server)"
)

#: The metadata key that holds a sentence pair's id (what ``pair_scores`` filters on).
PAIR_KEY = "ctxemb_pair"

#: Texts embedded and written at once: a framework's embedder plans its batches within one
#: call (LlamaIndex's largest embedding batch).
WRITE_CHUNK = 2048

P = TypeVar("P")
F = TypeVar("F", bound="FrameworkPath")


def eval_path_of(make: Callable[[Any, str, str, dict[str, Any]], P]) -> Callable[..., P]:
    """A framework adapter's public ``eval_path``, with the one signature ``ctxemb eval`` calls:

    :data:`SIGNATURE`. ``store`` and where it is are checked (:func:`store_where`), then
    ``make(embedder, store, collection, where)`` builds the adapter's path; ``make``'s module
    is ``eval_path``'s, and its docstring follows the signature in ``eval_path``'s.
    """

    def eval_path(
        embedder: Any,
        store: str = "memory",
        *,
        collection: str = "ctxemb-eval",
        path: str | None = None,
        host: str | None = None,
        port: int = 8000,
        dsn: str | None = None,
        url: str | None = None,
    ) -> P:
        where = store_where(store, path=path, host=host, port=port, dsn=dsn, url=url)
        return make(embedder, store, collection, where)

    eval_path.__module__ = make.__module__
    eval_path.__doc__ = f"{SIGNATURE}: {inspect.cleandoc(make.__doc__ or '')}"
    return eval_path


def store_where(
    store: str,
    *,
    path: Any = None,
    host: str | None = None,
    port: int = 8000,
    dsn: Any = None,
    url: str | None = None,
) -> dict[str, Any]:
    """The checked keywords that say where a framework path's ``store`` is.

    Returns:
        ``{}`` for ``"memory"``; ``{"path": ...}`` or ``{"host": ..., "port": ...}`` for
        ``"chroma"`` (a folder or a server); ``{"dsn": ...}`` for ``"pgvector"``;
        ``{"path": ...}`` or ``{"url": ...}`` for ``"qdrant"`` (local mode's folder or a
        server: ``ctxemb_qdrant.connect``'s keywords).

    Raises:
        InvalidInputError: another store; Chroma or Qdrant given both or neither of a folder
            and a server; pgvector without a connection string.
    """
    if url is not None and store != "qdrant":
        raise InvalidInputError(f"url is a Qdrant server's address; store {store!r} takes none")
    if store == "qdrant":
        if (path is None) == (url is None):
            raise InvalidInputError(
                "a Qdrant evaluation path needs either a folder (path) or a server (url)"
            )
        return {"path": str(path)} if path is not None else {"url": url}
    if store == "memory":
        return {}
    if store == "chroma":
        if (path is None) == (host is None):
            raise InvalidInputError(
                "a Chroma evaluation path needs either a folder (path) or a server (host, port)"
            )
        return {"path": str(path)} if path is not None else {"host": host, "port": port}
    if store == "pgvector":
        if not isinstance(dsn, str) or not dsn.strip():
            raise InvalidInputError(
                "a pgvector evaluation path needs dsn (a PostgreSQL connection string)"
            )
        return {"dsn": dsn}
    raise InvalidInputError(
        f"store must be 'memory' or 'chroma', or 'pgvector' or 'qdrant', got {store!r}"
    )


def paired_stores(
    framework: str,
    store: str,
    memory: Callable[[], Any],
    sides: Mapping[str, str],
    *args: Any,
    **where: Any,
) -> tuple[str, Any]:
    """A framework path's name and stores for ``store`` (checked by :func:`store_where`).

    In memory: ``(framework, memory())``; otherwise ``(f"{framework}-{store}", side(*args,
    **where))``, ``side`` the class ``sides[store]`` names as ``"module:Class"`` (the adapter's
    own, imported only now: a store's framework package loads only for a path over it).
    """
    if store == "memory":
        return framework, memory()
    module, _, name = sides[store].partition(":")
    side = getattr(importlib.import_module(module), name)
    return f"{framework}-{store}", side(*args, **where)


def pair_ids(second: Sequence[str]) -> list[str]:
    """One id per pair, naming its place and its stored sentence (a kept store is never stale)."""
    return [f"{i}-{hashlib.sha256(s.encode()).hexdigest()[:16]}" for i, s in enumerate(second)]


class PairedStores:
    """A store's side of a framework path: the documents in ``collection``, the sentence
    pairs in ``<collection>-pairs``, read through ``client`` (the path's own, closed with it),
    embedded with ``embedder``.

    A subclass makes the framework's store (``make(pairs)``) and whatever else its path asks.
    """

    #: All the pairs in one store: Chroma and PostgreSQL filter on an index of the metadata,
    #: not by testing each record.
    pairs_per_store: int | None = None

    def __init__(self, collection: str, client: Any, embedder: Any = None) -> None:
        self.collection = collection
        self._client = client
        #: What the framework's stores embed with (a core ``Embedder``, LangChain's
        #: ``ContractEmbeddings``).
        self.embedder = embedder

    def name(self, pairs: bool) -> str:
        return f"{self.collection}-pairs" if pairs else self.collection

    def pair_filter(self, pair: str) -> dict[str, str]:
        """The metadata filter on a pair's id, as Chroma and PostgreSQL stores take it."""
        return {PAIR_KEY: pair}

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class MemoryStores:
    """A framework's in-memory side: a new store for the documents and one for each block of
    :attr:`pairs_per_store` sentence pairs; nothing to close.

    An in-memory store filters by testing each of its records (Haystack's
    ``InMemoryDocumentStore`` tests each document, LangChain's ``InMemoryVectorStore`` builds a
    ``Document`` of each for the filter), so STS-B's 1,379 filtered searches in one store of all
    its pairs would test 1.9 million records; in stores of 64 they test 88,000. The score is the
    same either way: the filter leaves the pair's one record to be scored.
    """

    pairs_per_store: int | None = 64

    def __init__(self, embedder: Any = None) -> None:
        #: What the framework's stores embed with (as :attr:`PairedStores.embedder`).
        self.embedder = embedder

    def close(self) -> None:
        """Nothing to close: the stores live in this process."""


def component_of(embedder: Any, component: Callable[..., Any]) -> Any:
    """A framework's embedding component (LangChain's ``ContractEmbeddings``, LlamaIndex's
    ``ContractEmbedding``) that embeds exactly as the core ``embedder`` does: its contract,
    model folder (or server) and run settings, its progress setting, and its cache (none:
    ``False``), so vectors another path embedded are read back rather than embedded again."""
    options = embedder.component_options()
    cache = embedder.cache if embedder.cache is not None else False
    return component(
        options.pop("contract"), **options, show_progress=embedder.show_progress, cache=cache
    )


class FrameworkPath:
    """The evaluation loop (a :class:`~ctxemb_core.eval.paths.SearchPath`) over a framework's
    ``stores``.

    ``embedder`` is what the framework's components embed with (a core ``Embedder``, a
    LangChain ``ContractEmbeddings``): anything with the contract's ``fingerprint``. The loop
    is here: which ids are new, the write chunks, the runs, the pair blocks and their check.
    A subclass names its framework (:attr:`framework`, :attr:`memory`, :attr:`component`) and
    gives its framework's calls: :meth:`open`, :meth:`present`, :meth:`write`,
    :meth:`retrieve` (and :meth:`release`).
    """

    #: The framework's name: ``--via <framework>`` in memory, ``--via <framework>-<store>``.
    framework: ClassVar[str]
    #: The in-memory side, made with the framework's embedder.
    memory: ClassVar[type[MemoryStores]] = MemoryStores
    #: The framework's embedding component made from the core ``Embedder``
    #: (:func:`component_of`); ``None``: the framework's components take the ``Embedder``.
    component: ClassVar[type[Any] | None] = None

    def __init__(self, via: str, embedder: Any, stores: Any) -> None:
        self.via = via
        self.embedder = embedder
        self.stores = stores
        self._opened: dict[tuple[bool, int], Any] = {}
        self._closed = False

    @classmethod
    def over(
        cls: type[F],
        embedder: Any,
        store: str,
        collection: str,
        where: dict[str, Any],
        sides: Mapping[str, str],
    ) -> F:
        """The path of the core ``embedder``'s contract over ``store`` (checked, with
        ``where``, by :func:`store_where`): ``sides`` maps a store to its ``"module:Class"``
        (:func:`paired_stores`)."""
        if cls.component is not None:
            embedder = component_of(embedder, cls.component)
        memory = functools.partial(cls.memory, embedder)
        via, stores = paired_stores(
            cls.framework, store, memory, sides, embedder, collection, **where
        )
        return cls(via, embedder, stores)

    @classmethod
    def maker(
        cls: type[F], sides: Mapping[str, str]
    ) -> Callable[[Any, str, str, dict[str, Any]], F]:
        """What :func:`eval_path_of` makes a framework's ``eval_path`` of: :meth:`over` with
        the framework's ``sides``, in the subclass's module, with the subclass's docstring."""

        def make(embedder: Any, store: str, collection: str, where: dict[str, Any]) -> F:
            return cls.over(embedder, store, collection, where, sides)

        make.__module__ = cls.__module__
        make.__doc__ = cls.__doc__
        return make

    @property
    def fingerprint(self) -> str:
        return str(self.embedder.fingerprint)

    def opened(self, pairs: bool = False, block: int = 0) -> Any:
        """The documents' store (or that of a block of sentence pairs: pair ``n`` is kept in
        block ``n // stores.pairs_per_store``; Chroma and pgvector keep all in one), opened on
        first use."""
        if self._closed:
            raise CtxembError(f"this {self.via!r} evaluation path is closed")
        key = (pairs, block if pairs else 0)
        if key not in self._opened:
            self._opened[key] = self.open(pairs)
        return self._opened[key]

    # -- the framework's calls ---------------------------------------------------------------

    def open(self, pairs: bool) -> Any:
        """The framework's store of the documents (or of a block of pairs), newly opened."""
        raise NotImplementedError

    def present(self, opened: Any, ids: list[str]) -> set[str]:
        """Which of ``ids`` the opened store holds already."""
        raise NotImplementedError

    def write(
        self, opened: Any, ids: list[str], texts: list[str], metadatas: list[dict[str, str]] | None
    ) -> int:
        """Embed ``texts`` (document role) and write them as ``ids``, each with its metadata
        (``None``: none); returns how many were written."""
        raise NotImplementedError

    def retrieve(
        self, opened: Any, text: str, k: int, pair: str | None = None
    ) -> list[tuple[str, float]]:
        """The ids and contract similarities (best first) of the top ``k`` stored texts for
        the query ``text``; ``pair``: only the record whose :data:`PAIR_KEY` is ``pair``."""
        raise NotImplementedError

    def release(self, opened: Any) -> None:
        """Release one opened store (on :meth:`close`); nothing by default."""

    # -- the loop ----------------------------------------------------------------------------

    def index(self, documents: Mapping[str, str]) -> int:
        """Embed and write the documents whose ids the store lacks; returns how many."""
        ids, texts = check_documents(documents)
        return self.add(self.opened(), ids, texts)

    def search(self, queries: Mapping[str, str], k: int) -> dict[str, dict[str, float]]:
        qids, texts, k = check_queries(queries, k)
        opened = self.opened()
        return {
            qid: dict(self.retrieve(opened, text, k)) for qid, text in zip(qids, texts, strict=True)
        }

    def pair_scores(self, first: Sequence[str], second: Sequence[str]) -> np.ndarray:
        first, second = check_pairs(first, second)
        ids = pair_ids(second)
        size = self.stores.pairs_per_store or len(ids)
        scores = np.empty(len(first), dtype=np.float64)
        for start in range(0, len(ids), size):
            opened = self.opened(pairs=True, block=start // size)
            block = range(start, min(start + size, len(ids)))
            self.add(opened, [ids[n] for n in block], [second[n] for n in block], pairs=True)
            for n in block:
                found = self.retrieve(opened, first[n], 1, ids[n])
                if len(found) != 1:
                    raise CtxembError(
                        f"pair {ids[n]!r}: the store returned {len(found)} documents, not 1"
                    )
                scores[n] = found[0][1]
        return scores

    def add(self, opened: Any, ids: list[str], texts: list[str], pairs: bool = False) -> int:
        """Write the texts whose ids ``opened`` lacks, :data:`WRITE_CHUNK` at a time (a pair's
        record carries its id under :data:`PAIR_KEY`); returns how many were written."""
        present = self.present(opened, ids)
        new = [n for n, i in enumerate(ids) if i not in present]
        written = 0
        for start in range(0, len(new), WRITE_CHUNK):
            chunk = new[start : start + WRITE_CHUNK]
            names = [ids[n] for n in chunk]
            metadatas = [{PAIR_KEY: i} for i in names] if pairs else None
            written += self.write(opened, names, [texts[n] for n in chunk], metadatas)
        return written

    def close(self) -> None:
        """Close the stores and the client this path opened (again: nothing happens)."""
        if self._closed:
            return
        self._closed = True
        for opened in self._opened.values():
            self.release(opened)
        self._opened.clear()
        self.stores.close()
