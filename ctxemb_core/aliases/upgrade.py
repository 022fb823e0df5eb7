"""Changing an alias's model without downtime: shadow, backfill, gates, cutover, rollback.

Each step is one function over a store's :class:`~ctxemb_core.aliases.book.Catalog`, safe to
run again after an interrupt (it finishes what the last run began), and each change of the
alias is one compare-and-swap of its record: two upgrades of one alias at once cannot both
win (:class:`AliasMovedError` for the second).

1. :func:`begin_upgrade`: create the shadow index under the new contract, stamped, and mark the
   alias *upgrading*; from then on every write through the alias goes to both indexes.
2. :func:`backfill`: re-embed the texts the target holds into the shadow (no corpus needed;
   only what is missing or whose text digest differs is embedded, so it resumes), and delete
   from the shadow what the target no longer holds.
3. :func:`check_gates`: the new contract's canary, id and text-digest parity, a sample
   verification, and optionally quality (nDCG@10 against qrels, or top-k overlap), each with
   the figure it measured.
4. :func:`cutover`: a last backfill, the gates, then the switch: the shadow becomes the target,
   the old target is kept as ``previous`` and still written.
5. :func:`rollback`: back to the previous target (brought in step first); while upgrading, the
   shadow is abandoned (kept as ``previous`` until retired).
6. :func:`retire`: stop writing the previous index and drop it.

Over a hybrid index (a target that records a hybrid contract, :mod:`~ctxemb_core.aliases.
hybrid`), the dense contract, the lexical recipe (``lexical=``: tokenizer and BM25
parameters) and the fusion are upgraded together, or any one alone: the shadow is a hybrid
index under the new hybrid contract, its lexical side filled from its own stored texts with its
dense side; the ``lexical`` gate compares the shadow's lexical side with the target (ids and
text digests); the cutover switches both sides in the one step that switches the alias; a
rollback brings both sides of the previous target in step; a retire drops both.

Example:
    >>> create_alias(catalog, "docs", "docs-v1")                               # doctest: +SKIP
    >>> begin_upgrade(catalog, "docs", int8_embedder)                          # doctest: +SKIP
    >>> backfill(catalog, "docs", Encoders(int8_embedder))                     # doctest: +SKIP
    >>> cutover(catalog, "docs", Encoders(fp32_embedder, int8_embedder))       # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ctxemb_core._batches import progress_bar
from ctxemb_core.aliases.aliased import read_alias
from ctxemb_core.aliases.book import Catalog
from ctxemb_core.aliases.encoders import Encoders
from ctxemb_core.aliases.hybrid import drop_lexical, lexical_contract, open_target
from ctxemb_core.aliases.record import AliasRecord, AliasState, AliasTarget, check_alias_name
from ctxemb_core.contract import EmbeddingContract, same_contract
from ctxemb_core.documents import TEXT_KEY, text_digest
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import (
    AliasConflictError,
    AliasMovedError,
    AliasStateError,
    CtxembError,
    GateFailedError,
    InvalidInputError,
    TextNotStoredError,
)
from ctxemb_core.hybrid.contract import HybridContract
from ctxemb_core.hybrid.pair import stored_digest
from ctxemb_core.index.driver import Filter, Record
from ctxemb_core.index.guarded import (
    OPEN_SAMPLE,
    PAGE,
    GuardedIndex,
    stamped_contract,
    verify_driver,
)
from ctxemb_core.stamp_guard import as_embedder
from ctxemb_core.validate import check_count

__all__ = [
    "BackfillPlan",
    "BackfillReport",
    "Gate",
    "QualityGate",
    "UpgradePlan",
    "backfill",
    "begin_upgrade",
    "check_gates",
    "create_alias",
    "cutover",
    "plan_backfill",
    "plan_upgrade",
    "retire",
    "rewrite_records",
    "rollback",
    "shadow_name",
    "text_digests",
]

_META = frozenset({"text", "metadata"})


def _swap(catalog: Catalog, new: AliasRecord, expected: int | None) -> AliasRecord:
    if not catalog.aliases.swap(new, expected=expected):
        now = catalog.aliases.read(new.name)
        raise AliasMovedError(
            f"alias {new.name!r} was changed by another client (generation "
            f"{expected} -> {None if now is None else now.generation}) while this {new.step} "
            "was decided: nothing was written; run it again to act on the alias as it is now"
        )
    return new


def create_alias(catalog: Catalog, name: str, index: str) -> AliasRecord:
    """Bind alias ``name`` to the stamped index ``index`` and the contract its stamp carries.
    Binding an alias again to the index it names changes nothing.

    Raises:
        AliasConflictError: an index is named ``name``, or the alias exists for another index.
        MissingStampError: ``index`` is not stamped. InvalidInputError: no such index.
    """
    check_alias_name(name)
    if catalog.exists(name):
        raise AliasConflictError(
            f"{name!r} is the name of an index in {catalog.describe()}: an alias must not "
            "shadow an index (opening that name would be ambiguous); choose another name"
        )
    existing = catalog.aliases.read(name)
    if existing is not None:
        if existing.target.index == index and existing.state is AliasState.SERVING:
            return existing
        raise AliasConflictError(f"alias {name!r} exists (it serves {existing.target})")
    contract = stamped_contract(catalog.driver(index))
    # A hybrid index (a lexical side stamped beside it): the alias records its hybrid contract.
    target = AliasTarget.of(index, contract, lexical_contract(catalog, index))
    return _swap(catalog, AliasRecord.create(name, target), None)


def shadow_name(record: AliasRecord, contract: EmbeddingContract | HybridContract) -> str:
    """The shadow index's name: the alias's and the new contract's fingerprint's first 10 (the
    hybrid contract's, for a hybrid index: a new lexical recipe alone makes a new shadow)."""
    return f"{record.name}-{contract.fingerprint[:10]}"


def _new_hybrid(
    record: AliasRecord,
    dense: EmbeddingContract,
    given: HybridContract | None,
    lexical: Any,
    fusion: Any,
) -> HybridContract | None:
    """The hybrid contract an upgrade of ``record`` moves to: the target's lexical recipe and
    fusion, with what was given in place (``None`` for a dense index, which takes none)."""
    if record.target.hybrid is None:
        if given is not None or lexical is not None or fusion is not None:
            raise InvalidInputError(
                f"alias {record.name!r} serves a dense index ({record.target}): a lexical "
                "recipe or a fusion has no lexical side to apply to"
            )
        return None
    base = given if given is not None else record.target.hybrid
    return HybridContract(
        dense,
        (lexical if lexical is not None else base.lexical).recipe(),
        fusion if fusion is not None else base.fusion,
    )


def _serves(target: AliasTarget, dense: EmbeddingContract, hybrid: HybridContract | None) -> bool:
    """Whether ``target`` is built under ``dense`` (and ``hybrid``'s lexical recipe and
    fusion): an upgrade to it would change nothing."""
    if not same_contract(target.contract, dense):
        return False
    if target.hybrid is None or hybrid is None:
        return target.hybrid is None and hybrid is None
    # The lexical recipe and the fusion, field by field, as the hybrid guard compares them
    # (the dense side is same_contract's, above).
    changed = target.hybrid.recipe().diff(hybrid.recipe()).fields
    return not any(not f.startswith("dense.") for f in changed)


def _upgrade_to(
    record: AliasRecord, to: Any, lexical: Any, fusion: Any
) -> tuple[Embedder, HybridContract | None]:
    given = to if isinstance(to, HybridContract) else None
    embedder = as_embedder(given.dense if given is not None else to)
    return embedder, _new_hybrid(record, embedder.contract, given, lexical, fusion)


def begin_upgrade(
    catalog: Catalog,
    name: str,
    to: EmbeddingContract | Embedder | HybridContract,
    *,
    shadow: str | None = None,
    lexical: Any = None,
    fusion: Any = None,
) -> AliasRecord:
    """Create the shadow index under ``to`` (stamped, checked by its canary) and mark the alias
    upgrading. Begun again with the same contract, it changes nothing.

    Over a hybrid index, the shadow is a hybrid index too, under the target's lexical recipe and
    fusion with ``lexical`` (a :class:`~ctxemb_core.hybrid.LexicalContract`) and ``fusion`` (a
    :class:`~ctxemb_core.hybrid.Fusion`) in their place, or under ``to`` when it is a whole
    :class:`~ctxemb_core.hybrid.HybridContract`; ``to`` may be the target's own dense contract
    (a new lexical recipe alone).

    Raises:
        UnknownAliasError: no such alias. AliasStateError: the alias serves ``to`` already,
            or is upgrading to another contract. AliasMovedError: changed meanwhile.
        AliasConflictError: ``shadow`` names an index that exists, or an alias.
        InvalidInputError: ``lexical`` or ``fusion`` for an alias over a dense index.
    """
    record = read_alias(catalog, name)
    embedder, hybrid = _upgrade_to(record, to, lexical, fusion)
    if record.state is AliasState.UPGRADING:
        assert record.shadow is not None
        if _serves(record.shadow, embedder.contract, hybrid):
            return record
        raise AliasStateError(
            f"alias {name!r} is upgrading to {record.shadow} already: cut over or roll back first"
        )
    if _serves(record.target, embedder.contract, hybrid):
        raise AliasStateError(
            f"alias {name!r} already serves this contract ({record.target}): nothing to upgrade"
        )
    if record.previous is not None:
        problem = f"alias {name!r} still writes its previous target {record.previous.index}"
        raise AliasStateError(
            f"{problem}: retire it first (retire(catalog, {name!r})), or roll back to it "
            f"(rollback(catalog, {name!r}))",
            cli=f"{problem}: retire it first (ctxemb upgrade {name} --retire), or roll back to it "
            f"(ctxemb upgrade {name} --rollback)",
        )
    target_name = shadow if shadow is not None else shadow_name(record, hybrid or embedder.contract)
    if target_name == record.target.index or catalog.aliases.read(target_name) is not None:
        raise AliasConflictError(f"{target_name!r} cannot be the shadow index: it is taken")
    if shadow is not None and catalog.exists(target_name):
        # The backfill makes a shadow hold exactly the target's records: an index of its own
        # (another alias's target, anyone's data) would lose what the target does not hold.
        raise AliasConflictError(
            f"{target_name!r} cannot be the shadow index: it exists, and a backfill would "
            "delete every record of it the target does not hold; name a new index, or drop it"
        )
    made = GuardedIndex.open(catalog.driver(target_name), embedder, sample=0)
    made_target = AliasTarget.of(made.name, made.stamp.contract, hybrid)
    if hybrid is not None:
        # Its lexical side, under the new recipe, from what the shadow holds (nothing yet).
        open_target(catalog, made_target, embedder, create=True, refresh=True, alias=name)
    new = record.next("begin", state=AliasState.UPGRADING, shadow=made_target)
    return _swap(catalog, new, record.generation)


@dataclass(frozen=True)
class BackfillReport:
    """What one :func:`backfill` did: written, unchanged and deleted records, in seconds.

    ``carried`` says how the records were written: re-embedded under the new contract (False),
    or, where only a hybrid index's lexical recipe or fusion changed, their stored vectors
    carried over as they are (True: nothing was embedded)."""

    source: str
    target: str
    written: int
    unchanged: int
    deleted: int
    seconds: float
    carried: bool = False

    @property
    def rate(self) -> float:
        """Records written per second."""
        return self.written / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        """One line: what was written and how, what was there already, what was deleted."""
        how = (
            "carried over (the same dense contract: nothing embedded)"
            if self.carried
            else ("re-embedded")
        )
        return (
            f"{self.written} {how} ({self.rate:.1f}/s), {self.unchanged} already there, "
            f"{self.deleted} deleted"
        )


def text_digests(catalog: Catalog, index: str, contract: Embedder) -> dict[str, str | None]:
    """``{id: text digest}`` of index ``index``, read through the guard under ``contract``'s
    embedder (what the parity gate compares; for checking an upgrade by hand)."""
    return _digests(GuardedIndex.open(catalog.driver(index), contract, create=False, sample=0))


def _text_of(record: Record) -> str | None:
    """A record's text digest: the one it carries, else its stored text's (a record written
    before digests were kept); ``None`` without either."""
    digest = (record.metadata or {}).get(TEXT_KEY)
    if isinstance(digest, str):
        return digest
    return text_digest(record.text) if isinstance(record.text, str) else None


def _joined(record: Record) -> bool:
    """Whether a record's vector was made from another text than it stores (the digest it
    carries is not its stored text's)."""
    digest = (record.metadata or {}).get(TEXT_KEY)
    return (
        isinstance(digest, str)
        and isinstance(record.text, str)
        and (digest != text_digest(record.text))
    )


def _state(record: Record) -> str | None:
    """A record as a backfill, the parity gate and a rollback compare it: its text digest and
    its own metadata (a change to metadata alone is a change: a filter reads it)."""
    text = _text_of(record)
    own = {k: v for k, v in (record.metadata or {}).items() if not str(k).startswith("ctxemb")}
    if text is None or not own:
        return text
    shown = json.dumps(own, sort_keys=True, default=str, ensure_ascii=False)
    return f"{text}:{hashlib.sha256(shown.encode()).hexdigest()}"


def _digests(
    index: GuardedIndex, of: Callable[[Record], str | None] = _text_of
) -> dict[str, str | None]:
    return {r.id: of(r) for r in _each(index)}


def _each(index: GuardedIndex) -> Iterator[Record]:
    """Every record of ``index``, with its text and metadata, a page at a time."""
    offset = 0
    while True:
        page = index.page(offset, PAGE, ("metadata", "text"))
        if not page:
            return
        offset += len(page)
        yield from page


@dataclass(frozen=True)
class BackfillPlan:
    """What a backfill must do, decided from the text digests alone (nothing embedded yet):
    the ids to re-embed (missing from ``dest`` or stored there with another text) and the ids
    to delete (``dest`` holds them, ``source`` no longer does). Every runner writes by it: the
    in-process :func:`backfill` and ``ctxemb_ray.backfill_with_ray``, whose actors write with
    :func:`rewrite_records` too.

    Example:
        >>> plan = plan_backfill(catalog, "docs", encoders)              # doctest: +SKIP
        >>> written = sum(plan.write(ids) for ids in chunks(plan.todo))  # doctest: +SKIP
        >>> plan.finish(written)                                         # doctest: +SKIP
    """

    source: GuardedIndex
    dest: GuardedIndex
    todo: tuple[str, ...]
    unchanged: int
    gone: tuple[str, ...]
    started: float = field(default_factory=time.perf_counter)
    #: ``dest``'s hybrid pair, for a hybrid index: its lexical side follows every write.
    lexical: Any = None
    #: Raises while ``dest`` is no longer the shadow the alias upgrades into (another process
    #: cut over, or rolled back): run before every batch and before the deletes, so that a late
    #: batch never lands in an index the alias serves (``None``: no alias to ask).
    still: Callable[[], None] | None = None

    def write(self, ids: Sequence[str]) -> int:
        """Re-embed ``ids``' stored texts from ``source`` into ``dest``; returns how many. Under
        the very contract that made them (a hybrid index's new lexical recipe or fusion alone),
        the stored vectors are carried as they are instead: nothing is embedded.

        Raises:
            AliasMovedError: the alias no longer upgrades into ``dest`` (nothing written).
        """
        if self.still is not None:
            self.still()
        carry = same_contract(self.source.stamp, self.dest.stamp, exact=True)
        records = self.source.get(
            ids, ("text", "metadata", "vector") if carry else ("text", "metadata")
        )

        def write() -> int:
            if carry:
                return _carry_records(self.dest, records, self.source)
            return rewrite_records(self.dest, records, self.source.name)

        if self.lexical is None:
            return write()
        written: list[int] = []
        self.lexical.keep_in_step(ids, lambda: written.append(write()))
        return written[0]

    def finish(self, written: int, *, batch: int = PAGE) -> BackfillReport:
        """Delete what ``source`` no longer holds from ``dest`` (once every batch is written)
        and say what the backfill did. A hybrid ``dest``'s lexical side is then brought in step
        with every text its dense side stores (what runners that write the dense side alone,
        on a cluster, left it)."""
        if self.still is not None and self.gone:
            self.still()
        for start in range(0, len(self.gone), batch):
            part = list(self.gone[start : start + batch])
            if self.lexical is None:
                self.dest.delete(part)
            else:
                self.lexical.keep_in_step(part, lambda p=part: self.dest.delete(p))
        if self.lexical is not None:
            self.lexical.refresh()
        return BackfillReport(
            self.source.name,
            self.dest.name,
            written,
            self.unchanged,
            len(self.gone),
            time.perf_counter() - self.started,
            carried=same_contract(self.source.stamp, self.dest.stamp, exact=True),
        )


def rewrite_records(dest: GuardedIndex, records: Sequence[Record], source: str) -> int:
    """Write ``records`` (read with text and metadata from index ``source``) into ``dest``,
    embedded under ``dest``'s contract; returns how many. A record stored without its text
    cannot be re-embedded: :class:`InvalidInputError`, and nothing of the batch is written."""
    missing_text = [r.id for r in records if r.text is None]
    if missing_text:
        raise InvalidInputError(
            f"index {source!r}: records stored without their text cannot be "
            f"re-embedded: {missing_text[:5]}"
        )
    if records:
        dest.upsert(
            [r.id for r in records],
            [str(r.text) for r in records],
            [dict(r.metadata) if r.metadata else None for r in records],
        )
    return len(records)


def _carry_records(dest: GuardedIndex, records: Sequence[Record], source: GuardedIndex) -> int:
    """Write ``records`` (read with text, metadata and vector from ``source``, whose contract is
    ``dest``'s) into ``dest`` with their stored vectors; returns how many."""
    missing = [r.id for r in records if r.text is None or r.vector is None]
    if missing:
        raise InvalidInputError(
            f"index {source.name!r}: records stored without their text or vector cannot be "
            f"carried: {missing[:5]}"
        )
    if records:
        dest.add_embedded(
            [r.id for r in records],
            np.stack([np.asarray(r.vector) for r in records]),
            [str(r.text) for r in records],
            [dict(r.metadata) if r.metadata else None for r in records],
            fingerprint=source.stamp.fingerprint,
            upsert=True,
        )
    return len(records)


def _step_plan(
    source: GuardedIndex, dest: GuardedIndex, lexical: Any = None, *, whole: bool = False
) -> BackfillPlan:
    """``whole``: every record the plan would re-embed must store the text its vector was made
    from (:class:`TextNotStoredError` otherwise, before anything is written)."""
    started = time.perf_counter()
    have = _digests(dest, _state)
    check = whole and not same_contract(source.stamp, dest.stamp, exact=True)
    want: dict[str, str | None] = {}
    joined: set[str] = set()
    for r in _each(source):
        want[r.id] = _state(r)
        if check and _joined(r):
            joined.add(r.id)
    todo = tuple(i for i, d in want.items() if d is None or have.get(i) != d)
    if joined & set(todo):
        raise TextNotStoredError(source.name, [i for i in todo if i in joined])
    gone = tuple(sorted(set(have) - set(want)))
    return BackfillPlan(source, dest, todo, len(want) - len(todo), gone, started, lexical)


def _write_plan(
    plan: BackfillPlan, *, batch: int, progress: bool | None, desc: str
) -> BackfillReport:
    """Write ``plan`` in this process, ``batch`` records at a time."""
    written = 0
    with progress_bar(len(plan.todo), progress, unit="doc", desc=desc) as bar:
        for start in range(0, len(plan.todo), batch):
            ids = plan.todo[start : start + batch]
            written += plan.write(ids)
            bar.update(len(ids))
    return plan.finish(written, batch=batch)


#: How often, and how long apart, a parity check reads again the records that differed: writes
#: through the alias reach the two indexes one after the other, so a record a writer is writing
#: differs for that moment (never for longer, unless the writer died between the two).
PARITY_REREADS = (0.05, 0.2, 1.0)


def _differing(want: dict[str, str | None], have: dict[str, str | None]) -> set[str]:
    return {i for i, d in want.items() if have.get(i) != d} | (set(have) - set(want))


#: How many times a cutover backfills again the records a parity gate found differing.
MEND_ROUNDS = 3


def _stored_digests(
    index: GuardedIndex, of: Callable[[Record], str | None] = _state
) -> Callable[[list[str]], dict[str, str | None]]:
    def read(ids: list[str]) -> dict[str, str | None]:
        return {r.id: of(r) for r in index.get(ids, ("metadata", "text"))}

    return read


def _settled(
    old: GuardedIndex,
    new: Callable[[list[str]], Mapping[str, str | None]],
    differ: set[str],
    of: Callable[[Record], str | None] = _state,
) -> int:
    """How many of ``differ`` still differ once writes in flight have reached both indexes
    (``new``: the digests the other side holds for some ids; ``of``: what ``old`` is compared
    by, a record's state unless said)."""
    for pause in PARITY_REREADS:
        if not differ:
            break
        time.sleep(pause)
        ids = sorted(differ)
        differ = _differing(_stored_digests(old, of)(ids), dict(new(ids)))
    return len(differ)


def _lexical_of(record: Record) -> str:
    """What a lexical side holds of a record: its stored text's digest."""
    return stored_digest(record.text)


def _opened(catalog: Catalog, target: AliasTarget, encoders: Encoders, alias: str) -> GuardedIndex:
    embedder = encoders.get(target.contract, alias=alias)
    return GuardedIndex.open(catalog.driver(target.index), embedder, create=False, sample=0)


def _paired(
    catalog: Catalog, target: AliasTarget, encoders: Encoders, alias: str
) -> tuple[GuardedIndex, Any]:
    """An index a backfill writes: its guarded index, and for a hybrid one its pair (opened
    under the alias's recorded recipe, its lexical side mended where found out of step)."""
    if target.hybrid is None:
        return _opened(catalog, target, encoders, alias), None
    embedder = encoders.get(target.contract, alias=alias)
    hybrid = open_target(catalog, target, embedder, refresh=True, alias=alias)
    return hybrid.dense.index, hybrid


def _check_encoders(encoders: Any) -> Encoders:
    if isinstance(encoders, Encoders):
        return encoders
    if isinstance(encoders, Embedder):
        return Encoders(encoders)
    if isinstance(encoders, Sequence) and not isinstance(encoders, str):
        return Encoders(*encoders)
    raise InvalidInputError(f"encoders must be Encoders, got {type(encoders).__name__}")


def plan_backfill(
    catalog: Catalog, name: str, encoders: Encoders | Embedder | Sequence[Any]
) -> BackfillPlan:
    """What :func:`backfill` would re-embed and delete now (nothing is written): the plan every
    runner of a backfill writes by, in this process or on a cluster.

    Raises:
        AliasStateError: the alias is not upgrading. NoEncoderError: no encoder for a side.
    """
    encoders = _check_encoders(encoders)
    record = read_alias(catalog, name)
    if record.state is not AliasState.UPGRADING or record.shadow is None:
        raise AliasStateError(f"alias {name!r} is not upgrading: begin an upgrade first")
    source = _opened(catalog, record.target, encoders, name)
    dest, lexical = _paired(catalog, record.shadow, encoders, name)
    plan = _step_plan(source, dest, lexical, whole=True)
    return replace(plan, still=_still(catalog, name, dest.name))


def _still(catalog: Catalog, name: str, shadow: str) -> Callable[[], None]:
    """A check that alias ``name`` still upgrades into ``shadow`` (AliasMovedError if not)."""

    def check() -> None:
        now = read_alias(catalog, name)
        if (
            now.state is not AliasState.UPGRADING
            or now.shadow is None
            or now.shadow.index != shadow
        ):
            raise AliasMovedError(
                f"alias {name!r} no longer upgrades into {shadow!r} (another client cut over or "
                "rolled back): this backfill stopped, and wrote nothing more"
            )

    return check


def backfill(
    catalog: Catalog,
    name: str,
    encoders: Encoders | Embedder | Sequence[Any],
    *,
    batch: int = PAGE,
    progress: bool | None = None,
) -> BackfillReport:
    """Re-embed the texts of the alias's target into its shadow, under the shadow's contract.

    Resumable: only ids the shadow lacks, or holds with another text digest, are embedded;
    ids the target no longer holds are deleted from the shadow. Writes through the alias go to
    both meanwhile, so a backfill run while they happen misses none. (On a Ray cluster, by
    the same plan: ``ctxemb_ray.backfill_with_ray``.)

    Raises:
        AliasStateError: the alias is not upgrading. NoEncoderError: no encoder for a side.
    """
    check_count(batch, "batch")
    plan = plan_backfill(catalog, name, encoders)
    return _write_plan(plan, batch=batch, progress=progress, desc="backfilling")


@dataclass(frozen=True)
class Gate:
    """One gate of a cutover: its name, whether it passed, the figure it measured and what
    that figure is."""

    name: str
    passed: bool
    figure: float
    detail: str

    def __str__(self) -> str:
        return f"{'pass' if self.passed else 'FAIL'}  {self.name}: {self.detail}"


@dataclass(frozen=True)
class QualityGate:
    """The optional quality gate: queries, and either qrels with a floor on nDCG@``k``
    relative to the current target (``floor=0.98``: at least 98 % of it), or no qrels and a
    floor on the mean top-``k`` overlap of the two indexes' results.

    ``where``: a metadata filter both indexes are searched under (the store's filter language,
    as in ``query(where=...)``), so the gate measures the records a team's evaluation set
    covers in an index that holds others too (other tenants, live writes): ``{"set":
    "scifact"}``. ``None``: every record.
    """

    queries: Mapping[str, str]
    qrels: Mapping[str, Mapping[str, int]] | None = None
    floor: float = 0.98
    k: int = 10
    depth: int = 100
    where: Filter | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.queries, Mapping) or not self.queries:
            raise InvalidInputError("a quality gate needs queries: {query id: text}")
        if not 0.0 <= float(self.floor) <= 1.5:
            raise InvalidInputError(f"a quality floor is a ratio in [0, 1.5], got {self.floor!r}")
        check_count(self.k, "k")
        check_count(self.depth, "depth")
        if self.where is not None and not isinstance(self.where, Mapping):
            raise InvalidInputError(
                f"a quality gate's where is a metadata filter (a mapping), got {self.where!r}"
            )


