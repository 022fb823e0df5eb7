"""What every store adapter shares, written once: its tools, its errors' words and translation.

A store adapter offers the same calls whatever the store (:data:`ADAPTER_API`, what the
``ctxemb`` command calls on one). All but its own (``connect``, names, the stored index, the
lexical side's place) are tools over an index, the same in every store, and
:class:`StoreTools` makes them: :meth:`~StoreTools.open`, :meth:`~StoreTools.verify`,
:meth:`~StoreTools.detect`, :meth:`~StoreTools.restamp`, :meth:`~StoreTools.stamped_contract`,
:meth:`~StoreTools.migrate`, :meth:`~StoreTools.shortlist`, :meth:`~StoreTools.search`,
:meth:`~StoreTools.eval_path` and :meth:`~StoreTools.open_hybrid`. The adapter gives it only
what is its store's:

- ``facade``: its public index object (an :class:`~ctxemb_core.index.IndexFacade` subclass:
  ``GuardedCollection``, ``GuardedTable``), whose ``open`` makes every check;
- ``new_driver(client, name, *, embedder=None, **options)``: the driver of an index, existing
  or not, its client and name checked (``embedder``: whose settings a store that persists its
  embedding configuration writes; ``options``: the store's own keywords, such as a PostgreSQL
  schema, refused with a ``TypeError`` when it has no such keyword);
- ``held``: the store's unguarded index object and how to reach its driver, so that a caller
  may verify what it holds unguarded as well as an opened index (or ``driver_of(index)``: the
  driver of any index object a caller holds, or the store's refusal of anything else);
- ``translated(what)``: its client library's errors in ctxemb's tree (:func:`translator`
  builds one from a table);
- ``terms``: its words, in which the advice of every error the tools raise is given
  (:class:`~ctxemb_core.remedy.StoreTerms`; ``None``: the default store's, left for an outer
  adapter to word);
- optionally ``query_options`` (its index's ``query`` keywords that searches pass on, such as
  Chroma's ``where_document``), ``pair_query`` (those of an evaluation's one-record pair
  search), ``repair`` (what it repairs beyond its setting on an open with ``repair=True``)
  and ``lexical`` (where a hybrid index's lexical side lives: ``(lexical_folder, place_for)``).

The decisions stay the guard's: :meth:`~ctxemb_core.index.IndexFacade.open`,
:func:`~ctxemb_core.index.verify_driver`, :func:`~ctxemb_core.detect.detect_driver`,
:func:`~ctxemb_core.index.restamp_index`, :func:`~ctxemb_core.index.migration`,
:func:`~ctxemb_core.rerank.search.index_shortlist`, :func:`~ctxemb_core.hybrid.pair.open_paired`.

Example:
    >>> TOOLS = StoreTools(TERMS, facade=GuardedThing, new_driver=ThingDriver,
    ...                    driver_of=held)                                     # doctest: +SKIP
    >>> open_thing, search, migrate = TOOLS.open, TOOLS.search, TOOLS.migrate  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import shutil
import sys
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from ctxemb_core.detect import DetectReport, detect_driver
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError, StampError, StampMovedError, worded
from ctxemb_core.index import (
    IndexFacade,
    OpenOptions,
    StoreDriver,
    migration,
    restamp_index,
    verify_driver,
)
from ctxemb_core.index.driver_kit import translator
from ctxemb_core.index.guarded import stamped_contract
from ctxemb_core.index.migrate import check_not_itself
from ctxemb_core.remedy import Said, StoreTerms
from ctxemb_core.stamp import CANARY_TOLERANCE, IndexStamp
from ctxemb_core.stamp_guard import as_embedder
from ctxemb_core.validate import check_count, check_flag

if TYPE_CHECKING:
    from ctxemb_core.contract import EmbeddingContract
    from ctxemb_core.eval.guarded import GuardedPath
    from ctxemb_core.hybrid.pair import HybridIndex, LexicalPlace
    from ctxemb_core.hybrid.store import LexicalStore
    from ctxemb_core.rerank import Reranker, ScoreThreshold, Shortlist, TwoStageResult
    from ctxemb_core.stamp_guard import RestampReport, VerifyReport

__all__ = [
    "ADAPTER_API",
    "TOOL_NAMES",
    "FolderHybrids",
    "StoreCatalog",
    "StoreTools",
    "Translated",
    "translator",
    "worded_in",
]

#: The names every store adapter module offers (in its ``__all__``), whatever it calls its
#: indexes: what the ``ctxemb`` command calls on the adapter its ``--store`` names
#: (``open_collection`` is a PostgreSQL adapter's ``open_table`` too).
ADAPTER_API = (
    "catalog",
    "check_name",
    "connect",
    "detect",
    "driver",
    "eval_path",
    "lexical_folder",
    "migrate",
    "open_collection",
    "open_hybrid",
    "restamp",
    "search",
    "shortlist",
    "stamped_contract",
    "stored_collection",
    "stored_or_none",
    "verify",
)

#: The names of :data:`ADAPTER_API` that are a :class:`StoreTools` tool, and the tool: what
#: :meth:`StoreTools.exported` answers for an adapter module that does not define the name.
TOOL_NAMES = {
    "detect": "detect",
    "eval_path": "eval_path",
    "lexical_folder": "lexical_folder",
    "migrate": "migrate",
    "open_collection": "open",
    "open_hybrid": "open_hybrid",
    "restamp": "restamp",
    "search": "search",
    "shortlist": "shortlist",
    "stamped_contract": "stamped_contract",
    "stored_collection": "stored",
    "verify": "verify",
}

#: ``translated(what)``: a block whose store errors are raised as ctxemb's, ``what`` first.
Translated = Callable[[str], AbstractContextManager[None]]


def worded_in(terms: StoreTerms, target: Any) -> Any:
    """A function (or every public method of a class, in place) whose errors give their advice
    in ``terms``: an adapter's calls, named as the caller called them."""
    if isinstance(target, type):
        for name, member in list(vars(target).items()):
            if not name.startswith("_") and callable(member):
                setattr(target, name, worded_in(terms, member))
        return target

    @functools.wraps(target)
    def call(*args: Any, **kwargs: Any) -> Any:
        with worded(terms):
            return target(*args, **kwargs)

    return call


