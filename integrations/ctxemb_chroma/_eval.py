"""An evaluation path through a guarded Chroma collection (``ctxemb eval --via chroma``)."""

from __future__ import annotations

from chromadb.api import ClientAPI

from ctxemb_chroma._collection import GuardedCollection, open_collection
from ctxemb_core import Embedder
from ctxemb_core.eval.guarded import GuardedPath

__all__ = ["ChromaPath", "eval_path"]


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


class ChromaPath(GuardedPath):
    """Index, search and pair scoring through one guarded collection (see :func:`eval_path`);
    the loop is core's, Chroma's own is the space its collection was created in."""

    noun = "collection"

    def __init__(self, collection: GuardedCollection, via: str, progress: bool = False) -> None:
        super().__init__(collection, via, progress)
        self.collection = collection

    def space(self) -> str:
        config = self.collection.raw.configuration_json or {}
        return str(config.get("hnsw", {}).get("space", "l2"))