def _run(
    index: GuardedIndex, queries: Mapping[str, str], depth: int, where: Filter | None = None
) -> dict[str, dict[str, float]]:
    ids = list(queries)
    found = index.query([queries[q] for q in ids], depth, where=where)
    return {q: {m.id: m.score for m in matches} for q, matches in zip(ids, found, strict=True)}


def _quality(old: GuardedIndex, new: GuardedIndex, gate: QualityGate) -> Gate:
    from ctxemb_core.eval.metrics import ndcg_at_k

    before = _run(old, gate.queries, gate.depth, gate.where)
    after = _run(new, gate.queries, gate.depth, gate.where)
    if gate.qrels is not None:
        ndcg_old = ndcg_at_k(before, gate.qrels, gate.k)
        ndcg_new = ndcg_at_k(after, gate.qrels, gate.k)
        ratio = ndcg_new / ndcg_old if ndcg_old > 0 else (1.0 if ndcg_new >= 0 else 0.0)
        # Both at 0 measured nothing (a filter that keeps no record, judgements of ids neither
        # index holds): that is no evidence the shadow is as good, so it does not pass.
        measured = ndcg_new > 0 or ndcg_old > 0
        return Gate(
            "quality",
            measured and ratio >= gate.floor,
            ndcg_new,
            f"nDCG@{gate.k} {ndcg_new:.5f} (shadow) vs {ndcg_old:.5f} (target): "
            + (
                f"{ratio:.4f} of it, floor {gate.floor}"
                if measured
                else "both 0, so nothing was measured (do the judged ids, and the filter, "
                "reach the indexes' records?)"
            ),
        )
    overlaps = []
    for q in gate.queries:
        top_old = sorted(before[q], key=before[q].__getitem__, reverse=True)[: gate.k]
        top_new = set(sorted(after[q], key=after[q].__getitem__, reverse=True)[: gate.k])
        overlaps.append(len(top_new.intersection(top_old)) / max(1, len(top_old)))
    mean = sum(overlaps) / len(overlaps)
    return Gate(
        "quality",
        mean >= gate.floor,
        mean,
        f"top-{gate.k} overlap {mean:.4f} over {len(overlaps)} queries, floor {gate.floor}",
    )


