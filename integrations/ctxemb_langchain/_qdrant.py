"""``langchain_qdrant.QdrantVectorStore`` on a stamped collection: :class:`._indexed.IndexedStore`
on ``ctxemb_qdrant``'s driver. What is Qdrant's own here: the client (a local folder, memory or
a server's URL, or one given), the collection's name, and the hybrid index beside it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document
from langchain_qdrant import QdrantVectorStore
from qdrant_client import QdrantClient
from qdrant_client import models as qm

import ctxemb_qdrant
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import check_count
from ctxemb_core.index import StoreOpenOptions, store_opening
from ctxemb_core.remedy import StoreTerms
from ctxemb_langchain._embeddings import ContractEmbeddings, contract_embeddings
from ctxemb_langchain._indexed import IndexedStore
from ctxemb_langchain._results import scored

if TYPE_CHECKING:
    from typing_extensions import Unpack


#: ``ctxemb_qdrant``'s words for an error's advice, with this framework's way to adopt.
TERMS = StoreTerms.of(
    "qdrant",
    "--qdrant-path or --qdrant-url",
    records="points",
    frameworks="in LangChain ContractQdrant(..., adopt=True)",
)


# The guarded methods take ctxemb's filter (metadata equality), not Qdrant's models.Filter.
class ContractQdrant(IndexedStore, QdrantVectorStore):  # type: ignore[misc]
    """``langchain_qdrant.QdrantVectorStore`` on a Qdrant collection stamped with the contract.

    The collection is ``ctxemb_qdrant``'s (points laid out as ``QdrantVectorStore`` lays them
    out: ``page_content`` and ``metadata`` in the payload, one unnamed vector), created stamped
    or opened and verified as ``ctxemb_qdrant.open_collection`` opens it, so a collection
    written by the CLI, by Haystack's ``QdrantDocumentStore`` or by LlamaIndex through ctxemb
    opens here under the same contract and the other way round; :class:`ContractEmbeddings` of
    another contract are refused (``ContractMismatchError``, fields named). Every call re-reads
    the collection; every write (an upsert, as in ``QdrantVectorStore``) is checked whole and
    undone on failure. ``similarity_search_with_score`` gives the contract's distance
    (``1 - similarity``; lower is nearer); ids are the caller's strings (the point id is
    ``ctxemb_qdrant.point_id(id)``).

    Args:
        client: a ``QdrantClient``; or ``path`` (local mode's folder, joined if this process
            holds it), ``location=":memory:"`` or ``url`` (a server), as ``QdrantVectorStore``
            takes them.
        collection_name: the collection.
        embedding: :class:`ContractEmbeddings`.
        sample: stored points re-embedded and compared when the collection is opened.
        create: create the collection (stamped) when it is missing.
        adopt: stamp an unstamped collection once a sample of its points re-embeds to their
            stored vectors under the contract.

    Example:
        >>> store = ContractQdrant(None, "docs", ContractEmbeddings(contract), path="./qdrant")
        >>> store.add_texts(["Green tea is steamed."])  # doctest: +SKIP
        >>> store.as_retriever(search_kwargs={"k": 3}).invoke("green tea")  # doctest: +SKIP
    """

    def __init__(
        self,
        client: QdrantClient | None = None,
        collection_name: str = "langchain",
        embedding: ContractEmbeddings | None = None,
        *,
        path: str | None = None,
        location: str | None = None,
        url: str | None = None,
        api_key: str | None = None,
        **opening: Unpack[StoreOpenOptions],
    ) -> None:
        options = store_opening(opening, "ContractQdrant")
        embeddings = contract_embeddings(embedding)
        client = _client(client, path, location, url, api_key)
        driver = ctxemb_qdrant.QdrantDriver(client, collection_name)
        # QdrantVectorStore's attributes (client, collection_name, keys, distance) as the
        # collection has them; its own validation reads a collection the guard creates below.
        QdrantVectorStore.__init__(
            self,
            client,
            collection_name,
            embeddings,
            distance=qm.Distance.DOT,
            validate_collection_config=False,
        )
        self._sample = options["sample"]
        self._open(driver, embeddings, TERMS, **options)

    @property
    def collection(self) -> ctxemb_qdrant.GuardedQdrantCollection:
        """:attr:`index` in ctxemb's shapes, as :func:`ctxemb_qdrant.open_collection` returns
        it."""
        return ctxemb_qdrant.GuardedQdrantCollection(self.index)

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:  # type: ignore[override]
        return IndexedStore.get_by_ids(self, [str(i) for i in ids])

    def similarity_search_with_score_by_vector(  # type: ignore[override]
        self, embedding: list[float], k: int = 4, filter: dict | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` records nearest a vector and their distance, through the guard."""
        check_count(k, "k")
        with self._worded():
            return scored(self._by_vector(embedding, k, filter))

    def max_marginal_relevance_search_with_score_by_vector(
        self, *args: Any, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        raise InvalidInputError(
            "ContractQdrant's MMR search returns documents: use "
            "max_marginal_relevance_search_by_vector"
        )

    @classmethod
    def from_existing_collection(  # type: ignore[override]
        cls, collection_name: str, embedding: ContractEmbeddings, **kwargs: Any
    ) -> ContractQdrant:
        """The stamped collection ``collection_name``, which must exist."""
        return cls(kwargs.pop("client", None), collection_name, embedding, create=False, **kwargs)

    def _open_hybrid(self, **options: Any) -> Any:
        # For ContractHybridRetriever.from_store: the collection's hybrid index, opened by
        # ctxemb_qdrant as the CLI opens it.
        return ctxemb_qdrant.open_hybrid(
            self.client,
            self.collection_name,
            self._embeddings.embedder,
            sample=self._sample,
            **options,
        )

    @classmethod
    def _for_texts(
        cls, embedding: ContractEmbeddings, *, collection_name: str = "langchain", **kwargs: Any
    ) -> ContractQdrant:
        # For from_texts: the collection (default "langchain") on client= or path=/url=.
        return cls(kwargs.pop("client", None), collection_name, embedding, **kwargs)


def _client(
    client: Any, path: str | None, location: str | None, url: str | None, api_key: str | None
) -> QdrantClient:
    """The client given, or the one ``path``/``location``/``url`` name (exactly one)."""
    given = [v for v in (client, path, location, url) if v is not None]
    if len(given) != 1:
        raise InvalidInputError(
            "ContractQdrant needs exactly one of client=, path= (local mode's folder), "
            'location=":memory:" or url= (a Qdrant server)'
        )
    if client is not None:
        if not isinstance(client, QdrantClient):
            raise TypeError(f"client must be a QdrantClient, got {type(client).__name__}")
        return client
    if location is not None:
        if location != ":memory:":
            return ctxemb_qdrant.connect(url=location, api_key=api_key)
        return ctxemb_qdrant.connect(memory=True)
    if url is not None:
        return ctxemb_qdrant.connect(url=url, api_key=api_key)
    return ctxemb_qdrant.connect(path)
