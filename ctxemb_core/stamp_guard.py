"""The stamp's life cycle as the guard runs it: open, verify, adopt, re-stamp, the store's setting.

An adapter (or :class:`~ctxemb_core.index.GuardedIndex`) reads its store's metadata and a sample
of stored records and hands them here. The stamp (fingerprint, contract, canary) is read strictly
and checked completely on open and whenever it is seen to change
(:meth:`~ctxemb_core.stamp.IndexStamp.from_metadata`, :meth:`~ctxemb_core.stamp.IndexStamp.verify`);
the sampled records are checked by :mod:`ctxemb_core.records`.

Part of the guard (:mod:`ctxemb_core.guard` names every function here too).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxemb_core.contract import (
    ContractDiff,
    DiffKind,
    EmbeddingContract,
    FieldChange,
    same_contract,
)
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import (
    ConfigurationMismatchError,
    ContractMismatchError,
    EncoderDriftError,
    InvalidInputError,
    MissingStampError,
    StampError,
    StorageMismatchError,
)
from ctxemb_core.records import (
    NO_TEXT,
    RecordCheck,
    check_stored,
    detection_probability,
    refuse_foreign,
)
from ctxemb_core.stamp import CANARY_TOLERANCE, IndexStamp, agreement

__all__ = [
    "RESTAMPABLE",
    "RestampReport",
    "VerifyReport",
    "adopt_stamp",
    "as_embedder",
    "check_binding",
    "check_configuration",
    "check_querier",
    "check_querier_canary",
    "check_storage",
    "open_stamp",
    "restamp_stamp",
    "verify_index",
]


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify_index` found; ``ok`` only when every check passed.

    Attributes:
        stamped: the index carries a ctxemb stamp.
        fingerprint_match: the stamp's fingerprint equals the caller's, or the two differ only
            in the model's name over equal weights digests (a ``label`` difference, listed in
            ``diff``: the same vectors, accepted on open as well).
        diff: the contract difference (empty when the fingerprints match or there is no stamp).
        canary_cosine: lowest agreement between the stored canary and its re-embedding (or
            ``None`` when it was not computed because the contracts differ).
        sample_size: how many stored records were re-embedded and compared.
        sample_min_cosine: the lowest agreement among them (``None`` without a sample).
        bad_ids: ids of checked records whose stored vector is not this contract's.
        tolerance: the agreement both checks require (for float vectors).
        damaged: why the stamp could not be read, when it is there but damaged.
        records: how many records the index holds (``None`` when unknown).
        mode: ``"all"``, ``"sample"`` or ``"none"``: how the records were chosen.
        configuration: the store's own embedding setting checked against the stamp: ``"match"``,
            a description of the disagreement, or ``None`` when the store has no such setting.
        reasons: ``{id: reason}`` for each bad id.
    """

    stamped: bool
    fingerprint_match: bool
    diff: ContractDiff | None
    canary_cosine: float | None
    sample_size: int
    sample_min_cosine: float | None
    bad_ids: tuple[str, ...] = field(default=())
    tolerance: float = CANARY_TOLERANCE
    damaged: str | None = None
    records: int | None = None
    mode: str = "none"
    configuration: str | None = None
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        canary_ok = self.canary_cosine is not None and self.canary_cosine >= self.tolerance
        configuration_ok = self.configuration in (None, "match")
        return (
            self.stamped
            and self.damaged is None
            and self.fingerprint_match
            and canary_ok
            and configuration_ok
            and not self.bad_ids
        )

    @property
    def detection_probability(self) -> float:
        """The chance that this check found one altered record among the older ones."""
        if self.mode == "all":
            return 1.0
        if self.records is None or self.mode == "none":
            return 0.0
        return detection_probability(self.records, self.sample_size)

    def checked(self) -> list[str]:
        """What this report checked, in words."""
        if not self.stamped:
            done = ["stamp: looked for, none found"]
        elif self.damaged is not None:
            done = ["stamp: read, and found damaged"]
        else:
            done = ["stamp: present and readable"]
        if self.stamped and self.damaged is None:
            done.append("fingerprint: the caller's contract against the stamp's")
            if self.canary_cosine is not None:
                done.append("canary: the probe texts re-embedded, angle and length")
        if self.configuration is not None:
            done.append("configuration: the store's embedding setting against the stamp")
        if self.mode == "all":
            done.append(f"records: all {self.sample_size} re-embedded, angle and length")
        elif self.mode == "sample":
            done.append(
                f"records: a sample of {self.sample_size} of {self.records} (the newest half "
                "and a random half) re-embedded, angle and length"
            )
        return done

    def not_checked(self) -> list[str]:
        """What this report could not check, in words."""
        out = []
        if not self.stamped or self.damaged is not None:
            out.append("fingerprint and canary: no readable stamp to check them against")
        elif not self.fingerprint_match:
            out.append("canary: not re-embedded, the contracts differ")
        if self.mode == "sample" and self.records and self.sample_size < self.records:
            p = self.detection_probability
            out.append(
                f"records: {self.records - self.sample_size} of {self.records} were not "
                f"re-embedded; one altered older record is found with probability {p:.3f} "
                "(check every record with all=True / --all)"
            )
        elif self.mode == "none":
            out.append("records: no stored record was re-embedded")
        out.append("record metadata: not part of the contract, never checked")
        out.append("records written after this check: checked by the next one")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "stamped": self.stamped,
            "damaged": self.damaged,
            "fingerprint_match": self.fingerprint_match,
            "diff": [str(c) for c in self.diff.changes] if self.diff else [],
            "diff_kind": self.diff.kind.value if self.diff else DiffKind.IDENTICAL.value,
            "canary_cosine": self.canary_cosine,
            "configuration": self.configuration,
            "records": self.records,
            "mode": self.mode,
            "sample_size": self.sample_size,
            "sample_min_cosine": self.sample_min_cosine,
            "detection_probability": round(self.detection_probability, 6),
            "bad_ids": list(self.bad_ids),
            "reasons": dict(self.reasons),
            "tolerance": self.tolerance,
            "checked": self.checked(),
            "not_checked": self.not_checked(),
        }


