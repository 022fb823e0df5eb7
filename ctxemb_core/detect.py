"""Which contract wrote an index: candidate recipes re-embedded against the stored vectors.

An index of unknown provenance (written by a raw client, or stamped by a hand one doubts) still
holds its documents' texts beside their vectors. Re-embedding a sample of them under candidate
contracts -- each candidate model's own recipe with every pooling, normalisation on and off, no
document prefix and each known family's (:data:`~ctxemb_core.resolve.FAMILY_PRESETS`), truncated
to the stored width -- shows which recipe reproduces them.

What stored documents tell, and what they cannot:

- the document side: network and weights, pooling, document prefix, truncation, precision (read
  from the stored values) and normalisation (read from the stored lengths: a cosine cannot tell
  a unit vector from a longer one, so each record is compared by angle *and* length, as
  :func:`~ctxemb_core.stamp.agreement` does for the stamp's canary);
- not the query side: a query prefix or a separate query encoder never touches a stored
  document, so it is the model's (or family's) default, stated as an assumption;
- not ``max_tokens`` when no sampled document is long enough to reach it.

A match is *conclusive* when every sampled record could be re-embedded, one recipe reproduces
each of them within the record tolerance (:func:`~ctxemb_core.guard.record_tolerance`), and no
candidate with other document vectors does as well. Candidates whose document vectors equal
another's on every sampled record (mean and mean_sqrt_len pooling once normalised, say) are one
document-side recipe: the first in the candidate order (the model's own choices first) stands
for them, and the others are listed as indistinguishable.

Example:
    >>> report = detect_contract(texts, vectors, ["sentence-transformers/all-MiniLM-L6-v2"])
    >>> report.conclusive, report.best.label  # doctest: +SKIP
    (True, 'mean, normalised, no document prefix')
"""

from __future__ import annotations

import functools
import os
import warnings
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core._batches import plan_batches
from ctxemb_core.backends import load_encoder
from ctxemb_core.backends.base import Encoder
from ctxemb_core.contract import EmbeddingContract, Pooling, Precision, same_contract
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import CtxembError, InvalidInputError, StampError, TruncationWarning
from ctxemb_core.folders.layouts import read_layout
from ctxemb_core.folders.locate import locate_model
from ctxemb_core.index.guarded import check_driver, sample_records
from ctxemb_core.pooling import DenseHead, l2_normalize, pool, quantize
from ctxemb_core.records import (
    NO_TEXT,
    OTHER_WIDTH,
    record_tolerance,
    sample_cosines,
    storable,
)
from ctxemb_core.resolve import FAMILY_PRESETS, contract_for
from ctxemb_core.stamp import CANARY_TOLERANCE, IndexStamp, agreement
from ctxemb_core.validate import check_count, check_text

__all__ = [
    "DEFAULT_MODEL",
    "KEEPABLE",
    "Candidate",
    "DetectReport",
    "candidate_contracts",
    "detect_contract",
    "detect_driver",
    "model_contract",
]

#: The model tried when the caller names none and the index has no stamp: the bundled
#: all-MiniLM-L6-v2, which is also the default embedding function of Chroma and others.
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

#: Contract fields a caller may hold fixed (taken from the model's contract, not varied).
KEEPABLE = ("pooling", "normalize", "query_prefix", "document_prefix", "truncate_dim", "precision")

# Two candidates whose vectors agree this closely on every sampled record are one recipe as far
# as the sample can tell: rounding-level differences (mean vs mean_sqrt_len once normalised).
_SAME = 1.0 - 1e-6
NO_VECTOR = "no vector"


