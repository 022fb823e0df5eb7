"""The evaluation path through a store's guarded index (``ctxemb eval --via chroma|pgvector``).

Every store adapter's path does the same: write the documents the index lacks (as a sync, in
resumable chunks), search the queries in chunks, and score a sentence pair by storing its second
sentence as record ``str(i)`` and searching the first among that record alone (an ``ids=``
filter), so the score is the store's own distance turned into the contract's similarity
(:func:`ctxemb_core.records.similarity`) in the space the index's driver reports.
:class:`GuardedPath` does it once; a store gives only the options its ``query`` takes, for a
search and for a pair's one-record search (``ctxemb_core.store_tools.StoreTools.eval_path``
makes the path).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.eval.paths import check_documents, check_pairs, check_queries
from ctxemb_core.records import similarity

__all__ = ["GuardedPath"]

QUERIES = 64  # queries per query call
WRITE = 1024  # documents embedded and written per call (a re-run resumes from the last one)


class GuardedPath:
    """A :class:`~ctxemb_core.eval.paths.SearchPath` through one guarded index of a store.

    ``guarded`` is what the adapter's ``open_*`` returned (a ``GuardedCollection``, a
    ``GuardedTable``): it gives ``stamp``, ``contract``, ``embedder``, ``name``, ``count()``,
    ``sync(ids, texts)`` and ``query(texts, n_results, include=..., ids=..., **options)``
    returning Chroma's shape, and ``index``, its :class:`~ctxemb_core.index.GuardedIndex`.
    ``options`` are keywords of the store's ``query`` for every search (a PostgreSQL table's
    ``exact``), ``pair_options`` those of a pair's one-record search (there: a scan).
    """

    def __init__(
        self,
        guarded: Any,
        via: str,
        progress: bool = False,
        *,
        options: Mapping[str, Any] | None = None,
        pair_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.guarded = guarded
        self.via = via
        self.progress = progress
        self.options = dict(options or {})
        self.pair_options = {**self.options, **(pair_options or {})}
        #: What the store calls an index, in messages (``collection``, ``table``); the index is
        #: an attribute of that name too (``path.collection``, ``path.table``).
        self.noun = str(getattr(getattr(guarded, "_terms", None), "kind", "index"))
        setattr(self, self.noun, guarded)

    def __repr__(self) -> str:
        shown = "".join(f", {key}={value!r}" for key, value in self.options.items())
        return f"{type(self).__name__}(via={self.via!r}, {self.noun}={self.guarded.name!r}{shown})"

    @property
    def fingerprint(self) -> str:
        return str(self.guarded.stamp.fingerprint)

    def space(self) -> str:
        """The distance space of the index (``cosine``, ``ip``, ``l2``), for ``similarity``: the
        one its driver reported when the index was last verified."""
        return str(self.guarded.index.verified_head.space)

    def query_options(self, pairs: bool) -> dict[str, Any]:
        """Keywords of the store's ``query`` for a search (``pairs``: a one-record pair search)."""
        return dict(self.pair_options if pairs else self.options)

    def index(self, documents: Mapping[str, str]) -> int:
        """Write the documents the index lacks, and rewrite any stored under another text."""
        ids, texts = check_documents(documents)
        return self._store(ids, texts)

    def search(self, queries: Mapping[str, str], k: int) -> dict[str, dict[str, float]]:
        qids, texts, k = check_queries(queries, k)
        count = self.guarded.count()
        if not count:
            raise InvalidInputError(f"{self.noun} {self.guarded.name!r} holds no documents")
        space = self.space()
        options = self.query_options(pairs=False)
        run: dict[str, dict[str, float]] = {}
        for start in range(0, len(qids), QUERIES):
            chunk = slice(start, start + QUERIES)
            found = self.guarded.query(
                texts[chunk], n_results=min(k, count), include=["distances"], **options
            )
            for qid, ids, distances in zip(
                qids[chunk], found["ids"], found["distances"], strict=True
            ):
                scores = similarity(distances, space, self.guarded.contract)
                run[qid] = dict(zip(ids, scores.tolist(), strict=True))
        return run

    def pair_scores(self, first: Sequence[str], second: Sequence[str]) -> np.ndarray:
        """Store ``second[i]`` as record ``str(i)``, then search ``first[i]`` among that record
        alone (an ``ids`` filter): the store's own distance of each pair."""
        a, b = check_pairs(first, second)
        self._store([str(i) for i in range(len(b))], b)
        querier = self.guarded.embedder
        if querier.cache is not None:
            # One batched pass now, so each one-text query below reads its vector from the
            # cache instead of running the encoder once per pair.
            querier.embed_queries(a)
        space = self.space()
        options = self.query_options(pairs=True)
        out = np.empty(len(a), dtype=np.float64)
        for i, text in enumerate(a):
            found = self.guarded.query(
                [text], n_results=1, ids=[str(i)], include=["distances"], **options
            )
            (distance,) = found["distances"][0]
            out[i] = similarity([distance], space, self.guarded.contract)[0]
        return out

    def close(self) -> None:
        """Nothing to release: the client belongs to the caller."""

    def _store(self, ids: list[str], texts: list[str]) -> int:
        """Sync the records in resumable chunks: the new added, the changed rewritten."""
        from tqdm.auto import tqdm

        written = 0
        with tqdm(
            total=len(ids), unit="doc", desc=f"indexing ({self.via})", disable=not self.progress
        ) as bar:
            for start in range(0, len(ids), WRITE):
                report = self.guarded.sync(ids[start : start + WRITE], texts[start : start + WRITE])
                written += len(report.added) + len(report.updated)
                bar.update(len(ids[start : start + WRITE]))
        return written