# -- the caller's embedder ------------------------------------------------------------------------


def as_embedder(contract: Any, what: str = "contract") -> Embedder:
    """The caller's embedder: an :class:`Embedder` as it is, a contract made into one."""
    if isinstance(contract, Embedder):
        return contract
    if isinstance(contract, EmbeddingContract):
        return Embedder(contract)
    raise InvalidInputError(
        f"{what} must be an EmbeddingContract or an Embedder, got {type(contract).__name__}"
    )


def check_querier(embedder: Any) -> Embedder | None:
    """A caller's own query embedder: an :class:`Embedder` or ``None`` (a contract is refused:
    the caller meant a specific embedder, and building one silently would hide that)."""
    if embedder is not None and not isinstance(embedder, Embedder):
        hint = "; pass Embedder(contract)" if isinstance(embedder, EmbeddingContract) else ""
        raise InvalidInputError(
            f"embedder must be an Embedder, got {type(embedder).__name__}{hint}"
        )
    return embedder


def check_querier_canary(stamp: IndexStamp, querier: Embedder, verified: list[Embedder]) -> None:
    """Refuse a querier of another contract than the stamp's; re-embed the canary with each
    embedder not in ``verified`` once (same contract on paper, the canary proves its vectors)."""
    stamp.check_contract(querier.contract)
    if not any(q is querier for q in verified):
        stamp.verify(querier)
        verified.append(querier)


# -- the stamp and the store's own setting --------------------------------------------------------


def check_storage(
    name: str,
    stored: Mapping[str, Any],
    expected: Mapping[str, Any],
    recorded: Mapping[str, Any] | None = None,
    advice: str = "",
) -> None:
    """The form a store keeps the vectors in must be the one the stamp's contract makes.

    For stores whose vectors have a declared type (a PostgreSQL column): the adapter says what
    the contract's vectors need (``expected``, e.g. ``{"column": "vector(384)"}``), what the
    store has now (``stored``) and what was recorded beside the stamp when the index was made
    (``recorded``, if the store keeps it). All three must agree.

    Raises:
        StorageMismatchError: a field differs (each one named, store against stamp).
    """
    for found in (stored, recorded):
        if found is None:
            continue
        if any(found.get(k) != v for k, v in expected.items()):
            raise StorageMismatchError(name, dict(found), dict(expected), advice)