def check_gates(
    catalog: Catalog,
    name: str,
    encoders: Encoders | Embedder | Sequence[Any],
    *,
    sample: int = OPEN_SAMPLE,
    quality: QualityGate | None = None,
) -> list[Gate]:
    """Every gate of a cutover, measured now (nothing is changed).

    - ``canary``: the new contract's canary re-embeds to the shadow's stamp (lowest cosine);
    - ``parity``: the shadow holds exactly the target's ids, with the same text digests
      (records that differ);
    - ``sample``: ``sample`` shadow records re-embed to their stored vectors (lowest cosine);
    - ``lexical``: for a hybrid shadow, its lexical side holds exactly the target's ids, with
      the same text digests (records that differ), its stamp and analyzer canary checked;
    - ``quality``: with ``quality`` (see :class:`QualityGate`).
    """
    encoders = _check_encoders(encoders)
    record = read_alias(catalog, name)
    if record.shadow is None:
        raise AliasStateError(f"alias {name!r} is not upgrading: there is nothing to gate")
    embedder = encoders.get(record.shadow.contract, alias=name)
    driver = catalog.driver(record.shadow.index)
    report = verify_driver(driver, embedder, sample=sample)
    gates = [
        Gate(
            "canary",
            report.fingerprint_match
            and report.canary_cosine is not None
            and report.canary_cosine >= report.tolerance,
            float(report.canary_cosine or 0.0),
            f"lowest canary cosine {report.canary_cosine} (tolerance {report.tolerance})",
        )
    ]
    gates.append(_parity(catalog, record, encoders, embedder))
    gates.append(
        Gate(
            "sample",
            not report.bad_ids,
            float(report.sample_min_cosine if report.sample_min_cosine is not None else 1.0),
            f"{report.sample_size} records re-embedded, lowest cosine "
            f"{report.sample_min_cosine}, {len(report.bad_ids)} not this contract's",
        )
    )
    if record.shadow.hybrid is not None:
        gates.append(_lexical_parity(catalog, record, encoders, embedder))
    if quality is not None:
        old = _opened(catalog, record.target, encoders, name)
        new = GuardedIndex.open(driver, embedder, create=False, sample=0)
        gates.append(_quality(old, new, quality))
    return gates


