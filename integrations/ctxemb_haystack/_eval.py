"""``ctxemb eval --via haystack|haystack-chroma|haystack-pgvector``: the pipelines a Haystack
user runs, measured.

Documents go through an indexing ``Pipeline`` (:class:`ContractDocumentEmbedder` →
:class:`ContractDocumentWriter`) and queries through a query ``Pipeline``
(:class:`ContractTextEmbedder` → :class:`ContractRetriever` around the store's own retriever),
into ``InMemoryDocumentStore``, ``ChromaDocumentStore`` or ``PgvectorDocumentStore``. The
scores are the retriever's, already similarities with the contract's meaning (the Chroma and
pgvector distances are converted by :class:`ContractRetriever`). Sentence pairs are stored
apart from the documents (in memory: 64 pairs to a store; Chroma: the collection
``<collection>-pairs``; pgvector: the table ``<collection>-pairs``), each with its pair id in
``meta``, and each first sentence is searched under a Haystack filter on that id.
"""

from __future__ import annotations

from haystack import Document
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

from ctxemb_core import Embedder
from ctxemb_core.errors import CtxembError
from ctxemb_core.eval.frameworks import (
    PAIR_KEY,
    FrameworkPath,
    MemoryStores,
    eval_path_of,
)
from ctxemb_haystack._eval_pipelines import Pipelines

__all__ = ["HaystackPath", "eval_path"]


#: The Chroma and pgvector sides of the path, imported only for a path over that store.
SIDES = {
    "chroma": "ctxemb_haystack._eval_chroma:ChromaStores",
    "pgvector": "ctxemb_haystack._eval_pgvector:PgvectorStores",
    "qdrant": "ctxemb_haystack._eval_qdrant:QdrantStores",
}


class _MemoryStores(MemoryStores):
    """A new ``InMemoryDocumentStore`` for the documents and for each block of pairs."""

    def make(self, pairs: bool) -> InMemoryDocumentStore:
        return InMemoryDocumentStore()

    def retriever(self, store: InMemoryDocumentStore) -> InMemoryEmbeddingRetriever:
        return InMemoryEmbeddingRetriever(store)

    def present(self, store: InMemoryDocumentStore, pairs: bool) -> set[str]:
        return set(store.storage)


class HaystackPath(FrameworkPath):
    """Haystack's pipelines (:class:`ContractDocumentEmbedder` into :class:`ContractDocumentWriter`;
    :class:`ContractTextEmbedder` into :class:`ContractRetriever`) built from ``embedder``, over
    one document store, made on first use.

    Args:
        store: ``"memory"`` (``InMemoryDocumentStore``, exact search; ``--via haystack``) or
            ``"chroma"`` (``ChromaDocumentStore``; ``--via haystack-chroma``) or ``"pgvector"``
            (``PgvectorDocumentStore``; ``--via haystack-pgvector``).

    Example:
        >>> path = eval_path(Embedder(contract_for("all-MiniLM-L6-v2")), "chroma", path="./db")
        >>> path.index({"d1": "Green tea is steamed."})  # doctest: +SKIP
        1
    """

    framework = "haystack"
    memory = _MemoryStores
    embedder: Embedder

    def part(self, pairs: bool = False, block: int = 0) -> Pipelines:
        """The documents' store and pipelines (or a block of sentence pairs'), made on first
        use (:meth:`~ctxemb_core.eval.frameworks.FrameworkPath.opened`)."""
        part: Pipelines = self.opened(pairs, block)
        return part

    def open(self, pairs: bool) -> Pipelines:
        return Pipelines(self.embedder, self.stores, pairs)

    def release(self, opened: Pipelines) -> None:
        opened.close()

    def present(self, opened: Pipelines, ids: list[str]) -> set[str]:
        return opened.present.intersection(ids)

    def write(
        self,
        opened: Pipelines,
        ids: list[str],
        texts: list[str],
        metadatas: list[dict[str, str]] | None,
    ) -> int:
        metas = metadatas or [{}] * len(ids)
        zipped = zip(ids, texts, metas, strict=True)
        return opened.index([Document(id=i, content=t, meta=dict(m)) for i, t, m in zipped])

    def retrieve(
        self, opened: Pipelines, text: str, k: int, pair: str | None = None
    ) -> list[tuple[str, float]]:
        where = None
        if pair is not None:
            where = {"field": f"meta.{PAIR_KEY}", "operator": "==", "value": pair}
        return [(d.id, _score(d)) for d in opened.ask(text, k, where)]


eval_path = eval_path_of(HaystackPath.maker(SIDES))


def _score(document: Document) -> float:
    if document.score is None:  # ContractRetriever scores every document it returns
        raise CtxembError(f"document {document.id!r} came back from the retriever unscored")
    return float(document.score)
