"""``langchain_chroma.Chroma`` on a stamped collection: core's guarded index on ``ctxemb_chroma``'s
driver (the guard of every store), with Chroma's own methods reading the collection it verified."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_chroma import Chroma
from langchain_core.documents import Document

from ctxemb_chroma import (
    ChromaDriver,
    GuardedCollection,
    connect,
    open_hybrid,
    stored_or_none,
)
from ctxemb_core.errors import CtxembError, InvalidInputError, StampError
from ctxemb_core.guard import OPEN_SAMPLE, check_flag, check_paging, check_sample_size
from ctxemb_core.index import GuardedIndex
from ctxemb_core.remedy import DEFAULT_TERMS
from ctxemb_langchain._checks import UnstampedView, check_settings, chroma_documents
from ctxemb_langchain._embeddings import ContractEmbeddings, contract_embeddings
from ctxemb_langchain._writer import IndexWriter


class ContractChroma(IndexWriter, Chroma):
    """``langchain_chroma.Chroma`` whose collection carries the contract's stamp.

    Created stamped (the stamp ``ctxemb_chroma`` and the Haystack adapter write: a collection
    indexed by any of them opens here under the same contract) or opened and verified as
    ``ctxemb_chroma.open_collection`` opens it (core's :class:`~ctxemb_core.index.GuardedIndex`
    on a :class:`~ctxemb_chroma.ChromaDriver`); ``ContractEmbeddings`` of another contract are
    refused (``ContractMismatchError``, fields named). Every later call re-reads the collection;
    writes (upserts, as in ``Chroma``) are checked whole and undone on failure.

    Args:
        collection_name: the collection.
        embedding_function: :class:`ContractEmbeddings`.
        sample: stored records re-embedded and compared when the collection is opened.
        create_collection_if_not_exists: create the collection (stamped) when it is missing.
        adopt: stamp an existing unstamped collection (written by a plain ``Chroma``, say)
            once a sample of its records re-embeds to their stored vectors under the contract
            (``ctxemb_chroma.open_collection(..., adopt=True)``); a mismatch is refused.
        **kwargs: ``Chroma``'s own (``persist_directory``, ``host``/``port``, ``client``,
            ``client_settings``, ``relevance_score_fn``, …). The contract decides the collection's
            metadata (its stamp) and distance space: ``collection_metadata`` /
            ``collection_configuration`` may only name that space (``{"hnsw:space": "cosine"}``
            for a normalised contract, ``"ip"`` otherwise), as LangChain tutorials do. A
            ``persist_directory`` is opened with ``ctxemb_chroma.connect``, which joins a client
            already open on that folder in this process, however its path was spelled.

    Example:
        >>> store = ContractChroma("docs", ContractEmbeddings(contract), persist_directory="./db")
        >>> store.add_texts(["Green tea is steamed."])  # doctest: +SKIP
        >>> store.similarity_search("how is green tea made", k=1)  # doctest: +SKIP
    """

    _merges = True  # an upsert keeps stored metadata keys the batch does not set, as Chroma's
    _terms = DEFAULT_TERMS.adopting_in("in LangChain ContractChroma(..., adopt=True)")

    def __init__(
        self,
        collection_name: str = "langchain",
        embedding_function: ContractEmbeddings | None = None,
        persist_directory: str | None = None,
        *,
        sample: int = OPEN_SAMPLE,
        create_collection_if_not_exists: bool = True,
        adopt: bool = False,
        **kwargs: Any,
    ) -> None:
        embeddings = contract_embeddings(embedding_function)
        check_settings(kwargs, embeddings.contract)
        self._ctxemb_sample = check_sample_size(sample)
        self._ctxemb_open = {
            "sample": self._ctxemb_sample,
            "create": check_flag(create_collection_if_not_exists, "create"),
            "adopt": check_flag(adopt, "adopt"),
        }
        self._guarded: GuardedIndex | None = None
        if persist_directory is not None and not {"client", "tenant", "database"} & set(kwargs):
            # Through connect, which joins a client already open on the folder under another
            # spelling: Chroma's own would be a second system there, blind to the other's writes.
            kwargs["client"] = connect(persist_directory, settings=kwargs.get("client_settings"))
        # Chroma's constructor makes the client, then calls the collection hook below.
        super().__init__(collection_name, embeddings, persist_directory, **kwargs)
        if self._guarded is None:  # pragma: no cover - a langchain_chroma that renamed its hook
            raise CtxembError(
                "this langchain_chroma version opened the collection without ctxemb's guard; "
                "ContractChroma refuses to run unguarded (please report the version)"
            )

    def _Chroma__ensure_collection(self) -> None:
        # Called by Chroma.__init__ and reset_collection: open through the guard instead of
        # get_or_create_collection, which would make an unstamped collection.
        embedder = self.contract_embeddings.embedder
        driver = ChromaDriver(self._client, self._collection_name, embedder=embedder)
        self._guarded = self._opened(driver, **self._ctxemb_open)
        self._chroma_collection = self._verified(self._guarded)

    def _verified(self, index: GuardedIndex) -> Any:
        """The collection ``index`` verified (its head read and, if it changed, verified again),
        as Chroma's client gives it."""
        name = self._collection_name
        for _ in range(2):
            try:
                head = index.current()
            except InvalidInputError:
                if stored_or_none(self._client, name) is None:
                    raise InvalidInputError(f"collection {name!r} no longer exists") from None
                raise
            raw = stored_or_none(self._client, name)
            if raw is not None and str(raw.id) == head.identity:
                return raw
        raise StampError(
            f"collection {self._collection_name!r} keeps being made again while it is read"
        )

    @property
    def contract_embeddings(self) -> ContractEmbeddings:
        return contract_embeddings(self._embedding_function)

    @property
    def index(self) -> GuardedIndex:
        """The guarded index this store reads and writes through."""
        if self._guarded is None:
            raise CtxembError("the collection was deleted; call reset_collection() first")
        return self._guarded

    @property
    def guarded(self) -> GuardedCollection:
        """:attr:`index` in Chroma's shapes (``raw``, ``get``, ``query``), as
        :func:`ctxemb_chroma.open_collection` returns it."""
        return GuardedCollection(self.index)

    @property
    def _collection(self) -> Any:
        # Every Chroma call of the base class goes through here: the collection is read back
        # and re-verified if it changed since it was verified (a deleted one: see index).
        self._chroma_collection = self._verified(self.index)
        return UnstampedView(self._chroma_collection)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        """``Chroma.get``, its ``limit``/``offset`` checked first (Chroma's own error for a
        negative one is an untyped ``OverflowError``)."""
        check_paging(kwargs, "get")
        return super().get(*args, **kwargs)

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored documents of these ids (a record stored without metadata has ``{}``)."""
        return chroma_documents(self, ids)

    def update_documents(self, ids: list[str], documents: list[Document]) -> None:
        """Re-embed and replace the stored records of these ids (ids not stored are skipped, as
        Chroma's ``update`` skips them); checked whole and undone on failure, as ``add_texts``."""
        if len(ids) != len(documents):
            raise InvalidInputError("update_documents needs one id per document")
        present = set(self.get(ids=list(ids), include=[])["ids"])
        keep = [(i, d) for i, d in zip(ids, documents, strict=True) if i in present]
        if keep:
            self.add_documents([d for _, d in keep], ids=[i for i, _ in keep])

    def fork(self, new_name: str) -> ContractChroma:
        """Chroma's fork (a copy of the collection, stamp included), opened guarded."""
        self._collection.fork(new_name=new_name)
        return ContractChroma(
            new_name,
            self.contract_embeddings,
            client=self._client,
            sample=self._ctxemb_sample,
            create_collection_if_not_exists=False,
        )

    def delete_collection(self) -> None:
        super().delete_collection()
        self._guarded = None

    def reset_collection(self) -> None:
        """Delete the collection (if it is still there) and create it again, stamped."""
        if self._guarded is not None:
            self.delete_collection()
        self._Chroma__ensure_collection()

    def _open_hybrid(self, **options: Any) -> Any:
        # For ContractHybridRetriever.from_store: the collection's hybrid index, opened by
        # ctxemb_chroma as the CLI opens it (the same lexical folder and stamp).
        return open_hybrid(
            self._client,
            self._collection_name,
            self.contract_embeddings.embedder,
            sample=self._ctxemb_sample,
            **options,
        )

    def add_images(self, *args: Any, **kwargs: Any) -> list[str]:
        raise InvalidInputError(
            "ContractChroma stores text embedded under its contract; ContractEmbeddings has no "
            "image role"
        )
