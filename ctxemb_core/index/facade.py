"""A store adapter's public index object: a :class:`GuardedIndex` in that store's shapes.

``ctxemb_chroma.GuardedCollection`` and ``ctxemb_pgvector.GuardedTable`` hold a guarded index
as ``.index`` and translate only what is their store's own (Chroma's ``get`` / ``query``
keyword arguments and results; PostgreSQL's search breadth, exact scan and filters).
:class:`IndexFacade` is what they share, written once: what the index is, ``count`` and
``ids``, the writes with the batch refused in the store's terms before anything is embedded,
``sync``, ``add_missing`` and ``delete_missing``, and the open path (:meth:`IndexFacade.open`).

A subclass names its driver type and its :class:`~ctxemb_core.remedy.StoreTerms` (the words its
errors' advice uses). The index's own object, read unguarded, and the refusal of a missing index
are its driver's (``stored()``, ``missing_error(why)``); the subclass may say how its client's
errors are translated, what it refuses in a batch, how an unstamped index is named.

Example:
    >>> class GuardedThing(IndexFacade[ThingDriver, Thing]):          # doctest: +SKIP
    ...     _driver_type, _terms = ThingDriver, THING_TERMS
    >>> things = GuardedThing.open(ThingDriver(client, "docs"), contract)  # doctest: +SKIP
    >>> things.sync(["d1"], ["Green tea is steamed."])                     # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypedDict, TypeVar, cast

from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidArgumentsError, InvalidInputError, MissingStampError, worded
from ctxemb_core.index.driver import StoreDriver
from ctxemb_core.index.guarded import GuardedIndex
from ctxemb_core.remedy import DEFAULT_TERMS, StoreTerms
from ctxemb_core.stamp import IndexStamp
from ctxemb_core.stamp_guard import as_embedder
from ctxemb_core.sync import SyncReport
from ctxemb_core.validate import check_records
from ctxemb_core.verified import OpenCheck

if TYPE_CHECKING:
    from typing_extensions import Self, Unpack

__all__ = ["IndexFacade", "OpenOptions"]

DriverT = TypeVar("DriverT", bound=StoreDriver)
StoredT = TypeVar("StoredT")
_Method = TypeVar("_Method", bound=Callable[..., Any])


class OpenOptions(TypedDict, total=False):
    """How an index is opened, the same in every store (each is :meth:`GuardedIndex.open`'s).

    - ``create`` (default ``True``): create the index, stamped in the same step, when it does
      not exist; ``False`` refuses a missing one, naming near names where the store can.
    - ``adopt`` (``False``): stamp an unstamped index once a sample of its records re-embeds to
      their stored vectors (refused, nothing written, otherwise).
    - ``repair`` (``False``): once the stamp and canary pass, write the store's own setting
      back from the stamp where it disagrees (a store may repair more: see its opener).
    - ``sample`` (:data:`~ctxemb_core.records.OPEN_SAMPLE`): stored records re-embedded on
      open, those written since the last verified open first (0: stamp, canary and setting).
    - ``stamp`` (``None``): the stamp a new index gets instead of one made now (another
      index's of the same contract, carried with its vectors); it must be the caller's
      contract's and pass its canary.
    """

    create: bool
    adopt: bool
    repair: bool
    sample: int
    stamp: IndexStamp | None


def _worded(method: _Method) -> _Method:
    """``method``'s errors give their advice in the facade's store terms (a classmethod's: its
    class's)."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        with worded(self._terms):
            return method(self, *args, **kwargs)

    return cast(_Method, call)


class IndexFacade(Generic[DriverT, StoredT]):
    """A guarded index in one store's shapes; every call is checked before it runs.

    ``index`` is the :class:`~ctxemb_core.index.GuardedIndex` that makes every check (the
    head compared with what was verified on each call; a change verified again in full, or the
    call refused); writes are all-or-nothing, by the store's transaction or by undo.

    Args:
        index: a guarded index over a driver of the subclass's ``_driver_type``.

    Raises:
        InvalidInputError: ``index`` is not a GuardedIndex over such a driver.
    """

    #: The driver class the index must run over (a subclass's).
    _driver_type: ClassVar[type] = object
    #: The store's words: what it calls an index, and how its errors' advice names its calls.
    _terms: ClassVar[StoreTerms] = DEFAULT_TERMS

    def __init__(self, index: GuardedIndex) -> None:
        if not isinstance(index, GuardedIndex) or not isinstance(index.driver, self._driver_type):
            raise InvalidInputError(
                f"a {type(self).__name__} wraps a GuardedIndex over a {self._driver_type.__name__}"
            )
        self.index = index
        #: What an open with ``repair=True`` wrote back beyond the store's setting, in words
        #: (empty: nothing; a store's tools set it: ``StoreTools(repair=...)``).
        self.repaired: list[str] = []

    @property
    def client(self) -> Any:
        """The store's client the index is reached through: its driver's ``client`` (a store
        whose driver names it otherwise says so: a PostgreSQL table's ``conn``)."""
        return getattr(self.driver, "client", None)

    # -- the store's own (a subclass's hooks) ---------------------------------------------

    @classmethod
    def _stored_in(cls, driver: DriverT) -> StoredT | None:
        """The index's object as the store has it now (unguarded), or ``None``: none (the
        driver's ``stored()``)."""
        stored = getattr(driver, "stored", None)
        if not callable(stored):
            raise NotImplementedError(f"{cls.__name__} reads no store object")
        return cast("StoredT | None", stored())

    @classmethod
    def _missing(cls, driver: DriverT, why: str) -> Exception:
        """The refusal of an index that is not there: the driver's ``missing_error(why)`` (a
        store may name near names), else in the facade's terms."""
        worded = getattr(driver, "missing_error", None)
        if callable(worded):
            return cast(Exception, worded(why))
        return InvalidInputError(
            f"{cls._terms.kind} {driver.name!r} does not exist in {driver.describe()}{why}"
        )

    @classmethod
    def _unstamped(cls, driver: DriverT, exc: MissingStampError) -> MissingStampError:
        """The refusal of an unstamped index (a store may say who likely wrote it)."""
        return exc

    @staticmethod
    def _translated(what: str) -> contextlib.AbstractContextManager[None]:
        """The store client's errors as ctxemb's while ``what`` runs (a store's; none here)."""
        return contextlib.nullcontext()

    def _check_batch(
        self, ids: list[str], documents: Sequence[str], metadatas: list[Any] | None
    ) -> None:
        """What the store would refuse only while writing, refused before anything is
        embedded (``ids`` and ``metadatas`` as :func:`~ctxemb_core.validate.check_records`
        returned them)."""

    @staticmethod
    def _check_options(given: Mapping[str, Any], options: Any, call: str = "") -> None:
        """Keywords gathered as ``**given`` must be the ``options`` TypedDict's, as named
        parameters would be (an :class:`~ctxemb_core.errors.InvalidArgumentsError`, a
        ``TypeError``, naming the stray one and what ``call`` takes otherwise)."""
        if not given:  # most calls give none (a query's every call passes here)
            return
        unknown = sorted(set(given) - set(options.__annotations__))
        if unknown:
            raise InvalidArgumentsError(
                f"{call or 'this call'}() got an unexpected keyword argument {unknown[0]!r}; "
                f"besides its own parameters it takes {', '.join(sorted(options.__annotations__))}"
            )

    def _seen(self) -> StoredT:
        """The index's object as the last check proved it (read again unless a store keeps
        the one it just read)."""
        return self.stored()

    # -- opening --------------------------------------------------------------------------

    @classmethod
    @_worded  # its errors too: the store's words, whoever called it (a framework's store)
    def open(
        cls,
        driver: DriverT,
        contract: EmbeddingContract | Embedder,
        **opening: Unpack[OpenOptions],
    ) -> Self:
        """Create a stamped index, or open one and verify its stamp, setting and records:
        :meth:`GuardedIndex.open` over ``driver`` (the options: :class:`OpenOptions`), with a
        missing index (``create=False``) and an unstamped one refused in the store's words.

        Raises:
            ContractMismatchError: the index, or the ``stamp`` given, is another contract's.
            TypeError: an option :class:`OpenOptions` does not name.
            (and every refusal of :meth:`GuardedIndex.open`)
        """
        cls._check_options(opening, OpenOptions, cls._terms.open)
        embedder = as_embedder(contract)
        stamp = opening.get("stamp")
        if stamp is not None:  # refused whether the index is made or only opened
            if not isinstance(stamp, IndexStamp):
                raise InvalidInputError(f"stamp must be an IndexStamp, got {type(stamp).__name__}")
            stamp.check_contract(embedder.contract)
        if opening.get("create", True) is False and cls._stored_in(driver) is None:
            raise cls._missing(driver, " (create=False)")
        with cls._translated(f"opening {cls._terms.kind} {driver.name!r}"):
            try:
                index = GuardedIndex.open(driver, embedder, **opening)
            except MissingStampError as exc:
                raise cls._unstamped(driver, exc) from None
        return cls(index)

    # -- what the index is ----------------------------------------------------------------

    @property
    def driver(self) -> DriverT:
        return cast(DriverT, self.index.driver)

    @property
    def name(self) -> str:
        return self.index.name

    @property
    def embedder(self) -> Embedder:
        return self.index.embedder

    @property
    def contract(self) -> EmbeddingContract:
        return self.index.contract

    @property
    def stamp(self) -> IndexStamp:
        return self.index.stamp

    @property
    def sample(self) -> int:
        """The stored records a re-verification re-embeds (the open's ``sample``)."""
        return self.index.sample

    @property
    def open_check(self) -> OpenCheck | None:
        """What the last verification checked of the stored records (``None`` when the index
        was created or adopted by this open)."""
        return self.index.open_check

    @_worded
    def stored(self) -> StoredT:
        """The index as the store has it now, unguarded (for reading or verifying)."""
        found = self._stored_in(self.driver)
        if found is None:
            raise InvalidInputError(f"{self._terms.kind} {self.name!r} no longer exists")
        return found

    @_worded
    def current(self) -> StoredT:
        """The index now, proven to carry the stamp this object verified (or re-verified)."""
        with self._translated(f"verifying {self.name!r}"):
            self.index.current()
        return self._seen()

    @_worded
    def count(self) -> int:
        return self.index.count()

    @_worded
    def ids(self) -> set[str]:
        """Every id the index holds (one read)."""
        self.index.current()
        return set(self.driver.ids())

    # -- writing --------------------------------------------------------------------------

    def _checked(
        self, ids: Sequence[str], documents: Sequence[str], metadatas: Sequence[Any] | None
    ) -> None:
        if type(self)._check_batch is IndexFacade._check_batch:
            return  # nothing of the store's own: the index checks the batch before embedding
        checked, metas = check_records(ids, documents, metadatas)
        self._check_batch(checked, documents, metas)

    @_worded
    def add(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        upsert: bool = False,
    ) -> None:
        """Embed documents under the contract and write them, all or nothing.

        The batch (as the store would judge it too), the stamp and, for ``add``, that no id is
        stored yet are checked before anything is embedded. A write that fails or is
        interrupted (Ctrl-C included) leaves the index as it was: the store's transaction, or
        the records put back exactly where the store has none.

        Raises:
            InvalidInputError: a bad batch (named); ExistingIdsError for ``add``.
            IncompleteWriteError: a store without transactions failed, and so did the undo.
        """
        self._checked(ids, documents, metadatas)
        write = self.index.upsert if upsert else self.index.add
        write(ids, documents, metadatas)

    def upsert(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """Like :meth:`add`, replacing the records of existing ids (text, vector and metadata;
        restored as they were on error)."""
        self.add(ids, documents, metadatas, upsert=True)

    @_worded
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

        For frameworks whose embedder and writer are separate steps (Haystack, LangChain): the
        vectors are refused unless ``fingerprint`` is the stamp's, and each must be finite and
        of the contract's width; otherwise as :meth:`add`.

        Raises:
            ContractMismatchError: the vectors were made under another contract.
            InvalidInputError: a bad batch or vector (named), ExistingIdsError for ``add``.
        """
        self._checked(ids, documents, metadatas)
        self.index.add_embedded(
            ids, vectors, documents, metadatas, fingerprint=fingerprint, upsert=upsert
        )

    @_worded
    def add_missing(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> int:
        """Add the records whose ids the index lacks; returns how many this call added.

        What indexing a corpus wants: a re-run, or another process indexing the same corpus
        at the same time, adds nothing twice and fails on nothing that is already there.
        """
        self._checked(ids, documents, metadatas)
        return self.index.add_missing(ids, documents, metadatas)

    @_worded
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

        Changed records are upserted (all or nothing, as :meth:`upsert`), so a sync
        interrupted mid-corpus keeps the batches before and a re-run resumes. ``dry_run``
        embeds and writes nothing. See :mod:`ctxemb_core.sync` for the rules.
        """
        self._checked(ids, documents, metadatas)
        return self.index.sync(ids, documents, metadatas, dry_run=dry_run, progress=progress)

    @_worded
    def delete_missing(self, keep: Iterable[str], *, dry_run: bool = False) -> list[str]:
        """Delete the records whose ids are not in ``keep`` (a corpus's ids); returns them.

        Deleting is by id, in chunks of the store's batch limit; an interrupted run leaves
        some deleted and the next run deletes the rest.
        """
        return self.index.delete_missing(keep, dry_run=dry_run)