def _parity(catalog: Catalog, record: AliasRecord, encoders: Encoders, embedder: Embedder) -> Gate:
    """The parity gate: ids and text digests of the target and the shadow, measured now."""
    assert record.shadow is not None
    old = _opened(catalog, record.target, encoders, record.name)
    new = GuardedIndex.open(catalog.driver(record.shadow.index), embedder, create=False, sample=0)
    have, want = _digests(new, _state), _digests(old, _state)
    differ = _settled(old, _stored_digests(new), _differing(want, have))
    return Gate(
        "parity",
        differ == 0,
        float(differ),
        f"{differ} records differ ({len(want)} in the target, {len(have)} in the shadow)",
    )


def _lexical_parity(
    catalog: Catalog, record: AliasRecord, encoders: Encoders, embedder: Embedder
) -> Gate:
    """The lexical gate: the ids and text digests of the shadow's lexical side against the
    target's records, measured now (a side that does not open, out of step or of another
    recipe, fails it with the reason)."""
    assert record.shadow is not None
    old = _opened(catalog, record.target, encoders, record.name)
    try:
        side = open_target(catalog, record.shadow, embedder, alias=record.name).lexical
    except CtxembError as exc:
        return Gate("lexical", False, float("nan"), f"the shadow's lexical side: {exc}")
    want = _digests(old, _lexical_of)
    have: dict[str, str | None] = dict(side.digests())
    differ = _settled(old, side.digests, _differing(want, have), _lexical_of)
    return Gate(
        "lexical",
        differ == 0,
        float(differ),
        f"{differ} records differ on the lexical side ({len(want)} in the target, {len(have)} "
        "in the shadow's lexical side)",
    )


