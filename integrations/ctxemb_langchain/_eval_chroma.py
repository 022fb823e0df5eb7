"""The :class:`ContractChroma` side of ``ctxemb eval --via langchain-chroma``."""

from __future__ import annotations

from typing import Any

from langchain_core.documents import Document

from ctxemb_chroma import connect
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import similarity
from ctxemb_langchain._chroma import ContractChroma
from ctxemb_langchain._embeddings import ContractEmbeddings
from ctxemb_langchain._eval_path import PAIR_KEY


class ChromaStores:
    """:class:`ContractChroma` stores on one folder or server: the documents in
    ``collection``, the sentence pairs in ``<collection>-pairs``."""

    #: All the pairs in one collection: Chroma filters on its metadata index, not by testing
    #: each record.
    pairs_per_store: int | None = None

    def __init__(
        self,
        embeddings: ContractEmbeddings,
        collection: str,
        path: Any,
        host: str | None,
        port: int,
    ) -> None:
        if (path is None) == (host is None):
            raise InvalidInputError(
                "a Chroma evaluation path needs either a folder (path) or a server (host, port)"
            )
        self.embeddings = embeddings
        self.collection = collection
        self._client: Any = (
            connect(str(path)) if path is not None else connect(host=host, port=port)
        )

    def make(self, pairs: bool) -> ContractChroma:
        name = f"{self.collection}-pairs" if pairs else self.collection
        return ContractChroma(name, self.embeddings, client=self._client)

    def pair_filter(self, pair: str) -> dict[str, str]:
        return {PAIR_KEY: pair}

    def similarities(
        self, store: ContractChroma, query: str, found: list[tuple[Document, float]]
    ) -> list[float]:
        """``similarity_search_with_score`` gives Chroma's distance in the collection's space;
        the contract's similarity is derived from it as everywhere in ctxemb."""
        space = store.index.current().space
        return similarity([s for _, s in found], space, store.contract_embeddings.contract).tolist()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
