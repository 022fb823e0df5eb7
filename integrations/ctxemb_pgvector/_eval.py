"""An evaluation path through a guarded table (``ctxemb eval --via pgvector``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ctxemb_core import Embedder
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.eval.paths import check_documents, check_pairs, check_queries
from ctxemb_core.guard import similarity
from ctxemb_pgvector._open import open_table
from ctxemb_pgvector._table import GuardedTable

__all__ = ["PgvectorPath", "eval_path"]

_QUERIES = 64  # queries per query call
_WRITE = 1024  # documents embedded and written per transaction (a re-run resumes)


def eval_path(
    conn: Any,
    name: str,
    embedder: Embedder,
    *,
    sample: int | None = None,
    via: str = "pgvector",
    progress: bool = False,
    exact: bool = False,
    ef_search: int = 200,
    schema: str = "public",
) -> PgvectorPath:
    """A :class:`~ctxemb_core.eval.paths.SearchPath` over the guarded table ``name``.

    The table is opened as any user opens it (:func:`open_table`), documents are written only
    when missing or changed, and queries go through :meth:`GuardedTable.query`: through the
    HNSW index (``ef_search``), or by a scan of every row with ``exact``; ``schema`` is the
    table's.
    """
    options: dict[str, Any] = {"ef_search": ef_search, "schema": schema}
    if sample is not None:
        options["sample"] = sample
    table = open_table(conn, name, embedder, **options)
    return PgvectorPath(table, via, progress, exact)


class PgvectorPath:
    """Index, search and pair scoring through one guarded table (see :func:`eval_path`)."""

    def __init__(
        self, table: GuardedTable, via: str, progress: bool = False, exact: bool = False
    ) -> None:
        self.table = table
        self.via = via
        self.progress = progress
        self.exact = exact

    def __repr__(self) -> str:
        return f"PgvectorPath(via={self.via!r}, table={self.table.name!r}, exact={self.exact})"

    @property
    def fingerprint(self) -> str:
        return self.table.stamp.fingerprint

    def index(self, documents: Mapping[str, str]) -> int:
        ids, texts = check_documents(documents)
        return self._store(ids, texts)

    def search(self, queries: Mapping[str, str], k: int) -> dict[str, dict[str, float]]:
        qids, texts, k = check_queries(queries, k)
        count = self.table.count()
        if not count:
            raise InvalidInputError(f"table {self.table.name!r} holds no documents")
        space = self.table.layout.space_for_similarity
        run: dict[str, dict[str, float]] = {}
        for start in range(0, len(qids), _QUERIES):
            chunk = slice(start, start + _QUERIES)
            found = self.table.query(
                texts[chunk], min(k, count), include=["distances"], exact=self.exact
            )
            for qid, ids, distances in zip(
                qids[chunk], found["ids"], found["distances"], strict=True
            ):
                scores = similarity(distances, space, self.table.contract)
                run[qid] = dict(zip(ids, scores.tolist(), strict=True))
        return run

    def pair_scores(self, first: Sequence[str], second: Sequence[str]) -> np.ndarray:
        """Store ``second[i]`` as row ``str(i)``, then search ``first[i]`` among that row alone:
        the store's own distance of each pair."""
        a, b = check_pairs(first, second)
        self._store([str(i) for i in range(len(b))], b)
        querier = self.table.embedder
        if querier.cache is not None:
            querier.embed_queries(a)  # one batched pass; the one-text queries read the cache
        space = self.table.layout.space_for_similarity
        out = np.empty(len(a), dtype=np.float64)
        for i, text in enumerate(a):
            found = self.table.query([text], 1, ids=[str(i)], include=["distances"], exact=True)
            (distance,) = found["distances"][0]
            out[i] = similarity([distance], space, self.table.contract)[0]
        return out

    def close(self) -> None:
        """Nothing to release: the connection belongs to the caller."""

    def _store(self, ids: list[str], texts: list[str]) -> int:
        from tqdm.auto import tqdm

        written = 0
        with tqdm(
            total=len(ids), unit="doc", desc=f"indexing ({self.via})", disable=not self.progress
        ) as bar:
            for start in range(0, len(ids), _WRITE):
                chunk_ids, chunk_texts = ids[start : start + _WRITE], texts[start : start + _WRITE]
                report = self.table.sync(chunk_ids, chunk_texts)
                written += len(report.added) + len(report.updated)
                bar.update(len(chunk_ids))
        return written