#: The gates a further backfill can mend (records written between two reads).
_MENDABLE = frozenset({"parity", "lexical"})


def cutover(
    catalog: Catalog,
    name: str,
    encoders: Encoders | Embedder | Sequence[Any],
    *,
    sample: int = OPEN_SAMPLE,
    quality: QualityGate | None = None,
    progress: bool | None = None,
    on_gate: Callable[[Gate], None] | None = None,
) -> AliasRecord:
    """Bring the shadow in step, check every gate, then switch the alias to it in one step;
    the old target is kept as ``previous`` and still written until :func:`retire`.

    Raises:
        GateFailedError: a gate did not pass (its ``gates`` say which): nothing switched.
        AliasStateError: the alias is not upgrading. AliasMovedError: changed meanwhile.
    """
    encoders = _check_encoders(encoders)
    record = read_alias(catalog, name)
    if record.state is not AliasState.UPGRADING or record.shadow is None:
        if record.step == "cutover" and record.previous is not None:
            return record  # a re-run after the switch: done
        raise AliasStateError(f"alias {name!r} is not upgrading: begin an upgrade first")
    backfill(catalog, name, encoders, progress=progress)
    gates = check_gates(catalog, name, encoders, sample=sample, quality=quality)
    # A parity difference that outlasted the re-reads is a write slower than they wait (a loaded
    # store) or one whose writer died between the two indexes: either way another backfill of
    # the records that differ mends it; only a difference that survives that is a failure.
    for _ in range(MEND_ROUNDS):
        failing = {g.name for g in gates if not g.passed}
        if not failing or not failing <= _MENDABLE:
            break
        backfill(catalog, name, encoders, progress=False)
        shadow = encoders.get(record.shadow.contract, alias=name)
        again = {"parity": _parity(catalog, record, encoders, shadow)}
        if record.shadow.hybrid is not None:
            again["lexical"] = _lexical_parity(catalog, record, encoders, shadow)
        gates = [again.get(g.name, g) for g in gates]
    for gate in gates:
        if on_gate is not None:
            on_gate(gate)
    failed = [g for g in gates if not g.passed]
    if failed:
        raise GateFailedError(
            f"alias {name!r} was not switched: "
            + "; ".join(f"{g.name}: {g.detail}" for g in failed),
            gates,
        )
    new = record.next(
        "cutover",
        state=AliasState.SERVING,
        target=record.shadow,
        shadow=None,
        previous=record.target,
    )
    return _swap(catalog, new, record.generation)