def _showing(method: Callable[..., Any], names: Collection[str]) -> Callable[..., Any]:
    """``method`` with its ``**options`` shown as the keywords it takes (``names``): what
    ``inspect`` and ``help`` see, and a caller that passes a keyword only where it is taken
    (the ``ctxemb`` command's store scope, such as ``schema``)."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        return method(*args, **kwargs)

    signature = inspect.signature(method)
    kept = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    shown = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None) for n in names]
    parameters = [*kept, *sorted(shown, key=str)]
    call.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return call


def named(spec: str) -> Any:
    """The object ``"module:NAME"`` names, its module imported now (an adapter's catalog or
    tools, named where importing them would import the module that names them)."""
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


#: A store adapter's public index object (its ``open`` makes every check).
F = TypeVar("F", bound=IndexFacade[Any, Any])
#: ``(client, name)`` -> the folder a store keeps an index's lexical side in.
LexicalHome = Callable[[Any, str], Path]


class StoreTools(Generic[F]):
    """A store adapter's tools, over the index object and the drivers it says how to reach.

    Args:
        terms: the adapter's words for the advice of the errors raised (``None``: the
            default store's, left for an outer adapter to word).
        facade: its public index object's class (``GuardedCollection``, ``GuardedTable``).
        new_driver: ``(client, name, *, embedder=None, **options)`` -> the driver of that
            index, existing or not (``embedder``: whose settings a store that persists its
            embedding configuration writes with a new stamp; ``options``: the store's own
            keywords, such as a PostgreSQL schema, each a keyword-only parameter).
        driver_of: an index object a caller holds -> its driver (``InvalidInputError`` for
            what is not one of the store's); default: an opened index's own driver, and for
            an object of ``held``'s type (the store's unguarded index) ``held``'s driver.
        held: ``(type, to_driver)``: the store's unguarded index object (a Chroma collection,
            a PostgreSQL ``StoredTable``) and its driver, for the default ``driver_of``.
        driver: like ``new_driver``, for an index that must exist; default: ``new_driver``'s
            driver, a missing index refused in the facade's words (with the store's hints).
        translated: the store's errors in ctxemb's tree, around the reads of verify, detect
            and restamp.
        query_options: the keywords of the facade's ``query`` that :meth:`shortlist`,
            :meth:`search` and :meth:`eval_path` pass on (Chroma's ``where_document``, a
            table's ``exact``), besides ``where``.
        pair_query: those keywords for an evaluation's one-record pair search.
        repair: ``(driver, stamp)`` -> what the store repaired beyond its setting, in words,
            on an open with ``repair=True`` of a stamped index once its stamp and canary pass
            (before the guard opens it): the opened index's ``repaired``.
        client_name: the store's own name of its client, which :meth:`migrate` takes as well
            as ``client`` (PostgreSQL's ``conn``; given, it wins).
        check_name: the store's check of an index's name, before anything connects.
        lexical: ``(home, place_for)``: where a hybrid index's lexical side lives unless the
            caller names a folder: ``home(client, name)``, a folder of the store's (refused
            where it has none), or with ``home`` ``None`` in the store itself; and the
            :class:`~ctxemb_core.hybrid.pair.LexicalPlace` of an opened index and its folder
            (``place_for(dense, folder)``). ``None``: the store has no hybrid index.
        catalog: ``"module:function"``, the adapter's ``catalog(client, **scope)`` -> the
            store's alias catalog, so that what would change an index under an alias's readers
            (a restamp) sees it, and an index opened by an alias's name is refused (its caller
            meant the alias); named, not imported, since the catalog's module opens this
            store's hybrid sides through these tools.
        resolves_aliases: the store resolves an alias of its own wherever an index is named
            (Qdrant): an alias's name is refused even where the store finds an index by it
            (writes by that name would miss an upgrade's shadow index).
    """

    def __init__(
        self,
        terms: StoreTerms | None = None,
        *,
        facade: type[F],
        new_driver: Callable[..., StoreDriver],
        driver_of: Callable[[Any], StoreDriver] | None = None,
        held: tuple[type, Callable[[Any], StoreDriver]] | None = None,
        driver: Callable[..., StoreDriver] | None = None,
        translated: Translated | None = None,
        query_options: Collection[str] = (),
        pair_query: Mapping[str, Any] | None = None,
        repair: Callable[[Any, IndexStamp], list[str]] | None = None,
        client_name: str = "client",
        check_name: Callable[[str], Any] | None = None,
        lexical: tuple[LexicalHome | None, Callable[[F, Any], LexicalPlace]] | None = None,
        catalog: str | None = None,
        resolves_aliases: bool = False,
    ) -> None:
        self.terms = terms
        self._words = terms or facade._terms
        self._facade = facade
        self._new_driver = new_driver
        self._driver = driver or self._existing
        self._driver_of = driver_of or self._held
        self._held_type = held
        self._translated = translated or (lambda what: contextlib.nullcontext())
        self._query_options = frozenset(query_options)
        self._pair_query = dict(pair_query or {})
        self._repair = repair
        self._check_name = check_name
        self._lexical = lexical
        self._catalog = catalog
        self._resolves_aliases = resolves_aliases
        self._client_name = client_name
        signature = inspect.signature(new_driver).parameters.values()
        self._store_options = frozenset(
            p.name for p in signature if p.kind is p.KEYWORD_ONLY and p.name != "embedder"
        )
        for tool in ("shortlist", "search"):  # their **options: the store's query keywords
            setattr(self, tool, _showing(getattr(self, tool), self._query_options))

    @contextlib.contextmanager
    def _running(self, what: str | None = None) -> Iterator[None]:
        """A tool's block: its errors worded in the adapter's terms (and the store's errors
        translated, saying ``what``, when given)."""
        with worded(self.terms), self._translated(what) if what else contextlib.nullcontext():
            yield

    def _checked(self, options: Mapping[str, Any], allowed: Collection[str], call: str) -> None:
        """``options`` must be the store's own keywords of ``call`` (``allowed``), as named
        parameters would be: a ``TypeError`` naming the stray one otherwise."""
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            opening = sorted(OpenOptions.__annotations__) if call == self._words.open else []
            raise TypeError(
                f"{self._words.module}.{call}() got an unexpected keyword argument "
                f"{unknown[0]!r}; its options are {[*opening, *sorted(allowed)]}"
            )

    def _guarded(self, index: Any, call: str) -> F:
        if not isinstance(index, self._facade):
            raise InvalidInputError(
                f"{call} needs a {self._facade.__name__} ({self._words.open}), got "
                f"{type(index).__name__}: a raw {self._words.kind}'s stamp is not checked"
            )
        return index

    def exported(self, module: str) -> Callable[[str], Any]:
        """Adapter package ``module``'s ``__getattr__`` (PEP 562): each name of
        :data:`ADAPTER_API` that is one of these tools (:data:`TOOL_NAMES`: ``open_collection``
        is :meth:`open`, ``stored_collection`` :meth:`stored`, ...) and that the module does not
        define itself, so that every store adapter offers the same tools under the same names.
        A module defines its own where it differs (a tool wrapped, an old signature kept).

        Example:
            >>> __getattr__ = TOOLS.exported(__name__)  # an adapter's __init__  # doctest: +SKIP
        """

        def tool(name: str) -> Any:
            method = TOOL_NAMES.get(name)
            if method is None:
                raise AttributeError(f"module {module!r} has no attribute {name!r}")
            found = getattr(self, method)
            vars(sys.modules[module])[name] = found  # looked up once
            return found

        return tool

    def _held(self, index: Any) -> StoreDriver:
        """The driver of an index object the caller holds: an opened index's, or (``held``)
        the store's unguarded one's; anything else refused in the store's words."""
        if isinstance(index, self._facade):
            return index.driver
        kinds = [self._facade]
        if self._held_type is not None:
            kind, to_driver = self._held_type
            if isinstance(index, kind):
                return to_driver(index)
            kinds.append(kind)
        raise InvalidInputError(
            f"{self._words.kind} must be a {' or a '.join(k.__name__ for k in kinds)}, got "
            f"{type(index).__name__}"
        )

    def _existing(
        self, client: Any, name: str, *, embedder: Embedder | None = None, **options: Any
    ) -> StoreDriver:
        """The driver of index ``name``, which must exist (a missing one named with hints)."""
        driver = self._new_driver(client, name, embedder=embedder, **options)
        if self._missing_not_alias(client, driver, options):
            raise self._facade._missing(driver, "")
        return driver

    def open(
        self, client: Any, name: str, contract: EmbeddingContract | Embedder, **options: Any
    ) -> F:
        """Create a stamped index, or open one and verify its stamp, setting and records.

        Args:
            client: the store's client (as its adapter's ``connect`` returns it).
            name: the index's name.
            contract: the caller's contract (or an :class:`~ctxemb_core.Embedder` built from it).
            **options: ``create``, ``adopt``, ``repair``, ``sample``, ``stamp``: as every
                store's open (:class:`~ctxemb_core.index.OpenOptions`); and the store's own
                (a PostgreSQL table's ``schema``, ``hnsw``, ``ef_search``: see its adapter).

        Raises:
            ContractMismatchError: the index (or the ``stamp`` given) is another contract's.
            EncoderDriftError: same contract, but the canary re-embeds to other vectors.
            ForeignVectorsError: sampled records that this contract did not make.
            ConfigurationMismatchError: the store's persisted embedding setting is not the
                stamp's (StorageMismatchError: a column of another type).
            MissingStampError: an unstamped index, without ``adopt=True``.
            DamagedStampError: a stamp that cannot be read or contradicts itself.
            InvalidInputError: a bad argument, or no such index with ``create=False``.
            StoreUnavailableError: the server cannot be reached.
            TypeError: an option neither :class:`~ctxemb_core.index.OpenOptions` nor the
                store names.
        """
        with self._running():
            opening = {k: options.pop(k) for k in list(options) if k in OpenOptions.__annotations__}
            self._checked(options, self._store_options, self._words.open)
            embedder = as_embedder(contract)
            driver = self._new_driver(client, name, embedder=embedder, **options)
            self._missing_not_alias(client, driver, options)  # created if missing
            repaired: list[str] = []
            if self._repair is not None and check_flag(opening.get("repair", False), "repair"):
                read = driver.read_stamp()
                if read is not None and IndexStamp.is_stamped(read.metadata):
                    stamp = IndexStamp.from_metadata(read.metadata)
                    stamp.verify(embedder)  # what is changed around ctxemb is written back
                    repaired = self._repair(driver, stamp)
            opened = self._facade.open(driver, embedder, **opening)
            if self._repair is not None:
                opened.repaired = repaired
            return opened

    def _catalog_of(self, client: Any, options: Mapping[str, Any]) -> Any:
        """The store's alias catalog (the adapter's ``catalog(client, **scope)``), given the
        options of the call that are its scope (a PostgreSQL table's ``schema``)."""
        assert self._catalog is not None
        catalog = named(self._catalog)
        takes = inspect.signature(catalog).parameters
        return catalog(client, **{k: v for k, v in options.items() if k in takes})

    def _missing_not_alias(
        self, client: Any, driver: StoreDriver, options: Mapping[str, Any]
    ) -> bool:
        """Whether the store holds no index of ``driver``'s name; refused where that name is one
        of the store's aliases (see :meth:`_refuse_alias_name`)."""
        missing = self._facade._stored_in(driver) is None
        if self._catalog is not None and (missing or self._resolves_aliases):
            self._refuse_alias_name(client, driver.name, options)
        return missing

    def _refuse_alias_name(self, client: Any, name: str, options: Mapping[str, Any]) -> None:
        """Refuse to open, or create, an index under the name of one of the store's aliases: its
        caller meant the alias (whose readers would never see such an index)."""
        from ctxemb_core.aliases.record import check_alias_name

        record = None
        with contextlib.suppress(InvalidInputError):  # not a name an alias can have
            record = self._catalog_of(client, options).aliases.read(check_alias_name(name))
        if record is None:
            return
        words, target = self._words, record.target.index
        through = Said(
            f"AliasedIndex.open({words.module}.catalog({self._client_name}), {name!r}, "
            f"Encoders(...)) from ctxemb_core.aliases, or {words.open}(..., {target!r}, ...)",
            f"--alias {name} where the command takes it, or --collection {target}",
        )
        raise through.into(
            InvalidInputError,
            f"{name!r} is an alias of this store (serving {words.kind} {target!r}), not a "
            f"{words.kind}: open it through the alias, or the {words.kind} itself ({{do}}); a "
            f"new {words.kind} needs a name that no alias has",
        )

    def verify(
        self,
        index: Any,
        contract: EmbeddingContract | Embedder,
        sample: int = 32,
        *,
        all: bool = False,
        progress: bool | None = None,
    ) -> VerifyReport:
        """Check an index against a contract and report every finding (never raises for them).

        Args:
            index: an opened index, or one held unguarded (as the store has it: one that
                would not open); which objects a store takes, its adapter says.
            contract: the caller's contract (or embedder).
            sample: how many stored records to re-embed (the newest half by the store's order,
                and a random half).
            all: re-embed every stored record instead, page by page, with a progress bar.
            progress: show the progress bar (``None``: as the embedder's ``show_progress``).

        The report's ``checked()`` / ``not_checked()`` (and ``to_dict()``) say what was proven
        and what was not, with the probability that a sample finds one altered older record;
        ``configuration`` whether the store's own setting (an embedding function it persists,
        a column's type) is the one the stamp's contract needs (``match``, or what differs).
        """
        with self._running("verifying"):
            driver = self._driver_of(index)
        with self._running(f"verifying {driver.name!r}"):
            return verify_driver(driver, contract, all=all, sample=sample, progress=progress)

    def stored(self, client: Any, name: str, **scope: Any) -> Any:
        """Index ``name`` as the store has it now, unguarded (the facade's stored object: a
        Chroma collection, a PostgreSQL ``StoredTable``), to read or ``verify`` whatever it
        holds; ``scope``: the store's own keywords.

        Raises:
            InvalidInputError: no such index (named in the store's words, with its hints).
        """
        with self._running(f"reading {name!r}"):
            self._checked(scope, self._store_options, "stored_collection")
            return self._facade._stored_in(self._existing(client, name, **scope))

    def stamped_contract(self, client: Any, name: str, **scope: Any) -> EmbeddingContract:
        """The contract index ``name``'s stamp holds: read, not verified (nothing is embedded);
        ``scope``: the store's own keywords (a PostgreSQL table's ``schema``).

        Raises:
            InvalidInputError: no such index (named in the store's words, with its hints).
            MissingStampError: the index carries no stamp.
            DamagedStampError: a stamp that cannot be read.
        """
        with self._running(f"reading the stamp of {name!r}"):
            self._checked(scope, self._store_options, "stamped_contract")
            return stamped_contract(self._driver(client, name, **scope))

    def detect(
        self,
        client: Any,
        name: str,
        *models: Any,
        sample: int = 32,
        keep: Collection[str] = (),
        tolerance: float = CANARY_TOLERANCE,
        backend: str = "auto",
        **scope: Any,
    ) -> DetectReport:
        """Find which contract wrote an index's vectors; reads a sample, never writes.

        The newest half and a random half of ``sample`` records are re-embedded under the
        candidates of each model (see :func:`ctxemb_core.detect.detect_contract`). A stamped
        index's own contract is tried too, and ``report.stamp_match`` says whether it is the
        best match. A conclusive report can be adopted: open the index under
        ``report.best.contract`` with ``adopt=True``.

        Args:
            client: the store's client (as its adapter's ``connect`` returns it).
            name: the index, stamped or not (one a framework or raw client wrote).
            *models: candidate models (contracts, embedders, folders or names); default: the
                stamp's contract, else the bundled all-MiniLM-L6-v2.
            sample: how many stored records to re-embed (at least 1).
            keep: contract fields held as each model's contract has them instead of varied.
            tolerance: the agreement each record must reach.
            backend: the embedder backend.
            **scope: the store's own keywords (a PostgreSQL table's ``schema``).

        Example:
            >>> report = detect(client, "legacy-docs")       # doctest: +SKIP
            >>> report.conclusive, report.best.label         # doctest: +SKIP
            (True, 'mean, normalised, no document prefix')
        """
        with self._running(f"sampling {name!r}"):
            self._checked(scope, self._store_options, "detect")
            check_count(sample, "sample", 1)
            return detect_driver(
                self._driver(client, name, **scope),
                *models,
                sample=sample,
                keep=keep,
                tolerance=tolerance,
                backend=backend,
            )

    def restamp(
        self,
        client: Any,
        name: str,
        contract: EmbeddingContract | Embedder,
        *,
        embedder: Embedder | None = None,
        **scope: Any,
    ) -> RestampReport:
        """Stamp an index with a new contract whose change leaves its documents valid.

        What a query-side change needs (a new ``query_prefix``, a separate query encoder) or a
        new name for the same weights: the stored vectors stay, and the stamp (fingerprint,
        contract and canary, computed with the new contract's embedder) is rewritten in one
        step of the store (with the embedding configuration a store persists beside it).
        Works on any stamped index, whichever adapter or framework wrote it. Indexes opened
        before see the change on their next call; open them again under the new contract.

        Args:
            client: the store's client (as its adapter's ``connect`` returns it).
            name: the stamped index.
            contract: the new contract (or an :class:`~ctxemb_core.Embedder` built from it).
            embedder: the embedder that computes the new canary (e.g. one with another
                backend); its contract must be ``contract``. Default: ``Embedder(contract)``.
            **scope: the store's own keywords (a PostgreSQL table's ``schema``).

        Returns:
            What changed: the old and new fingerprints and the differing fields (nothing is
            written when the contracts are identical).

        Raises:
            ContractMismatchError: the change needs the documents re-embedded: migrate into a
                new index instead.
            AliasConflictError: an alias serves the index (or upgrades into it, or keeps it
                for a rollback): its readers hold the alias's recorded contract, so the change
                goes through the alias (``ctxemb upgrade``); nothing is written.
            EncoderDriftError: the new contract's embedder does not reproduce the stored
                document vectors (the stamp's canary).
            MissingStampError: the index carries no stamp (open it with ``adopt=True`` first).
            DamagedStampError: its stamp cannot be read.
            StampError: the stamp changed while it was re-stamped (nothing was written).
            InvalidInputError: no such index, or an ``embedder`` of another contract.
            ConfigurationMismatchError: the store did not keep what was written.

        Example:
            >>> new = contract.with_(query_prefix="query: ")               # doctest: +SKIP
            >>> restamp(client, "docs", new)                               # doctest: +SKIP
            RestampReport(old_fingerprint='3f1c…', new_fingerprint='9a0b…', ...)
        """
        given = embedder or (contract if isinstance(contract, Embedder) else None)
        with self._running(f"re-stamping {name!r}"):
            self._checked(scope, self._store_options, "restamp")
            driver = self._driver(client, name, embedder=given, **scope)
            if self._catalog is not None:
                from ctxemb_core.aliases.book import refuse_alias_member

                refuse_alias_member(self._catalog_of(client, scope), name, "re-stamp")
            try:
                return restamp_index(driver, contract, embedder=embedder)
            except StampMovedError:
                module = self._words.module
                raise StampError(
                    f"the stamp of {name!r} changed while it was re-stamped; nothing was "
                    f"written: check it ({module}.verify) and re-stamp again"
                ) from None

    def migrate(
        self,
        source: Any,
        target_contract: EmbeddingContract | Embedder,
        target_name: str,
        *,
        client: Any = None,
        batch_size: int = 256,
        progress: bool | None = None,
        reembed: bool = False,
        **options: Any,
    ) -> F:
        """Copy every document of ``source`` into the new index ``target_name``; returns it.

        ``source`` is a guarded index of any ctxemb adapter: this store's, or another store's
        (a ``GuardedTable`` into Chroma, a ``GuardedCollection`` into PostgreSQL) with
        ``client`` naming this store. The copy is :func:`ctxemb_core.index.migrate_index`,
        resumable: under another contract, or under the source's own within one store (a
        rebuild: records written around ctxemb re-embedded too), every document is re-embedded;
        from another store under the source's own contract (and without ``reembed``) the stored
        vectors and the stamp are carried as the target store keeps them (a pgvector column bit
        for bit; Chroma re-normalises a cosine collection's vectors: equal within
        ``ctxemb_core.migrate.COPY_TOLERANCE``).

        Args:
            source: the guarded index to copy (never modified).
            target_contract: the target's contract (or an :class:`~ctxemb_core.Embedder`).
            target_name: the new index (created stamped, or resumed).
            client: this store's client (also under the store's own name for it, such as
                ``conn``); default: the source's, when it is this store's.
            batch_size: records read and written per step.
            progress: a progress bar (``None``: as the embedder's ``show_progress``).
            reembed: re-embed every document, even where the vectors could be carried.
            **options: the store's own keywords of the target (a PostgreSQL ``schema``).

        Raises:
            InvalidInputError: the target is the source, no ``client`` for another store's
                source, a bad ``batch_size``, or a ``source`` that is no guarded index.

        Example:
            >>> new = migrate(old, contract.with_(truncate_dim=128), "docs-128")  # doctest: +SKIP
        """
        words = self._words
        with self._running():
            copy = migration(
                source,
                batch_size,
                reembed,
                progress,
                opened_by=f"{words.module}.{words.open}, or another store adapter's",
            )
            ours = isinstance(source, self._facade)
            own = options.pop(self._client_name, None)  # e.g. a PostgreSQL conn
            client = own if own is not None else client
            if client is None:
                if not ours:
                    raise InvalidInputError(
                        f"client is needed: the source is not a {words.kind} of {words.module}"
                    )
                client = source.client
            self._checked(options, self._store_options, "migrate")
            embedder = as_embedder(target_contract)
            target = self._new_driver(client, target_name, embedder=embedder, **options)
            check_not_itself(copy.source, target, words.kind)
            # Within one store a migration under the same contract is a rebuild; across
            # stores, the same contract's vectors are carried.
            rebuild = ours and client is source.client
            return self._facade(copy.into(target, embedder, rebuild=rebuild))

    def shortlist(
        self,
        index: Any,
        query: str,
        k: int,
        *,
        where: Mapping[str, Any] | None = None,
        embedder: Embedder | None = None,
        require_text: bool = True,
        **options: Any,
    ) -> Shortlist:
        """The ``k`` nearest records of ``query`` in an opened index, with their texts and
        similarities.

        The index's stamp is checked (its ``query``) before anything is read; the similarity is
        the contract's (:func:`ctxemb_core.records.similarity`): higher is better, whatever
        distance the store reports. ``where`` keeps records whose metadata matches;
        ``options`` are the store's own keywords of its ``query`` (Chroma's
        ``where_document``; a table's ``exact``: scan every row, not the HNSW index).
        ``require_text=False`` lists records stored without their text too (with an empty
        text), for a caller that shows results rather than reranking them.

        Raises:
            InvalidInputError: a candidate stored without its text (nothing to rerank), unless
                ``require_text=False``; ``index`` not an opened index of this store.
            ContractMismatchError: ``embedder``'s contract is not the index's.
            TypeError: a keyword the store's ``query`` does not take.
        """
        from ctxemb_core.rerank.search import index_shortlist

        with self._running():
            index = self._guarded(index, "shortlist")
            self._checked(options, self._query_options, "shortlist")
            return index_shortlist(
                index,
                query,
                k,
                records=f"{self._words.records} of {index.name!r}",
                embedder=embedder,
                require_text=require_text,
                where=where,
                **options,
            )

    def search(
        self,
        index: Any,
        query: str,
        reranker: Reranker,
        *,
        k: int = 100,
        n: int = 10,
        score_threshold: float | ScoreThreshold | None = None,
        where: Mapping[str, Any] | None = None,
        embedder: Embedder | None = None,
        **options: Any,
    ) -> TwoStageResult:
        """Two-stage search: ``k`` candidates from the index's bi-encoder (:meth:`shortlist`,
        with ``where``, ``embedder`` and the store's ``options``), reranked to ``n``
        (:func:`ctxemb_core.rerank.two_stage`, which says what each argument does).

        Example:
            >>> from ctxemb_core.rerank import reranker_for, rerank_contract_for
            >>> docs = open_collection(client, "docs", contract)  # doctest: +SKIP
            >>> reranker = reranker_for(rerank_contract_for("./my-cross-encoder"))  # doctest: +SKIP
            >>> result = search(docs, "green tea", reranker, k=50, n=5)  # doctest: +SKIP
            >>> [h.id for h in result], result.reranker_fingerprint[:12]  # doctest: +SKIP
        """
        from ctxemb_core.rerank import two_stage

        with self._running():
            index = self._guarded(index, "search")
            self._checked(options, self._query_options, "search")
            first = partial(self.shortlist, index, where=where, embedder=embedder, **options)
            return two_stage(query, first, reranker, k=k, n=n, score_threshold=score_threshold)

    def eval_path(
        self,
        client: Any,
        name: str,
        embedder: Embedder,
        *,
        sample: int | None = None,
        via: str | None = None,
        progress: bool = False,
        **options: Any,
    ) -> GuardedPath:
        """A :class:`~ctxemb_core.eval.paths.SearchPath` over the guarded index ``name``
        (``ctxemb eval --via <store>``).

        The index is opened as any user opens it (:meth:`open`: created stamped, or verified
        with a ``sample`` of its records re-embedded), documents are written only when missing
        or changed, and queries go through its ``query``, so what is measured is what an
        application on this adapter runs; the store's distances become the contract's
        similarity in the index's own space (:class:`~ctxemb_core.eval.guarded.GuardedPath`).

        Args:
            client: the store's client.
            name: the index to write into and search (created if missing).
            embedder: the contract's embedder, for both roles.
            sample: stored records re-embedded when an existing index is opened.
            via: the name this path reports (default the store's: ``chroma``, ``pgvector``).
            progress: a progress bar on stderr while documents are written.
            **options: the store's own: its ``query`` keywords for every search (a table's
                ``exact``), the others :meth:`open`'s (a table's ``ef_search``, ``schema``).

        Raises:
            ContractMismatchError, EncoderDriftError, ForeignVectorsError: as :meth:`open`.

        Example:
            >>> from ctxemb_core.eval import evaluate_retrieval, load_beir
            >>> path = eval_path(connect("./chroma"), "beir-scifact", embedder)  # doctest: +SKIP
            >>> evaluate_retrieval(path, load_beir("scifact")).metrics["ndcg@10"]  # doctest: +SKIP
        """
        from ctxemb_core.eval.guarded import GuardedPath

        query = {key: options.pop(key) for key in list(options) if key in self._query_options}
        if sample is not None:
            options["sample"] = sample
        opened = self.open(client, name, embedder, **options)
        via = via or self._words.module.removeprefix("ctxemb_")
        return GuardedPath(opened, via, progress, options=query, pair_options=self._pair_query)

    def open_hybrid(
        self,
        client: Any,
        name: str,
        contract: EmbeddingContract | Embedder,
        *,
        lexical_path: Any = None,
        **options: Any,
    ) -> HybridIndex:
        """Open (or create) index ``name`` under ``contract`` and its lexical (BM25) side, where
        the store keeps it (its adapter's ``lexical_folder``): a hybrid index under one
        stamped recipe.

        ``options``: the hybrid ones (``lexical`` and ``fusion``: the caller's recipe, ``None``
        the stamp's, for a new index BM25 k1 1.5, b 0.75, English stemmer and stop words, RRF
        k = 60; ``create``, ``refresh``, ``rebuild``, ``progress``: see
        :func:`ctxemb_core.hybrid.pair.open_hybrid`), the others :meth:`open`'s.
        ``lexical_path``: the side's folder, for a store that keeps it in one (Chroma); for a
        store that keeps it in its database (PostgreSQL), an old (ctxemb 0.1) lexical folder
        to convert, once.

        Raises:
            ContractMismatchError, HybridMismatchError, OutOfStepError, EncoderDriftError,
                ForeignLexicalError: see :func:`ctxemb_core.hybrid.pair.open_hybrid`.
        """
        from ctxemb_core.hybrid.pair import open_paired

        with self._running():
            folder = self.lexical_folder(client, name, lexical_path)
            assert self._lexical is not None  # lexical_folder refused a store without
            place_for = self._lexical[1]
            return open_paired(
                partial(self.open, client, name, contract),
                lambda dense: place_for(dense, folder),
                **options,
            )

    def lexical_folder(self, client: Any, name: str, lexical_path: Any = None) -> Path | None:
        """Where the lexical side of index ``name`` lives: ``lexical_path``, else the store's
        own place for it (Chroma: ``<embedded store>/ctxemb-lexical/<name>``; ``None``: in the
        store itself, PostgreSQL's tables, where ``lexical_path`` only names an old lexical
        folder to convert), so that a framework's hybrid index is the one
        :meth:`open_hybrid` opens.

        Raises:
            InvalidInputError: a bad name; no ``lexical_path`` where the store has no folder
                of its own (a Chroma server's is not this machine's to write in).
        """
        with self._running():
            if self._lexical is None:
                raise InvalidInputError(f"{self._words.module} has no hybrid index")
            if self._check_name is not None:
                self._check_name(name)
            if lexical_path is not None:
                return Path(os.fspath(lexical_path))
            home = self._lexical[0]
            return None if home is None else home(client, name)

    def lexical_side(self, client: Any, name: str) -> LexicalStore | None:
        """Index ``name``'s lexical side in the store's own folder for it (an alias catalog's
        ``lexical``), read without opening the dense side; ``None`` where the store has no
        folder of its own (a server's side lives where its caller names it) or keeps the side
        in its own tables."""
        from ctxemb_core.hybrid.store import LexicalStore, SQLiteLexical

        with contextlib.suppress(InvalidInputError):
            folder = self.lexical_folder(client, name)
            return None if folder is None else LexicalStore(SQLiteLexical(folder, name))
        return None


class StoreCatalog:
    """What a store adapter's alias catalog (:class:`~ctxemb_core.aliases.book.Catalog`) takes
    from its tools (:meth:`_tools`), the same for every store: the driver of index ``name``
    (the tools' ``new_driver``, which checks the name) and, for a
    :class:`~ctxemb_core.aliases.hybrid.HybridCatalog`, ``open_hybrid`` as the adapter's.
    The catalog holds ``client`` and ``scope``, the store's keywords of each index it names
    (a PostgreSQL table's ``schema``); its ``aliases``, ``exists`` (asked of any name, an
    alias's too: no driver), ``drop`` and ``describe`` are the store's own.
    """

    client: Any
    scope: Mapping[str, Any] = {}
    #: ``"module:NAME"``, the adapter's :class:`StoreTools`: named, not imported, since they
    #: name the catalog (``StoreTools(catalog=...)``); imported at the first call.
    tools: str

    def _tools(self) -> StoreTools[Any]:
        """The store adapter's tools (:attr:`tools`)."""
        return cast("StoreTools[Any]", named(self.tools))

    def driver(self, name: str) -> StoreDriver:
        return self._tools()._new_driver(self.client, name, **self.scope)

    def open_hybrid(
        self, name: str, contract: EmbeddingContract | Embedder, **options: Any
    ) -> HybridIndex:
        return self._tools().open_hybrid(self.client, name, contract, **self.scope, **options)


class FolderHybrids(StoreCatalog):
    """A :class:`StoreCatalog` whose store keeps each lexical side in a folder beside it: the
    same for every such store. ``lexical`` is its tools', ``lexical_mark`` the token the
    index's metadata records (:meth:`_metadata`), ``drop`` the store's :meth:`_drop` and the
    side's folder with it.
    """

    def _metadata(self, name: str) -> Mapping[str, Any] | None:
        """Index ``name``'s metadata as the store keeps it, or ``None`` for no such index."""
        raise NotImplementedError

    def _drop(self, name: str) -> None:
        """Drop index ``name`` from the store, if it is there."""
        raise NotImplementedError

    def drop(self, name: str) -> None:
        """Drop index ``name`` and the folder of its lexical side beside the store (a server's
        side lives where its caller named it: left to them)."""
        self._drop(name)
        with contextlib.suppress(InvalidInputError):
            folder = self._tools().lexical_folder(self.client, name)
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    def lexical(self, name: str) -> LexicalStore | None:
        return self._tools().lexical_side(self.client, name)

    def lexical_mark(self, name: str) -> str | None:
        from ctxemb_core.hybrid.pair import recorded_mark

        return recorded_mark(self._metadata(name))
