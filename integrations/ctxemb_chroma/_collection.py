"""Contract-stamped Chroma collections: created stamped, verified on open, guarded on every call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.errors import NotFoundError

from ctxemb_chroma._function import ContractEmbeddingFunction
from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.errors import InvalidInputError, MissingStampError
from ctxemb_core.guard import (
    VerifyReport,
    adopt_stamp,
    check_records,
    open_stamp,
    sample_ranges,
    verify_index,
)

SAMPLE = 16  # stored documents re-embedded on open: the newest half and a random half


def connect(path: str | None = None, host: str | None = None, port: int = 8000) -> ClientAPI:
    """An embedded client on ``path`` (the default), or an HTTP client of a Chroma server."""
    import chromadb

    if host:
        return chromadb.HttpClient(host=host, port=port)
    return chromadb.PersistentClient(path=path or "./chroma")


def stored_collection(client: ClientAPI, name: str) -> Collection:
    """The collection as the store has it now, unguarded (for reading its stamp or verifying)."""
    try:
        return client.get_collection(name, embedding_function=None)
    except NotFoundError:
        raise InvalidInputError(f"collection {name!r} does not exist") from None


def stamped_contract(client: ClientAPI, name: str) -> EmbeddingContract:
    """The contract recorded in a collection's stamp (raises if it has none)."""
    return IndexStamp.from_metadata(stored_collection(client, name).metadata).contract


def _embedder(contract: EmbeddingContract | Embedder) -> Embedder:
    return contract if isinstance(contract, Embedder) else Embedder(contract)


def _existing(client: ClientAPI, name: str, ef: ContractEmbeddingFunction) -> Collection | None:
    try:
        return client.get_collection(name, embedding_function=ef)  # type: ignore[arg-type]
    except NotFoundError:
        return None
    except ValueError as exc:
        # Chroma refuses our function when the collection persisted another one by name.
        raise MissingStampError(
            f"collection {name!r} was created with another Chroma embedding function and "
            f"carries no ctxemb stamp; ctxemb will not mix vectors into it ({exc})"
        ) from None


def _sample(raw: Collection, size: int = SAMPLE) -> tuple[list[str], list[Any], Any]:
    ids: list[str] = []
    docs: list[Any] = []
    vecs: list[Any] = []
    for start, stop in sample_ranges(raw.count(), size):
        got = raw.get(offset=start, limit=stop - start, include=["documents", "embeddings"])
        ids += got["ids"]
        docs += got["documents"] or [None] * len(got["ids"])
        vecs += list(got["embeddings"] if got["embeddings"] is not None else [])
    return ids, docs, vecs


def open_collection(
    client: ClientAPI,
    name: str,
    contract: EmbeddingContract | Embedder,
    *,
    create: bool = True,
    adopt: bool = False,
    sample: int = SAMPLE,
) -> GuardedCollection:
    """Create a stamped collection, or open one and verify its stamp and stored vectors.

    Args:
        client: a ``chromadb`` client (embedded ``PersistentClient`` or ``HttpClient``).
        name: the collection's name.
        contract: the caller's contract (or an :class:`~ctxemb_core.Embedder` built from it).
        create: create the collection (stamped in the same call) if it does not exist.
        adopt: stamp an existing unstamped collection after re-embedding a sample of its
            documents and finding its stored vectors equal to this contract's.
        sample: how many stored documents to re-embed and compare on open.

    Raises:
        ContractMismatchError: the collection was written under another contract.
        EncoderDriftError: same contract, but the canary re-embeds to other vectors.
        ForeignVectorsError: stored vectors that this contract did not make.
        MissingStampError: an unstamped collection, without ``adopt=True``.

    Example:
        >>> client = chromadb.PersistentClient("./index")          # doctest: +SKIP
        >>> docs = open_collection(client, "docs", contract)        # doctest: +SKIP
        >>> docs.add(["d1"], ["Green tea is steamed."])             # doctest: +SKIP
        >>> docs.query(["how is green tea made"], n_results=1)      # doctest: +SKIP
    """
    embedder = _embedder(contract)
    ef = ContractEmbeddingFunction(embedder)
    raw = _existing(client, name, ef)
    if raw is None:
        if not create:
            raise InvalidInputError(f"collection {name!r} does not exist (create=False)")
        stamp = IndexStamp.from_embedder(embedder)
        # The stamp is part of the create call itself: no unstamped collection ever exists.
        raw = client.create_collection(
            name,
            metadata=stamp.to_metadata(),
            embedding_function=ef,  # type: ignore[arg-type]
            configuration={"hnsw": {"space": ef.default_space(), "ef_search": 200}},
        )
        return GuardedCollection(client, raw, embedder, stamp)
    if not IndexStamp.is_stamped(raw.metadata) and adopt:
        return GuardedCollection(client, raw, embedder, _adopt(raw, embedder, ef, sample))
    stamp = open_stamp(raw.metadata, embedder, _sample(raw, sample))
    return GuardedCollection(client, raw, embedder, stamp)