def rollback(
    catalog: Catalog,
    name: str,
    encoders: Encoders | Embedder | Sequence[Any],
    *,
    progress: bool | None = None,
) -> AliasRecord:
    """Serve the previous target again, brought in step with the current one first (nothing
    written since the cutover is lost); the current target becomes ``previous``, still
    written until :func:`retire`. While upgrading, the upgrade is abandoned: the target stays,
    the shadow is kept as ``previous`` until retired.

    Raises:
        AliasStateError: nothing to roll back to. AliasMovedError: changed meanwhile.
    """
    encoders = _check_encoders(encoders)
    record = read_alias(catalog, name)
    if record.state is AliasState.UPGRADING:
        new = record.next("rollback", state=AliasState.SERVING, shadow=None, previous=record.shadow)
        return _swap(catalog, new, record.generation)
    if record.previous is None:
        raise AliasStateError(f"alias {name!r} has no previous target to roll back to")
    current = _opened(catalog, record.target, encoders, name)
    previous, lexical = _paired(catalog, record.previous, encoders, name)
    plan = _step_plan(current, previous, lexical)
    _write_plan(plan, batch=PAGE, progress=progress, desc="rolling back")
    new = record.next("rollback", target=record.previous, previous=record.target)
    return _swap(catalog, new, record.generation)


