"""The :class:`ContractChroma` side of ``ctxemb eval --via langchain-chroma``."""

from __future__ import annotations

from typing import Any

from langchain_core.documents import Document

from ctxemb_chroma import connect
from ctxemb_core.eval.frameworks import PairedStores
from ctxemb_core.guard import similarity
from ctxemb_langchain._chroma import ContractChroma
from ctxemb_langchain._embeddings import ContractEmbeddings


class ChromaStores(PairedStores):
    """:class:`ContractChroma` stores on one folder (``path``) or server (``host``, ``port``):
    the documents in ``collection``, the sentence pairs in ``<collection>-pairs``."""

    def __init__(self, embeddings: ContractEmbeddings, collection: str, **where: Any) -> None:
        super().__init__(collection, connect(**where), embeddings)

    def make(self, pairs: bool) -> ContractChroma:
        return ContractChroma(self.name(pairs), self.embedder, client=self._client)

    def similarities(
        self, store: ContractChroma, query: str, found: list[tuple[Document, float]]
    ) -> list[float]:
        """``similarity_search_with_score`` gives Chroma's distance in the collection's space;
        the contract's similarity is derived from it as everywhere in ctxemb."""
        space = store.index.current().space
        return similarity([s for _, s in found], space, store.contract_embeddings.contract).tolist()
