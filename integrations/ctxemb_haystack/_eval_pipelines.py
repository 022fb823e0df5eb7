"""The two pipelines of a Haystack evaluation path, over one document store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from haystack import Document, Pipeline
from haystack.core.errors import PipelineRuntimeError
from haystack.document_stores.types import DuplicatePolicy

from ctxemb_core import Embedder
from ctxemb_core.errors import CtxembError
from ctxemb_haystack._components import ContractDocumentWriter, ContractRetriever
from ctxemb_haystack._embedders import ContractDocumentEmbedder, ContractTextEmbedder


class Pipelines:
    """A store with its indexing pipeline (``ContractDocumentEmbedder`` →
    ``ContractDocumentWriter``) and its query pipeline (``ContractTextEmbedder`` →
    ``ContractRetriever`` around the store's own retriever), embedding as ``embedder`` does."""

    def __init__(self, embedder: Embedder, stores: Any, pairs: bool) -> None:
        self.store = stores.make(pairs)
        # The embedder's contract, folder (or server) and run settings.
        settings: dict[str, Any] = embedder.component_options()
        documents = ContractDocumentEmbedder(**settings)
        texts = ContractTextEmbedder(**settings)
        for component in (documents, texts):
            # The caller's cache (wherever its file is) and progress setting (None: a bar on a
            # terminal for long batches), which a component's serialisable flags cannot carry.
            component.lazy.cache = embedder.cache
            component.lazy.show_progress = embedder.show_progress
        self.indexing = Pipeline()
        self.indexing.add_component("embedder", documents)
        # SKIP: what another run stored is kept (only missing ids are sent anyway).
        self.writer = ContractDocumentWriter(self.store, DuplicatePolicy.SKIP)
        self.indexing.add_component("writer", self.writer)
        self.indexing.connect("embedder.documents", "writer.documents")
        self.query = Pipeline()
        self.query.add_component("embedder", texts)
        self.retriever = ContractRetriever(stores.retriever(self.store))
        self.query.add_component("retriever", self.retriever)
        self.query.connect("embedder.embedding", "retriever.query_embedding")
        self.query.connect("embedder.fingerprint", "retriever.fingerprint")
        self.query.warm_up()
        self.present: set[str] = stores.present(self.store, pairs)

    def index(self, documents: Sequence[Document]) -> int:
        """Embed and write, in one run of the indexing pipeline, the documents whose ids the
        store lacks; returns how many were written."""
        new = [d for d in documents if d.id not in self.present]
        if not new:
            return 0
        out = run(self.indexing, {"embedder": {"documents": new}})
        self.present.update(d.id for d in new)
        written: int = out["writer"]["documents_written"]
        return written

    def ask(self, text: str, top_k: int, filters: dict[str, Any] | None = None) -> list[Document]:
        """The query pipeline's documents for ``text``, scored by the guarded retriever."""
        inputs = {"embedder": {"text": text}, "retriever": {"top_k": top_k, "filters": filters}}
        documents: list[Document] = run(self.query, inputs)["retriever"]["documents"]
        return documents

    def close(self) -> None:
        # The store's client (Chroma, pgvector) and the guards' own connections (pgvector).
        for owner in (self.store, self.writer._guard, self.retriever._guard):
            closer = getattr(owner, "close", None)
            if callable(closer):
                closer()


def run(pipeline: Pipeline, inputs: dict[str, Any]) -> dict[str, Any]:
    """``pipeline.run``, raising ctxemb's error itself where Haystack wrapped it."""
    try:
        return pipeline.run(inputs)
    except PipelineRuntimeError as exc:
        if isinstance(exc.__cause__, CtxembError):
            raise exc.__cause__ from None
        raise
