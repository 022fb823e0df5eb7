"""A LlamaIndex vector store on a stamped Qdrant collection: :class:`._store.ContractVectorStore`
on ``ctxemb_qdrant``'s driver. What is Qdrant's own here: the client (local mode's folder,
memory, a server's URL, or one given) and the collection's name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ctxemb_qdrant
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index import StoreOpenOptions, store_opening
from ctxemb_llamaindex._embedding import ContractEmbedding
from ctxemb_llamaindex._store import ContractVectorStore

if TYPE_CHECKING:
    from typing_extensions import Unpack


class ContractQdrantVectorStore(ContractVectorStore):
    """LlamaIndex's vector store on a Qdrant collection stamped with the contract, in place of
    ``QdrantVectorStore`` (``llama-index-vector-stores-qdrant``).

    The collection is ``ctxemb_qdrant``'s, created stamped or opened and verified as
    ``ctxemb_qdrant.open_collection`` opens it, so a collection written by the CLI, Haystack's
    ``QdrantDocumentStore`` or LangChain's ``ContractQdrant`` opens here under the same
    contract, and one written here opens there; under another contract it is refused
    (``ContractMismatchError``, fields named). Nodes keep LlamaIndex's own node JSON
    (``_node_content``) in each point's metadata, so they come back whole.

    Args:
        collection_name: the collection.
        embed_model: a :class:`ContractEmbedding`; ``None``: the contract the collection's
            stamp holds (the collection must exist).
        path: local mode's folder (``ctxemb_qdrant.connect``, which joins a client this
            process holds on it); or ``url`` (a server, ``api_key`` its key); or ``client``
            (a ``QdrantClient``, as ``QdrantVectorStore`` takes it).
        sample: stored points re-embedded and compared when the collection is opened.
        create: create the collection (stamped) when it is missing.
        adopt: stamp an unstamped collection once a sample of its points re-embeds to their
            stored vectors under the contract.

    Example:
        >>> embed = ContractEmbedding(model_name="all-MiniLM-L6-v2")
        >>> store = ContractQdrantVectorStore("docs", embed, path="./qdrant")  # doctest: +SKIP
        >>> index = load_index(store)  # doctest: +SKIP
    """

    _adapter = (
        ctxemb_qdrant.GuardedQdrantCollection,
        ctxemb_qdrant.QdrantDriver,
        ctxemb_qdrant.open_hybrid,
    )

    def __init__(
        self,
        collection_name: str,
        embed_model: ContractEmbedding | None = None,
        *,
        path: str | None = None,
        url: str | None = None,
        api_key: str | None = None,
        client: Any = None,
        **opening: Unpack[StoreOpenOptions],
    ) -> None:
        options = store_opening(opening, "ContractQdrantVectorStore")
        super().__init__()
        if sum(v is not None for v in (path, url, client)) > 1:
            raise InvalidInputError(
                "ContractQdrantVectorStore takes one of path= (local mode's folder), url= (a "
                "Qdrant server) and client="
            )
        if client is None:
            client = ctxemb_qdrant.connect(path, url, api_key=api_key)
        self._open_store(client, collection_name, embed_model, options)

    @classmethod
    def class_name(cls) -> str:
        return "ContractQdrantVectorStore"