@dataclass(frozen=True)
class Candidate:
    """One candidate contract and how closely it reproduces the stored vectors.

    Attributes:
        contract: the candidate contract.
        label: its document-side recipe in words (``"cls, normalised, no document prefix"``).
        checked: how many sampled records were re-embedded under it.
        agreeing: how many of them it reproduces within the record tolerance, angle and length.
        min_cosine: the lowest cosine (angle only) between a stored vector and its re-embedding.
        median_cosine: the median of those cosines.
        norm_ratio: the median of ``|re-embedded| / |stored|`` (1 when the lengths agree).
        norms_agree: every re-embedded length is within the tolerance of its stored length.
        min_agreement: the lowest :func:`~ctxemb_core.stamp.agreement` (angle and length).
        median_agreement: the median agreement (what ranks candidates that do not explain all).
        query_source: where the query side comes from (``"the model's own"``, ``"the e5
            family's"``, ``"no prefix"``, ``"as given"``): it is an assumption, never observed.
        same_as: the fingerprint of the candidate that stands for this one: its document vectors
            equal that one's on every sampled record, so it is not ranked on its own (``None``
            for a candidate ranked on its own).
    """

    contract: EmbeddingContract
    label: str
    checked: int
    agreeing: int
    min_cosine: float
    median_cosine: float
    norm_ratio: float
    norms_agree: bool
    min_agreement: float
    median_agreement: float
    query_source: str = "the model's own"
    same_as: str | None = None

    @property
    def explains(self) -> bool:
        """It reproduces every checked record (and at least one was checked)."""
        return self.checked > 0 and self.agreeing == self.checked

    def represented_by(self, other: Candidate) -> bool:
        """Whether ``other`` is the candidate that stands for this one (:attr:`same_as`)."""
        return self.same_as is not None and same_contract(other.contract, self.same_as, exact=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "model": self.contract.model,
            "fingerprint": self.contract.fingerprint,
            "checked": self.checked,
            "agreeing": self.agreeing,
            "min_cosine": round(self.min_cosine, 6),
            "median_cosine": round(self.median_cosine, 6),
            "norm_ratio": round(self.norm_ratio, 6),
            "norms_agree": self.norms_agree,
            "min_agreement": round(self.min_agreement, 6),
            "same_as": self.same_as,
        }


@dataclass(frozen=True)
class DetectReport:
    """What :func:`detect_contract` found: the candidates best first, and what stays unknown.

    Attributes:
        candidates: every candidate, ranked: each distinct document-side recipe best first,
            followed by the candidates indistinguishable from it (``same_as`` set).
        conclusive: one recipe reproduces every sampled record and no other recipe does.
        unknown: what the stored documents cannot tell (the query side, an unreached
            ``max_tokens``, unsampled records) when conclusive; what is unknown, and why, when
            not.
        sampled: how many records were looked at.
        checked: how many of them were re-embedded (text present, of the stored width).
        records: how many records the index holds (``None`` when unknown).
        width: the stored vectors' width (the most common one in the sample).
        precision: the precision read from the stored values (or held fixed by the caller).
        skipped: ``{id: reason}`` of sampled records that could not be re-embedded.
        stamped: the contract of the index's stamp, when it has one.
        models: the candidate models tried.
        tolerance: the agreement a record must reach (for float vectors).
    """

    candidates: tuple[Candidate, ...]
    conclusive: bool
    unknown: tuple[str, ...]
    sampled: int
    checked: int
    records: int | None = None
    width: int | None = None
    precision: Precision | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    stamped: EmbeddingContract | None = None
    models: tuple[str, ...] = ()
    tolerance: float = CANARY_TOLERANCE

    @property
    def best(self) -> Candidate | None:
        """The best candidate (the one a conclusive match names), or ``None`` with none."""
        return self.candidates[0] if self.candidates else None

    @property
    def ranked(self) -> tuple[Candidate, ...]:
        """The distinct document-side recipes, best first (indistinguishable ones left out)."""
        return tuple(c for c in self.candidates if c.same_as is None)

    @property
    def stamp_match(self) -> bool | None:
        """Whether the stamp's contract is the best match (``None`` without a stamp): it is
        the best candidate or indistinguishable from it, and the best reproduces every record."""
        if self.stamped is None:
            return None
        best = self.best
        if best is None or not best.explains:
            return False
        group = [c for c in self.candidates if c is best or c.represented_by(best)]
        return any(same_contract(self.stamped, c.contract) for c in group)

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {
            "conclusive": self.conclusive,
            "best": None
            if best is None
            else {
                "label": best.label,
                "fingerprint": best.contract.fingerprint,
                "contract": best.contract.to_dict(),
            },
            "stamped": self.stamped is not None,
            "stamp_match": self.stamp_match,
            "unknown": list(self.unknown),
            "records": self.records,
            "sampled": self.sampled,
            "checked": self.checked,
            "width": self.width,
            "precision": self.precision.value if self.precision else None,
            "skipped": dict(self.skipped),
            "models": list(self.models),
            "tolerance": self.tolerance,
            "candidates": [c.to_dict() for c in self.candidates],
        }