def retire(catalog: Catalog, name: str) -> AliasRecord:
    """Stop writing the previous target and drop it.

    Raises:
        AliasStateError: the alias is still upgrading, or has no previous target.
    """
    record = read_alias(catalog, name)
    if record.state is AliasState.UPGRADING:
        raise AliasStateError(
            f"alias {name!r} is still upgrading into {record.shadow}: cut over or roll back "
            "before retiring"
        )
    if record.previous is None:
        raise AliasStateError(f"alias {name!r} has no previous target to retire")
    new = _swap(catalog, record.next("retire", previous=None), record.generation)
    drop_lexical(catalog, record.previous)
    catalog.drop(record.previous.index)
    return new


@dataclass(frozen=True)
class UpgradePlan:
    """What :func:`plan_upgrade` found (``--dry-run``): nothing was changed."""

    alias: str
    source: AliasTarget
    contract: EmbeddingContract
    shadow: str
    documents: int
    rate: float
    steps: tuple[str, ...] = field(default=())
    #: The new hybrid contract, for an alias over a hybrid index.
    hybrid: HybridContract | None = None
    #: The dense contract is unchanged: the stored vectors are carried, nothing is embedded.
    carried: bool = False

    @property
    def seconds(self) -> float:
        """The estimated backfill time at the measured rate."""
        return self.documents / self.rate if self.rate > 0 else float("inf")

    def describe(self) -> str:
        return "\n".join(
            [
                f"upgrade alias {self.alias}: {self.source} -> {self.shadow} "
                f"[{self.contract.fingerprint[:12]}] {(self.hybrid or self.contract).describe()}",
                f"  {self.documents} documents to copy with their stored vectors (the dense "
                "contract is unchanged: nothing is embedded)"
                if self.carried
                else f"  {self.documents} documents to re-embed at {self.rate:.1f}/s measured: "
                f"about {self.seconds:.0f} s",
                *(f"  {i}. {s}" for i, s in enumerate(self.steps, 1)),
            ]
        )


