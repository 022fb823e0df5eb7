"""A stamped Chroma collection bound to one contract: core's guarded index in Chroma's shapes.

Every decision (open, verify, adopt, repair, the sample, writes undone on failure, sync, the
query checks) is :class:`ctxemb_core.index.GuardedIndex`'s over a :class:`ChromaDriver`;
:class:`GuardedCollection` takes and returns what Chroma's own collection does (``get`` and
``query`` keyword arguments and results, Chroma's ``where`` / ``where_document`` filters).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection

from ctxemb_chroma._driver import ChromaDriver, check_metadatas
from ctxemb_chroma._store import (
    check_client,
    check_name,
    configured_function,
    missing_collection,
    read_settled,
    stored_or_none,
    translated,
)
from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.errors import InvalidInputError, MissingStampError
from ctxemb_core.guard import (
    OPEN_SAMPLE,
    as_embedder,
    check_count,
    check_delete,
    check_paging,
    check_records,
)
from ctxemb_core.index import GuardedIndex
from ctxemb_core.sync import SyncReport
from ctxemb_core.verified import OpenCheck


class GuardedCollection:
    """A Chroma collection bound to one contract; every call is checked before it runs.

    Every call first reads the collection back from the store (one ``get_collection``: 0.3-0.5
    ms embedded) and compares its id, stamp and Chroma's persisted configuration with what was
    verified: a change after open (a stamp replaced or removed, a configuration changed, the
    collection created again under the name) is verified again in full, or the call refused.
    ``index`` is the :class:`~ctxemb_core.index.GuardedIndex` that makes those checks.
    """

    def __init__(self, index: GuardedIndex) -> None:
        if not isinstance(index, GuardedIndex) or not isinstance(index.driver, ChromaDriver):
            raise InvalidInputError("a GuardedCollection wraps a GuardedIndex over a ChromaDriver")
        self.index = index
        self.client: ClientAPI = index.driver.client
        self._driver: ChromaDriver = index.driver

    name = property(lambda self: self.index.name)
    embedder = property(lambda self: self.index.embedder)
    sample = property(lambda self: self.index.sample)

    @property
    def contract(self) -> EmbeddingContract:
        return self.index.contract

    @property
    def stamp(self) -> IndexStamp:
        return self.index.stamp

    @property
    def open_check(self) -> OpenCheck | None:
        """What the last verification checked of the stored records (``None`` when the
        collection was created or adopted by this open)."""
        return self.index.open_check

    @property
    def raw(self) -> Collection:
        """The Chroma collection as it was last verified (no embedding function of its own)."""
        return self._driver._collection()

    def count(self) -> int:
        return self.index.count()

    def ids(self) -> set[str]:
        return set(self.index.ids())

    def stored(self) -> Collection:
        """The collection as the store has it now, unguarded (for reading or verifying)."""
        raw = stored_or_none(self.client, self.name)
        if raw is None:
            raise InvalidInputError(f"collection {self.name!r} no longer exists")
        return raw

    def current(self) -> Collection:
        """The collection now, proven to carry the stamp this object verified (or re-verified)."""
        with translated(f"verifying {self.name!r}"):
            self.index.current()
        return self.raw

    def add(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        upsert: bool = False,
    ) -> None:
        """Embed documents under the contract and write them.

        The batch, the stamp and, for ``add``, that no id is stored yet (Chroma would keep the
        old record silently) are checked before anything is written. A write that fails or is
        interrupted (Ctrl-C included) is undone exactly, in chunks of the store's batch limit.

        Raises:
            InvalidInputError: a bad batch (named), ExistingIdsError for ``add``.
            IncompleteWriteError: the write failed and so did its undo (both reported).
        """
        checked, metas = check_records(ids, documents, metadatas)
        check_metadatas(checked, metas)  # the caller's, as Chroma would judge them
        write = self.index.upsert if upsert else self.index.add
        write(ids, documents, metadatas)

    def add_embedded(
        self,
        ids: Sequence[str],
        vectors: Any,
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        fingerprint: str,
        upsert: bool = False,
    ) -> None:
        """Write records a ctxemb embedder elsewhere already embedded, under ``fingerprint``.

        For frameworks whose embedder and writer are separate steps (Haystack, LangChain):
        the vectors are refused unless ``fingerprint`` is the stamp's, and each must be finite
        and of the contract's width; otherwise as :meth:`add` (checked whole, undone on error).

        Raises:
            ContractMismatchError: the vectors were made under another contract.
            InvalidInputError: a bad batch or vector (named), ExistingIdsError for ``add``.
        """
        checked, metas = check_records(ids, documents, metadatas)
        check_metadatas(checked, metas)
        self.index.add_embedded(
            ids, vectors, documents, metadatas, fingerprint=fingerprint, upsert=upsert
        )

    def upsert(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """Like :meth:`add`, replacing existing ids (restored as they were on error)."""
        self.add(ids, documents, metadatas, upsert=True)

    def add_missing(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> int:
        """Add the records whose ids the collection lacks; returns how many this call added.

        What indexing a corpus wants: a re-run, or another process indexing the same corpus
        at the same time, adds nothing twice and fails on nothing that is already there.
        """
        return self.index.add_missing(ids, documents, metadatas)

    def sync(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> SyncReport:
        """Index a batch as a sync: embed and write only the records that are new or whose text
        changed; returns what was added, updated and left unchanged.

        Changed records are upserted (undone whole on failure, as :meth:`upsert`), so a sync
        interrupted mid-corpus keeps the batches before and a re-run resumes. ``dry_run``
        embeds and writes nothing. See :mod:`ctxemb_core.sync` for the rules.
        """
        return self.index.sync(ids, documents, metadatas, dry_run=dry_run, progress=progress)

    def delete_missing(self, keep: Iterable[str], *, dry_run: bool = False) -> list[str]:
        """Delete the records whose ids are not in ``keep`` (a corpus's ids); returns them.

        Deleting is by id in chunks of the store's batch limit; an interrupted run leaves some
        deleted and the next run deletes the rest.
        """
        return self.index.delete_missing(keep, dry_run=dry_run)

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
        is returned. Other keyword arguments are Chroma's ``query``'s (``where``, ``include``).
        """
        check_count(n_results, "n_results")
        with translated(f"verifying {self.name!r}"):
            vectors = self.index.query_vectors(query_texts, embedder=embedder)
        with translated("query"):
            return read_settled(
                self.raw.query, query_embeddings=vectors, n_results=n_results, **kwargs
            )

    def get(self, **kwargs: Any) -> Any:
        """Chroma's ``get`` on the collection, after the stamp is checked."""
        check_paging(kwargs, "get")
        raw = self.current()
        with translated("get"):
            return read_settled(raw.get, **kwargs)

    def delete(
        self,
        ids: Sequence[str] | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        where_document: Mapping[str, Any] | None = None,
    ) -> None:
        """Delete records by id, by Chroma ``where`` / ``where_document`` filter, or both
        (a record must match all that are given). An empty filter is refused, never read as
        "everything"."""
        ids, given = check_delete(ids, {"where": where, "where_document": where_document})
        raw = self.current()
        if given:  # Chroma's own filter language: the records it matches, deleted by id
            with translated("delete"):
                found = read_settled(raw.get, ids=ids, include=[], **given)["ids"]
            ids = list(found) if ids is None else [i for i in ids if i in set(found)]
        if ids:
            self.index.delete(ids)


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
        create: create the collection (stamped in the create call) when it does not exist.
        adopt: stamp an existing unstamped collection once a sample of its records re-embeds
            to their stored vectors (refused, nothing written, otherwise).
        repair: write Chroma's persisted embedding function back from the stamp when it
            disagrees with it, once the stamp and canary pass.
        sample: stored records re-embedded on open (0: stamp and canary only).
        stamp: the stamp a new collection gets (another index's of the same contract, carried
            with its vectors by :func:`~ctxemb_chroma.migrate`); its canary is checked here.

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
    driver = ChromaDriver(client, name, embedder=embedder)
    if create is False and stored_or_none(client, name) is None:
        raise missing_collection(client, name, " (create=False)")  # with a hint at a near one
    with translated(f"opening collection {name!r}"):
        try:
            index = GuardedIndex.open(
                driver,
                embedder,
                create=create,
                adopt=adopt,
                repair=repair,
                sample=sample,
                stamp=stamp,
            )
        except MissingStampError as exc:
            raise _unstamped(client, name, exc) from None
    return GuardedCollection(index)


def _unstamped(client: ClientAPI, name: str, exc: MissingStampError) -> MissingStampError:
    """The refusal of an unstamped collection in Chroma's terms: who likely wrote it."""
    raw = stored_or_none(client, name)
    if raw is None or "carries no ctxemb stamp" not in str(exc):
        return exc  # an adoption refused: its own words
    function = configured_function(raw)[0]
    by = (
        f"with another Chroma embedding function ({function!r}: Chroma's own, or a writer "
        "such as Haystack's DocumentWriter)"
        if function not in (None, "ctxemb")
        else "around ctxemb (a plain chromadb or langchain_chroma.Chroma client, say)"
    )
    return MissingStampError(
        f"collection {name!r} was written {by} and carries no ctxemb stamp, so nothing proves "
        "which contract made its vectors; ctxemb neither reads nor writes it unstamped. ",
        remedies=exc.remedies,
    )