# -- candidate models and contracts -------------------------------------------------------------


def model_contract(model: Any, **overrides: Any) -> EmbeddingContract:
    """A candidate model's own contract: a contract (or an embedder's) as it is, else
    :func:`~ctxemb_core.contract_for` of a folder or name with ``overrides``.

    A plain transformers folder says no pooling; detection tries every pooling anyway, so
    ``mean`` stands in for it (the candidates do not prefer it over the others).

    Raises:
        InvalidInputError: overrides with a contract, or a model of another type.
    """
    if isinstance(model, Embedder):
        model = model.contract
    if isinstance(model, EmbeddingContract):
        if overrides:
            raise InvalidInputError(
                "contract options apply to a model folder or name, not to a contract; change "
                "the contract with contract.with_(...)"
            )
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise InvalidInputError(
            "a candidate model is an EmbeddingContract, a model folder or a model name, got "
            f"{type(model).__name__}"
        )
    if overrides.get("pooling") is None and read_layout(locate_model(model)).pooling is None:
        overrides = {**overrides, "pooling": Pooling.MEAN}
    return contract_for(model, **overrides)


@dataclass(frozen=True)
class _Prefixes:
    query: str
    document: str
    source: str


def _prefix_options(base: EmbeddingContract, keep: Collection[str]) -> list[_Prefixes]:
    """The model's own prefixes, none, and each family's: one option per document prefix."""
    options = [_Prefixes(base.query_prefix, base.document_prefix, "the model's own")]
    if "document_prefix" not in keep:
        options.append(_Prefixes("", "", "no prefix"))
        options += [_Prefixes(q, d, f"the {f} family's") for f, (q, d) in FAMILY_PRESETS.items()]
    if "query_prefix" in keep:
        options = [_Prefixes(base.query_prefix, o.document, "as given") for o in options]
    seen: set[str] = set()
    out = []
    for option in options:
        if option.document not in seen:  # the same document side is one candidate
            seen.add(option.document)
            out.append(option)
    return out


def candidate_contracts(
    base: EmbeddingContract,
    width: int,
    precision: Precision | None = None,
    keep: Collection[str] = (),
) -> list[tuple[EmbeddingContract, str, str]]:
    """The candidate contracts of one model for stored vectors of ``width`` components.

    Each pooling, normalisation on and off, the model's own document prefix, none and each
    family's; truncated to ``width`` when it is narrower than the model's dimension; in
    ``precision`` (default: the model's). The model's own choices come first. Fields named in
    ``keep`` are taken from ``base`` and not varied. None fits when the model emits fewer
    components than ``width``, or ``keep`` holds a ``truncate_dim`` of another width.

    Returns:
        ``(contract, label, query_source)`` per candidate, distinct contracts only.
    """
    if base.dimension < width or ("truncate_dim" in keep and base.output_dim != width):
        return []
    truncate = None if width == base.dimension else width
    precision = base.precision if precision is None or "precision" in keep else precision
    if precision is Precision.BINARY and width % 8:
        return []
    poolings = [base.pooling] + [p for p in Pooling if p is not base.pooling]
    norms = [base.normalize, not base.normalize]
    if "pooling" in keep:
        poolings = poolings[:1]
    if "normalize" in keep:
        norms = norms[:1]
    out: dict[str, tuple[EmbeddingContract, str, str]] = {}
    for prefixes in _prefix_options(base, keep):
        for pooling in poolings:
            for normalize in norms:
                contract = base.with_(
                    pooling=pooling,
                    normalize=normalize,
                    query_prefix=prefixes.query,
                    document_prefix=prefixes.document,
                    truncate_dim=truncate,
                    precision=precision,
                )
                label = _label(contract)
                out.setdefault(contract.fingerprint, (contract, label, prefixes.source))
    return list(out.values())