def check_configuration(
    stamp: IndexStamp, name: str | None, contract: Mapping[str, Any] | None
) -> None:
    """The store's persisted embedding setting must be the stamp's contract.

    Args:
        stamp: the index's stamp (already read and verified).
        name: the name of the embedding function the store persisted (``None`` for none).
        contract: the contract dict in that setting, for a ctxemb function.

    Raises:
        ConfigurationMismatchError: another function, or a ctxemb function under another
            contract (the differing fields named).
    """
    if name != "ctxemb":
        what = f"embedding function {name!r}" if name else "no embedding function"
        raise ConfigurationMismatchError(
            str(name), (), f"the store records {what}, the stamp says ctxemb {stamp.fingerprint}"
        )
    try:
        configured = EmbeddingContract.from_dict(dict(contract or {}))
    except (StampError, ValueError, TypeError) as exc:
        raise ConfigurationMismatchError(
            "ctxemb", (), f"the ctxemb configuration holds no valid contract ({exc})"
        ) from None
    if not same_contract(stamp.contract, configured, exact=True):
        diff = stamp.contract.diff(configured)
        raise ConfigurationMismatchError("ctxemb", diff.fields, f"it differs in {diff}")


@functools.lru_cache(maxsize=32)
def _read_stamp(items: tuple[tuple[str, str, Any], ...]) -> IndexStamp:
    # A store's hook asks on every call (0.35 ms to read a MiniLM stamp); the same stamp is read
    # once. Damaged stamps raise, and exceptions are not cached.
    return IndexStamp.from_metadata({key: value for key, _, value in items})


def check_binding(
    metadata: Mapping[str, Any] | None,
    contract: EmbeddingContract,
    name: str,
    *,
    configured: Mapping[str, Any] | None = None,
    require_stamp: bool = True,
    advice: str = "",
) -> None:
    """The check a store's own embedding hook makes for the index it is about to serve.

    A store that embeds by itself (Chroma's ``Collection.add``/``query`` calling its embedding
    function) hands ctxemb's function the texts and nothing else; the adapter finds the index the
    call serves and asks this first, so that nothing is embedded for an index of another
    contract. It checks what the store returned with the index (its metadata, and the contract
    the store persisted for its embedding function), not the stored vectors: those are sampled
    when the index is opened through ctxemb.

    Args:
        metadata: the index's metadata as the store returned it.
        contract: the contract of the function about to embed.
        name: what the messages call the index (``"collection 'docs'"``).
        configured: the contract (a dict) the store persisted for the index's embedding
            function, if it is ctxemb's; an index without a stamp is held to it.
        require_stamp: refuse an index without a stamp. ``False`` where a handle is only being
            made (a collection created a moment ago carries no stamp yet); embedding and
            writing pass ``True``.
        advice: the adapter's next step for an index without a stamp (its own calls).

    Raises:
        ContractMismatchError: the stamp (or, without one, the persisted function) holds
            another contract; the differing fields are named.
        DamagedStampError: a stamp that cannot be read.
        MissingStampError: no stamp, with ``require_stamp``.
    """
    if IndexStamp.is_stamped(metadata):
        _read_stamp(IndexStamp.metadata_items(metadata)).check_contract(contract)
        return
    if configured is not None:
        try:
            persisted = EmbeddingContract.from_dict(dict(configured))
        except (StampError, ValueError, TypeError):
            persisted = None  # not a contract: nothing to compare; the stamp decides below
        if persisted is not None and not same_contract(persisted, contract):
            raise ContractMismatchError(persisted, contract)
    if require_stamp:
        raise MissingStampError(
            f"{name} carries no ctxemb stamp, so nothing would prove which contract wrote "
            f"its vectors; ctxemb's embedding function embeds nothing for it. {advice}".rstrip()
        )


# -- open, verify, re-stamp, adopt ----------------------------------------------------------------


