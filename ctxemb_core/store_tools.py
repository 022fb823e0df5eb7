"""What every store adapter shares, written once: its tools, its errors' words and translation.

A store adapter offers the same calls whatever the store (:data:`ADAPTER_API`, what the
``ctxemb`` command calls on one). Three of them are tools over an
index, the same in every store: :meth:`StoreTools.verify`, :meth:`StoreTools.detect` and
:meth:`StoreTools.restamp`. The adapter gives :class:`StoreTools` only what is its store's:

- ``driver(client, name, *, embedder=None, **scope)``: the driver of an index that exists,
  its client and name checked (a missing index named with the store's hints);
- ``driver_of(index)``: the driver of an index object a caller holds (an opened index, or one
  held unguarded), or the store's refusal of anything else;
- ``translated(what)``: its client library's errors in ctxemb's tree (:func:`translator`
  builds one from a table);
- ``terms``: its words, in which the advice of every error the tools raise is given
  (:class:`~ctxemb_core.remedy.StoreTerms`; ``None``: the default store's).

The decisions stay the guard's: :func:`~ctxemb_core.index.verify_driver`,
:func:`~ctxemb_core.detect.detect_driver`, :func:`~ctxemb_core.index.restamp_index`.

Example:
    >>> TOOLS = StoreTools(TERMS, driver=existing, driver_of=held)  # doctest: +SKIP
    >>> verify, detect, restamp = TOOLS.verify, TOOLS.detect, TOOLS.restamp  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ctxemb_core.detect import DetectReport, detect_driver
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import CtxembError, StampError, StampMovedError
from ctxemb_core.index import StoreDriver, restamp_index, verify_driver
from ctxemb_core.remedy import DEFAULT_TERMS, StoreTerms
from ctxemb_core.stamp import CANARY_TOLERANCE
from ctxemb_core.validate import check_count

if TYPE_CHECKING:
    from ctxemb_core.contract import EmbeddingContract
    from ctxemb_core.stamp_guard import RestampReport, VerifyReport

__all__ = ["ADAPTER_API", "StoreTools", "Translated", "translator", "worded_in"]

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

#: ``translated(what)``: a block whose store errors are raised as ctxemb's, ``what`` first.
Translated = Callable[[str], AbstractContextManager[None]]

#: One rule of :func:`translator`: the store's exception types, ctxemb's error, its message.
Rule = tuple[type[BaseException] | tuple[type[BaseException], ...], type[CtxembError], str]


def translator(*rules: Rule) -> Translated:
    """An adapter's ``translated(what)`` from a table of its client library's exceptions.

    Each rule is ``(exception types, ctxemb error, message)``; the first rule whose types
    match the exception raised in the block decides (as ``except`` clauses would), and the
    error raised says ``what``, then the message (``{exc}``: the store's own words). ctxemb's
    own errors, and anything no rule names, pass unchanged.
    """

    @contextlib.contextmanager
    def translated(what: str) -> Iterator[None]:
        try:
            yield
        except CtxembError:
            raise
        except Exception as exc:
            for types, error, message in rules:
                if isinstance(exc, types):
                    raise error(f"{what}: " + message.format(exc=exc)) from exc
            raise

    return translated


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
        try:
            return target(*args, **kwargs)
        except CtxembError as exc:
            exc.in_terms_of(terms)
            raise

    return call


class StoreTools:
    """A store adapter's verify, detect and restamp, over the drivers it says how to reach.

    Args:
        terms: the adapter's words for the advice of the errors raised (``None``: the
            default store's, left for an outer adapter to word).
        driver: ``(client, name, *, embedder=None, **scope)`` -> the driver of that index,
            which must exist (``embedder``: whose settings a store that persists its embedding
            configuration writes with a new stamp; ``scope``: the store's own keywords, such
            as a PostgreSQL schema).
        driver_of: an index object a caller holds -> its driver (``InvalidInputError`` for
            what is not one of the store's).
        translated: the store's errors in ctxemb's tree, around each tool's reads.
    """

    def __init__(
        self,
        terms: StoreTerms | None = None,
        *,
        driver: Callable[..., StoreDriver],
        driver_of: Callable[[Any], StoreDriver],
        translated: Translated | None = None,
    ) -> None:
        self.terms = terms
        self._driver = driver
        self._driver_of = driver_of
        self._translated = translated or (lambda what: contextlib.nullcontext())

    @contextlib.contextmanager
    def _running(self, what: str) -> Iterator[None]:
        try:
            with self._translated(what):
                yield
        except CtxembError as exc:
            if self.terms is not None:
                exc.in_terms_of(self.terms)
            raise

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
            driver = self._driver(client, name, embedder=given, **scope)
            try:
                return restamp_index(driver, contract, embedder=embedder)
            except StampMovedError:
                module = (self.terms or DEFAULT_TERMS).module
                raise StampError(
                    f"the stamp of {name!r} changed while it was re-stamped; nothing was "
                    f"written: check it ({module}.verify) and re-stamp again"
                ) from None
