"""A LlamaIndex vector store on a stamped Chroma collection: :class:`._store.ContractVectorStore`
on ``ctxemb_chroma``'s driver. What is Chroma's own here: the client (a folder, a server or one
given) and the collection's name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxemb_chroma import ChromaDriver, GuardedCollection, connect, open_hybrid
from ctxemb_core.index import StoreOpenOptions, store_opening
from ctxemb_llamaindex._embedding import ContractEmbedding
from ctxemb_llamaindex._store import ContractVectorStore

if TYPE_CHECKING:
    from typing_extensions import Unpack


class ContractChromaVectorStore(ContractVectorStore):
    """LlamaIndex's vector store on a Chroma collection stamped with the contract, in place of
    ``ChromaVectorStore``.

    The collection is created stamped or opened and verified as ``ctxemb_chroma.open_collection``
    opens it, so a collection written by the CLI, Haystack or LangChain opens here under the
    same contract, and one written here opens there; under another contract it is refused
    (``ContractMismatchError``, fields named). Nodes are stored as LlamaIndex's own Chroma
    store keeps them (``_node_content`` in each record's metadata).

    Args:
        collection_name: the collection.
        embed_model: a :class:`ContractEmbedding`; ``None``: the contract the collection's
            stamp holds (the collection must exist).
        persist_path: an embedded store's folder (``ctxemb_chroma.connect``, which joins a
            client already open on it); or ``host``/``port`` of a server; or ``client``.
        sample: stored records re-embedded and compared when the collection is opened.
        create: create the collection (stamped) when it is missing.
        adopt: stamp an unstamped collection (a plain ``ChromaVectorStore``'s) once a sample
            of its records re-embeds to their stored vectors under the contract.

    Example:
        >>> embed = ContractEmbedding(model_name="all-MiniLM-L6-v2")
        >>> store = ContractChromaVectorStore("docs", embed, persist_path="./db")  # doctest: +SKIP
        >>> index = load_index(store)  # doctest: +SKIP
    """

    _adapter = (GuardedCollection, ChromaDriver, open_hybrid)

    def __init__(
        self,
        collection_name: str,
        embed_model: ContractEmbedding | None = None,
        *,
        persist_path: str | None = None,
        host: str | None = None,
        port: int = 8000,
        client: Any = None,
        **opening: Unpack[StoreOpenOptions],
    ) -> None:
        options = store_opening(opening, "ContractChromaVectorStore")
        super().__init__()
        client = connect(persist_path, host, port) if client is None else client
        self._open_store(client, collection_name, embed_model, options)

    @classmethod
    def class_name(cls) -> str:
        return "ContractChromaVectorStore"