def open_stamp(
    metadata: Mapping[str, Any] | None,
    embedder: Embedder,
    sample: tuple[Sequence[str], Sequence[str | None], Any] | None = None,
    tolerance: float = CANARY_TOLERANCE,
) -> IndexStamp:
    """The full check on open; returns the stamp or raises the error that says what is wrong.

    Raises:
        MissingStampError: no stamp.
        DamagedStampError: a stamp that cannot be read or contradicts itself.
        ContractMismatchError: the caller's contract is another one (fields named).
        EncoderDriftError: the canary does not re-embed to its stored vectors.
        ForeignVectorsError: sampled stored records were not made under this contract (e.g. a
            raw client wrote into the index with another embedding function, or without text).
    """
    stamp = IndexStamp.from_metadata(metadata)
    stamp.verify(embedder, tolerance)
    if sample is not None:
        refuse_foreign(embedder, *sample, tolerance=tolerance)
    return stamp


def verify_index(
    metadata: Mapping[str, Any] | None,
    embedder: Embedder,
    sample: tuple[Sequence[str], Sequence[str | None], Any] | RecordCheck | None = None,
    tolerance: float = CANARY_TOLERANCE,
    *,
    records: int | None = None,
    mode: str | None = None,
    configuration: tuple[str | None, Mapping[str, Any] | None] | None = None,
) -> VerifyReport:
    """Like :func:`open_stamp`, but reports every finding instead of raising on the first.

    Args:
        sample: stored ``(ids, documents, vectors)`` to re-embed, or a :class:`RecordCheck`
            the adapter already made (page by page, for a check of every record).
        records: how many records the index holds, for the detection probability.
        mode: ``"all"`` or ``"sample"`` (default: ``"sample"`` when records were given).
        configuration: the store's persisted ``(function name, contract dict)``, if it has one.
    """
    damaged = None
    try:
        stamp: IndexStamp | None = IndexStamp.from_metadata(metadata)
    except MissingStampError:
        stamp = None
    except StampError as exc:  # damaged: there, but not to be trusted in any part
        stamp, damaged = None, str(exc)
    diff = stamp.contract.diff(embedder.contract) if stamp else None
    match = stamp is not None and same_contract(stamp.contract, embedder.contract)
    canary = None
    if stamp is not None and match:
        try:
            canary = stamp.verify(embedder, tolerance).min_cosine
        except EncoderDriftError as exc:
            canary = exc.min_cosine
    result = sample if isinstance(sample, RecordCheck) else None
    if sample is not None and result is None:
        result = check_stored(embedder, *sample, tolerance=tolerance)  # type: ignore[misc]
    result = result or RecordCheck()
    config_state = None
    if configuration is not None and stamp is not None:
        try:
            check_configuration(stamp, *configuration)
            config_state = "match"
        except ConfigurationMismatchError as exc:
            config_state = exc.detail
    return VerifyReport(
        stamped=stamp is not None or damaged is not None,
        fingerprint_match=match,
        diff=diff or None,
        canary_cosine=canary,
        sample_size=result.checked,
        sample_min_cosine=result.min_agreement,
        bad_ids=tuple(result.bad),
        tolerance=tolerance,
        damaged=damaged,
        records=records,
        mode=mode or ("sample" if sample is not None else "none"),
        configuration=config_state,
        reasons=dict(result.bad),
    )


#: The differences an index may accept by re-stamping: its stored document vectors stay valid.
RESTAMPABLE = frozenset({DiffKind.IDENTICAL, DiffKind.LABEL, DiffKind.QUERY_ONLY})


@dataclass(frozen=True)
class RestampReport:
    """What a re-stamp changed: the index's contract before and after, field by field.

    Attributes:
        old_fingerprint: the fingerprint the index carried.
        new_fingerprint: the fingerprint it carries now (equal when nothing changed).
        changes: the differing fields, index (old) and caller (new) values.
        kind: ``identical``, ``label`` or ``query_only`` (a re-embed is refused, never stamped).
    """

    old_fingerprint: str
    new_fingerprint: str
    changes: tuple[FieldChange, ...]
    kind: DiffKind

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(c.field for c in self.changes)

    @property
    def changed(self) -> bool:
        """Whether the stamp was rewritten."""
        return not same_contract(self.old_fingerprint, self.new_fingerprint, exact=True)

    def __str__(self) -> str:
        if not self.changed:
            return f"unchanged: {self.old_fingerprint[:12]}"
        shown = "; ".join(str(c) for c in self.changes)
        old, new = self.old_fingerprint[:12], self.new_fingerprint[:12]
        return f"{old} -> {new} ({self.kind.value}: {shown})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "old_fingerprint": self.old_fingerprint,
            "new_fingerprint": self.new_fingerprint,
            "kind": self.kind.value,
            "changes": [{"field": c.field, "old": c.index, "new": c.caller} for c in self.changes],
        }