def _label(c: EmbeddingContract) -> str:
    parts = [c.pooling.value, "normalised" if c.normalize else "not normalised"]
    if not c.document_prefix:
        parts.append("no document prefix")
    else:
        family = next((f for f, (_, d) in FAMILY_PRESETS.items() if d == c.document_prefix), None)
        named = f"{family} " if family else ""
        parts.append(f"{named}document prefix {c.document_prefix!r}")
    if c.truncate_dim is not None:
        parts.append(f"truncated to {c.truncate_dim}")
    if c.precision is not Precision.FLOAT32:
        parts.append(c.precision.value)
    return ", ".join(parts)


def _stored_precision(rows: np.ndarray) -> Precision:
    """The precision stored values show: ±1 (binary), integers (int8), float16 values, else
    float32."""
    if not rows.size or not np.isfinite(rows).all():
        return Precision.FLOAT32
    if (np.abs(rows) == 1.0).all():
        return Precision.BINARY
    if (rows == np.rint(rows)).all() and np.abs(rows).max() <= 127:
        return Precision.INT8
    if (rows.astype(np.float16).astype(np.float32) == rows).all():
        return Precision.FLOAT16
    return Precision.FLOAT32


# -- re-embedding the sample under many contracts -----------------------------------------------


@functools.lru_cache(maxsize=4)
def _network(
    folder: Path, weights: str, backend: str, device: str, quantization: str | None
) -> tuple[Encoder, tuple[DenseHead, ...]]:
    # The token-vector primitive of the folder the embedder checked (weights digest included),
    # loaded once per model: every candidate of a model pools the same forward passes.
    layout = read_layout(folder)
    encoder = load_encoder(layout.transformer, backend, device, quantization)
    return encoder, tuple(DenseHead(d.path, d.activation) for d in layout.dense)


# Pooled vectors of the sample per network run (weights, weight quantization, max_tokens,
# backend) and document prefix: every pooling of one forward pass, shared by every candidate
# (and every candidate model) that runs the same network over the same texts.
_Runs = dict[tuple[str, str | None, int, str, str], dict[Pooling, np.ndarray]]


def _pooled(embedder: Embedder, texts: list[str], prefix: str, runs: _Runs) -> bool:
    """Every pooling of one forward pass over ``prefix + text``, into ``runs``; whether a text
    reached ``max_tokens``.

    The steps up to the dense heads are the embedder's (:meth:`Embedder.embed_float`): the
    prefix read with the text, the contract's ``max_tokens``, the pooling over the real tokens,
    the network's own dense heads; truncation, normalisation and precision follow per contract.
    """
    c = embedder.contract
    quant = c.quantization.value if c.quantization else None
    key = (c.weights, quant, c.max_tokens, embedder.backend, prefix)
    if key in runs:
        return False
    encoder, dense = _network(
        embedder.model_path, c.weights, embedder.backend, embedder.device, quant
    )
    read = [prefix + t for t in texts]
    lengths = encoder.tokenizer.lengths(read, c.max_tokens)
    rows: dict[Pooling, np.ndarray] = {}
    truncated = False
    for idx in plan_batches(lengths, embedder.batch_size, embedder.token_budget):
        batch = encoder.encode([read[i] for i in idx], c.max_tokens)
        truncated = truncated or bool(batch.truncated.any())
        for pooling in Pooling:
            vectors = pool(batch.hidden, batch.mask, pooling)
            for head in dense:
                vectors = head(vectors)
            if pooling not in rows:
                rows[pooling] = np.empty((len(read), vectors.shape[1]), dtype=np.float32)
            rows[pooling][idx] = vectors
    runs[key] = rows
    return truncated