def plan_upgrade(
    catalog: Catalog,
    name: str,
    to: EmbeddingContract | Embedder | HybridContract,
    encoders: Encoders | Embedder | Sequence[Any],
    *,
    measure: int = 64,
    lexical: Any = None,
    fusion: Any = None,
) -> UpgradePlan:
    """What :func:`begin_upgrade` and :func:`backfill` would do, and how long the backfill
    would take at the embedding rate measured on ``measure`` of the target's texts.

    Raises:
        AliasStateError: as :func:`begin_upgrade` would. NoEncoderError: none for a side.
    """
    encoders = _check_encoders(encoders)
    check_count(measure, "measure")
    record = read_alias(catalog, name)
    new, hybrid = _upgrade_to(record, to, lexical, fusion)
    if _serves(record.target, new.contract, hybrid):
        raise AliasStateError(
            f"alias {name!r} already serves this contract ({record.target}): nothing to upgrade"
        )
    source = _opened(catalog, record.target, encoders, name)
    count = source.count()
    carried = same_contract(record.target.contract, new.contract, exact=True)
    texts = [] if carried else [r.text or "" for r in source.page(0, measure, ("text",))]
    started = time.perf_counter()
    if texts:
        new.embed_documents(texts)
    elapsed = time.perf_counter() - started
    rate = len(texts) / elapsed if elapsed > 0 else 0.0
    shadow = shadow_name(record, hybrid or new.contract)
    return UpgradePlan(
        name,
        record.target,
        new.contract,
        shadow,
        count,
        rate,
        (
            f"create {shadow} stamped under the new contract"
            + (", its lexical side under the new recipe" if hybrid is not None else ""),
            (
                f"copy {count} stored records into it"
                if carried
                else f"re-embed {count} stored texts into it"
            )
            + ", writes through the alias going to both",
            "check the gates: canary, parity, sample"
            + (", lexical" if hybrid is not None else "")
            + " (and quality if given)",
            f"switch alias {name} to {shadow}; keep {record.target.index} until retired",
        ),
        hybrid,
        carried,
    )