def restamp_stamp(
    stamp: IndexStamp, embedder: Embedder, tolerance: float = CANARY_TOLERANCE
) -> tuple[IndexStamp, RestampReport]:
    """The stamp an index gets when it deliberately accepts ``embedder``'s contract.

    Only a change that leaves the stored document vectors valid is accepted: the query side
    (``query_prefix``, a separate query encoder) and the model's name over equal weights. The
    new stamp's canary is computed with ``embedder``; before that, its document-role vectors
    must reproduce the stored canary's (all of it for a name-only change), so an encoder that
    drifted is never stamped as the index's own. The store writes the new stamp's metadata
    (:meth:`IndexStamp.to_metadata`) in one call, with its own embedding setting.

    Returns:
        The new stamp (``stamp`` itself when the contracts are identical) and the report.

    Raises:
        ContractMismatchError: the change needs the documents re-embedded (its advice points
            to migration, into a new index).
        EncoderDriftError: ``embedder`` does not reproduce the stored document vectors.
    """
    diff = stamp.contract.diff(embedder.contract)
    if diff.kind not in RESTAMPABLE:
        raise ContractMismatchError(stamp.contract, embedder.contract, stamped=True)
    report = RestampReport(
        stamp.fingerprint, embedder.contract.fingerprint, diff.changes, diff.kind
    )
    if same_contract(stamp.contract, embedder.contract, exact=True):
        stamp.verify(embedder, tolerance)
        return stamp, report
    new = IndexStamp.from_embedder(embedder, stamp.probes)
    # The query rows may differ by design; the document rows are what the index stores.
    rows = len(stamp.probes) if diff.kind is DiffKind.QUERY_ONLY else len(new.canary)
    cos = agreement(stamp.canary[:rows], new.canary[:rows])
    worst = int(np.argmin(cos))
    if not cos[worst] >= tolerance:
        role = "document" if worst < len(stamp.probes) else "query"
        probe = f"{role}: {stamp.probes[worst % len(stamp.probes)]}"
        raise EncoderDriftError(float(cos[worst]), tolerance, probe)
    return new, report


def adopt_stamp(
    embedder: Embedder,
    sample: tuple[Sequence[str], Sequence[str | None], Any] | RecordCheck,
    stored: int,
    name: str,
    tolerance: float = CANARY_TOLERANCE,
) -> IndexStamp:
    """The stamp to write on an unstamped index of ``stored`` records, once its records prove it.

    Raises:
        MissingStampError: a checked stored record is not this contract's (records without
            text included), or the index has records but none was checked.
    """
    result = sample if isinstance(sample, RecordCheck) else check_stored(embedder, *sample)
    if not (result.bad or (stored and result.min_agreement is None)):
        return IndexStamp.from_embedder(embedder)
    untexted = sum(why == NO_TEXT for why in result.bad.values())
    if untexted == len(result.bad) and result.min_agreement is None:
        # Nothing was compared: a verdict on the vectors would be a guess (a framework that
        # keeps its text under another key, or records written without text).
        seen = (
            f"{untexted} of {result.checked} sampled records carry no text where ctxemb reads it"
            if result.checked
            else f"none of its {stored} records was sampled"
        )
        raise MissingStampError(
            f"cannot adopt {name!r}: no documents to re-embed ({seen}), so nothing proves which "
            "contract made its vectors. A store written by another framework may keep its text "
            "elsewhere: index the texts again under ctxemb"
        )
    also = f", {untexted} {'has' if untexted == 1 else 'have'} no text" if untexted else ""
    raise MissingStampError(
        f"cannot adopt {name!r}: its stored vectors are not this contract's (lowest agreement "
        f"{result.min_agreement}, {len(result.bad) - untexted} of {result.checked} sampled "
        f"documents differ{also})"
    )
