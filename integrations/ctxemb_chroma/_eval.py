"""An evaluation path through a guarded Chroma collection (``ctxemb eval --via chroma``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from chromadb.api import ClientAPI

from ctxemb_chroma._collection import GuardedCollection, open_collection
from ctxemb_core import Embedder
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.eval.paths import check_documents, check_pairs, check_queries
from ctxemb_core.guard import similarity

__all__ = ["ChromaPath", "eval_path"]

_QUERIES = 64  # queries per query call
_WRITE = 1024  # documents embedded and written per call (a re-run resumes from the last one)


def eval_path(
    client: ClientAPI,
    name: str,
    embedder: Embedder,
    *,
    sample: int | None = None,
    via: str = "chroma",
    progress: bool = False,
) -> ChromaPath:
    """A :class:`~ctxemb_core.eval.paths.SearchPath` over the guarded collection ``name``.

    The collection is opened as any user opens it (:func:`open_collection`: created stamped,
    or verified with a ``sample`` of its records re-embedded), documents are written only when
    missing, and queries go through :meth:`GuardedCollection.query`, so what is measured is
    what an application on this adapter runs. Chroma's distances become the contract's
    similarity here (:func:`ctxemb_core.guard.similarity`), in the collection's own space.

    Args:
        client: an embedded or server client (:func:`~ctxemb_chroma.connect`).
        name: the collection to index into and search (created if missing).
        embedder: the contract's embedder, for both roles.
        sample: stored records re-embedded when an existing collection is opened.
        via: the name this path reports (``chroma``, ``chroma-server``).
        progress: a progress bar on stderr while documents are written.

    Raises:
        ContractMismatchError, EncoderDriftError, ForeignVectorsError: as ``open_collection``.

    Example:
        >>> from ctxemb_chroma import connect, eval_path
        >>> from ctxemb_core.eval import evaluate_retrieval, load_beir
        >>> path = eval_path(connect("./chroma"), "beir-scifact", embedder)  # doctest: +SKIP
        >>> evaluate_retrieval(path, load_beir("scifact")).metrics["ndcg@10"]  # doctest: +SKIP
    """
    if sample is None:
        collection = open_collection(client, name, embedder)
    else:
        collection = open_collection(client, name, embedder, sample=sample)
    return ChromaPath(collection, via, progress)


class ChromaPath:
    """Index, search and pair scoring through one guarded collection (see :func:`eval_path`)."""

    def __init__(self, collection: GuardedCollection, via: str, progress: bool = False) -> None:
        self.collection = collection
        self.via = via
        self.progress = progress

    def __repr__(self) -> str:
        return f"ChromaPath(via={self.via!r}, collection={self.collection.name!r})"

    @property
    def fingerprint(self) -> str:
        return self.collection.stamp.fingerprint

    def index(self, documents: Mapping[str, str]) -> int:
        """Write the documents the collection lacks, and rewrite any stored under another text."""
        ids, texts = check_documents(documents)
        return self._store(ids, texts)

    def search(self, queries: Mapping[str, str], k: int) -> dict[str, dict[str, float]]:
        qids, texts, k = check_queries(queries, k)
        count = self.collection.count()
        if not count:
            raise InvalidInputError(f"collection {self.collection.name!r} holds no documents")
        run: dict[str, dict[str, float]] = {}
        for start in range(0, len(qids), _QUERIES):
            chunk = slice(start, start + _QUERIES)
            found = self.collection.query(
                texts[chunk], n_results=min(k, count), include=["distances"]
            )
            for qid, ids, distances in zip(
                qids[chunk], found["ids"], found["distances"], strict=True
            ):
                scores = similarity(distances, self._space(), self.collection.contract)
                run[qid] = dict(zip(ids, scores.tolist(), strict=True))
        return run

    def pair_scores(self, first: Sequence[str], second: Sequence[str]) -> np.ndarray:
        """Store ``second[i]`` as record ``str(i)``, then search ``first[i]`` among that record
        alone (Chroma's ``ids`` filter): the store's own distance of each pair."""
        a, b = check_pairs(first, second)
        self._store([str(i) for i in range(len(b))], b)
        querier = self.collection.embedder
        if querier.cache is not None:
            # One batched pass now, so each one-text query below reads its vector from the
            # cache instead of running the encoder once per pair.
            querier.embed_queries(a)
        space = self._space()
        out = np.empty(len(a), dtype=np.float64)
        for i, text in enumerate(a):
            found = self.collection.query([text], n_results=1, ids=[str(i)], include=["distances"])
            (distance,) = found["distances"][0]
            out[i] = similarity([distance], space, self.collection.contract)[0]
        return out

    def close(self) -> None:
        """Nothing to release: the client belongs to the caller."""

    def _space(self) -> str:
        config = self.collection.raw.configuration_json or {}
        return str(config.get("hnsw", {}).get("space", "l2"))

    def _store(self, ids: list[str], texts: list[str]) -> int:
        """Add the missing records and upsert the changed ones, in resumable chunks."""
        from tqdm.auto import tqdm

        written = 0
        with tqdm(
            total=len(ids), unit="doc", desc=f"indexing ({self.via})", disable=not self.progress
        ) as bar:
            for start in range(0, len(ids), _WRITE):
                chunk_ids, chunk_texts = ids[start : start + _WRITE], texts[start : start + _WRITE]
                stored = self.collection.get(ids=chunk_ids, include=["documents"])
                held = dict(zip(stored["ids"], stored["documents"], strict=True))
                changed = [
                    k for k, i in enumerate(chunk_ids) if i in held and held[i] != chunk_texts[k]
                ]
                if changed:
                    self.collection.upsert(
                        [chunk_ids[k] for k in changed], [chunk_texts[k] for k in changed]
                    )
                written += len(changed) + self.collection.add_missing(chunk_ids, chunk_texts)
                bar.update(len(chunk_ids))
        return written