def _stored_form(pooled: np.ndarray, c: EmbeddingContract) -> np.ndarray:
    # As Embedder.embed_float then guard.stored_form: truncate, normalise, precision, storable.
    vectors = pooled[:, : c.truncate_dim] if c.truncate_dim is not None else pooled
    if c.normalize:
        vectors = l2_normalize(vectors)
    return storable(quantize(vectors, c.precision), c.precision)


def _score(
    contract: EmbeddingContract,
    label: str,
    source: str,
    stored: np.ndarray,
    fresh: np.ndarray,
    tolerance: float,
) -> Candidate:
    s = stored.astype(np.float64)
    f = fresh.astype(np.float64)
    agree = agreement(s, f)
    ns, nf = np.linalg.norm(s, axis=1), np.linalg.norm(f, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.nan_to_num((s * f).sum(axis=1) / np.maximum(ns * nf, 1e-30), nan=-1.0)
        ratio = nf / np.maximum(ns, 1e-30)
    need = record_tolerance(contract, tolerance)
    lengths_ok = bool(((ratio >= tolerance) & (ratio <= 1.0 / tolerance)).all())
    return Candidate(
        contract=contract,
        label=label,
        checked=len(s),
        agreeing=int((agree >= need).sum()),
        min_cosine=float(cos.min()),
        median_cosine=float(np.median(cos)),
        norm_ratio=float(np.median(ratio)),
        norms_agree=lengths_ok,
        min_agreement=float(agree.min()),
        median_agreement=float(np.median(agree)),
        query_source=source,
    )


# -- the detection ------------------------------------------------------------------------------


def detect_contract(
    documents: Sequence[str | None],
    vectors: Any,
    models: Sequence[Any] = (),
    *,
    ids: Sequence[str] | None = None,
    stamped: EmbeddingContract | None = None,
    keep: Collection[str] = (),
    records: int | None = None,
    tolerance: float = CANARY_TOLERANCE,
    backend: str = "auto",
) -> DetectReport:
    """Find which contract wrote stored vectors, from a sample of ``(document, vector)`` records.

    Args:
        documents: the sampled records' texts (``None`` for a record stored without one).
        vectors: their stored vectors, one row each (as the store returns them).
        models: candidate models: contracts, embedders, model folders or names. Default: the
            stamp's contract if there is one, else :data:`DEFAULT_MODEL`.
        ids: the records' ids, to name skipped ones (default: their positions).
        stamped: the contract of the index's stamp, when it has one: it is tried too, and
            :attr:`DetectReport.stamp_match` says whether it is the best match.
        keep: fields of :data:`KEEPABLE` taken from each model's contract instead of varied.
        records: how many records the index holds (for what the sample leaves unchecked).
        tolerance: the agreement a record must reach (see
            :func:`~ctxemb_core.guard.record_tolerance`).
        backend: the embedder backend (``"auto"``, ``"onnx"``, ``"torch"``).

    Returns:
        The report; nothing is written anywhere.

    Raises:
        InvalidInputError: mismatched lengths, an unknown ``keep`` field, a bad model argument.
        ModelNotFoundError: a named model is not available here (a stamp's model that is not is
            reported in ``unknown`` instead).
    """
    docs, rows = list(documents), list(vectors)
    if len(docs) != len(rows):
        raise InvalidInputError(f"{len(docs)} documents and {len(rows)} vectors")
    names = [str(i) for i in range(len(docs))] if ids is None else [str(i) for i in ids]
    if len(names) != len(docs):
        raise InvalidInputError(f"{len(names)} ids and {len(docs)} documents")
    unknown_keep = sorted(set(keep) - set(KEEPABLE))
    if unknown_keep:
        raise InvalidInputError(f"keep: unknown fields {unknown_keep}; valid ones are {KEEPABLE}")
    if records is not None:
        check_count(records, "records", 0)
    if (
        isinstance(tolerance, bool)
        or not isinstance(tolerance, (int, float))
        or not 0 < tolerance <= 1
    ):
        raise InvalidInputError(f"tolerance must be a number in (0, 1], got {tolerance!r}")
    sample = _usable(names, docs, rows)
    unknown: list[str] = []
    bases = _bases(models, stamped, unknown)
    scored: list[Candidate] = []
    fresh: list[np.ndarray] = []
    truncated = False
    if sample.width is not None:
        scored, fresh, truncated = _screen(bases, sample, keep, tolerance, backend, unknown)
    ranked = _rank(scored, fresh)
    best = ranked[0] if ranked else None
    confirmed = best is not None and best.explains and _confirmed(best, sample, tolerance)
    rivals = [c for c in ranked[1:] if c.same_as is None and c.explains]
    conclusive = bool(confirmed and best and best.norms_agree and not rivals and not sample.skipped)
    if best is not None and best.explains and not confirmed:
        unknown.append(
            f"{best.label} agrees on the screen but not when embedded through the Embedder "
            "(a bug to report); the match is not taken as conclusive"
        )
    counts = (len(docs), len(sample.texts), records)
    unknown += _findings(ranked, rivals, sample.skipped, counts, truncated, tolerance)
    return DetectReport(
        candidates=tuple(ranked),
        conclusive=conclusive,
        unknown=tuple(unknown),
        sampled=len(docs),
        checked=len(sample.texts),
        records=records,
        width=sample.width,
        precision=sample.precision,
        skipped=sample.skipped,
        stamped=stamped,
        models=tuple(dict.fromkeys(b.model for b in bases)),
        tolerance=tolerance,
    )


@dataclass(frozen=True)
class _Sample:
    """The sampled records that can be re-embedded, and why the others cannot."""

    texts: list[str]
    stored: np.ndarray
    width: int | None
    precision: Precision | None
    skipped: dict[str, str]


def _usable(names: list[str], docs: list[Any], rows: list[Any]) -> _Sample:
    """Records with a text and a vector of the stored width (the most common one)."""
    flat = [None if r is None else np.asarray(r, dtype=np.float32).ravel() for r in rows]
    has_text = [_has_text(d) for d in docs]
    widths = Counter(r.size for r, ok in zip(flat, has_text, strict=True) if r is not None and ok)
    width = widths.most_common(1)[0][0] if widths else None
    skipped: dict[str, str] = {}
    texts: list[str] = []
    kept: list[np.ndarray] = []
    for name, doc, row, ok in zip(names, docs, flat, has_text, strict=True):
        if row is None:
            skipped[name] = NO_VECTOR
        elif not ok:
            skipped[name] = NO_TEXT
        elif row.size != width:
            skipped[name] = OTHER_WIDTH
        else:
            texts.append(doc)
            kept.append(row)
    if not kept:
        return _Sample([], np.zeros((0, 0), np.float32), None, None, skipped)
    stored = np.stack(kept)
    return _Sample(texts, stored, width, _stored_precision(stored), skipped)


def _screen(
    bases: list[EmbeddingContract],
    sample: _Sample,
    keep: Collection[str],
    tolerance: float,
    backend: str,
    unknown: list[str],
) -> tuple[list[Candidate], list[np.ndarray], bool]:
    """Every candidate of every model scored against the sample; each network runs once per
    document prefix. Returns the candidates, their stored-form vectors and whether a
    sampled text reached ``max_tokens``."""
    assert sample.width is not None
    scored: list[Candidate] = []
    fresh: list[np.ndarray] = []
    seen: set[str] = set()
    runs: _Runs = {}
    truncated = False
    for base in bases:
        found = candidate_contracts(base, sample.width, sample.precision, keep)
        if not found:
            unknown.append(_no_fit(base, sample.width, sample.precision))
            continue
        embedder = Embedder(base, backend=backend)
        quant = base.quantization.value if base.quantization else None
        for contract, label, source in found:
            if contract.fingerprint in seen:
                continue
            seen.add(contract.fingerprint)
            prefix = contract.document_prefix
            truncated = _pooled(embedder, sample.texts, prefix, runs) or truncated
            key = (base.weights, quant, base.max_tokens, embedder.backend, prefix)
            vectors = _stored_form(runs[key][contract.pooling], contract)
            scored.append(_score(contract, label, source, sample.stored, vectors, tolerance))
            fresh.append(vectors)
    return scored, fresh, truncated


def _has_text(document: Any) -> bool:
    try:
        check_text(document, "document")
    except InvalidInputError:
        return False
    return True


def _bases(
    models: Sequence[Any], stamped: EmbeddingContract | None, unknown: list[str]
) -> list[EmbeddingContract]:
    """The candidate models' own contracts: the stamp's first, then the caller's, distinct."""
    if isinstance(models, (str, os.PathLike, EmbeddingContract, Embedder)):
        models = [models]
    bases: list[EmbeddingContract] = []
    if stamped is not None:
        try:
            Embedder(stamped)  # its network must be here to re-embed anything
            bases.append(stamped)
        except CtxembError as exc:
            unknown.append(
                f"the stamp's model {stamped.model} is not usable here ({exc}); its recipe "
                "was not tried"
            )
    chosen = list(models) or ([] if bases else [DEFAULT_MODEL])
    for model in chosen:
        contract = model_contract(model)
        if not any(same_contract(b, contract, exact=True) for b in bases):
            bases.append(contract)
    return bases


def _no_fit(base: EmbeddingContract, width: int, precision: Precision | None) -> str:
    if base.dimension < width:
        return (
            f"the stored vectors have {width} components and {base.model} emits "
            f"{base.dimension}: they are not this model's"
        )
    if precision is Precision.BINARY and width % 8:
        return f"binary vectors of {width} components cannot be {base.model}'s (8 per byte)"
    return (
        f"{base.model} with truncate_dim={base.truncate_dim} held fixed gives "
        f"{base.output_dim} components, the stored vectors have {width}"
    )


def _rank(scored: list[Candidate], fresh: list[np.ndarray]) -> list[Candidate]:
    """Group candidates with equal document vectors (the first in candidate order stands for
    its group) and rank the groups: most records reproduced, then the highest median
    agreement, then candidate order."""
    heads: list[int] = []
    members: dict[int, list[int]] = {}
    for i in range(len(scored)):
        for h in heads:
            if (agreement(fresh[h], fresh[i]) >= _SAME).all():
                members[h].append(i)
                break
        else:
            heads.append(i)
            members[i] = []
    order = sorted(heads, key=lambda h: (-scored[h].agreeing, -scored[h].median_agreement, h))
    out: list[Candidate] = []
    for h in order:
        out.append(scored[h])
        out += [replace(scored[i], same_as=scored[h].contract.fingerprint) for i in members[h]]
    return out


def _confirmed(best: Candidate, sample: _Sample, tolerance: float) -> bool:
    """The best candidate re-embedded through the Embedder, as adopting it will check it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)  # the limit is the contract's own
        scores = sample_cosines(Embedder(best.contract), sample.texts, sample.stored)
    return bool((scores >= record_tolerance(best.contract, tolerance)).all())


def _findings(
    ranked: list[Candidate],
    rivals: list[Candidate],
    skipped: dict[str, str],
    counts: tuple[int, int, int | None],
    truncated: bool,
    tolerance: float,
) -> list[str]:
    """What stays unknown (conclusive) or what is unknown and why (inconclusive), in words."""
    sampled, checked, records = counts
    out: list[str] = []
    best = ranked[0] if ranked else None
    if skipped:
        shown = ", ".join(list(skipped)[:3]) + (" …" if len(skipped) > 3 else "")
        reasons = ", ".join(f"{n} {why}" for why, n in Counter(skipped.values()).items())
        out.append(
            f"{len(skipped)} of {sampled} sampled records could not be re-embedded ({reasons}: "
            f"{shown}); they may come from another recipe, and adopting refuses them"
        )
    if best is None:
        if not checked:
            out.append("no sampled record has both a text and a vector to compare")
        elif not out:
            out.append("no candidate contract fits the stored vectors")
        return out
    if not best.explains:
        if best.agreeing:
            out.append(
                f"{best.label} ({best.contract.model}) reproduces {best.agreeing} of "
                f"{best.checked} sampled records, not the others: the index mixes recipes, or "
                "records were altered after embedding"
            )
            return out
        aligned = [
            c
            for c in ranked
            if c.same_as is None and c.min_cosine >= record_tolerance(c.contract, tolerance)
        ]
        if aligned:
            a = aligned[0]
            out.append(
                f"the directions are {a.label}'s ({a.contract.model}, min cosine "
                f"{a.min_cosine:.6f}) but not the lengths (median length ratio "
                f"{a.norm_ratio:.4f}): the vectors were rescaled after embedding, a recipe "
                "outside the candidates"
            )
            return out
        out.append(
            "no candidate explains the stored vectors: another model or weights, or a recipe "
            f"outside the candidates; best was {best.label} ({best.contract.model}) with "
            f"median cosine {best.median_cosine:.4f} (min {best.min_cosine:.4f})"
        )
        return out
    if rivals:
        names = "; ".join(c.label for c in [best, *rivals])
        out.append(
            f"{len(rivals) + 1} recipes with different document vectors all reproduce the "
            f"sample ({names}): a larger sample or longer documents may tell them apart"
        )
    out += _assumptions(best, ranked, truncated)
    if records is not None and records > sampled:
        out.append(
            f"records: {records - sampled} of {records} were not sampled (adopting re-checks a "
            "sample; verify --all checks every record)"
        )
    return out


def _assumptions(best: Candidate, ranked: list[Candidate], truncated: bool) -> list[str]:
    """What the best match takes on trust: the query side, an unreached limit, look-alikes."""
    c = best.contract
    out = []
    others = [
        f"{f} ({q!r})"
        for f, (q, d) in FAMILY_PRESETS.items()
        if d == c.document_prefix and q != c.query_prefix
    ]
    also = f"; {', '.join(others)} share this document side with another" if others else ""
    out.append(
        "query side: not observable from stored documents; query_prefix "
        f"{c.query_prefix!r} is assumed ({best.query_source}){also}"
    )
    if c.query_model is not None:
        out.append(f"query encoder: {c.query_model} is assumed (the model's own)")
    if not truncated:
        out.append(
            f"max_tokens: no sampled document reaches {c.max_tokens} tokens, so the limit is "
            f"not observable; {c.max_tokens} (the model's) is assumed"
        )
    same = [x.label for x in ranked if x.represented_by(best)]
    if same:
        out.append(
            "indistinguishable on these documents (same vectors): "
            + "; ".join(same)
            + f"; named instead: {best.label} (the model's own choices come first)"
        )
    return out


def detect_driver(
    driver: Any,
    *models: Any,
    sample: int = 32,
    keep: Collection[str] = (),
    tolerance: float = CANARY_TOLERANCE,
    backend: str = "auto",
) -> DetectReport:
    """:func:`detect_contract` over any store's index (a
    :class:`~ctxemb_core.index.driver.StoreDriver`, stamped or not); reads a sample, never
    writes. The newest half and a random half of ``sample`` records are re-embedded; a stamped
    index's own contract is tried too (``report.stamp_match``)."""
    check_driver(driver)
    size = check_count(sample, "sample", 1)
    read = driver.read_stamp()
    if read is None:
        raise InvalidInputError(f"index {driver.name!r} does not exist in {driver.describe()}")
    count = driver.count()
    records = sample_records(driver, size, count)
    try:  # a stamp one doubts may be damaged too: the index is then taken as unstamped
        stamped: EmbeddingContract | None = IndexStamp.from_metadata(read.metadata).contract
    except StampError:
        stamped = None
    return detect_contract(
        [r.text for r in records],
        [r.vector for r in records],
        models,
        ids=[r.id for r in records],
        stamped=stamped,
        keep=keep,
        records=count,
        tolerance=tolerance,
        backend=backend,
    )