def _adopt(
    raw: Collection, embedder: Embedder, ef: ContractEmbeddingFunction, sample: int
) -> IndexStamp:
    stamp = adopt_stamp(embedder, _sample(raw, max(sample, 1)), raw.count(), raw.name)
    raw.modify(
        metadata={**(raw.metadata or {}), **stamp.to_metadata()},
        configuration={"embedding_function": ef},
    )
    return stamp


def verify(
    collection: GuardedCollection | Collection,
    contract: EmbeddingContract | Embedder,
    sample: int = 32,
) -> VerifyReport:
    """Check a collection against a contract and report every finding (never raises for them)."""
    raw = collection.stored() if isinstance(collection, GuardedCollection) else collection
    return verify_index(raw.metadata, _embedder(contract), _sample(raw, sample))


class GuardedCollection:
    """A Chroma collection bound to one contract; every call is checked before it runs.

    Writes re-read the stamp from the store (another process may have replaced the collection);
    queries check against the stamp read on open, a string comparison.
    """

    def __init__(
        self, client: ClientAPI, raw: Collection, embedder: Embedder, stamp: IndexStamp
    ) -> None:
        self.client = client
        self.raw = raw
        self.embedder = embedder
        self.stamp = stamp

    @property
    def name(self) -> str:
        return self.raw.name

    @property
    def contract(self) -> EmbeddingContract:
        return self.embedder.contract

    def count(self) -> int:
        return self.raw.count()

    def ids(self) -> set[str]:
        return set(self.raw.get(include=[])["ids"])

    def stored(self) -> Collection:
        """The collection as the store has it now (another process may have replaced it)."""
        return stored_collection(self.client, self.name)

    def add(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        upsert: bool = False,
    ) -> None:
        """Embed documents under the contract and write them; nothing is written on any error."""
        ids, metadatas = check_records(ids, documents, metadatas)
        IndexStamp.from_metadata(self.stored().metadata).check_contract(self.contract)
        vectors = self.embedder.embed_documents(list(documents))
        write = self.raw.upsert if upsert else self.raw.add
        previous = (
            self.raw.get(ids=ids, include=["documents", "embeddings", "metadatas"])
            if upsert
            else None
        )
        step = self.client.get_max_batch_size()
        try:
            for i in range(0, len(ids), step):
                write(
                    ids=ids[i : i + step],
                    embeddings=vectors[i : i + step],
                    documents=list(documents[i : i + step]),
                    metadatas=metadatas[i : i + step] if metadatas else None,
                )
        except Exception:
            _undo(self.raw, ids, previous)
            raise

    def upsert(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """Like :meth:`add`, replacing existing ids (restored as they were on error)."""
        self.add(ids, documents, metadatas, upsert=True)

    def query(
        self,
        query_texts: Sequence[str],
        n_results: int = 10,
        *,
        embedder: Embedder | None = None,
        **kwargs: Any,
    ) -> Any:
        """Embed queries under the contract (query role) and search; checked before it runs.

        ``embedder`` lets a caller query with its own embedder; its contract must be the
        collection's, or :class:`~ctxemb_core.errors.ContractMismatchError` is raised and nothing
        is returned.
        """
        querier = embedder or self.embedder
        self.stamp.check_contract(querier.contract)
        if isinstance(query_texts, str):
            query_texts = [query_texts]
        vectors = querier.embed_queries(list(query_texts))
        return self.raw.query(query_embeddings=vectors, n_results=n_results, **kwargs)

    def get(self, **kwargs: Any) -> Any:
        return self.raw.get(**kwargs)

    def delete(self, ids: Sequence[str]) -> None:
        self.raw.delete(ids=list(ids))


def _undo(raw: Collection, ids: list[str], previous: Any) -> None:
    raw.delete(ids=ids)
    if previous and previous["ids"]:
        raw.add(
            ids=previous["ids"],
            embeddings=previous["embeddings"],
            documents=previous["documents"],
            metadatas=previous["metadatas"],
        )
