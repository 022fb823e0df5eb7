"""Opening a Chroma collection through the guard: created stamped, or verified whole."""

from __future__ import annotations

from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection

from ctxemb_chroma._collection import GuardedCollection
from ctxemb_chroma._function import ContractEmbeddingFunction
from ctxemb_chroma._store import (
    check_client,
    check_name,
    missing_collection,
    stored_or_none,
    translated,
)
from ctxemb_chroma._verify import adopt as adopt_unstamped
from ctxemb_chroma._verify import verify_open
from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.guard import (
    OPEN_SAMPLE,
    as_embedder,
    check_flag,
    check_sample_size,
)


def create_stamped(
    client: ClientAPI, name: str, function: ContractEmbeddingFunction, stamp: IndexStamp
) -> Collection:
    """Create collection ``name`` as every stamped collection ctxemb makes is made: ``stamp`` in
    its metadata in the create call itself (no unstamped collection exists), ``function`` (of the
    stamp's contract) as Chroma's persisted embedding function, searched in the space the
    contract's vectors are for. :func:`open_collection` and the store driver both call it."""
    with translated(f"creating collection {name!r}"):
        return client.create_collection(
            name,
            metadata=stamp.to_metadata(),
            embedding_function=function,  # type: ignore[arg-type]
            configuration={"hnsw": {"space": function.default_space(), "ef_search": 200}},
        )


def open_collection(
    client: ClientAPI,
    name: str,
    contract: EmbeddingContract | Embedder,
    *,
    create: bool = True,
    adopt: bool = False,
    repair: bool = False,
    sample: int = OPEN_SAMPLE,
    stamp: IndexStamp | None = None,
) -> GuardedCollection:
    """Create a stamped collection, or open one and verify its stamp and stored vectors.

    Args:
        client: a ``chromadb`` client (embedded ``PersistentClient`` or ``HttpClient``).
        name: the collection's name.
        contract: the caller's contract (or an :class:`~ctxemb_core.Embedder` built from it).
        create: create the collection (stamped in the same call) if it does not exist.
        adopt: stamp an existing unstamped collection after re-embedding a sample of its
            documents and finding its stored vectors equal to this contract's.
        repair: write the stamp's contract back into Chroma's persisted embedding-function
            configuration when it was changed around ctxemb (after the stamp is verified).
        sample: how many stored records to re-embed and compare on open (the newest half and a
            random half; 0 checks the stamp and canary only). See
            :func:`ctxemb_core.guard.detection_probability` for what a sample finds. A
            collection that passed an open under this contract is not sampled again while
            its ids are unchanged; records added (or deleted and added again) since are
            checked first (:mod:`ctxemb_core.verified`; ``open_check`` says what was done).
        stamp: the stamp a new collection gets instead of one made now: another index's of
            the same contract, carried with its vectors (:func:`migrate` from another store);
            it must pass its canary here.

    Raises:
        ContractMismatchError: the collection was written under another contract.
        EncoderDriftError: same contract, but the canary re-embeds to other vectors.
        ForeignVectorsError: stored records that this contract did not make (or without text).
        ConfigurationMismatchError: Chroma's persisted embedding function is not the stamp's.
        MissingStampError: an unstamped collection, without ``adopt=True``.
        DamagedStampError: a stamp that cannot be read or contradicts itself.
        InvalidInputError: a bad argument (a name Chroma refuses, a non-client, …).
        StoreUnavailableError: the server cannot be reached.

    Example:
        >>> client = chromadb.PersistentClient("./index")          # doctest: +SKIP
        >>> docs = open_collection(client, "docs", contract)        # doctest: +SKIP
        >>> docs.add(["d1"], ["Green tea is steamed."])             # doctest: +SKIP
        >>> docs.query(["how is green tea made"], n_results=1)      # doctest: +SKIP
    """
    check_client(client)
    check_name(name)
    embedder = as_embedder(contract)
    check_sample_size(sample)
    for flag, value in (("create", create), ("adopt", adopt), ("repair", repair)):
        check_flag(value, flag)
    raw = stored_or_none(client, name)
    if raw is None:
        if not create:
            raise missing_collection(client, name, " (create=False)")
        if stamp is None:
            stamp = IndexStamp.from_embedder(embedder)
        else:
            stamp.check_contract(embedder.contract)
            stamp.verify(embedder)
        try:
            raw = create_stamped(client, name, ContractEmbeddingFunction(embedder), stamp)
            return GuardedCollection(client, raw, embedder, stamp, sample=sample)
        except Exception:
            raw = stored_or_none(client, name)
            if raw is None:
                raise
            # Another process created it meanwhile: open what it made, with every check.
    check = None
    with translated(f"opening collection {name!r}"):
        if adopt and not IndexStamp.is_stamped(raw.metadata):
            stamp = adopt_unstamped(raw, embedder, sample)
        else:
            stamp, check = verify_open(client, raw, embedder, sample, repair)
    return GuardedCollection(client, raw, embedder, stamp, sample=sample, open_check=check)
